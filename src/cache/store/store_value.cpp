// cache::store: the eviction value (docs/prompt-cache.md "Eviction by value"): which copy leaves
// RAM first when the budget is full, and whether a parked entry leaving the device is worth a RAM
// copy at all. See store.h (evict_one, value_of) and value.h (the reuse model).
//
//   value(e) = saved_seconds(e) x likelihood(e.uses, age) / RAM bytes of e
//   saved_seconds(e) = prefill_seconds(restore_point_below(e), |e|)   (attention included:
//                      tier_cost::prefill_seconds), or reading its tier copy back when cheaper
//
// The idea is Marconi's (Pan et al., "Marconi: Prefix Caching for the Era of Hybrid LLMs",
// arXiv 2411.19379): FLOPs saved per byte, weighed with recency. A hybrid model's entry holds a
// whole recurrent state whatever its length, so a one-off call's entry and a long conversation's
// can cost the same bytes while the first saves a few hundred tokens on its own system text
// (already an anchor) and the second thousands; and a conversation's entry is restored again
// within seconds while a title request's never is, which the reuse model learns (value.h).
#include "cache/store/store.h"

#include <algorithm>
#include <unordered_set>

namespace lineage::cache {

int32_t store::restore_point_below(const entry & e, int32_t up_to) const {
    const auto t = tries_.find(e.k.bucket);
    if (t == tries_.end()) {
        return 0;
    }
    int32_t best = 0;
    t->second.match(e.toks, [&](uint64_t id, int32_t matched) {
        const int32_t lcp = std::min(matched, up_to);
        if (lcp <= best) {
            return false;  // descending: nothing later restores more
        }
        if (id == e.id) {
            return true;
        }
        const entry & x = *by_id_.at(id);
        const auto n = static_cast<int32_t>(x.toks.size());
        int32_t r = 0;
        if (lcp >= n || !hybrid_) {
            r = std::min(lcp, n);  // its whole state; a dense KV restores any prefix of itself
        } else {
            for (const auto & c : x.checkpoints) {  // ascending
                if (c.n_tokens > lcp) {
                    break;
                }
                r = c.n_tokens;
            }
        }
        best = std::max(best, r);
        return true;
    });
    return best;
}

double store::saved_seconds(const entry & e) const {
    const auto n = static_cast<int32_t>(e.toks.size());
    const int32_t below = std::min(restore_point_below(e), n);
    const double recompute = cost_.prefill_seconds(below, n).value_or(static_cast<double>(n - below));
    // With a tier below RAM, the copy leaving RAM is read back instead of recomputed where it has
    // a copy there or would be written on leaving (erase's spill): it saves at most that read.
    const bool copy_below = e.tier_copy != 0 || (writes_behind() && !e.write_failed && !e.write_declined);
    if (copy_below && cost_.prefill_tokens_per_s()) {
        const double read = static_cast<double>(e.ram_bytes() + e.device_bytes) / cost_.read_bytes_per_s(0);
        return std::min(recompute, read);
    }
    return recompute;
}

double store::value_of(const entry & e) const {
    const double bytes = static_cast<double>(std::max<uint64_t>(e.ram_bytes(), 1));
    return saved_seconds(e) * reuse_.likelihood(e.uses, now_s_ - e.last_use, e.family) / bytes;
}

bool store::likely_back(const entry & e) const {
    // Restored before (or a conversation's prompt: commit_input::hints.multi_turn), or of a family
    // whose entries have come back more often than not: a conversation's first turn once an
    // earlier conversation on the same system text has shown it (a side call's family, never
    // restored, falls below even odds; no evidence is even odds, not more).
    return e.uses > 0 || reuse_.probability(0, e.family) > 0.5;
}

std::optional<store::victim_choice> store::choose_victim(uint64_t protect_id) {
    auto evictable = [&](const entry & x) { return !x.anchor && x.id != protect_id && x.ram_bytes() > 0; };
    if (cfg_.eviction == eviction_policy::recency) {
        for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
            if (evictable(*it)) {
                return victim_choice{std::next(it).base(), false, 0};
            }
        }
        return std::nullopt;
    }
    // The protected share: the live conversations' entries, most recently used first, while
    // they fit in ram_protect_share of what the pinned anchors leave of the budget (anchors are
    // never victims: on an agent's bench trace they held 279 of 420 MiB, and a share of the
    // whole budget left the conversations nothing).
    const std::unordered_set<uint64_t> live = protected_live();
    // The least value among the least recently used candidates, an unprotected one if any.
    std::optional<victim_choice> v;
    int32_t looked = 0;
    for (auto it = entries_.rbegin(); it != entries_.rend() && looked < config::eviction_candidates; ++it) {
        if (!evictable(*it)) {
            continue;
        }
        ++looked;
        const bool is_live = live.count(it->id) > 0;
        const double value = value_of(*it);
        if (!v || (v->live && !is_live) || (is_live == v->live && value < v->value)) {
            v = victim_choice{std::next(it).base(), is_live, value};
        }
    }
    // A pinned anchor's ladder rung goes before an entry worth more per byte: the anchors are
    // never victims, but their rungs held ~165 of the bench's 420 MiB under pressure (33 rungs of
    // 5 MB, each saving a new session on a variant system text ~50-300 tokens) while the
    // conversations' entries were evicted.
    if (auto r = cheapest_rung(); r && (!v || v->live || r->value < v->value)) {
        v = r;
    }
    return v;
}

std::unordered_set<uint64_t> store::protected_live(uint64_t id, uint64_t extra_bytes) const {
    const double window = std::max(config::live_window_s, 4 * reuse_.gap_s());
    // The anchors' own states, not their ladder rungs: those are victims like the entries
    // (cheapest_rung), and counted here they left a conversation no share while they held it.
    uint64_t anchors = 0;
    for (const auto & x : entries_) {
        if (x.anchor) {
            anchors += x.ram_bytes();
            for (const auto & c : x.checkpoints) {
                anchors -= c.kind == point_kind::ladder && c.recurrent ? c.recurrent->size() : 0;
            }
        }
    }
    const auto share = static_cast<uint64_t>(cfg_.ram_protect_share *
                                             static_cast<double>(cfg_.ram_bytes - std::min(cfg_.ram_bytes, anchors)));
    uint64_t held = 0;
    std::unordered_set<uint64_t> live;
    for (const auto & x : entries_) {
        const uint64_t bytes = x.ram_bytes() + (x.id == id ? extra_bytes : 0);
        if (!x.anchor && likely_back(x) && now_s_ - x.last_use <= window && held + bytes <= share) {
            held += bytes;
            live.insert(x.id);
        }
    }
    return live;
}

double store::rung_likelihood(double age_s) const {
    const double p0 = reuse_.probability(0);
    const auto restored = static_cast<double>(rung_reuse_.reused_count(0));
    const auto evicted = static_cast<double>(rung_reuse_.left_count(0));
    const double p = (restored + 2 * p0) / (restored + evicted + 2);
    return rung_aged(p, age_s);
}

double store::rung_aged(double p, double age_s) const {
    return p / (1 + std::max(age_s, 0.0) / std::max(rung_reuse_.gap_s(), 1e-3));
}

std::optional<store::victim_choice> store::cheapest_rung() {
    std::optional<victim_choice> v;
    // A rung is priced as a copy never restored (use class 0) by its own kind's outcomes
    // (rung_likelihood), aged since its anchor was last used.
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        if (!it->anchor || it->checkpoints.empty()) {
            continue;
        }
        const double age = now_s_ - it->last_use;
        const double likelihood = rung_likelihood(age);
        int32_t below = restore_point_below(*it, it->checkpoints.front().n_tokens);
        for (size_t i = 0; i < it->checkpoints.size(); ++i) {
            const checkpoint & c = it->checkpoints[i];
            if (c.kind == point_kind::ladder && c.recurrent) {
                // A rung restored before (a system text's variant that comes back: the line before
                // a timestamp) is priced as an entry with that many uses where that is more.
                const auto u = it->rung_uses.find(c.n_tokens);
                const double l = u == it->rung_uses.end()
                                     ? likelihood
                                     : std::max(likelihood, rung_aged(reuse_.probability(u->second), age));
                const int32_t from = std::min(below, c.n_tokens);
                const double saved =
                    cost_.prefill_seconds(from, c.n_tokens).value_or(static_cast<double>(c.n_tokens - from));
                const double value = saved * l / static_cast<double>(std::max<uint64_t>(c.recurrent->size(), 1));
                if (!v || value < v->value) {
                    v = victim_choice{it, false, value, static_cast<int32_t>(i)};
                }
            }
            below = std::max(below, c.n_tokens);
        }
    }
    return v;
}

bool store::evict_one(uint64_t protect_id, eviction_reason reason) {
    const auto v = choose_victim(protect_id);
    if (!v) {
        return false;
    }
    if (v->rung >= 0) {
        entry & a = *v->it;
        const auto at = a.checkpoints.begin() + v->rung;
        LINEAGE_TRACE(trace_, "dropped the ladder rung at {} of anchor entry {} ({}; value {:.3g} s/MB, below every "
                              "entry's): the anchor stays",
                      at->n_tokens, a.id, human_bytes(at->recurrent ? at->recurrent->size() : 0), v->value * 1e6);
        if (a.rung_uses.erase(at->n_tokens) == 0) {
            rung_reuse_.left_unused(0);  // evicted never restored: its kind's failure
        }
        a.checkpoints.erase(at);
        stats_.ladder_rungs_evicted++;
        return true;
    }
    const entry & x = *v->it;
    stats_.evictions_by_uses[x.uses > 0 ? "reused" : "unused"]++;
    if (cfg_.eviction == eviction_policy::recency) {
        erase(v->it, reason);
        return true;
    }
    erase(v->it, reason,
          !trace_.on() ? std::string()
                       : fmt::format(" (value {:.3g} s/MB: saves {:.3g} s, reuse likelihood {:.2f} after {} uses{})", v->value * 1e6,
                      saved_seconds(x), reuse_.likelihood(x.uses, now_s_ - x.last_use, x.family), x.uses,
                      v->live ? "; a live conversation past the protected share" : ""));
    return true;
}

void store::count_rungs_not_planned(int32_t n) {
    if (n <= 0) {
        return;
    }
    stats_.ladder_rungs_not_planned += n;
    LINEAGE_TRACE(trace_,
                  "{} ladder rung(s) not planned: the RAM budget has no room left for them and each is worth less "
                  "per byte than what it would push out",
                  n);
}

bool store::below_admission(uint64_t id, uint64_t bytes) {
    if (cfg_.eviction != eviction_policy::value || id == 0) {
        return false;
    }
    const auto it = by_id_.find(id);
    if (it == by_id_.end() || it->second->anchor || it->second->where != tier::device) {
        return false;  // only a parked entry leaving the device is admitted to RAM, or not
    }
    const entry & e = *it->second;
    const auto v = choose_victim(id);
    if (!v) {
        return false;
    }
    // A live conversation that the protected share holds once it is in RAM goes before every copy
    // outside the share, as choose_victim orders them: it is admitted over one whatever their
    // values per byte. (Its value falls with its age in units of the reuse gap, which side calls
    // restored a second apart make short: on the bench's pressure trace a conversation's turn
    // two seconds old was refused for a title call's entry.)
    if (!v->live && protected_live(id, bytes).count(id) > 0) {
        return false;
    }
    // Its value once its whole state is in RAM, against what it would push out.
    const double mine = saved_seconds(e) * reuse_.likelihood(e.uses, now_s_ - e.last_use, e.family) /
                        static_cast<double>(std::max<uint64_t>(e.ram_bytes() + bytes, 1));
    if (mine >= v->value) {
        // A protected live conversation leaves only for another likely to come back.
        if (!v->live || likely_back(e)) {
            return false;
        }
        LINEAGE_TRACE(trace_,
                      "entry {} ({} tokens) not kept in RAM: it would push out entry {}, a live conversation "
                      "within the protected share, and it is not likely to come back itself",
                      e.id, e.toks.size(), v->it->id);
        return true;
    }
    LINEAGE_TRACE(trace_, "entry {} ({} tokens) not kept in RAM: its value {:.3g} s/MB is below {} {}'s {:.3g} s/MB, "
                          "which it would push out",
                  e.id, e.toks.size(), mine * 1e6, v->rung >= 0 ? "a ladder rung of anchor entry" : "entry",
                  v->it->id, v->value * 1e6);
    return true;
}

}  // namespace lineage::cache
