// cache::store: the warm-up's side of the store (docs/prompt-cache.md "Warm-up"): whether a
// warm-up has anything to add, and the marks that tell a hit on a warmed entry from waste.
// See store.h for the contract.
#include "cache/store/store.h"

namespace lineage::cache {

bool store::covers(const key & k, const tokens & prefix) const {
    auto t = tries_.find(k.bucket);
    if (t == tries_.end() || prefix.empty()) {
        return false;
    }
    const auto n = static_cast<int32_t>(prefix.size());
    bool covered = false;
    // Descending common prefix: the first entries visited are those that hold the most of it.
    t->second.match(prefix, [&](uint64_t id, int32_t lcp) {
        if (lcp < n) {
            return false;
        }
        covered = covered || !by_id_.at(id)->anchor;
        return !covered;
    });
    return covered;
}

int32_t store::longest_match(const std::string & bucket, const tokens & prompt) const {
    int32_t best = 0;
    if (auto t = tries_.find(bucket); t != tries_.end() && !prompt.empty()) {
        t->second.match(prompt, [&](uint64_t, int32_t lcp) {
            best = std::max(best, lcp);
            return false;  // descending common prefix: the first is the longest
        });
    }
    return best;
}

restore_plan store::plan_warmup(const key & k, const tokens & prefix, const plan_hints & hints, double now_s) {
    warmup_lookup_ = true;
    restore_plan p = plan(k, prefix, hints, now_s);
    warmup_lookup_ = false;
    return p;
}

void store::note_warmed_restore(entry & e, int32_t n, bool absorbs, bool by_warmup) {
    if (e.warmed <= 0) {
        return;
    }
    if (n >= e.warmed && !by_warmup) {
        stats_.warmup.hits++;
        LINEAGE_TRACE(trace_, "a warm-up hit: entry {} was warmed to {} tokens before this request", e.id, e.warmed);
        e.warmed = 0;
    } else if (absorbs) {
        // Continued short of what was warmed (the next prompt left it earlier), or by another
        // warm-up: the warmed tokens served nobody.
        stats_.warmup.wasted++;
        LINEAGE_TRACE(trace_, "entry {} was warmed to {} tokens; continued at {}: the warm-up is wasted", e.id,
                      e.warmed, n);
        e.warmed = 0;
    }
}

}  // namespace lineage::cache
