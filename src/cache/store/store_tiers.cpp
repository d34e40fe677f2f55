// cache::store: the RAM budget and eviction, demotion, TTL, reset, views and stats, and the
// tier-2 hooks (write-behind jobs, completions, completing a disk load); see store.h.
#include "cache/store/store.h"

#include "cache/blob_patch.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace lineage::cache {

namespace {

uint64_t size_of(const blob_ptr & b) {
    return b ? b->size() : 0;
}

}  // namespace

bool store::reserve(uint64_t bytes, uint64_t protect) {
    if (bytes > cfg_.ram_bytes) {
        count(rejection_reason::too_large);
        LINEAGE_TRACE(trace_, "rejected a state of {}: larger than the whole RAM budget of {} ({})",
                      human_bytes(bytes), human_bytes(cfg_.ram_bytes), cfg_.budget_flag);
        if (!warned_too_large_) {
            warned_too_large_ = true;
            spdlog::warn("cache: a state of {} bytes is larger than the whole RAM budget of {} bytes and is not "
                         "stored; raise {} (this warning is printed once)",
                         bytes, cfg_.ram_bytes, cfg_.budget_flag);
        }
        return false;
    }
    while (ram_bytes() + bytes > cfg_.ram_bytes) {
        if (below_admission(protect, bytes)) {
            count(rejection_reason::not_admitted);
            return false;
        }
        if (!evict_one(protect, eviction_reason::capacity)) {
            count(rejection_reason::budget);
            LINEAGE_TRACE(
                trace_, "rejected a state of {}: the RAM budget of {} is held by pinned, protected or reserved states",
                human_bytes(bytes), human_bytes(cfg_.ram_bytes));
            return false;
        }
    }
    pending_bytes_ += bytes;
    return true;
}

tier_job store::job_of(entry & e) {
    tier_job j;
    j.entry_id = e.id;
    j.k = e.k;
    j.toks = e.toks;
    j.history = e.history;
    j.anchor = e.anchor;
    j.full = e.full;
    j.base = e.base;  // the tier's worker writes the patch applied (copy_record::base)
    j.seq = e.where == tier::device ? e.seq : -1;
    j.checkpoints = e.checkpoints;
    j.ancestors = std::move(e.ancestors);
    e.ancestors.clear();
    e.writing = true;
    return j;
}

bool store::worth_writing(entry & e, bool at_shutdown) {
    // The copy holds the whole state (a patch's base rows too).
    const uint64_t bytes = e.ram_bytes() + e.device_bytes + e.shared_bytes();
    const int32_t n = static_cast<int32_t>(e.toks.size());
    if (cost_.worth_write(bytes, n, at_shutdown)) {
        return true;
    }
    e.write_declined = true;
    stats_.tier_writes_declined++;
    const double rate = cost_.prefill_tokens_per_s().value_or(0);
    const double read_bps = cost_.read_bytes_per_s(0);
    const double write_bps = cost_.write_bytes_per_s();
    LINEAGE_TRACE(trace_, "entry {} ({} tokens, {}) not written{}: reading it back (~{:.0f} ms at {}/s){} more than "
                          "recomputing it (~{:.0f} ms at {:.0f} tokens/s)",
                  e.id, n, human_bytes(bytes), at_shutdown ? " at shutdown" : "",
                  1e3 * static_cast<double>(bytes) / read_bps, human_bytes(static_cast<uint64_t>(read_bps)),
                  at_shutdown ? fmt::format(" and writing it now (~{:.0f} ms at {}/s) cost",
                                            1e3 * static_cast<double>(bytes) / write_bps,
                                            human_bytes(static_cast<uint64_t>(write_bps)))
                              : std::string(" costs"),
                  1e3 * n / rate, rate);
    return false;
}

void store::erase(iter it, std::optional<eviction_reason> reason, std::string_view detail) {
    // Write-behind "when it leaves RAM": an entry pushed out for room or by TTL goes to disk,
    // where the tier cost rule says a copy is worth it.
    const bool spill = writes_behind() && reason && *reason != eviction_reason::superseded && it->tier_copy == 0 &&
                       !it->writing && !it->write_failed && !it->write_declined && worth_writing(*it, false);
    if (spill) {
        LINEAGE_TRACE(trace_, "entry {} ({} tokens) leaves memory ({}): written to disk", it->id, it->toks.size(),
                      to_string(*reason));
        spills_.push_back(job_of(*it));
    }
    if (it->where == tier::device) {
        released_.push_back(it->seq);
    }
    const bool lost = reason && *reason != eviction_reason::superseded && *reason != eviction_reason::released;
    if (lost && it->warmed > 0) {
        stats_.warmup.wasted++;  // warmed, never hit
    }
    if (lost) {
        ghosts_.add(it->k.bucket, it->toks, it->uses);  // a later miss on it is then "evicted"
        if (!it->anchor) {
            reuse_.left_unused(it->uses, it->family);  // the reuse model's failure (value.h)
        }
    }
    if (reason) {
        stats_.evictions[std::string(to_string(*reason))]++;
        LINEAGE_TRACE(trace_, "evicted {}entry {} ({}, {} tokens, {} checkpoints, {}): {}{}",
                      it->anchor ? "anchor " : "", it->id, to_string(it->where), it->toks.size(),
                      it->checkpoints.size(), human_bytes(it->ram_bytes() + it->device_bytes), to_string(*reason),
                      detail);
        spdlog::debug("cache: evicted entry {} ({} tokens, {}, {} checkpoints): {}", it->id, it->toks.size(),
                      to_string(it->where), it->checkpoints.size(), to_string(*reason));
    }
    on_leaving(*it);
    index_remove(it);
    entries_.erase(it);
}

restore_plan cold_plan(restore_plan p) {
    restore_plan cold;
    cold.captures = std::move(p.captures);
    return cold;
}

checkpoint_filter store::checkpoints_to_read(const restore_plan & p) const {
    if (repins_as_anchor(p)) {
        return {};  // it may be pinned again with its whole ladder
    }
    checkpoint_filter f;
    f.up_to = p.absorbs ? p.n_restore : -1;
    f.at = p.n_restore;
    return f;
}

util::status store::tier_loaded(const key & k, restore_plan & p, tier_load_result r, double now_s) {
    now_s_ = std::max(now_s_, now_s);
    if (r.error == tier_load_error::none && r.record && hybrid_ && p.n_restore < p.source_tokens) {
        // A hybrid restore short of the file's length needs the checkpoint the index named.
        const auto & cps = r.record->checkpoints;
        const bool has = std::any_of(cps.begin(), cps.end(),
                                     [&](const checkpoint & c) { return c.n_tokens == p.n_restore && c.recurrent; });
        if (!has) {
            r.error = tier_load_error::corrupt;
            r.detail = "the file has no checkpoint at " + std::to_string(p.n_restore) + " as its index says";
            r.record.reset();
        }
    }
    if (r.error != tier_load_error::none || !r.record) {
        const std::string why = fmt::format("{} {} not loaded ({}: {})", copy_noun(p), p.tier_copy,
                                            to_string(r.error), r.detail);
        tier_load_failed(p);
        p = cold_plan(std::move(p));
        return util::status::error(why);
    }
    copy_record & rec = *r.record;
    p.full = rec.full;
    if (hybrid_ && p.n_restore < p.source_tokens) {
        for (const auto & c : rec.checkpoints) {
            if (c.n_tokens == p.n_restore) {
                p.recurrent = c.recurrent;
            }
        }
    }
    if (p.absorbs) {
        // Absorption from disk: the file's restore points up to the restore point return with
        // the request's commit, as from a RAM entry.
        for (auto & c : rec.checkpoints) {
            const uint64_t size = size_of(c.recurrent);
            if (c.n_tokens <= p.n_restore && reserve(size)) {
                p.inflight_bytes += size;
                p.inherited.push_back(std::move(c));
            }
        }
        p.final_from_sequence = hybrid_ && p.n_restore == p.source_tokens;
    } else if (rec.anchor && repins_as_anchor(p)) {
        // A system prompt seen before the restart or released from RAM: pinned in RAM again
        // with its ladder (its file stays). Not on the CPU alone with RAM release on
        // (config::repin_read_anchors_for) when it came from our own file: the next new session
        // reads that file again (and the plan captured no anchor over it). One read from a
        // shared tier (Redis) is pinned, to be written to our own tier from RAM.
        uint64_t size = size_of(rec.full);
        for (const auto & c : rec.checkpoints) {
            size += size_of(c.recurrent);
        }
        if (reserve(size)) {
            commit_anchor(k, rec.toks, rec.full, size, now_s, p.tier == 0 && own_copies() ? p.tier_copy : 0,
                          rec.checkpoints);
        }
    }
    return util::status::ok();
}

void store::attach_tier(const tier_lookup * t, tier_traits traits) {
    stats_.tier_hits.try_emplace(traits.name, 0);
    stats_.tier_reads_declined.try_emplace(traits.name, 0);
    tiers_.push_back({t, std::move(traits)});
}

std::string store::copy_noun(const restore_plan & p) const {
    const size_t t = static_cast<size_t>(p.tier);
    return p.tier >= 0 && t < tiers_.size() ? tiers_[t].traits.copy_noun : p.tier_name + " copy";
}

void store::tier_load_failed(const restore_plan & p) {
    if (p.counted) {  // a warm-up's hit was not counted (plan_tier_restore)
        count_hit(p, -1);
        int64_t & tier_hits = stats_.tier_hits[p.tier_name];
        tier_hits = std::max<int64_t>(0, tier_hits - 1);
        stats_.tokens_prefilled += p.n_restore;
        stats_.misses++;
    }
    const size_t t = static_cast<size_t>(p.tier);
    stats_.rejections[p.tier >= 0 && t < tiers_.size() ? tiers_[t].traits.load_failed : "tier_load_failed"]++;
    LINEAGE_TRACE(trace_, "{} {} could not be loaded: not restored", copy_noun(p), p.tier_copy);
}

void store::retract_lookup(const restore_plan & first, int32_t n_prompt) {
    auto take_back = [](int64_t & n, int64_t by) { n = std::max<int64_t>(0, n - by); };
    take_back(stats_.ladder_rungs_not_planned, first.rungs_not_planned);
    if (!first.counted) {
        return;
    }
    take_back(stats_.lookups, 1);
    take_back(stats_.misses, 1);  // tier_load_failed's
    take_back(stats_.tokens_prefilled, n_prompt);
    if (first.cause) {  // classify's
        take_back((first.n_restore == 0 ? stats_.misses_by_cause
                                        : stats_.short_hits_by_cause)[std::string(to_string(*first.cause))],
                  1);
        if (*first.cause == miss_cause::key_differs && !first.cause_dimension.empty()) {
            take_back(stats_.key_differs[first.cause_dimension], 1);
        }
    }
}

std::optional<entry_view> store::device_lru() const {
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
        if (it->where == tier::device) {
            return view(*it);
        }
    }
    return std::nullopt;
}

void store::demote(uint64_t id, blob_ptr full, uint64_t reserved, std::optional<patch_base> base) {
    release_pending(reserved);
    auto it = std::find_if(entries_.begin(), entries_.end(), [id](const entry & e) { return e.id == id; });
    if (it == entries_.end()) {
        return;
    }
    if (!full) {
        erase(it, eviction_reason::capacity, " (its sequence id was needed and its state does not fit the RAM budget)");
        return;
    }
    const auto anchor = base ? by_id_.find(base->anchor) : by_id_.end();
    if (base && (anchor == by_id_.end() || anchor->second->full != base->state)) {
        // The anchor left between patch_base_for and now: the patch reads nothing held.
        erase(it, eviction_reason::capacity, " (its anchor left RAM before its state did)");
        return;
    }
    const int32_t seq = it->seq;
    released_.push_back(seq);
    it->seq = -1;
    it->where = tier::ram;
    it->full = std::move(full);
    it->device_bytes = 0;
    if (base) {
        it->base = std::move(base->state);
        it->base_anchor = base->anchor;
        it->base_tokens = base->n_tokens;
    }
    LINEAGE_TRACE(trace_, "demoted entry {} ({} tokens) from device sequence {} to RAM ({}{})", it->id,
                  it->toks.size(), seq, human_bytes(size_of(it->full)),
                  base ? fmt::format(", a patch over anchor {}'s {} tokens: {} read from it", it->base_anchor,
                                     it->base_tokens, human_bytes(it->shared_bytes()))
                       : std::string());
}

void store::abandon(const restore_plan & p, uint64_t reserved) {
    release_pending(reserved + p.inflight_bytes);
    if (p.absorbs) {
        count(rejection_reason::abandoned);
        LINEAGE_TRACE(trace_, "abandoned the taken entry {}: the request failed before its commit", p.source);
    }
}

void store::expire(double now_s) {
    now_s_ = std::max(now_s_, now_s);
    for (auto it = entries_.begin(); it != entries_.end();) {
        auto next = std::next(it);
        if (now_s - it->last_use > cfg_.ttl_s) {
            erase(it, eviction_reason::ttl, trace_.on() ? fmt::format(" (unused for {:.0f} s > {} {:.0f} s)",
                                                        now_s - it->last_use, cfg_.ttl_flag, cfg_.ttl_s)
                                         : std::string());
        }
        it = next;
    }
}

uint64_t store::release_written(double now_s) {
    if (cfg_.ram_release_s <= 0 || !own_copies()) {
        return 0;
    }
    uint64_t freed = 0;
    for (auto it = entries_.begin(); it != entries_.end();) {
        auto next = std::next(it);
        if (it->where == tier::ram && it->tier_copy != 0 && !it->writing && it->rung_holds == 0 &&
            now_s - it->last_use >= cfg_.ram_release_s) {
            freed += it->ram_bytes();
            erase(it, eviction_reason::released,
                  trace_.on() ? fmt::format(" (unused for {:.0f} s >= --cache-ram-release-s {:.0f} s; disk file {} "
                                            "serves its next hit)",
                                            now_s - it->last_use, cfg_.ram_release_s, it->tier_copy)
                              : std::string());
        }
        it = next;
    }
    return freed;
}

reset_result store::reset() {
    reset_result r;
    r.entries_freed = static_cast<int64_t>(entries_.size());
    for (const auto & e : entries_) {
        r.bytes_freed += e.ram_bytes() + e.device_bytes;
        if (e.where == tier::device) {
            released_.push_back(e.seq);
        }
    }
    for (const auto & [id, o] : orphan_bases_) {
        r.bytes_freed += size_of(o.state);
    }
    orphan_bases_.clear();  // the patches over them go with every entry
    entries_.clear();
    successor_.clear();
    tries_.clear();
    by_id_.clear();
    apc_blocks_ = 0;
    block_refs_.clear();
    ghosts_.clear();  // an operator's reset: what was there is not "evicted" by the budget
    LINEAGE_TRACE(trace_, "reset: freed {} entries ({})", r.entries_freed, human_bytes(r.bytes_freed));
    return r;
}

reset_result store::reset_if(const std::function<bool(const key &)> & which) {
    reset_result r;
    for (auto it = entries_.begin(); it != entries_.end();) {
        auto next = std::next(it);
        if (which(it->k)) {
            r.entries_freed++;
            r.bytes_freed += it->ram_bytes() + it->device_bytes;
            erase(it, std::nullopt);  // no reason: neither counted as an eviction nor spilled
        }
        it = next;
    }
    LINEAGE_TRACE(trace_, "reset (filtered): freed {} entries ({})", r.entries_freed, human_bytes(r.bytes_freed));
    return r;
}

std::vector<tier_job> store::take_idle_writes(double now_s, double idle_s) {
    std::vector<tier_job> out;
    if (!writes_behind()) {
        return out;
    }
    for (auto & e : entries_) {
        if (e.tier_copy == 0 && !e.writing && !e.write_failed && !e.write_declined &&
            (idle_s < 0 || now_s - e.last_use >= idle_s) && worth_writing(e, idle_s < 0)) {
            LINEAGE_TRACE(trace_, "entry {} ({} tokens) {}: written to disk", e.id, e.toks.size(),
                          idle_s < 0 ? "at shutdown" : fmt::format("idle for {:.0f} s", now_s - e.last_use));
            out.push_back(job_of(e));
        }
    }
    return out;
}

std::optional<tier_job> store::take_overdue_write(double now_s, double max_unwritten_s) {
    if (!writes_behind() || max_unwritten_s <= 0) {
        return std::nullopt;
    }
    entry * due = nullptr;
    for (auto & e : entries_) {
        if (e.tier_copy == 0 && !e.writing && !e.write_failed && !e.write_declined &&
            now_s - e.unwritten_since >= max_unwritten_s &&
            (due == nullptr || e.unwritten_since < due->unwritten_since) && worth_writing(e, false)) {
            due = &e;
        }
    }
    if (due == nullptr) {
        return std::nullopt;
    }
    LINEAGE_TRACE(trace_, "entry {} ({} tokens) unwritten for {:.0f} s while the engine is busy: written to disk",
                  due->id, due->toks.size(), now_s - due->unwritten_since);
    return job_of(*due);
}

std::vector<tier_job> store::take_spills() {
    std::vector<tier_job> out;
    out.swap(spills_);
    return out;
}

void store::tier_written(uint64_t entry_id, copy_id f) {
    uint64_t id = entry_id;
    for (int hops = 0; hops < 1 << 16; ++hops) {
        if (auto found = by_id_.find(id); found != by_id_.end()) {
            const iter it = found->second;
            if (id == entry_id && it->stale_write) {
                // Changed while written (rungs added): the file lacks the change, so it is an
                // ancestor of the next write, not the entry's copy.
                it->writing = false;
                it->stale_write = false;
                if (f != 0) {
                    it->ancestors.push_back(f);
                }
                it->tier_copy = 0;
                it->unwritten_since = it->last_use;
            } else if (id == entry_id) {
                it->writing = false;
                it->tier_copy = f;
                it->write_failed = f == 0;
            } else if (f != 0) {
                it->ancestors.push_back(f);  // absorbed while written: its successor supersedes the file
            }
            return;
        }
        auto s = successor_.find(id);
        if (s == successor_.end()) {
            return;  // left the store (spilled, evicted or reset): the file stands on its own
        }
        id = s->second;
        successor_.erase(s);
    }
}

std::vector<int32_t> store::take_released_seqs() {
    std::vector<int32_t> out;
    out.swap(released_);
    return out;
}

entry_view store::view(const entry & e) const {
    entry_view v;
    v.id = e.id;
    v.k = e.k;
    v.n_tokens = static_cast<int32_t>(e.toks.size());
    v.where = e.where;
    v.seq = e.seq;
    v.anchor = e.anchor;
    for (const auto & c : e.checkpoints) {
        v.checkpoints.emplace_back(c.n_tokens, c.kind);
    }
    v.device_bytes = e.device_bytes;
    v.ram_bytes = e.ram_bytes();
    v.bytes = v.ram_bytes + v.device_bytes;
    v.tier_copy = e.tier_copy;
    v.tier_ancestors = e.ancestors;
    v.warmed = e.warmed;
    v.uses = e.uses;
    return v;
}

std::vector<entry_view> store::entries() const {
    std::vector<entry_view> out;
    for (const auto & e : entries_) {
        out.push_back(view(e));
    }
    return out;
}

stats store::get_stats() const {
    stats s = stats_;
    s.buffer_pool = blob_pool::instance().stats();
    s.ghosts = static_cast<int64_t>(ghosts_.size());
    s.entries = 0;
    s.anchors = 0;
    s.checkpoints.clear();
    s.bytes = {{"device", 0}, {"ram", 0}};
    for (const auto & e : entries_) {
        (e.anchor ? s.anchors : s.entries)++;
        if (e.anchor) {
            s.anchor_bytes += e.ram_bytes();
        }
        if (e.base) {
            s.shared_prefix_entries++;
            s.shared_prefix_bytes += e.shared_bytes();
        }
        for (const auto & c : e.checkpoints) {
            s.checkpoints[std::string(to_string(c.kind))]++;
            s.checkpoint_bytes[std::string(to_string(c.kind))] += size_of(c.recurrent);
        }
        s.bytes["device"] += e.device_bytes;
        s.bytes["ram"] += e.ram_bytes();
        if (!e.anchor) {
            const auto n_message = std::count_if(e.checkpoints.begin(), e.checkpoints.end(),
                                                 [](const checkpoint & c) { return c.kind == point_kind::message; });
            const auto n_reply = std::count_if(e.checkpoints.begin(), e.checkpoints.end(),
                                               [](const checkpoint & c) { return c.kind == point_kind::reply; });
            auto & l = s.largest_lineage;
            l.bytes = std::max(l.bytes, e.device_bytes + e.ram_bytes());
            l.checkpoints = std::max(l.checkpoints, static_cast<int64_t>(e.checkpoints.size()) - n_message - n_reply);
            l.message_rungs = std::max(l.message_rungs, static_cast<int64_t>(n_message));
            l.reply_checkpoints = std::max(l.reply_checkpoints, static_cast<int64_t>(n_reply));
        }
        s.apc_active_entries += e.chain.empty() ? 0 : 1;
        if (!e.k.tenant.empty()) {
            tenant_usage & t = s.tenants[e.k.tenant];
            (e.anchor ? t.anchors : t.entries)++;
            t.bytes += e.ram_bytes() + e.device_bytes;
        }
    }
    s.eviction.policy = to_string(cfg_.eviction);
    s.eviction.reuse_probability_unused = reuse_.probability(0);
    s.eviction.reuse_probability_once = reuse_.probability(1);
    s.eviction.reuse_probability_more = reuse_.probability(2);
    s.eviction.reuse_gap_s = reuse_.gap_s();
    if (const auto fit = cost_.prefill_fit()) {
        s.eviction.prefill_s_per_token = fit->first;
        s.eviction.prefill_s_per_token_position = fit->second;
    }
    s.tier_cost_prefill_tokens_per_s = cost_.prefill_tokens_per_s().value_or(0);
    s.tier_cost_read_bytes_per_s = writes_behind() ? cost_.read_bytes_per_s(0) : 0;
    s.tier_cost_write_bytes_per_s = writes_behind() ? cost_.write_bytes_per_s() : 0;
    s.total_blocks_stored = apc_blocks_;
    s.unique_block_hashes = static_cast<int64_t>(block_refs_.size());
    return s;
}

}  // namespace lineage::cache
