// cache::store: commit (absorption, thinning, twins) and anchors; see store.h.
#include "cache/store/store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>

namespace lineage::cache {

namespace {

uint64_t size_of(const blob_ptr & b) {
    return b ? b->size() : 0;
}


// Thinning order (docs/prompt-cache.md "Commit, thinning, eviction"): old guard points first (only
// the newest guard is a live resend point), then ladder rungs, then the oldest turn boundaries
// but the two kept ones (`first_turn`, `history`: see store::thin), then the oldest divergence
// points, then the newest guard, then the first turn's boundary, then the last user turn's; message
// rungs and reply checkpoints never (thin() caps them apart). `cps` ascends by length, so the first
// match is the oldest. Returns the index to drop (REQUIRES: cps holds a checkpoint that is neither a
// message rung nor a reply checkpoint).
size_t drop_candidate(const std::vector<checkpoint> & cps, int32_t first_turn, int32_t history) {
    std::optional<size_t> newest_guard;
    for (size_t i = 0; i < cps.size(); ++i) {
        if (cps[i].kind == point_kind::guard) {
            newest_guard = i;
        }
    }
    for (size_t i = 0; i < cps.size(); ++i) {
        if (cps[i].kind == point_kind::guard && i != newest_guard) {
            return i;
        }
    }
    auto kept_turn = [&](const checkpoint & c) {
        return c.kind == point_kind::turn && (c.n_tokens == first_turn || c.n_tokens == history);
    };
    // Ladder rungs reach a conversation entry only when their anchor was not pinned (no RAM):
    // they go first.
    for (point_kind k : {point_kind::ladder, point_kind::turn, point_kind::divergence}) {
        for (size_t i = 0; i < cps.size(); ++i) {
            if (cps[i].kind == k && !kept_turn(cps[i])) {
                return i;
            }
        }
    }
    if (newest_guard) {
        return *newest_guard;
    }
    for (int32_t n : {first_turn, history}) {
        for (size_t i = 0; i < cps.size(); ++i) {
            if (cps[i].kind == point_kind::turn && cps[i].n_tokens == n) {
                return i;
            }
        }
    }
    // Anything but a message rung or a reply checkpoint (those have their own caps in thin()).
    for (size_t i = 0; i < cps.size(); ++i) {
        if (cps[i].kind != point_kind::message && cps[i].kind != point_kind::reply) {
            return i;
        }
    }
    return 0;
}

}  // namespace

void store::thin(std::vector<checkpoint> & cps, int32_t first_turn, int32_t history) {
    // Message rungs have their own cap: the oldest go first (only the newest message's are
    // kept at commit, so this bites only on a twin's rungs).
    auto n_of = [&](point_kind k) {
        return static_cast<int32_t>(
            std::count_if(cps.begin(), cps.end(), [k](const checkpoint & c) { return c.kind == k; }));
    };
    auto n_message = [&] { return n_of(point_kind::message); };
    while (n_message() > cfg_.message_rungs_max()) {
        auto it = std::find_if(cps.begin(), cps.end(), [](const checkpoint & c) { return c.kind == point_kind::message; });
        LINEAGE_TRACE(trace_, "thinned: dropped the message rung at {} (over {} per lineage)", it->n_tokens,
                      cfg_.message_rungs_max());
        cps.erase(it);
    }
    // Reply checkpoints too (only the newest reply's are kept at commit): the oldest go first.
    while (n_of(point_kind::reply) > config::max_reply_candidates) {
        auto it = std::find_if(cps.begin(), cps.end(), [](const checkpoint & c) { return c.kind == point_kind::reply; });
        LINEAGE_TRACE(trace_, "thinned: dropped the reply checkpoint at {} (over {} per lineage)", it->n_tokens,
                      config::max_reply_candidates);
        cps.erase(it);
    }
    while (static_cast<int32_t>(cps.size()) - n_message() - n_of(point_kind::reply) > cfg_.max_checkpoints) {
        const size_t i = drop_candidate(cps, first_turn, history);
        LINEAGE_TRACE(trace_, "thinned: dropped the {} checkpoint at {} (over {} per lineage)", to_string(cps[i].kind),
                      cps[i].n_tokens, cfg_.max_checkpoints);
        cps.erase(cps.begin() + static_cast<std::ptrdiff_t>(i));
    }
}

bool store::commit(commit_input in, double now_s) {
    now_s_ = std::max(now_s_, now_s);
    stats_.requests_committed++;
    uint64_t release = in.reserved_bytes;
    if (in.absorbed) {
        release += in.absorbed->inflight_bytes;
    }
    release_pending(release);
    if (!cfg_.enabled || static_cast<int32_t>(in.toks.size()) < cfg_.min_prefix) {
        count(cfg_.enabled ? rejection_reason::min_prefix : rejection_reason::disabled);
        LINEAGE_TRACE(trace_, "not stored: {} tokens < min prefix {} (--prompt-cache-min-prefix)", in.toks.size(),
                      cfg_.min_prefix);
        return false;
    }
    entry e = committed_entry(in, now_s);
    const uint64_t absorbed_id = in.absorbed && in.absorbed->absorbs ? in.absorbed->source : 0;
    if (absorbed_id != 0) {
        // A regenerate that took a resend twin is the turn's resend point now.
        for (auto & x : entries_) {
            x.resend_twin = x.resend_twin == absorbed_id ? e.id : x.resend_twin;
        }
    }
    const size_t n_inherited = in.absorbed ? in.absorbed->inherited.size() : 0;
    if (hybrid_ && cfg_.lineage) {
        e.final_recurrent = std::move(in.final_recurrent);
        e.checkpoints = committed_checkpoints(in, e);
    }
    supersede_same_tokens(e);
    std::sort(e.checkpoints.begin(), e.checkpoints.end(),
              [](const checkpoint & a, const checkpoint & b) { return a.n_tokens < b.n_tokens; });
    thin(e.checkpoints, e.first_turn, e.history);
    const uint64_t id = e.id;
    if (trace_.on()) {
        std::string cps;
        for (const auto & c : e.checkpoints) {
            cps += fmt::format("{}{}@{}", cps.empty() ? "" : " ", to_string(c.kind), c.n_tokens);
        }
        LINEAGE_TRACE(trace_, "stored entry {}: {} tokens on device sequence {} ({}), checkpoints [{}]{}{}", id,
                      e.toks.size(), e.seq, human_bytes(e.device_bytes + e.ram_bytes()), cps,
                      absorbed_id ? fmt::format("; absorbed entry {} and carried over {} of its restore points",
                                                absorbed_id, n_inherited)
                                  : std::string(),
                      e.resend_twin != 0 ? fmt::format("; entry {} stays as the resend twin", e.resend_twin)
                                         : std::string());
    }
    entries_.push_front(std::move(e));
    index_add(entries_.begin());
    enforce_limits_after_commit(id);
    return true;
}

store::entry store::committed_entry(commit_input & in, double now_s) {
    entry e;
    e.id = next_id_++;
    e.k = std::move(in.k);
    e.toks = std::move(in.toks);
    e.where = tier::device;
    e.seq = in.seq;
    e.device_bytes = in.device_bytes;
    e.last_use = now_s;
    e.unwritten_since = in.absorbed && in.absorbed->unwritten_since >= 0 ? std::min(in.absorbed->unwritten_since, now_s)
                                                                         : now_s;
    e.history = in.hints.history_tokens;
    e.warmed = in.warmed ? static_cast<int32_t>(e.toks.size()) : 0;
    e.resend_twin = in.absorbed ? in.absorbed->twin : 0;
    // The reuse class (value.h): a request that continues an entry adds one use to the
    // lineage's (a warm-up's extension of it adds none: its plan is no use).
    if (in.absorbed && in.absorbed->absorbs) {
        e.uses = in.absorbed->source_uses + (in.absorbed->source_used ? 1 : 0);
    }
    e.uses = std::max(e.uses, in.evicted_uses);  // a conversation back after its entry was evicted
    e.uses = std::max(e.uses, in.hints.multi_turn ? 1 : 0);  // or one back whose entry this store never had
    e.family = reuse_family(e.k.bucket, e.toks);
    if (e.history < 0 && in.absorbed) {
        e.history = in.absorbed->source_history;  // an agent-loop step keeps the user turn's boundary
    }
    // The conversation's first turn boundary stays the lineage's while the prompt still holds it
    // (restored at or past it); a lineage started here (a miss, an anchor, an edit before it)
    // starts from this prompt's.
    e.first_turn = e.history;
    if (in.absorbed && in.absorbed->source_first_turn >= 0 &&
        in.absorbed->source_first_turn <= in.absorbed->n_restore) {
        e.first_turn = in.absorbed->source_first_turn;
    }
    if (in.absorbed) {
        e.ancestors = std::move(in.absorbed->tier_ancestors);
        if (in.absorbed->pending_write_of != 0) {
            successor_[in.absorbed->pending_write_of] = e.id;
        }
    }
    return e;
}

std::vector<checkpoint> store::committed_checkpoints(commit_input & in, const entry & e) {
    std::vector<checkpoint> cps;
    if (in.absorbed) {
        cps = std::move(in.absorbed->inherited);
        // Only the newest reply keeps its reply checkpoint: the absorbed one lies inside the
        // history now, where no next prompt parts.
        std::erase_if(cps, [](const checkpoint & c) { return c.kind == point_kind::reply; });
    }
    for (auto & c : in.captured) {
        cps.push_back(std::move(c));
    }
    const int32_t n = static_cast<int32_t>(e.toks.size());
    std::erase_if(cps, [n](const checkpoint & c) { return c.n_tokens < 1 || c.n_tokens >= n || !c.recurrent; });
    // Only the newest user message keeps its message rungs: those of earlier messages go.
    if (const int32_t m = in.hints.last_user_tokens; m >= 0) {
        std::erase_if(cps, [m](const checkpoint & c) { return c.kind == point_kind::message && c.n_tokens <= m; });
    }
    // Newest capture wins at equal length (stable sort keeps insertion order).
    std::stable_sort(cps.begin(), cps.end(),
                     [](const checkpoint & a, const checkpoint & b) { return a.n_tokens < b.n_tokens; });
    std::vector<checkpoint> uniq;
    for (auto & c : cps) {
        if (!uniq.empty() && uniq.back().n_tokens == c.n_tokens) {
            uniq.back() = std::move(c);
        } else {
            uniq.push_back(std::move(c));
        }
    }
    thin(uniq, e.first_turn, e.history);
    return uniq;
}

void store::supersede_same_tokens(entry & e) {
    // A verbatim resend that did not absorb (it restored an earlier point) leaves an entry with
    // the same tokens behind: the new one supersedes it and takes over its checkpoints.
    std::vector<iter> twins;
    if (auto t = tries_.find(e.k.bucket); t != tries_.end()) {
        for (uint64_t tid : t->second.exact(e.toks)) {
            if (!by_id_.at(tid)->anchor) {
                twins.push_back(by_id_.at(tid));
            }
        }
    }
    std::sort(twins.begin(), twins.end(), [](iter a, iter b) { return a->mru > b->mru; });  // list order
    for (iter it : twins) {
        for (auto & c : it->checkpoints) {
            const bool have = std::any_of(e.checkpoints.begin(), e.checkpoints.end(),
                                          [&](const checkpoint & x) { return x.n_tokens == c.n_tokens; });
            if (!have) {
                e.checkpoints.push_back(std::move(c));
            }
        }
        it->checkpoints.clear();
        for (copy_id f : it->ancestors) {
            e.ancestors.push_back(f);
        }
        if (it->tier_copy != 0) {
            e.ancestors.push_back(it->tier_copy);
        }
        if (it->writing) {
            successor_[it->id] = e.id;
        }
        e.uses = std::max(e.uses, it->uses);
        erase(it, eviction_reason::superseded, " (same tokens as the new entry)");
    }
}

void store::enforce_limits_after_commit(uint64_t id) {
    // The reservations covered these bytes; what was freed since may let others in. Enforce
    // the budget and the entry cap on everything but the new entry.
    while (ram_bytes() > cfg_.ram_bytes && evict_one(id, eviction_reason::capacity)) {
    }
    int64_t n_conv = 0;
    for (const auto & x : entries_) {
        n_conv += x.anchor ? 0 : 1;
    }
    while (n_conv > cfg_.max_entries) {
        auto victim = std::find_if(entries_.rbegin(), entries_.rend(),
                                   [id](const entry & x) { return !x.anchor && x.id != id; });
        if (victim == entries_.rend()) {
            break;
        }
        erase(std::next(victim).base(), eviction_reason::lru);
        --n_conv;
    }
    if (ram_bytes() > cfg_.ram_bytes) {
        // Only the new entry's own checkpoints are left to give up, oldest first.
        auto & cps = entries_.front().checkpoints;
        while (ram_bytes() > cfg_.ram_bytes && !cps.empty()) {
            LINEAGE_TRACE(trace_, "over the RAM budget: entry {} gives up its {} checkpoint at {}", id,
                          to_string(cps.front().kind), cps.front().n_tokens);
            cps.erase(cps.begin());
        }
        if (ram_bytes() > cfg_.ram_bytes) {  // the state at its end last
            entries_.front().final_recurrent.reset();
        }
    }
}

void store::order_rungs(std::vector<checkpoint> & rungs) const {
    std::stable_sort(rungs.begin(), rungs.end(),
                     [](const checkpoint & a, const checkpoint & b) { return a.n_tokens < b.n_tokens; });
    rungs.erase(std::unique(rungs.begin(), rungs.end(),
                            [](const checkpoint & a, const checkpoint & b) { return a.n_tokens == b.n_tokens; }),
                rungs.end());
    while (static_cast<int32_t>(rungs.size()) > std::max(0, cfg_.ladder_max_rungs)) {
        rungs.erase(rungs.begin());  // the far end of the region goes first
    }
}

void store::commit_anchor(const key & k, tokens toks, blob_ptr full, uint64_t reserved, double now_s,
                          copy_id tier_copy, std::vector<checkpoint> rungs) {
    now_s_ = std::max(now_s_, now_s);
    release_pending(reserved);
    const auto n = static_cast<int32_t>(toks.size());
    std::erase_if(rungs, [&](const checkpoint & c) {
        return !hybrid_ || !cfg_.lineage || !c.recurrent || c.n_tokens < 1 || c.n_tokens >= n;
    });
    order_rungs(rungs);
    for (auto & c : rungs) {
        c.kind = point_kind::ladder;
    }
    uint64_t size = size_of(full);
    for (const auto & c : rungs) {
        size += size_of(c.recurrent);
    }
    if (cfg_.max_anchors <= 0) {
        return;  // --cache-max-anchors 0: no anchors (plan() schedules none)
    }
    if (auto t = tries_.find(k.bucket); t != tries_.end()) {
        for (uint64_t id : t->second.exact(toks)) {
            if (by_id_.at(id)->anchor) {
                return;  // already pinned
            }
        }
    }
    auto anchors = [this] {
        int32_t n = 0;
        uint64_t b = 0;
        for (const auto & e : entries_) {
            if (e.anchor) {
                n++;
                b += e.ram_bytes();
            }
        }
        return std::pair{n, b};
    };
    if (size > cfg_.max_anchor_bytes) {
        count(rejection_reason::anchor_too_large);
        LINEAGE_TRACE(trace_, "anchor at {} tokens not pinned: {} > the anchor cap {} (--cache-max-anchor-bytes)",
                      toks.size(), human_bytes(size), human_bytes(cfg_.max_anchor_bytes));
        return;
    }
    // Anchor caps (--cache-max-anchors, --cache-max-anchor-bytes): the least recently used anchor
    // goes first.
    for (auto [n, b] = anchors(); n >= cfg_.max_anchors || b + size > cfg_.max_anchor_bytes; std::tie(n, b) = anchors()) {
        auto victim = std::find_if(entries_.rbegin(), entries_.rend(), [](const entry & x) { return x.anchor; });
        erase(std::next(victim).base(), eviction_reason::anchor_cap);
    }
    entry e;
    e.id = next_id_++;
    e.k = k;
    e.toks = std::move(toks);
    e.where = tier::ram;
    e.full = std::move(full);
    e.checkpoints = std::move(rungs);
    e.anchor = true;
    e.last_use = now_s;
    e.unwritten_since = now_s;
    e.tier_copy = tier_copy;
    if (e.checkpoints.empty()) {
        LINEAGE_TRACE(trace_, "pinned anchor entry {} at {} tokens ({})", e.id, e.toks.size(), human_bytes(size));
    } else {
        std::string at;
        for (const auto & c : e.checkpoints) {
            at += (at.empty() ? "" : " ") + std::to_string(c.n_tokens);
        }
        LINEAGE_TRACE(trace_, "pinned anchor entry {} at {} tokens with {} ladder rungs at [{}] ({})", e.id,
                      e.toks.size(), e.checkpoints.size(), at, human_bytes(size));
    }
    entries_.push_front(std::move(e));
    index_add(entries_.begin());
    if (shares_anchors() && tier_copy == 0) {
        // A shared tier (Redis): an anchor goes to the other replicas as soon as it is pinned.
        LINEAGE_TRACE(trace_, "anchor entry {} written behind at once (a shared tier)", entries_.front().id);
        spills_.push_back(job_of(entries_.front()));
    }
    while (ram_bytes() > cfg_.ram_bytes && evict_one(entries_.front().id, eviction_reason::capacity)) {
    }
}

}  // namespace lineage::cache
