// cache::store: the index, the lookup (plan) and the capture points; commit, absorption and
// anchors are in store_commit.cpp, the budget, tiers and disk hooks in store_tiers.cpp, the
// decision trace in store_trace.cpp. See store.h for the contract.
#include "cache/store/store.h"

#include "cache/rule/block_chain.h"
#include "cache/rule/ladder.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <set>
#include <stdexcept>
#include <utility>

namespace lineage::cache {

std::string_view restored_from(const restore_plan & p) {
    switch (p.op) {
        case restore_op::none: return "";
        case restore_op::take_device: return "device";
        case restore_op::share_device: return p.live ? "running_request" : "device";
        case restore_op::load_ram: return "ram";
        case restore_op::load_tier: return p.tier_name;
    }
    return "";
}

std::string_view to_string(restore_op op) {
    switch (op) {
        case restore_op::none: return "none";
        case restore_op::take_device: return "take_device";
        case restore_op::share_device: return "share_device";
        case restore_op::load_ram: return "load_ram";
        case restore_op::load_tier: return "load_tier";
    }
    return "";
}

std::string_view to_string(point_kind k) {
    switch (k) {
        case point_kind::none: return "miss";
        case point_kind::full: return "full";
        case point_kind::prefix: return "prefix";
        case point_kind::turn: return "turn";
        case point_kind::guard: return "guard";
        case point_kind::anchor: return "anchor";
        case point_kind::divergence: return "divergence";
        case point_kind::ladder: return "ladder";
        case point_kind::message: return "message";
        case point_kind::reply: return "reply";
    }
    return "?";
}

std::string_view to_string(tier t) {
    switch (t) {
        case tier::device: return "device";
        case tier::ram: return "ram";
        case tier::disk: return "disk";
    }
    return "?";
}

int32_t common_prefix(const tokens & a, const tokens & b) {
    const size_t n = std::min(a.size(), b.size());
    size_t i = 0;
    while (i < n && a[i] == b[i]) {
        ++i;
    }
    return static_cast<int32_t>(i);
}

namespace {

uint64_t size_of(const blob_ptr & b) {
    return b ? b->size() : 0;
}
}  // namespace

uint64_t store::entry::ram_bytes() const {
    uint64_t b = size_of(full) + size_of(final_recurrent);
    for (const auto & c : checkpoints) {
        b += size_of(c.recurrent);
    }
    return b;
}

store::store(const config & cfg, bool hybrid)
    : cfg_(cfg), hybrid_(hybrid), rule_(restore_settings::from(cfg, hybrid)),
      cost_(cfg.tier_cost, static_cast<double>(cfg.tier_bandwidth_bytes_per_s)) {
    stats_.enabled = cfg.enabled;
    stats_.mode = cfg.lineage ? "lineage" : "exact";
    stats_.family = hybrid ? "hybrid" : "dense";
    stats_.budget_bytes = cfg.ram_bytes;
    stats_.apc_enabled = apc_on();
    if (hybrid && cfg.apc_enabled) {
        spdlog::info("cache: APC (--apc-enabled) is off for this hybrid model: restoring KV blocks without the "
                     "recurrent state at that length would be wrong; the lineage restore points serve it");
    }
}

void store::set_budget(uint64_t bytes) {
    cfg_.ram_bytes = bytes;
    stats_.budget_bytes = bytes;
}

int64_t store::apc_num_blocks() const {
    return cfg_.apc_num_blocks > 0 ? cfg_.apc_num_blocks : int64_t{cfg_.max_entries} * 512;
}

void store::index_add(iter it) {
    it->mru = next_mru_++;
    tries_[it->k.bucket].insert(it->toks, it->id);
    by_id_[it->id] = it;
    if (apc_on()) {
        const int64_t room = std::max<int64_t>(0, apc_num_blocks() - apc_blocks_);
        it->chain = block_chain(it->k.bucket, it->toks, cfg_.apc_block_size, static_cast<size_t>(room), cfg_.apc_hash);
        apc_blocks_ += static_cast<int64_t>(it->chain.size());
        for (const auto & h : it->chain) {
            block_refs_[h]++;
        }
    }
}

void store::index_remove(iter it) {
    auto t = tries_.find(it->k.bucket);
    if (t != tries_.end()) {
        t->second.erase(it->toks, it->id);
        if (t->second.empty()) {
            tries_.erase(t);
        }
    }
    by_id_.erase(it->id);
    apc_blocks_ -= static_cast<int64_t>(it->chain.size());
    for (const auto & h : it->chain) {
        if (auto r = block_refs_.find(h); r != block_refs_.end() && --r->second <= 0) {
            block_refs_.erase(r);
        }
    }
    it->chain.clear();
}

uint64_t store::held_bytes() const {
    uint64_t b = 0;
    for (const auto & e : entries_) {
        b += e.ram_bytes();
    }
    for (const auto & [id, o] : orphan_bases_) {
        b += size_of(o.state);
    }
    return b;
}

void store::release_pending(uint64_t bytes) {
    pending_bytes_ -= std::min(pending_bytes_, bytes);
}

stored_state store::state_of(const entry & e, const std::string & session) const {
    return stored_state{e.toks,       e.checkpoints,       e.anchor,
                        e.history,    e.k.session == session, e.where == tier::device,
                        static_cast<double>(e.mru), &e.chain};
}

/** One plan() in progress, handed from step to step: the request's lookup and what the search
 *  in memory and in the tiers below it found. */
struct store::plan_state {
    const key & k;
    const tokens & prompt;
    const plan_hints & hints;
    double now_s = 0;     ///< monotonic seconds
    bool counted = true;  ///< a request's lookup; a warm-up's is none (stats.warmup): no hit or miss counted
    std::vector<std::string> req_chain = {};  ///< the prompt's APC block chain (restore_rule)
    /** The restore point chosen in memory: a stored entry's id, or live_id_bit | an index into
     *  hints.live (a running request's sequence); nullopt: none. */
    std::optional<restore_candidate> chosen = {};
    int32_t live_lcp = 0;    ///< tokens: the longest common prefix with a live entry or running request
    int32_t best_short = 0;  ///< tokens: the longest restore point rejected for min prefix (0: none)
    std::optional<tier_candidate> tier_copy = {};  ///< a copy below RAM longer than memory's best, worth its read
    int32_t tier = -1;                             ///< tier_copy's tier, an index into tiers_
};

restore_plan store::plan(const key & k, const tokens & prompt, const plan_hints & hints, double now_s) {
    restore_plan p;
    plan_state s{k, prompt, hints, now_s, !warmup_lookup_};  // a warm-up's lookup is no request's (stats.warmup)
    p.counted = s.counted;
    stats_.lookups += s.counted ? 1 : 0;
    expire(now_s);

    search_memory(s);
    prefer_resend_twin(s);
    search_tiers(s);

    if (s.tier_copy) {
        plan_tier_restore(s, p);
    } else if (s.chosen && (s.chosen->id & live_id_bit) != 0) {
        plan_live_restore(s, p);
    } else if (s.chosen) {
        plan_entry_restore(s, p);
    } else {
        stats_.misses += s.counted ? 1 : 0;
        p.reason = s.best_short > 0 ? "miss (longest match " + std::to_string(s.best_short) + " < min prefix " +
                                          std::to_string(cfg_.min_prefix) + ")"
                                    : "miss";
    }
    if (s.counted) {  // a warm-up's plan is no request's: not classified either
        stats_.tokens_prefilled += static_cast<int64_t>(prompt.size()) - p.n_restore;
        classify(k, prompt, s.live_lcp, hints.media, p);
    }
    add_captures(p, k, prompt, hints, rung_room_now());
    count_rungs_not_planned(p.rungs_not_planned);
    if (trace_.on()) {
        trace_plan(k, prompt, hints, p);
    }
    return p;
}

void store::search_memory(plan_state & s) const {
    // The restore-point choice is restore_rule's (best_point, prefer, the two-tier search),
    // the same as the disk tier's.
    s.req_chain = rule_.prompt_chain(s.k.bucket, s.prompt);
    restore_search search(rule_, s.prompt, s.req_chain);
    int32_t live_lcp = 0;  // the first match is the longest common prefix with a live entry
    if (auto t = tries_.find(s.k.bucket); t != tries_.end()) {
        t->second.match(s.prompt, [&](uint64_t id, int32_t lcp) {
            live_lcp = std::max(live_lcp, lcp);
            if (!search.worth(lcp)) {
                return false;
            }
            search.offer(id, state_of(*by_id_.at(id), s.k.session), lcp);
            return true;
        });
    }
    // Running requests' sequences: restore points their prefill has passed (live_state). Offered
    // after the stored entries, with no recency, so that a stored state of the same length wins.
    for (size_t i = 0; i < s.hints.live.size(); ++i) {
        const live_state & l = s.hints.live[i];
        if (l.bucket != s.k.bucket || l.seq < 0) {
            continue;
        }
        const int32_t lcp = common_prefix(s.prompt, l.toks);
        live_lcp = std::max(live_lcp, lcp);
        if (search.worth(lcp)) {
            search.offer(live_id_bit | i,
                         stored_state{l.toks, l.checkpoints, false, -1, l.session == s.k.session, true, 0.0, nullptr},
                         lcp);
        }
    }
    s.chosen = search.chosen();
    s.live_lcp = live_lcp;
    s.best_short = search.best_short();
}

void store::prefer_resend_twin(plan_state & s) {
    // A resend of the turn a warm-up continued (a regenerate: it shares more with that turn's
    // entry, the resend twin, than with the warmed one) parts inside the warmed entry; where the
    // twin restores as much, the twin serves it, and the warm-up's work stays for the next turn
    // (with the guard merged into the history boundary both hold that point).
    if (!s.chosen || (s.chosen->id & live_id_bit) != 0) {
        return;
    }
    const entry & e = *by_id_.at(s.chosen->id);
    const auto twin = by_id_.find(e.resend_twin);
    if (e.resend_twin != 0 && s.chosen->n < static_cast<int32_t>(e.toks.size()) && twin != by_id_.end() &&
        twin->second->k.bucket == s.k.bucket) {
        const entry & t = *twin->second;
        const int32_t twin_lcp = common_prefix(s.prompt, t.toks);
        const auto c = twin_lcp > common_prefix(s.prompt, e.toks)
                           ? best_point(rule_, t.id, state_of(t, s.k.session), s.prompt, twin_lcp, s.req_chain)
                           : std::nullopt;
        if (c && c->n >= s.chosen->n) {
            LINEAGE_TRACE(trace_, "entry {} holds a warm-up to {} tokens; its resend twin, entry {}, restores {}: "
                                  "the twin serves this request",
                          e.id, e.toks.size(), t.id, c->n);
            s.chosen = c;
        }
    }
}

void store::search_tiers(plan_state & s) {
    // Each tier below RAM only for something longer than the best above it.
    if (!cfg_.enabled) {
        return;
    }
    for (size_t i = 0; i < tiers_.size(); ++i) {
        if (static_cast<int32_t>(i) == s.hints.skip_tier) {
            continue;
        }
        const int32_t above = std::max(s.chosen ? s.chosen->n : 0, s.tier_copy ? s.tier_copy->n : 0);
        auto c = tiers_[i].lookup->best(s.k.bucket, s.k.session, s.prompt, std::max(above, cfg_.min_prefix - 1));
        if (!c) {
            continue;
        }
        // The tier cost rule (tier_cost.h): read only where the read beats recomputing what
        // the copy adds over the best restore point above it.
        if (!cost_.worth_read(static_cast<int32_t>(i), c->bytes, c->n - above)) {
            if (s.counted) {
                stats_.tier_reads_declined[tiers_[i].traits.name]++;
            }
            const double rate = cost_.prefill_tokens_per_s().value_or(0);
            LINEAGE_TRACE(trace_,
                          "{} {} ({}) restores {} tokens, {} more than the best above it: reading it (~{:.0f} "
                          "ms at {}/s) costs more than recomputing them (~{:.0f} ms at {:.0f} tokens/s); not read",
                          tiers_[i].traits.copy_noun, c->id, human_bytes(c->bytes), c->n, c->n - above,
                          1e3 * static_cast<double>(c->bytes) / cost_.read_bytes_per_s(static_cast<int32_t>(i)),
                          human_bytes(static_cast<uint64_t>(cost_.read_bytes_per_s(static_cast<int32_t>(i)))),
                          rate > 0 ? 1e3 * (c->n - above) / rate : 0.0, rate);
            continue;
        }
        s.tier_copy = c;
        s.tier = static_cast<int32_t>(i);
    }
}

void store::plan_tier_restore(const plan_state & s, restore_plan & p) {
    const std::optional<tier_candidate> & on_disk = s.tier_copy;
    const tier_traits & t = tiers_[static_cast<size_t>(s.tier)].traits;
    p.n_restore = on_disk->n;
    p.kind = on_disk->kind;
    p.op = restore_op::load_tier;
    p.tier_copy = on_disk->id;
    p.tier_bytes = on_disk->bytes;
    p.tier = s.tier;
    p.tier_name = t.name;
    p.source_tokens = on_disk->source_tokens;
    p.source_anchor = on_disk->anchor;
    p.source_history = on_disk->history;
    const int32_t len = on_disk->source_tokens;
    p.absorbs = continues(rule_, p.n_restore, len, on_disk->history, on_disk->anchor);
    // The entries track the first tier's copies; a shared copy is not one replica's to supersede.
    if (p.absorbs && s.tier == 0 && own_copies()) {
        p.tier_ancestors.push_back(on_disk->id);
    }
    if (s.counted) {
        count_hit(p);
        stats_.tier_hits[t.name]++;
    }
    p.reason = "restore " + std::string(to_string(p.kind)) + " at " + std::to_string(p.n_restore) + "/" +
               std::to_string(s.prompt.size()) + " from " + t.copy_noun + " " +
               std::to_string(on_disk->id) + " (" +
               std::to_string(len) + " tokens" + (on_disk->same_session ? "" : ", cross-session") + ")" +
               (s.chosen ? ", longer than the best in memory (" + std::to_string(s.chosen->n) + ")" : "") +
               (p.absorbs ? ", superseding it" : "");
}

void store::plan_live_restore(const plan_state & s, restore_plan & p) {
    const std::optional<restore_candidate> & chosen = s.chosen;
    const live_state & l = s.hints.live[chosen->id & ~live_id_bit];
    p.n_restore = chosen->n;
    p.kind = chosen->kind;
    p.op = restore_op::share_device;
    p.live = true;
    p.device_seq = l.seq;
    p.source_tokens = static_cast<int32_t>(l.toks.size());
    p.recurrent = chosen->checkpoint >= 0 ? l.checkpoints[static_cast<size_t>(chosen->checkpoint)].recurrent : nullptr;
    // Its restore points up to here are the new entry's too (shared blobs): a resend of this
    // prompt then restores its guard from either request's entry.
    for (const auto & c : l.checkpoints) {
        if (c.n_tokens <= p.n_restore) {
            p.inherited.push_back(c);
        }
    }
    if (s.counted) {
        count_hit(p);
        stats_.live_hits++;
    }
    p.reason = "restore " + std::string(to_string(p.kind)) + " at " + std::to_string(p.n_restore) + "/" +
               std::to_string(s.prompt.size()) + " from running request " + std::to_string(l.request) +
               " (sequence " + std::to_string(l.seq) + ", " + std::to_string(l.toks.size()) + " tokens so far" +
               (l.session == s.k.session ? "" : ", cross-session") + ")";
}

void store::plan_entry_restore(const plan_state & s, restore_plan & p) {
    const std::optional<restore_candidate> & chosen = s.chosen;
    const iter chosen_it = by_id_.at(chosen->id);
    entry & e = *chosen_it;
    const bool counted = s.counted;
    uint64_t retire_twin = 0;
    // A use (value.h) restores something of the entry that no other copy holds: a prefix
    // an anchor or another entry restores as far (a side call's system text) is none.
    const bool used = counted && !e.anchor && restore_point_below(e) < chosen->n;
    if (used) {
        // The reuse model: an entry with e.uses uses came back after this long.
        reuse_.reused(e.uses, e.family);
        reuse_.observe_gap(s.now_s - e.last_use);
    }
    if (counted && e.anchor && chosen->kind == point_kind::ladder) {
        // A ladder rung restored: its first restore is its kind's success (rung_likelihood).
        if (e.rung_uses[chosen->n]++ == 0) {
            rung_reuse_.reused(0);
        }
        rung_reuse_.observe_gap(s.now_s - e.last_use);  // the rung kind's own reuse gap (rung_aged)
    }
    e.last_use = s.now_s;
    p.source_uses = e.uses;
    p.source_used = used;
    p.n_restore = chosen->n;
    p.kind = chosen->kind;
    p.source = e.id;
    p.source_tokens = static_cast<int32_t>(e.toks.size());
    p.source_history = e.history;
    p.source_first_turn = e.first_turn;
    p.recurrent = chosen->checkpoint >= 0 ? e.checkpoints[static_cast<size_t>(chosen->checkpoint)].recurrent : nullptr;
    // Absorption (docs/prompt-cache.md "Entries and lineages"): a prompt that continues a
    // conversation entry takes it.
    p.absorbs = continues(rule_, p.n_restore, p.source_tokens, e.history, e.anchor);
    if (p.absorbs && !counted && p.n_restore < p.source_tokens) {
        // A warm-up that parts before the entry's end keeps it as the resend twin
        // (restore_plan::twin): a regenerate of the turn just answered restores all but one
        // token from it until the next turn continues the warm-up's entry.
        p.absorbs = false;
        p.twin = e.id;
        for (const auto & c : e.checkpoints) {
            if (c.n_tokens <= p.n_restore) {
                p.inherited.push_back(c);
            }
        }
    } else if (p.absorbs && e.resend_twin != 0) {
        if (!counted) {
            p.twin = e.resend_twin;  // a preempted warm-up's continuation keeps the link
        } else {
            retire_twin = e.resend_twin;  // the next turn is here: the resend point serves no one
        }
    }
    if (e.where == tier::device) {
        p.op = p.absorbs ? restore_op::take_device : restore_op::share_device;
        p.device_seq = e.seq;
    } else {
        p.op = restore_op::load_ram;
        p.full = whole_state(e, p.n_restore);
    }
    const std::string other_template = template_difference(e.k.dims, s.k.dims);
    if (counted) {
        count_hit(p);
        stats_.cross_template_hits += other_template.empty() ? 0 : 1;
    }
    note_warmed_restore(e, p.n_restore, p.absorbs, !counted);
    p.reason = "restore " + std::string(to_string(p.kind)) + " at " + std::to_string(p.n_restore) + "/" +
               std::to_string(s.prompt.size()) + " from entry " + std::to_string(e.id) + " (" +
               std::string(to_string(e.where)) + ", " + std::to_string(e.toks.size()) + " tokens" +
               (e.k.session == s.k.session ? "" : ", cross-session") +
               (other_template.empty() ? "" : ", rendered under another template: " + other_template) + ")" +
               (p.absorbs ? ", absorbing it" : "");
    if (p.absorbs) {
        take_entry(p, chosen_it, retire_twin);
    } else {
        entries_.splice(entries_.begin(), entries_, chosen_it);
        e.mru = next_mru_++;
        if (used) {
            e.uses++;  // restored in place (an absorbing request's entry counts it at commit)
        }
    }
}

void store::take_entry(restore_plan & p, iter it, uint64_t retire_twin) {
    entry & e = *it;
    // The request owns the entry now. Its restore points up to the restore point (and
    // its final state, when restored whole) return with the commit; its RAM bytes stay
    // reserved until then.
    for (auto & c : e.checkpoints) {
        if (c.n_tokens <= p.n_restore) {
            p.inherited.push_back(std::move(c));
        }
    }
    if (hybrid_ && e.final_recurrent && p.n_restore == p.source_tokens) {
        p.inherited.push_back({p.source_tokens, point_kind::turn, e.final_recurrent});
    }
    p.inflight_bytes = e.ram_bytes();
    pending_bytes_ += p.inflight_bytes;
    p.tier_ancestors = std::move(e.ancestors);
    if (e.tier_copy != 0) {
        p.tier_ancestors.push_back(e.tier_copy);
    }
    p.pending_write_of = e.writing ? e.id : 0;
    p.unwritten_since = e.tier_copy == 0 && !e.writing && !e.write_failed ? e.unwritten_since : -1;
    on_leaving(e);
    index_remove(it);
    entries_.erase(it);
    if (auto t = by_id_.find(retire_twin); retire_twin != 0 && t != by_id_.end()) {
        const iter twin = t->second;
        p.tier_ancestors.insert(p.tier_ancestors.end(), twin->ancestors.begin(), twin->ancestors.end());
        if (twin->tier_copy != 0) {
            p.tier_ancestors.push_back(twin->tier_copy);
        }
        erase(twin, eviction_reason::superseded, " (the resend twin of the turn this request continues)");
    }
}

std::vector<capture_point> store::cold_split_points(const tokens & prompt, const plan_hints & hints) {
    restore_plan p;
    // No bucket "": nothing to diverge from, no anchor held. The rungs the budget cannot keep are
    // left out as a miss's plan leaves them out, so that both split alike.
    add_captures(p, key{}, prompt, hints, rung_room_now());
    count_rungs_not_planned(p.rungs_not_planned);
    return p.captures;
}

bool store::merges_guard(const restore_plan & p, int32_t from, int32_t n_prompt) const {
    if (cfg_.guard_merge <= 0) {
        return false;
    }
    const int32_t guard = n_prompt - 1;
    const auto near = [&](int32_t n) { return n > 0 && n < guard && guard - n <= cfg_.guard_merge; };
    if (near(from)) {
        return true;
    }
    // A split capture of a kind the entry keeps as a checkpoint (an anchor is its own entry, a
    // message rung goes with the next user turn, a pass-end point is taken where a pass ends).
    return std::any_of(p.captures.begin(), p.captures.end(), [&](const capture_point & c) {
        return !c.at_pass_end && !c.deferrable && near(c.n_tokens) &&
               (c.kind == point_kind::turn || c.kind == point_kind::divergence || c.kind == point_kind::ladder);
    });
}

/** The capture points of one plan being built (add_captures and its steps): what they read and
 *  what the anchor step leaves for the ladder step. */
struct store::capture_plan {
    restore_plan & p;
    const key & k;
    const tokens & prompt;
    const plan_hints & h;
    const rung_room & room;       ///< what a new ladder rung must be worth (store::rung_room_now)
    int32_t from = 0;             ///< tokens restored: a point must lie after them
    int32_t n_prompt = 0;         ///< prompt tokens: a point must lie before its end
    int32_t anchor = -1;          ///< the anchor's length, tokens (-1: none planned for this prompt)
    int32_t tools_anchor = -1;    ///< the tools anchor's length, tokens (-1: none)
    bool anchor_planned = false;  ///< the anchor (at `anchor`) is captured by this plan
    /** A split capture of `kind` at `n` tokens, when inside (from, n_prompt). */
    void add(int32_t n, point_kind kind) {
        if (n > from && n < n_prompt) {
            p.captures.push_back({n, kind});
        }
    }
    /** A capture of `kind` at the end of the pass that reaches `n` tokens, when inside (from, n_prompt). */
    void add_at_pass_end(int32_t n, point_kind kind) {
        if (n > from && n < n_prompt) {
            p.captures.push_back({n, kind, /*at_pass_end=*/true});
        }
    }
};

namespace {

/** The volatile rungs of a newly pinned system region: of `volatile_starts` (tokens, ascending:
 *  where per-session content starts), those after `from` and min prefix and before the near
 *  zone (`near_start`), at least a quarter of a near step apart, at most
 *  --cache-ladder-volatile-rungs of them (the first half and the last half where there are
 *  more). Ascending, tokens. */
std::vector<int32_t> volatile_rungs(const config & cfg, int32_t from, int32_t near_start,
                                    const std::vector<int32_t> & volatile_starts) {
    const int32_t min_gap = std::max(1, cfg.ladder_near_step / 4);
    std::vector<int32_t> spaced;
    for (const int32_t v : volatile_starts) {
        if (cfg.ladder_step <= 0 || v >= near_start) {
            break;
        }
        if (v <= from || v < cfg.min_prefix || (!spaced.empty() && v - spaced.back() < min_gap)) {
            continue;
        }
        spaced.push_back(v);
    }
    const size_t cap = static_cast<size_t>(std::max(0, cfg.ladder_volatile_rungs));
    const size_t head = spaced.size() <= cap ? spaced.size() : (cap + 1) / 2;
    std::vector<int32_t> out;
    for (size_t i = 0; i < spaced.size(); ++i) {
        if (i < head || (spaced.size() > cap && i >= spaced.size() - (cap - head))) {
            out.push_back(spaced[i]);
        }
    }
    return out;
}

/** Sorts `captures` by length and keeps one checkpoint per length: at one length the first
 *  planned kind stays (a rung, planned last, gives way); an anchor beside a checkpoint is a
 *  different state, and both stay. */
void sort_and_dedupe(std::vector<capture_point> & captures) {
    // Stable: at one length the first planned kind stays (a rung, planned last, gives way).
    std::stable_sort(captures.begin(), captures.end(),
              [](const capture_point & a, const capture_point & b) { return a.n_tokens < b.n_tokens; });
    // One checkpoint per length (an anchor beside a checkpoint is a different state: keep both).
    std::vector<capture_point> out;
    for (const auto & c : captures) {
        const bool dup = !out.empty() && out.back().n_tokens == c.n_tokens &&
                         (out.back().kind == point_kind::anchor) == (c.kind == point_kind::anchor);
        if (!dup) {
            out.push_back(c);
        }
    }
    captures = std::move(out);
}

}  // namespace

void store::add_captures(restore_plan & p, const key & k, const tokens & prompt, const plan_hints & h,
                         const rung_room & room) const {
    if (!cfg_.lineage) {
        return;  // exact mode: whole-prompt snapshots only
    }
    capture_plan c{p, k, prompt, h, room, p.n_restore, static_cast<int32_t>(prompt.size())};
    add_anchor_captures(c);
    if (hybrid_) {
        add_turn_captures(c);
        add_divergence_capture(c);
        if (c.anchor_planned) {
            add_ladder_captures(c);
        }
    }
    // An image is decoded as one unit: a point inside one moves back to its start (media.h).
    if (!h.media.empty()) {
        std::vector<capture_point> moved;
        for (auto m : p.captures) {
            m.n_tokens = clamp_to_spans(h.media, m.n_tokens);
            if (m.n_tokens > c.from || (m.kind == point_kind::anchor && m.n_tokens == c.from && m.n_tokens > 0)) {
                moved.push_back(m);
            }
        }
        p.captures = std::move(moved);
    }
    if (hybrid_) {
        add_guard_capture(c);
    }
    sort_and_dedupe(p.captures);
}

void store::add_anchor_captures(capture_plan & c) const {
    // anchor: end of system prompt + tools, minus BPE slack; pinned wherever it falls.
    // tools anchor (hybrid): the end of a tool block rendered before the system text, minus the
    // same slack, when it falls before the anchor: what system texts that differ near their end
    // (a timestamp, a sibling) still share, so that a new session on them does not start cold.
    // --cache-max-anchors 0 turns anchors off: none is planned.
    const bool anchors_on = cfg_.max_anchors > 0;
    c.anchor = anchors_on && c.h.anchor_tokens > 0 ? c.h.anchor_tokens - cfg_.anchor_slack : -1;
    c.tools_anchor =
        anchors_on && hybrid_ && c.h.tools_anchor_tokens > 0 ? c.h.tools_anchor_tokens - cfg_.anchor_slack : -1;
    // An anchor file this plan reads that stays a file (store::repins_read_anchor) is this
    // system prompt's anchor: capturing it again would pin a copy without its file, which the
    // disk tier would then write a second time.
    const restore_plan & p = c.p;
    const bool anchor_file = p.op == restore_op::load_tier && p.source_anchor && !repins_read_anchor(p);
    for (const int32_t a : {c.anchor, c.tools_anchor < c.anchor ? c.tools_anchor : -1}) {
        if (a < 0) {
            continue;
        }
        bool exists = anchor_file && p.source_tokens == a;
        if (auto t = tries_.find(c.k.bucket); t != tries_.end() && a > 0) {
            for (uint64_t id : t->second.exact(c.prompt, a)) {
                exists = exists || by_id_.at(id)->anchor;
            }
        }
        if (!exists && a >= cfg_.min_prefix && a >= c.from && a < c.n_prompt) {
            c.p.captures.push_back({a, point_kind::anchor});
            c.anchor_planned = c.anchor_planned || a == c.anchor;
        }
    }
}

void store::add_turn_captures(capture_plan & c) const {
    const plan_hints & h = c.h;
    const std::vector<int32_t> & breakpoints = h.breakpoint_tokens;
    // turn: the history boundary (prompt without its generation prompt), where the next
    // turn's prompt leaves this one when the template re-renders the assistant turn.
    c.add(h.history_tokens, point_kind::turn);
    // the start of the last user message: an edit of it restores up to there instead of
    // the previous request's history boundary (before the reply and tool results since).
    // Not when the client marked cache breakpoints (Anthropic cache_control): it said where it
    // comes back, and with max_checkpoints per lineage this turn would thin one of those away.
    // Only where it saves more than the split costs: not a few tokens after the restore point
    // (--cache-last-user-min-gain; that point stays a checkpoint an edit restores).
    if (cfg_.last_user_checkpoint && breakpoints.empty() && h.last_user_tokens - c.from >= cfg_.last_user_min_gain) {
        c.add(h.last_user_tokens, point_kind::turn);
    }
    // the start of each image: a prompt with the same text and another image restores
    // exactly the text before it (media.h).
    for (const auto & m : h.media) {
        c.add(m.begin, point_kind::turn);
    }
    // message rungs: inside the last user message (up to the history boundary), so that an
    // edit of it restores close to where it parts (ladder.h).
    if (breakpoints.empty() && h.last_user_tokens >= 0 && h.history_tokens > h.last_user_tokens) {
        for (const int32_t r : message_rungs(cfg_, c.from, h.last_user_tokens, h.history_tokens, cfg_.min_prefix)) {
            c.add(r, point_kind::message);
        }
        // and pass-end rungs through a long message: no split (config.h message_pass_rungs).
        for (const int32_t r :
             message_pass_rungs(cfg_, c.from, h.last_user_tokens, h.history_tokens, cfg_.min_prefix)) {
            c.add_at_pass_end(r, point_kind::message);
        }
    }
    // cache_control breakpoints: where the client says it will come back.
    for (const int32_t b : breakpoints) {
        c.add(b - cfg_.anchor_slack, point_kind::turn);
    }
}

void store::add_divergence_capture(capture_plan & c) const {
    // divergence: where the prompt stops sharing tokens with its closest sibling.
    int32_t sibling = 0;
    if (auto t = tries_.find(c.k.bucket); t != tries_.end()) {
        // The first entry, in descending common prefix, that the prompt leaves inside.
        t->second.match(c.prompt, [&](uint64_t id, int32_t lcp) {
            if (lcp < static_cast<int32_t>(by_id_.at(id)->toks.size())) {
                sibling = lcp;
                return false;
            }
            return true;
        });
    }
    // With slack: back to the start of its line, so that a variation parting a few tokens
    // earlier next time still restores it (ladder.h).
    if (sibling > 0) {
        const int32_t at = divergence_point(cfg_, sibling, c.h.line_starts);
        if (at - c.from >= cfg_.divergence_min_gain) {
            c.add(at, point_kind::divergence);
        }
    }
}

void store::add_ladder_captures(capture_plan & c) const {
    // ladder: rungs inside a newly pinned system region (after the tools anchor, which
    // every system text with these tools shares), kept with the anchor (ladder.h).
    const int32_t anchor = c.anchor;
    const int32_t tools_anchor = c.tools_anchor;
    const int32_t start = std::max(c.from, tools_anchor > 0 && tools_anchor < anchor ? tools_anchor : 0);
    const auto rungs = ladder_rungs(cfg_, start, anchor, c.h.line_starts, cfg_.min_prefix);
    // A split rung: in this prefill, or (--cache-ladder-defer) left to a ladder job that makes it
    // off the request's path (docs/architecture.md "Ladder jobs"). Only after `start` (the tools
    // anchor or the restore point), where the job restores a far rung (a pass end of this
    // prefill, at most a pass before the rung) or `start` itself: a rung before it (per-session
    // content inside the tool block) has no stored state near it, and its job would prefill
    // everything before it again.
    const auto add_split = [&](int32_t r) {
        if (!cfg_.ladder_defer || r <= start) {
            c.add(r, point_kind::ladder);
        } else if (r > c.from && r < c.n_prompt) {
            c.p.captures.push_back({r, point_kind::ladder, /*at_pass_end=*/false, /*deferrable=*/true});
        }
    };
    // Per-session content before the near zone (the tools included: a folder written
    // into a tool's description): a split rung right before each, at least a quarter of a
    // near step apart (as the near rungs' least gap: a run of paths, one per line, gets a
    // rung at each), at most --cache-ladder-volatile-rungs. Where there are more, the
    // first half of them and the last half: agents write the session's folder early (a
    // tool's description, the environment block) and its memory paths late (right before
    // the instructions' end), while the paths in between are most often the tools'
    // placeholder examples, the same in every session (qwen-code's prompt: 8 rungs spent on
    // those left its memory path ~400 tokens from a restore point).
    const int32_t near_start = rungs.near.empty() ? anchor : rungs.near.front();
    std::vector<std::pair<int32_t, bool>> planned;  // (tokens, at a pass end), ascending
    for (const int32_t v : volatile_rungs(cfg_, c.from, near_start, c.h.volatile_starts)) {
        planned.emplace_back(v, false);
    }
    for (const int32_t r : rungs.near) {
        planned.emplace_back(r, false);
    }
    for (const int32_t r : rungs.far) {
        planned.emplace_back(r, true);
    }
    std::sort(planned.begin(), planned.end());
    const std::vector<bool> kept = admit_rungs(c, planned);
    for (size_t i = 0; i < planned.size(); ++i) {
        if (!kept[i]) {
            c.p.rungs_not_planned++;
        } else if (planned[i].second) {
            c.add_at_pass_end(planned[i].first, point_kind::ladder);
        } else {
            add_split(planned[i].first);
        }
    }
}

std::vector<bool> store::admit_rungs(const capture_plan & c, const std::vector<std::pair<int32_t, bool>> & planned) const {
    // Under a budget with room for every rung (the default budget, or a tight one not yet
    // full) all are planned. Past the room, the rungs worth the most per byte take it, and each
    // of the others only where it is worth more than what it would push out: the eviction would
    // otherwise drop it again soon after, and a near or volatile rung is a split (one forward
    // pass on this request's path, or a ladder job's) paid for nothing.
    std::vector<bool> kept(planned.size(), true);
    const rung_room & room = c.room;
    const auto inside = [&](int32_t n) { return n > c.from && n < c.n_prompt; };
    uint64_t need = 0;
    for (const auto & [n, pass_end] : planned) {
        need += inside(n) ? room.bytes : 0;
    }
    if (room.bytes == 0 || need <= room.headroom) {
        return kept;
    }
    // Each rung's value per byte: the prefill seconds it saves beyond the point below it (the
    // rung before, or where this prefill starts), priced as cheapest_rung prices a held one.
    const double likelihood = rung_likelihood(0);
    std::vector<std::pair<double, size_t>> by_value;
    int32_t below = c.from;
    for (size_t i = 0; i < planned.size(); ++i) {
        const int32_t n = planned[i].first;
        if (!inside(n)) {
            continue;
        }
        const double saved = cost_.prefill_seconds(below, n).value_or(static_cast<double>(n - below));
        by_value.emplace_back(saved * likelihood / static_cast<double>(room.bytes), i);
        below = n;
    }
    std::stable_sort(by_value.begin(), by_value.end(), [](const auto & a, const auto & b) { return a.first > b.first; });
    uint64_t used = 0;
    for (const auto & [value, i] : by_value) {
        if (used + room.bytes <= room.headroom) {
            used += room.bytes;
        } else if (value < room.floor) {
            kept[i] = false;
        }
    }
    return kept;
}

store::rung_room store::rung_room_now() {
    rung_room room;
    if (cfg_.eviction != eviction_policy::value || !hybrid_) {
        return room;
    }
    // A rung's state: the size of a recurrent checkpoint held now (they are all one size on
    // one model), else unknown and every rung planned.
    for (const auto & e : entries_) {
        for (const auto & cp : e.checkpoints) {
            if (cp.recurrent) {
                room.bytes = cp.recurrent->size();
                break;
            }
        }
        if (room.bytes != 0) {
            break;
        }
    }
    const uint64_t used = ram_bytes();
    room.headroom = cfg_.ram_bytes > used ? cfg_.ram_bytes - used : 0;
    // The floor only where a ladder could outgrow the room (a victim search per plan otherwise).
    const auto most = static_cast<uint64_t>(std::max(0, cfg_.ladder_max_rungs) + std::max(0, cfg_.ladder_volatile_rungs));
    if (room.bytes != 0 && most * room.bytes > room.headroom) {
        const auto v = choose_victim(0);
        room.floor = !v || v->live ? std::numeric_limits<double>::infinity() : v->value;
    }
    return room;
}

void store::add_guard_capture(capture_plan & c) const {
    // guard: prompt - 1 (resend checkpoint), else prompt - 16 when the uncached suffix is
    // >= 256 tokens. The prompt - 1 guard merges into a restore point at most
    // --cache-guard-merge tokens before it (config.h guard_merge): a split planned above (on
    // a user turn the history boundary, the generation prompt's few tokens back) or the
    // restore point itself (a resend that restored it). A resend then restores that point and
    // computes those tokens in its one pass, and this prefill saves the pass the guard cuts.
    // Decided after the images moved the points above; a guard inside an image moves too.
    const plan_hints & h = c.h;
    const auto guard_at = [&](int32_t n) { return h.media.empty() ? n : clamp_to_spans(h.media, n); };
    if (cfg_.resend_checkpoint) {
        if (!merges_guard(c.p, c.from, c.n_prompt)) {
            c.add(guard_at(c.n_prompt - 1), point_kind::guard);
        }
    } else if (c.n_prompt - c.from >= cfg_.guard_min_suffix) {
        c.add(guard_at(c.n_prompt - cfg_.guard_distance), point_kind::guard);
    }
}

void store::check_invariants() const {
    auto fail = [](const std::string & what) { throw std::logic_error("cache invariant broken: " + what); };
    std::set<int32_t> seqs;
    int32_t n_anchor = 0;
    int32_t n_conv = 0;
    uint64_t anchor_bytes = 0;
    for (const auto & e : entries_) {
        const int32_t n = static_cast<int32_t>(e.toks.size());
        for (size_t i = 0; i < e.checkpoints.size(); ++i) {
            const auto & c = e.checkpoints[i];
            if (c.n_tokens < 1 || c.n_tokens >= n) {
                fail("1: checkpoint at " + std::to_string(c.n_tokens) + " outside [1, " + std::to_string(n) + ")");
            }
            if (i > 0 && e.checkpoints[i - 1].n_tokens >= c.n_tokens) {
                fail("1: checkpoints of entry " + std::to_string(e.id) + " do not ascend");
            }
        }
        const auto n_message = std::count_if(e.checkpoints.begin(), e.checkpoints.end(),
                                             [](const checkpoint & c) { return c.kind == point_kind::message; });
        const auto n_reply = std::count_if(e.checkpoints.begin(), e.checkpoints.end(),
                                           [](const checkpoint & c) { return c.kind == point_kind::reply; });
        if (static_cast<int32_t>(e.checkpoints.size() - n_message - n_reply) >
                (e.anchor ? cfg_.ladder_max_rungs : cfg_.max_checkpoints) ||
            n_message > cfg_.message_rungs_max() || n_reply > config::max_reply_candidates) {
            fail("2: entry " + std::to_string(e.id) + " has " + std::to_string(e.checkpoints.size()) +
                 " checkpoints (" + std::to_string(n_message) + " message rungs, " + std::to_string(n_reply) +
                 " reply checkpoints)");
        }
        for (const auto & c : e.checkpoints) {
            if (e.anchor && c.kind != point_kind::ladder) {
                fail("2: anchor entry " + std::to_string(e.id) + " holds a " + std::string(to_string(c.kind)) +
                     " checkpoint");
            }
        }
        if ((!hybrid_ || !cfg_.lineage) && !e.checkpoints.empty()) {
            fail("2: checkpoints on a dense family or in exact mode");
        }
        if (e.where == tier::device) {
            if (e.seq < 0 || !seqs.insert(e.seq).second || e.full) {
                fail("3: device entry " + std::to_string(e.id) + " with bad or shared sequence id");
            }
        } else if (!e.full) {
            fail("3: RAM entry " + std::to_string(e.id) + " without a state");
        }
        if (e.base) {
            // 11: a patch reads a base held once: its anchor's state, or the orphan base the
            // anchor left, which counts exactly the patches over it.
            const auto a = by_id_.find(e.base_anchor);
            const auto o = orphan_bases_.find(e.base_anchor);
            const bool held = (a != by_id_.end() && a->second->anchor && a->second->full == e.base) ||
                              (o != orphan_bases_.end() && o->second.state == e.base);
            if (e.where != tier::ram || e.anchor || !held || e.base_tokens < 1 ||
                e.base_tokens >= static_cast<int32_t>(e.toks.size())) {
                fail("11: entry " + std::to_string(e.id) + " is a patch over a base not held (anchor " +
                     std::to_string(e.base_anchor) + ")");
            }
        }
        if (e.tier_copy != 0 && (e.writing || e.write_failed)) {
            fail("9: entry " + std::to_string(e.id) + " has file " + std::to_string(e.tier_copy) +
                 " and a write in flight or failed");
        }
        if (e.unwritten_since > e.last_use) {
            fail("10: entry " + std::to_string(e.id) + " unwritten since after its last use");
        }
        if (e.anchor) {
            n_anchor++;
            anchor_bytes += e.ram_bytes();
            if (e.where != tier::ram) {
                fail("4: anchor not in RAM");
            }
        } else {
            n_conv++;
        }
    }
    if (n_anchor > cfg_.max_anchors || anchor_bytes > cfg_.max_anchor_bytes) {
        fail("4: anchors over their caps");
    }
    for (const auto & [id, o] : orphan_bases_) {
        const auto n = std::count_if(entries_.begin(), entries_.end(),
                                     [id = id](const entry & e) { return e.base && e.base_anchor == id; });
        if (n != o.patches || n == 0 || by_id_.count(id) != 0) {
            fail("11: the orphan base of anchor " + std::to_string(id) + " counts " + std::to_string(o.patches) +
                 " patches; " + std::to_string(n) + " read it");
        }
    }
    if (ram_bytes() > cfg_.ram_bytes) {
        fail("5: " + std::to_string(ram_bytes()) + " RAM bytes over the budget of " + std::to_string(cfg_.ram_bytes));
    }
    if (n_conv > cfg_.max_entries) {
        fail("6: " + std::to_string(n_conv) + " entries over the cap");
    }
    size_t in_tries = 0;
    for (const auto & [bucket, t] : tries_) {
        t.check_invariants();
        in_tries += t.size();
    }
    if (in_tries != entries_.size() || by_id_.size() != entries_.size()) {
        fail("7: the tries hold " + std::to_string(in_tries) + " ids for " + std::to_string(entries_.size()) + " entries");
    }
    int64_t blocks = 0;
    std::unordered_map<std::string, int64_t> refs;
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        auto t = tries_.find(it->k.bucket);
        const auto ids = t == tries_.end() ? std::vector<uint64_t>{} : t->second.exact(it->toks);
        if (std::find(ids.begin(), ids.end(), it->id) == ids.end() || by_id_.at(it->id) != it) {
            fail("7: entry " + std::to_string(it->id) + " is not indexed under its tokens");
        }
        if (!it->chain.empty() && !apc_on()) {
            fail("8: a block chain with APC off or on a hybrid family");
        }
        blocks += static_cast<int64_t>(it->chain.size());
        for (const auto & h : it->chain) {
            refs[h]++;
        }
    }
    if (blocks != apc_blocks_ || refs != block_refs_ || blocks > apc_num_blocks()) {
        fail("8: APC block counters do not match the chains (" + std::to_string(blocks) + " blocks)");
    }
}

}  // namespace lineage::cache
