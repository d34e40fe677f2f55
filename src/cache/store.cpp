#include "cache/store.h"

#include "cache/block_chain.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <stdexcept>

namespace lineage::cache {

std::string_view to_string(point_kind k) {
    switch (k) {
        case point_kind::none: return "miss";
        case point_kind::full: return "full";
        case point_kind::prefix: return "prefix";
        case point_kind::turn: return "turn";
        case point_kind::guard: return "guard";
        case point_kind::anchor: return "anchor";
        case point_kind::divergence: return "divergence";
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

// Thinning order (seed 000 "Thinning"): old guard points first (only the newest guard is a
// live resend point), then the oldest turn boundaries, then the oldest divergence points, then
// the newest guard. `cps` ascends by length, so the first match is the oldest. Returns the
// index to drop (REQUIRES: cps non-empty).
size_t drop_candidate(const std::vector<checkpoint> & cps) {
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
    for (point_kind k : {point_kind::turn, point_kind::divergence}) {
        for (size_t i = 0; i < cps.size(); ++i) {
            if (cps[i].kind == k) {
                return i;
            }
        }
    }
    return newest_guard.value_or(0);
}

}  // namespace

uint64_t store::entry::ram_bytes() const {
    uint64_t b = size_of(full) + size_of(final_recurrent);
    for (const auto & c : checkpoints) {
        b += size_of(c.recurrent);
    }
    return b;
}

store::store(const config & cfg, bool hybrid) : cfg_(cfg), hybrid_(hybrid), rule_(restore_settings::from(cfg, hybrid)) {
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

restore_plan store::plan(const key & k, const tokens & prompt, const plan_hints & hints, double now_s) {
    restore_plan p;
    stats_.lookups++;
    expire(now_s);

    // The restore-point choice is restore_rule's (best_point, prefer, the two-tier search),
    // the same as the disk tier's.
    const std::vector<std::string> req_chain = rule_.prompt_chain(k.bucket, prompt);
    restore_search search(rule_, prompt, req_chain);
    if (auto t = tries_.find(k.bucket); t != tries_.end()) {
        t->second.match(prompt, [&](uint64_t id, int32_t lcp) {
            if (!search.worth(lcp)) {
                return false;
            }
            search.offer(id, state_of(*by_id_.at(id), k.session), lcp);
            return true;
        });
    }
    const std::optional<restore_candidate> chosen = search.chosen();
    const int32_t best_short = search.best_short();
    // Tier 2 only for something longer than the best device/RAM restore point.
    std::optional<disk_candidate> on_disk;
    if (disk_ != nullptr && cfg_.enabled) {
        on_disk = disk_->best(k.bucket, k.session, prompt, std::max(chosen ? chosen->n : 0, cfg_.min_prefix - 1));
    }

    if (on_disk) {
        p.n_restore = on_disk->n;
        p.kind = on_disk->kind;
        p.op = restore_op::load_disk;
        p.disk_file = on_disk->id;
        p.source_tokens = on_disk->source_tokens;
        p.source_history = on_disk->history;
        const int32_t len = on_disk->source_tokens;
        p.absorbs = continues(rule_, p.n_restore, len, on_disk->history, on_disk->anchor);
        if (p.absorbs) {
            p.disk_ancestors.push_back(on_disk->id);
        }
        stats_.hits[std::string(to_string(p.kind))]++;
        stats_.disk_hits++;
        stats_.tokens_reused += p.n_restore;
        p.reason = "restore " + std::string(to_string(p.kind)) + " at " + std::to_string(p.n_restore) + "/" +
                   std::to_string(prompt.size()) + " from disk file " + std::to_string(on_disk->id) + " (" +
                   std::to_string(len) + " tokens" + (on_disk->same_session ? "" : ", cross-session") + ")" +
                   (chosen ? ", longer than the best in memory (" + std::to_string(chosen->n) + ")" : "") +
                   (p.absorbs ? ", superseding it" : "");
    } else if (chosen) {
        const iter chosen_it = by_id_.at(chosen->id);
        entry & e = *chosen_it;
        e.last_use = now_s;
        p.n_restore = chosen->n;
        p.kind = chosen->kind;
        p.source = e.id;
        p.source_tokens = static_cast<int32_t>(e.toks.size());
        p.source_history = e.history;
        p.recurrent = chosen->checkpoint >= 0 ? e.checkpoints[static_cast<size_t>(chosen->checkpoint)].recurrent : nullptr;
        // Absorption (seed 000 "final"): a prompt that continues a conversation entry takes it.
        p.absorbs = continues(rule_, p.n_restore, p.source_tokens, e.history, e.anchor);
        if (e.where == tier::device) {
            p.op = p.absorbs ? restore_op::take_device : restore_op::share_device;
            p.device_seq = e.seq;
        } else {
            p.op = restore_op::load_ram;
            p.full = e.full;
        }
        stats_.hits[std::string(to_string(p.kind))]++;
        stats_.tokens_reused += p.n_restore;
        p.reason = "restore " + std::string(to_string(p.kind)) + " at " + std::to_string(p.n_restore) + "/" +
                   std::to_string(prompt.size()) + " from entry " + std::to_string(e.id) + " (" +
                   std::string(to_string(e.where)) + ", " + std::to_string(e.toks.size()) + " tokens" +
                   (e.k.session == k.session ? "" : ", cross-session") + ")" + (p.absorbs ? ", absorbing it" : "");
        if (p.absorbs) {
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
            p.disk_ancestors = std::move(e.ancestors);
            if (e.disk_file != 0) {
                p.disk_ancestors.push_back(e.disk_file);
            }
            p.pending_write_of = e.writing ? e.id : 0;
            index_remove(chosen_it);
            entries_.erase(chosen_it);
        } else {
            entries_.splice(entries_.begin(), entries_, chosen_it);
            e.mru = next_mru_++;
        }
    } else {
        stats_.misses++;
        p.reason = best_short > 0 ? "miss (longest match " + std::to_string(best_short) + " < min prefix " +
                                        std::to_string(cfg_.min_prefix) + ")"
                                  : "miss";
    }
    stats_.tokens_prefilled += static_cast<int64_t>(prompt.size()) - p.n_restore;
    add_captures(p, k, prompt, hints);
    if (trace_.on()) {
        trace_plan(k, prompt, hints, p);
    }
    return p;
}

void store::add_captures(restore_plan & p, const key & k, const tokens & prompt, const plan_hints & h) const {
    if (!cfg_.lineage) {
        return;  // exact mode: whole-prompt snapshots only
    }
    const int32_t n_prompt = static_cast<int32_t>(prompt.size());
    const int32_t from = p.n_restore;
    auto add = [&](int32_t n, point_kind kind) {
        if (n > from && n < n_prompt) {
            p.captures.push_back({n, kind});
        }
    };
    // anchor: end of system prompt + tools, minus BPE slack; pinned wherever it falls.
    // tools anchor (hybrid): the end of a tool block rendered before the system text, minus the
    // same slack, when it falls before the anchor: what system texts that differ near their end
    // (a timestamp, a sibling) still share, so that a new session on them does not start cold.
    const int32_t anchor = h.anchor_tokens > 0 ? h.anchor_tokens - cfg_.anchor_slack : -1;
    const int32_t tools_anchor = hybrid_ && h.tools_anchor_tokens > 0 ? h.tools_anchor_tokens - cfg_.anchor_slack : -1;
    for (const int32_t a : {anchor, tools_anchor < anchor ? tools_anchor : -1}) {
        if (a < 0) {
            continue;
        }
        bool exists = false;
        if (auto t = tries_.find(k.bucket); t != tries_.end() && a > 0) {
            for (uint64_t id : t->second.exact(prompt, a)) {
                exists = exists || by_id_.at(id)->anchor;
            }
        }
        if (!exists && a >= cfg_.min_prefix && a >= from && a < n_prompt) {
            p.captures.push_back({a, point_kind::anchor});
        }
    }
    if (hybrid_) {
        // turn: the history boundary (prompt without its generation prompt), where the next
        // turn's prompt leaves this one when the template re-renders the assistant turn.
        add(h.history_tokens, point_kind::turn);
        // guard: prompt - 1 (resend checkpoint), else seed 000's prompt - 16 when the uncached
        // suffix is >= 256 tokens.
        if (cfg_.resend_checkpoint) {
            add(n_prompt - 1, point_kind::guard);
        } else if (n_prompt - from >= cfg_.guard_min_suffix) {
            add(n_prompt - cfg_.guard_distance, point_kind::guard);
        }
        // divergence: where the prompt stops sharing tokens with its closest sibling.
        int32_t sibling = 0;
        if (auto t = tries_.find(k.bucket); t != tries_.end()) {
            // The first entry, in descending common prefix, that the prompt leaves inside.
            t->second.match(prompt, [&](uint64_t id, int32_t lcp) {
                if (lcp < static_cast<int32_t>(by_id_.at(id)->toks.size())) {
                    sibling = lcp;
                    return false;
                }
                return true;
            });
        }
        if (sibling - from >= cfg_.divergence_min_gain) {
            add(sibling, point_kind::divergence);
        }
    }
    std::sort(p.captures.begin(), p.captures.end(),
              [](const capture_point & a, const capture_point & b) { return a.n_tokens < b.n_tokens; });
    // One checkpoint per length (an anchor beside a checkpoint is a different state: keep both).
    std::vector<capture_point> out;
    for (const auto & c : p.captures) {
        const bool dup = !out.empty() && out.back().n_tokens == c.n_tokens &&
                         (out.back().kind == point_kind::anchor) == (c.kind == point_kind::anchor);
        if (!dup) {
            out.push_back(c);
        }
    }
    p.captures = std::move(out);
}

void store::thin(std::vector<checkpoint> & cps) {
    while (static_cast<int32_t>(cps.size()) > cfg_.max_checkpoints) {
        const size_t i = drop_candidate(cps);
        LINEAGE_TRACE(trace_, "thinned: dropped the {} checkpoint at {} (over {} per lineage)", to_string(cps[i].kind),
                      cps[i].n_tokens, cfg_.max_checkpoints);
        cps.erase(cps.begin() + static_cast<std::ptrdiff_t>(i));
    }
}

bool store::reserve(uint64_t bytes, uint64_t protect) {
    if (bytes > cfg_.ram_bytes) {
        stats_.rejections["too_large"]++;
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
        if (!evict_one_lru(protect, "capacity")) {
            stats_.rejections["budget"]++;
            LINEAGE_TRACE(
                trace_, "rejected a state of {}: the RAM budget of {} is held by pinned, protected or reserved states",
                human_bytes(bytes), human_bytes(cfg_.ram_bytes));
            return false;
        }
    }
    pending_bytes_ += bytes;
    return true;
}

bool store::evict_one_lru(uint64_t protect_id, const char * reason) {
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
        if (it->anchor || it->id == protect_id || it->ram_bytes() == 0) {
            continue;
        }
        erase(std::next(it).base(), reason);
        return true;
    }
    return false;
}

disk_job store::job_of(entry & e) {
    disk_job j;
    j.entry_id = e.id;
    j.k = e.k;
    j.toks = e.toks;
    j.history = e.history;
    j.anchor = e.anchor;
    j.full = e.full;
    j.seq = e.where == tier::device ? e.seq : -1;
    j.checkpoints = e.checkpoints;
    j.ancestors = std::move(e.ancestors);
    e.ancestors.clear();
    e.writing = true;
    return j;
}

void store::erase(iter it, const char * reason, std::string_view detail) {
    // Write-behind "when it leaves RAM": an entry pushed out for room or by TTL goes to disk.
    const bool spill = disk_ != nullptr && reason != nullptr && it->disk_file == 0 && !it->writing &&
                       !it->write_failed &&
                       (std::strcmp(reason, "capacity") == 0 || std::strcmp(reason, "lru") == 0 ||
                        std::strcmp(reason, "ttl") == 0 || std::strcmp(reason, "anchor_cap") == 0);
    if (spill) {
        LINEAGE_TRACE(trace_, "entry {} ({} tokens) leaves memory ({}): written to disk", it->id, it->toks.size(),
                      reason);
        spills_.push_back(job_of(*it));
    }
    if (it->where == tier::device) {
        released_.push_back(it->seq);
    }
    if (reason != nullptr) {
        stats_.evictions[reason]++;
        LINEAGE_TRACE(trace_, "evicted {}entry {} ({}, {} tokens, {} checkpoints, {}): {}{}",
                      it->anchor ? "anchor " : "", it->id, to_string(it->where), it->toks.size(),
                      it->checkpoints.size(), human_bytes(it->ram_bytes() + it->device_bytes), reason, detail);
        spdlog::debug("cache: evicted entry {} ({} tokens, {}, {} checkpoints): {}", it->id, it->toks.size(),
                      to_string(it->where), it->checkpoints.size(), reason);
    }
    index_remove(it);
    entries_.erase(it);
}

bool store::commit(commit_input in, double now_s) {
    stats_.requests_committed++;
    uint64_t release = in.reserved_bytes;
    if (in.absorbed) {
        release += in.absorbed->inflight_bytes;
    }
    release_pending(release);
    if (!cfg_.enabled || static_cast<int32_t>(in.toks.size()) < cfg_.min_prefix) {
        stats_.rejections[cfg_.enabled ? "min_prefix" : "disabled"]++;
        LINEAGE_TRACE(trace_, "not stored: {} tokens < min prefix {} (--prompt-cache-min-prefix)", in.toks.size(),
                      cfg_.min_prefix);
        return false;
    }
    entry e;
    e.id = next_id_++;
    e.k = std::move(in.k);
    e.toks = std::move(in.toks);
    e.where = tier::device;
    e.seq = in.seq;
    e.device_bytes = in.device_bytes;
    e.last_use = now_s;
    e.history = in.history_tokens;
    if (e.history < 0 && in.absorbed) {
        e.history = in.absorbed->source_history;  // an agent-loop step keeps the user turn's boundary
    }
    if (in.absorbed) {
        e.ancestors = std::move(in.absorbed->disk_ancestors);
        if (in.absorbed->pending_write_of != 0) {
            successor_[in.absorbed->pending_write_of] = e.id;
        }
    }
    const uint64_t absorbed_id = in.absorbed ? in.absorbed->source : 0;
    const size_t n_inherited = in.absorbed ? in.absorbed->inherited.size() : 0;
    if (hybrid_ && cfg_.lineage) {
        e.final_recurrent = std::move(in.final_recurrent);
        std::vector<checkpoint> cps;
        if (in.absorbed) {
            cps = std::move(in.absorbed->inherited);
        }
        for (auto & c : in.captured) {
            cps.push_back(std::move(c));
        }
        const int32_t n = static_cast<int32_t>(e.toks.size());
        std::erase_if(cps, [n](const checkpoint & c) { return c.n_tokens < 1 || c.n_tokens >= n || !c.recurrent; });
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
        thin(uniq);
        e.checkpoints = std::move(uniq);
    }
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
        for (file_id f : it->ancestors) {
            e.ancestors.push_back(f);
        }
        if (it->disk_file != 0) {
            e.ancestors.push_back(it->disk_file);
        }
        if (it->writing) {
            successor_[it->id] = e.id;
        }
        erase(it, "superseded", " (same tokens as the new entry)");
    }
    std::sort(e.checkpoints.begin(), e.checkpoints.end(),
              [](const checkpoint & a, const checkpoint & b) { return a.n_tokens < b.n_tokens; });
    thin(e.checkpoints);
    const uint64_t id = e.id;
    if (trace_.on()) {
        std::string cps;
        for (const auto & c : e.checkpoints) {
            cps += fmt::format("{}{}@{}", cps.empty() ? "" : " ", to_string(c.kind), c.n_tokens);
        }
        LINEAGE_TRACE(trace_, "stored entry {}: {} tokens on device sequence {} ({}), checkpoints [{}]{}", id,
                      e.toks.size(), e.seq, human_bytes(e.device_bytes + e.ram_bytes()), cps,
                      absorbed_id ? fmt::format("; absorbed entry {} and carried over {} of its restore points",
                                                absorbed_id, n_inherited)
                                  : std::string());
    }
    entries_.push_front(std::move(e));
    index_add(entries_.begin());
    // The reservations covered these bytes; what was freed since may let others in. Enforce
    // the budget and the entry cap on everything but the new entry.
    while (ram_bytes() > cfg_.ram_bytes && evict_one_lru(id, "capacity")) {
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
        erase(std::next(victim).base(), "lru");
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
        entries_.front().final_recurrent.reset();
    }
    return true;
}

restore_plan cold_plan(restore_plan p) {
    restore_plan cold;
    cold.captures = std::move(p.captures);
    return cold;
}

util::status store::disk_loaded(const key & k, restore_plan & p, disk_load_result r, double now_s) {
    if (r.error == disk_load_error::none && r.record && hybrid_ && p.n_restore < p.source_tokens) {
        // A hybrid restore short of the file's length needs the checkpoint the index named.
        const auto & cps = r.record->checkpoints;
        const bool has = std::any_of(cps.begin(), cps.end(),
                                     [&](const checkpoint & c) { return c.n_tokens == p.n_restore && c.recurrent; });
        if (!has) {
            r.error = disk_load_error::corrupt;
            r.detail = "the file has no checkpoint at " + std::to_string(p.n_restore) + " as its index says";
            r.record.reset();
        }
    }
    if (r.error != disk_load_error::none || !r.record) {
        const std::string why =
            fmt::format("disk file {} not loaded ({}: {})", p.disk_file, to_string(r.error), r.detail);
        disk_load_failed(p);
        p = cold_plan(std::move(p));
        return util::status::error(why);
    }
    disk_record & rec = *r.record;
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
    } else if (p.kind == point_kind::anchor && reserve(size_of(rec.full))) {
        // A system prompt seen before the restart: pinned in RAM again (its file stays).
        commit_anchor(k, rec.toks, rec.full, size_of(rec.full), now_s, p.disk_file);
    }
    return util::status::ok();
}

void store::disk_load_failed(const restore_plan & p) {
    auto & h = stats_.hits[std::string(to_string(p.kind))];
    h = std::max<int64_t>(0, h - 1);
    stats_.disk_hits = std::max<int64_t>(0, stats_.disk_hits - 1);
    stats_.tokens_reused -= p.n_restore;
    stats_.tokens_prefilled += p.n_restore;
    stats_.misses++;
    stats_.rejections["disk_damaged"]++;
    LINEAGE_TRACE(trace_, "disk file {} could not be loaded: counted as a miss, prefilling cold", p.disk_file);
}

void store::commit_anchor(const key & k, tokens toks, blob_ptr full, uint64_t reserved, double now_s,
                          file_id disk_file) {
    release_pending(reserved);
    const uint64_t size = size_of(full);
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
        stats_.rejections["anchor_too_large"]++;
        LINEAGE_TRACE(trace_, "anchor at {} tokens not pinned: {} > the anchor cap {} (--cache-max-anchor-bytes)",
                      toks.size(), human_bytes(size), human_bytes(cfg_.max_anchor_bytes));
        return;
    }
    // Anchor caps (seed 000: 16 entries, 16 GiB): the least recently used anchor goes first.
    for (auto [n, b] = anchors(); n >= cfg_.max_anchors || b + size > cfg_.max_anchor_bytes; std::tie(n, b) = anchors()) {
        auto victim = std::find_if(entries_.rbegin(), entries_.rend(), [](const entry & x) { return x.anchor; });
        erase(std::next(victim).base(), "anchor_cap");
    }
    entry e;
    e.id = next_id_++;
    e.k = k;
    e.toks = std::move(toks);
    e.where = tier::ram;
    e.full = std::move(full);
    e.anchor = true;
    e.last_use = now_s;
    e.disk_file = disk_file;
    LINEAGE_TRACE(trace_, "pinned anchor entry {} at {} tokens ({})", e.id, e.toks.size(), human_bytes(size));
    entries_.push_front(std::move(e));
    index_add(entries_.begin());
    while (ram_bytes() > cfg_.ram_bytes && evict_one_lru(entries_.front().id, "capacity")) {
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

void store::demote(uint64_t id, blob_ptr full, uint64_t reserved) {
    release_pending(reserved);
    auto it = std::find_if(entries_.begin(), entries_.end(), [id](const entry & e) { return e.id == id; });
    if (it == entries_.end()) {
        return;
    }
    if (!full) {
        erase(it, "capacity", " (its sequence id was needed and its state does not fit the RAM budget)");
        return;
    }
    LINEAGE_TRACE(trace_, "demoted entry {} ({} tokens) from device sequence {} to RAM ({})", it->id, it->toks.size(),
                  it->seq, human_bytes(size_of(full)));
    released_.push_back(it->seq);
    it->seq = -1;
    it->where = tier::ram;
    it->full = std::move(full);
    it->device_bytes = 0;
}

void store::abandon(const restore_plan & p, uint64_t reserved) {
    release_pending(reserved + p.inflight_bytes);
    if (p.absorbs) {
        stats_.rejections["abandoned"]++;
        LINEAGE_TRACE(trace_, "abandoned the taken entry {}: the request failed before its commit", p.source);
    }
}

void store::expire(double now_s) {
    for (auto it = entries_.begin(); it != entries_.end();) {
        auto next = std::next(it);
        if (now_s - it->last_use > cfg_.ttl_s) {
            erase(it, "ttl", trace_.on() ? fmt::format(" (unused for {:.0f} s > {} {:.0f} s)",
                                                        now_s - it->last_use, cfg_.ttl_flag, cfg_.ttl_s)
                                         : std::string());
        }
        it = next;
    }
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
    entries_.clear();
    successor_.clear();
    tries_.clear();
    by_id_.clear();
    apc_blocks_ = 0;
    block_refs_.clear();
    LINEAGE_TRACE(trace_, "reset: freed {} entries ({})", r.entries_freed, human_bytes(r.bytes_freed));
    return r;
}

std::vector<disk_job> store::take_idle_writes(double now_s, double idle_s) {
    std::vector<disk_job> out;
    if (disk_ == nullptr) {
        return out;
    }
    for (auto & e : entries_) {
        if (e.disk_file == 0 && !e.writing && !e.write_failed && (idle_s < 0 || now_s - e.last_use >= idle_s)) {
            LINEAGE_TRACE(trace_, "entry {} ({} tokens) {}: written to disk", e.id, e.toks.size(),
                          idle_s < 0 ? "at shutdown" : fmt::format("idle for {:.0f} s", now_s - e.last_use));
            out.push_back(job_of(e));
        }
    }
    return out;
}

std::vector<disk_job> store::take_spills() {
    std::vector<disk_job> out;
    out.swap(spills_);
    return out;
}

void store::disk_written(uint64_t entry_id, file_id f) {
    uint64_t id = entry_id;
    for (int hops = 0; hops < 1 << 16; ++hops) {
        if (auto found = by_id_.find(id); found != by_id_.end()) {
            const iter it = found->second;
            if (id == entry_id) {
                it->writing = false;
                it->disk_file = f;
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
    v.bytes = e.ram_bytes() + e.device_bytes;
    v.disk_file = e.disk_file;
    v.disk_ancestors = e.ancestors;
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
    s.entries = 0;
    s.anchors = 0;
    s.checkpoints.clear();
    s.bytes = {{"device", 0}, {"ram", 0}};
    for (const auto & e : entries_) {
        (e.anchor ? s.anchors : s.entries)++;
        if (e.anchor) {
            s.anchor_bytes += e.ram_bytes();
        }
        for (const auto & c : e.checkpoints) {
            s.checkpoints[std::string(to_string(c.kind))]++;
            s.checkpoint_bytes[std::string(to_string(c.kind))] += size_of(c.recurrent);
        }
        s.bytes["device"] += e.device_bytes;
        s.bytes["ram"] += e.ram_bytes();
        s.apc_active_entries += e.chain.empty() ? 0 : 1;
    }
    s.total_blocks_stored = apc_blocks_;
    s.unique_block_hashes = static_cast<int64_t>(block_refs_.size());
    return s;
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
        if (static_cast<int32_t>(e.checkpoints.size()) > cfg_.max_checkpoints) {
            fail("2: entry " + std::to_string(e.id) + " has " + std::to_string(e.checkpoints.size()) + " checkpoints");
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
