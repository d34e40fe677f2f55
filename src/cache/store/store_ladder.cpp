// cache::store: ladder jobs, the ladder rungs made off the request's path (config::ladder_defer;
// docs/architecture.md "Ladder jobs"): where a job starts, and the rungs it made joining their
// anchor. See store.h for the contract.
#include "cache/store/store.h"

#include <algorithm>
#include <limits>

namespace lineage::cache {

namespace {

uint64_t blob_bytes(const blob_ptr & b) {
    return b ? b->size() : 0;
}

}  // namespace

restore_plan store::plan_ladder_job(const key & k, const tokens & prompt, const std::vector<int32_t> & rungs) const {
    restore_plan p;
    const auto n_prompt = static_cast<int32_t>(prompt.size());
    if (rungs.empty() || prompt.empty()) {
        return p;
    }
    // The latest state at or before the first rung: an entry restored at its own length, or one
    // of its checkpoints, within what the entry shares with the prompt. RAM only: a parked device
    // sequence belongs to a conversation that may be continued meanwhile.
    const int32_t limit = std::min(rungs.front(), n_prompt);
    const entry * best = nullptr;
    const checkpoint * best_cp = nullptr;
    int32_t best_n = 0;
    // The first held state after the first rung: the rungs from there on are a later stretch,
    // which restores it instead of prefilling up to it.
    int32_t next_held = std::numeric_limits<int32_t>::max();
    if (auto t = tries_.find(k.bucket); t != tries_.end()) {
        t->second.match(prompt, [&](uint64_t id, int32_t lcp) {
            const entry & e = *by_id_.at(id);
            if (e.where != tier::ram || !e.full) {
                return true;
            }
            const int32_t reach = std::min(lcp, limit);
            const auto len = static_cast<int32_t>(e.toks.size());
            const auto note_after = [&](int32_t at) {
                if (at > limit && at <= lcp) {
                    next_held = std::min(next_held, at);
                }
            };
            note_after(len);
            for (const auto & c : e.checkpoints) {
                if (c.recurrent) {
                    note_after(c.n_tokens);
                }
            }
            if (len <= reach && len > best_n) {
                best = &e;
                best_cp = nullptr;
                best_n = len;
            }
            for (const auto & c : e.checkpoints) {
                if (c.recurrent && c.n_tokens <= reach && c.n_tokens > best_n) {
                    best = &e;
                    best_cp = &c;
                    best_n = c.n_tokens;
                }
            }
            return true;
        });
    }
    if (best != nullptr) {
        p.n_restore = best_n;
        p.op = restore_op::load_ram;
        p.source = best->id;
        p.source_tokens = static_cast<int32_t>(best->toks.size());
        p.source_anchor = best->anchor;
        p.full = whole_state(*best, best_n);
        p.recurrent = best_cp != nullptr ? best_cp->recurrent : nullptr;
        p.kind = best_cp != nullptr ? best_cp->kind : (best->anchor ? point_kind::anchor : point_kind::full);
    }
    for (const int32_t r : rungs) {
        if (r > p.n_restore && r <= n_prompt && (r < next_held || p.captures.empty())) {
            p.captures.push_back({r, point_kind::ladder});
        }
    }
    p.reason = fmt::format("ladder job: {} rung(s) from {} ({} tokens) to {}", p.captures.size(),
                           p.n_restore > 0 ? to_string(p.kind) : std::string_view("token 0"), p.n_restore, n_prompt);
    return p;
}

void store::hold_for_rungs(const key & k, const tokens & toks, bool pending) {
    auto t = tries_.find(k.bucket);
    if (t == tries_.end() || toks.empty()) {
        return;
    }
    std::vector<uint64_t> held;
    t->second.match(toks, [&](uint64_t id, int32_t lcp) {
        const entry & e = *by_id_.at(id);
        if (e.anchor && lcp >= static_cast<int32_t>(e.toks.size())) {
            held.push_back(id);  // the anchor itself, or one its tokens begin with
        }
        return true;
    });
    for (uint64_t id : held) {
        entry & e = *by_id_.at(id);
        e.rung_holds = pending ? e.rung_holds + 1 : std::max(0, e.rung_holds - 1);
    }
}

bool store::holds_anchor(const key & k, const tokens & toks) const {
    auto t = tries_.find(k.bucket);
    if (t == tries_.end() || toks.empty()) {
        return false;
    }
    const auto ids = t->second.exact(toks);
    return std::any_of(ids.begin(), ids.end(), [&](uint64_t id) { return by_id_.at(id)->anchor; });
}

int32_t store::add_rungs(const key & k, const tokens & toks, std::vector<checkpoint> rungs, uint64_t reserved,
                         double now_s) {
    now_s_ = std::max(now_s_, now_s);
    release_pending(reserved);
    const auto given = static_cast<int64_t>(rungs.size());
    entry * a = nullptr;
    if (auto t = tries_.find(k.bucket); t != tries_.end() && !toks.empty()) {
        for (uint64_t id : t->second.exact(toks)) {
            if (by_id_.at(id)->anchor) {
                a = &*by_id_.at(id);
            }
        }
    }
    const auto n = static_cast<int32_t>(toks.size());
    if (a == nullptr || !hybrid_ || !cfg_.lineage) {
        stats_.ladder_deferred_rungs["dropped"] += given;
        LINEAGE_TRACE(trace_, "ladder job: {} rung(s) dropped: the anchor at {} tokens is gone", given, n);
        return 0;
    }
    std::vector<checkpoint> merged = a->checkpoints;
    for (auto & c : rungs) {
        if (c.recurrent && c.n_tokens >= 1 && c.n_tokens < n) {
            c.kind = point_kind::ladder;
            merged.push_back(std::move(c));
        }
    }
    order_rungs(merged);  // a rung already held stays (it comes first)
    // Within the anchor byte cap: the far end of the region goes first here too.
    const auto bytes_of = [](const std::vector<checkpoint> & cps) {
        uint64_t b = 0;
        for (const auto & c : cps) {
            b += blob_bytes(c.recurrent);
        }
        return b;
    };
    while (!merged.empty() && blob_bytes(a->full) + bytes_of(merged) > cfg_.max_anchor_bytes) {
        merged.erase(merged.begin());
    }
    int32_t added = 0;
    for (const auto & c : merged) {
        const bool held = std::any_of(a->checkpoints.begin(), a->checkpoints.end(), [&](const checkpoint & x) {
            return x.n_tokens == c.n_tokens && x.recurrent == c.recurrent;
        });
        added += held ? 0 : 1;
    }
    a->checkpoints = std::move(merged);
    if (added > 0 && a->writing) {
        // The write in flight took its job before these rungs: when it lands, its file is
        // superseded and the anchor written again (tier_written).
        a->stale_write = true;
        LINEAGE_TRACE(trace_, "anchor entry {} will be written again with its new rungs once its write lands", a->id);
    } else if (added > 0 && a->tier_copy != 0) {
        // Its file lacks these rungs: written again (write-behind), the old file superseded.
        a->ancestors.push_back(a->tier_copy);
        a->tier_copy = 0;
        a->unwritten_since = a->last_use;
        LINEAGE_TRACE(trace_, "anchor entry {} will be written again with its new rungs", a->id);
    }
    stats_.ladder_deferred_rungs["made"] += added;
    stats_.ladder_deferred_rungs["dropped"] += given - added;
    std::string at;
    for (const auto & c : a->checkpoints) {
        at += (at.empty() ? "" : " ") + std::to_string(c.n_tokens);
    }
    LINEAGE_TRACE(trace_, "ladder job: {} of {} rung(s) added to anchor entry {}; its rungs are at [{}]", added, given,
                  a->id, at);
    const uint64_t id = a->id;
    while (ram_bytes() > cfg_.ram_bytes && evict_one(id, eviction_reason::capacity)) {
    }
    return added;
}

}  // namespace lineage::cache
