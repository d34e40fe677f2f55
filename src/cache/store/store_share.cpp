// cache::store: prefix sharing in RAM: an entry held as a patch over its anchor's state
// (docs/prompt-cache.md "Prefix sharing in RAM"); see store.h patch_base_for, demote.
#include "cache/store/store.h"

#include "cache/blob_patch.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace lineage::cache {

uint64_t store::entry::shared_bytes() const {
    if (!base || !full) {
        return 0;
    }
    return patched_size(*full) - std::min(patched_size(*full), static_cast<uint64_t>(full->size()));
}

std::optional<store::patch_base> store::patch_base_for(uint64_t id) const {
    if (!cfg_.ram_share_prefix) {
        return std::nullopt;
    }
    const auto f = by_id_.find(id);
    if (f == by_id_.end() || f->second->where != tier::device || f->second->anchor) {
        return std::nullopt;
    }
    const entry & e = *f->second;
    const entry * best = nullptr;
    for (const auto & a : entries_) {
        if (a.anchor && a.where == tier::ram && a.full && !a.base && a.k.bucket == e.k.bucket &&
            a.toks.size() < e.toks.size() && (best == nullptr || a.toks.size() > best->toks.size()) &&
            std::equal(a.toks.begin(), a.toks.end(), e.toks.begin())) {
            best = &a;
        }
    }
    if (best == nullptr) {
        return std::nullopt;
    }
    return patch_base{best->id, best->full, static_cast<int32_t>(best->toks.size())};
}

blob_ptr store::whole_state(const entry & e, int32_t n_restore) const {
    if (!e.base || !e.full) {
        return e.full;
    }
    if (n_restore <= e.base_tokens) {
        // The anchor's KV rows [0, n_restore) are the entry's, byte for byte (the patch names
        // them); the restore trims the rest and puts the checkpoint's recurrent state in place.
        return e.base;
    }
    auto whole = apply_patch(*e.base, *e.full);
    if (!whole) {
        spdlog::error("cache: entry {}'s patch over anchor {} does not apply; it is not restored", e.id, e.base_anchor);
        return nullptr;
    }
    return make_blob(std::move(*whole));
}

void store::on_leaving(const entry & e) {
    if (e.base) {
        if (auto o = orphan_bases_.find(e.base_anchor); o != orphan_bases_.end() && --o->second.patches <= 0) {
            LINEAGE_TRACE(trace_, "the state of anchor {} ({}) is freed with the last entry that read it", o->first,
                          human_bytes(o->second.state ? o->second.state->size() : 0));
            orphan_bases_.erase(o);
        }
    }
    if (!e.anchor || !e.full) {
        return;
    }
    const auto n = std::count_if(entries_.begin(), entries_.end(),
                                 [&](const entry & d) { return d.base && d.base_anchor == e.id; });
    if (n > 0) {
        orphan_bases_[e.id] = orphan_base{e.full, static_cast<int32_t>(n)};
        LINEAGE_TRACE(trace_, "anchor {}'s state ({}) stays in RAM while {} entr{} held as a patch over it remain",
                      e.id, human_bytes(e.full->size()), n, n == 1 ? "y" : "ies");
    }
}

}  // namespace lineage::cache
