// scheduler::lifecycle: restore, capture, commit over sequence_states; see lifecycle.h.
#include "scheduler/lifecycle.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include <chrono>

namespace lineage::scheduler {

bool restore_point(sequence_states & st, const cache::restore_plan & p, int32_t seq) {
    switch (p.op) {
        case cache::restore_op::none:
            return true;
        case cache::restore_op::take_device:
            // Continue the parked sequence itself: no KV is copied. Restoring an earlier point
            // of it puts that checkpoint's recurrent state in place and trims the KV.
            break;
        case cache::restore_op::share_device:
            // The parked entry's KV [0, n) (shared cells in a unified pool; with per-sequence
            // buffers a device copy on a GPU, its state at the used length on the CPU alone),
            // then the restore point's recurrent state, then the trim.
            if (!st.seq_cp(p.device_seq, seq, p.n_restore)) {
                return false;
            }
            break;
        case cache::restore_op::load_ram:
        case cache::restore_op::load_tier:
            // Whole state at the entry's length, then the checkpoint, then trim the KV.
            if (!p.full || !st.set_state(seq, *p.full, false)) {
                return false;
            }
            break;
    }
    if (p.recurrent && !st.set_state(seq, *p.recurrent, true)) {
        return false;
    }
    if (p.n_restore < p.source_tokens && !st.seq_rm(seq, p.n_restore, -1)) {
        return false;
    }
    return st.seq_pos_max(seq) + 1 == p.n_restore;
}

void lifecycle::restore(slot & s, double now_s) {
    const auto apply_started = std::chrono::steady_clock::now();
    if (!restore_point(st_, s.plan, s.seq)) {
        spdlog::error("request {}: restoring {} at {} failed; prefilling cold", s.req->id,
                      cache::to_string(s.plan.kind), s.plan.n_restore);
        LINEAGE_TRACE(store_.trace(), "restoring {} at {} failed in the engine; prefilling cold",
                      cache::to_string(s.plan.kind), s.plan.n_restore);
        store_.abandon(s.plan, 0);
        s.plan = cache::cold_plan(std::move(s.plan));
        st_.seq_rm(s.seq, -1, -1);
    }
    s.stats.restore_s = seconds_since(s.restore_started);
    if (s.plan.op == cache::restore_op::load_tier && s.plan.n_restore > 0) {
        // The tier's read and checks (its worker's time, without waiting behind its writes or for
        // the engine step to end) and the state applied: what the tier cost rule weighs a read by.
        const double apply_s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - apply_started).count();
        store_.cost().observe_read(s.plan.tier, s.plan.tier_bytes, s.plan.tier_read_s + apply_s);
        spdlog::debug(
            "request {}: tier read {:.1f} ms ({} bytes), state applied in {:.1f} ms, {:.1f} ms from admission",
            s.req->id, s.plan.tier_read_s * 1e3, s.plan.tier_bytes, apply_s * 1e3, s.stats.restore_s * 1e3);
    }
    s.n_past = s.plan.n_restore;
    s.stats.cached_tokens = s.plan.n_restore;
    s.stats.hit_kind = std::string(cache::to_string(s.plan.kind));
    s.stats.restored_from = std::string(cache::restored_from(s.plan));
    s.stats.restore_op = s.plan.op == cache::restore_op::none ? "" : std::string(cache::to_string(s.plan.op));
    if (!s.use_cache) {
        s.stats.miss_cause = std::string(cache::to_string(cache::miss_cause::bypassed));
    } else if (s.plan.cause) {
        s.stats.miss_cause = std::string(cache::to_string(*s.plan.cause)) +
                             (s.plan.cause_dimension.empty() ? "" : ":" + s.plan.cause_dimension);
    }
    if (s.plan.final_from_sequence) {
        // The file's final state becomes a turn checkpoint of the new entry (store.h
        // final_from_sequence).
        const size_t size = st_.state_size(s.seq, true);
        if (store_.reserve(size)) {
            s.plan.inflight_bytes += size;
            s.plan.inherited.push_back(
                {s.plan.source_tokens, cache::point_kind::turn, cache::make_blob(st_.get_state(s.seq, true))});
        }
    }
    s.plan.full.reset();  // the loaded state is in the sequence now
    spdlog::debug("request {}: {}", s.req->id, s.use_cache ? s.plan.reason : "cache bypassed (cache_prompt=false)");
    // A capture exactly at the restore point (an anchor restored through a sibling) is taken now.
    while (s.next_capture < s.plan.captures.size() && s.plan.captures[s.next_capture].n_tokens == s.n_past) {
        capture(s, s.plan.captures[s.next_capture++], now_s, false);
    }
}

bool lifecycle::after_chunk(slot & s, double now_s) {
    // The points this pass reached: those that end a pass lie exactly here (slot::next_stop);
    // those taken at a pass end (cache::capture_point::at_pass_end) at or before here give one
    // capture here, unless another capture is taken here anyway or this is the prompt end.
    bool at_pass_end_due = false;
    cache::point_kind due_kind = cache::point_kind::ladder;  // of the last one due: a far rung or a message rung
    bool taken_here = false;
    while (s.next_capture < s.plan.captures.size()) {
        const auto & c = s.plan.captures[s.next_capture];
        if (c.deferrable && c.n_tokens < s.n_past) {
            // Passed over with the engine to itself: a ladder job makes it (lifecycle::capture
            // hands it over with the anchor).
            s.plan.deferred_rungs.push_back(c.n_tokens);
            s.next_capture++;
            continue;
        }
        if (c.at_pass_end ? c.n_tokens > s.n_past : c.n_tokens != s.n_past) {
            break;
        }
        if (c.at_pass_end) {
            at_pass_end_due = true;
            due_kind = c.kind;
        } else {
            if (s.use_cache) {
                // The pass ended here for it (a deferrable rung the prefill would have passed over
                // is taken where a pass happens to end there: no split).
                capture(s, c, now_s, s.n_past < s.prompt_size() && !(c.deferrable && s.defer_rungs));
            }
            taken_here = true;
        }
        s.next_capture++;
    }
    if (at_pass_end_due && !taken_here && s.use_cache && s.n_past < s.prompt_size()) {
        capture(s, {s.n_past, due_kind}, now_s, false);
    }
    if (s.n_past < s.prompt_size()) {
        return false;
    }
    // The whole prompt is in: keep the recurrent state at the prompt end (the entry's own
    // restore point once generation has moved the sequence on). A ladder job stores no entry.
    if (s.use_cache && hybrid_ && !s.req->ladder()) {
        const auto t0 = clock::now();
        const size_t size = st_.state_size(s.seq, true);
        if (store_.reserve(size)) {
            s.reserved_bytes += size;
            s.prompt_end_recurrent = cache::make_blob(st_.get_state(s.seq, true));
        }
        s.stats.capture_s += seconds_since(t0);
    }
    // A resend guard at prompt - 1 that the prefill passed over (slot::next_stop): roll back.
    if (s.next_capture < s.plan.captures.size()) {
        guard_by_rollback(s, s.plan.captures[s.next_capture]);
        s.next_capture++;
    }
    return true;
}

void lifecycle::guard_by_rollback(slot & s, const cache::capture_point & c) {
    const auto t0 = clock::now();
    cache::trace_scope trace(store_.trace(), s.req->id, s.req->warmup);
    if (!s.use_cache) {
        // A bypass computes what a first request with the cache on computes: the same rollback
        // and replay, nothing kept.
        if (st_.seq_rm(s.seq, c.n_tokens, -1)) {
            s.replay = s.n_past - c.n_tokens;
            s.n_past = c.n_tokens;
        }
        return;
    }
    if (!s.prompt_end_recurrent) {
        LINEAGE_TRACE(store_.trace(), "{} capture at {} skipped: the prompt-end state was not kept (no RAM)",
                      cache::to_string(c.kind), c.n_tokens);
        return;
    }
    const size_t size = st_.state_size(s.seq, true);
    if (!store_.reserve(size)) {
        LINEAGE_TRACE(store_.trace(), "{} capture at {} skipped: no RAM for its {}", cache::to_string(c.kind),
                      c.n_tokens, cache::human_bytes(size));
        s.stats.capture_s += seconds_since(t0);
        return;
    }
    // The engine takes the recurrent state back to c (its snapshot of the last decode) and
    // drops the KV of [c, prompt): the next decode step computes those tokens again.
    if (!st_.seq_rm(s.seq, c.n_tokens, -1)) {
        store_.unreserve(size);
        LINEAGE_TRACE(store_.trace(), "{} capture at {} skipped: the engine refused to roll back {} token(s)",
                      cache::to_string(c.kind), c.n_tokens, s.n_past - c.n_tokens);
        s.stats.capture_s += seconds_since(t0);
        return;
    }
    s.reserved_bytes += size;
    s.captured.push_back({c.n_tokens, c.kind, cache::make_blob(st_.get_state(s.seq, true))});
    store_.count_capture(c.kind, size, false);
    s.replay = s.n_past - c.n_tokens;
    s.n_past = c.n_tokens;
    LINEAGE_TRACE(store_.trace(), "captured the {} checkpoint at {} by rollback ({})", cache::to_string(c.kind),
                  c.n_tokens, cache::human_bytes(size));
    spdlog::debug("request {}: captured {} checkpoint at {} tokens by rollback ({} bytes)", s.req->id,
                  cache::to_string(c.kind), c.n_tokens, size);
    s.stats.capture_s += seconds_since(t0);
}

void lifecycle::after_decode(slot & s) {
    const auto & cfg = store_.cfg();
    if (!hybrid_ || !s.use_cache || s.reset_since || !cfg.lineage || !cfg.keep_reply || cfg.reply_step <= 0 ||
        !s.prompt_end_recurrent) {
        return;
    }
    const int32_t decoded = s.n_past - s.prompt_size();
    if (s.reply_stride == 0) {
        s.reply_stride = cfg.reply_step;
    }
    if (decoded <= 0 || decoded % s.reply_stride != 0) {
        return;
    }
    const auto t0 = clock::now();
    if (static_cast<int32_t>(s.reply_candidates.size()) >= cache::config::max_reply_candidates) {
        // Full: double the spacing and keep the candidates on it (every other one).
        s.reply_stride *= 2;
        const int32_t p = s.prompt_size();
        const int32_t stride = s.reply_stride;
        uint64_t freed = 0;
        std::erase_if(s.reply_candidates, [&](const cache::checkpoint & c) {
            const bool off = (c.n_tokens - p) % stride != 0;
            freed += off && c.recurrent ? c.recurrent->size() : 0;
            return off;
        });
        s.reserved_bytes -= std::min(s.reserved_bytes, freed);
        store_.unreserve(freed);
        if (decoded % s.reply_stride != 0) {
            s.stats.capture_s += seconds_since(t0);
            return;
        }
    }
    const size_t size = st_.state_size(s.seq, true);
    if (store_.reserve(size)) {
        s.reserved_bytes += size;
        s.reply_candidates.push_back({s.n_past, cache::point_kind::reply, cache::make_blob(st_.get_state(s.seq, true))});
        store_.count_capture(cache::point_kind::reply, size, false);
        spdlog::debug("request {}: reply checkpoint candidate at {} tokens ({} bytes)", s.req->id, s.n_past, size);
    }
    s.stats.capture_s += seconds_since(t0);
}

void lifecycle::capture(slot & s, const cache::capture_point & c, double now_s, bool split) {
    const auto t0 = clock::now();
    const bool whole = c.kind == cache::point_kind::anchor;
    if ((!whole && !hybrid_) || s.reset_since) {  // reset_since: nothing is kept (an anchor would be pinned now)
        return;
    }
    cache::trace_scope trace(store_.trace(), s.req->id, s.req->warmup);
    const size_t size = st_.state_size(s.seq, !whole);
    if (!store_.reserve(size)) {
        LINEAGE_TRACE(store_.trace(), "{} capture at {} skipped: no RAM for its {}", cache::to_string(c.kind),
                      c.n_tokens, cache::human_bytes(size));
        s.stats.capture_s += seconds_since(t0);
        return;
    }
    auto blob = cache::make_blob(st_.get_state(s.seq, !whole));
    store_.count_capture(c.kind, size, split);
    if (whole) {
        cache::tokens prefix(s.req->prompt.begin(), s.req->prompt.begin() + c.n_tokens);
        // The ladder rungs captured inside this region go with the anchor (and their
        // reservations with them).
        std::vector<cache::checkpoint> rungs;
        uint64_t rung_bytes = 0;
        std::erase_if(s.captured, [&](cache::checkpoint & cp) {
            if (cp.kind != cache::point_kind::ladder || cp.n_tokens >= c.n_tokens) {
                return false;
            }
            rung_bytes += cp.recurrent ? cp.recurrent->size() : 0;
            rungs.push_back(std::move(cp));
            return true;
        });
        s.reserved_bytes -= std::min(s.reserved_bytes, rung_bytes);
        // The rungs of this region the plan left to a ladder job (config::ladder_defer).
        std::vector<int32_t> owed;
        std::erase_if(s.plan.deferred_rungs, [&](int32_t r) {
            if (r >= c.n_tokens) {
                return false;
            }
            owed.push_back(r);
            return true;
        });
        cache::tokens anchor_toks = owed.empty() ? cache::tokens{} : prefix;
        store_.commit_anchor(s.key, std::move(prefix), std::move(blob), size + rung_bytes, now_s, 0, std::move(rungs));
        pool_.drain_released();
        spdlog::debug("request {}: pinned anchor at {} tokens ({} bytes)", s.req->id, c.n_tokens, size);
        if (!owed.empty()) {
            store_.count_deferred_rungs("deferred", static_cast<int64_t>(owed.size()));
            if (rungs_owed_ && store_.holds_anchor(s.key, anchor_toks)) {
                LINEAGE_TRACE(store_.trace(), "{} ladder rung(s) of the anchor at {} left to a ladder job", owed.size(),
                              c.n_tokens);
                rungs_owed_(s, std::move(anchor_toks), std::move(owed));
            } else {
                store_.count_deferred_rungs("dropped", static_cast<int64_t>(owed.size()));
            }
        }
    } else {
        s.reserved_bytes += size;
        s.captured.push_back({c.n_tokens, c.kind, std::move(blob)});
        LINEAGE_TRACE(store_.trace(), "captured the {} checkpoint at {} ({})", cache::to_string(c.kind), c.n_tokens,
                      cache::human_bytes(size));
        spdlog::debug("request {}: captured {} checkpoint at {} tokens ({} bytes)", s.req->id,
                      cache::to_string(c.kind), c.n_tokens, size);
    }
    s.stats.capture_s += seconds_since(t0);
}

void lifecycle::commit(slot & s, double now_s) {
    const auto t0 = clock::now();
    if (s.seq < 0) {
        return;
    }
    if (!s.use_cache) {
        pool_.release(s.seq);
        s.seq = -1;
        return;
    }
    cache::trace_scope trace(store_.trace(), s.req->id, s.req->warmup);
    if (s.reset_since) {
        LINEAGE_TRACE(store_.trace(), "not stored: the cache was reset while this request was served");
        store_.abandon(s.plan, s.reserved_bytes);
        pool_.release(s.seq);
        s.seq = -1;
        return;
    }
    // The entry is everything decoded: for dense models any prefix of their KV is a restore
    // point; for hybrids (--cache-keep-reply) a next prompt that parts inside the reply (a
    // re-rendered reply, a regenerate) restores the resend guard at prompt - 1 (or, with that
    // guard off, the prompt-end state kept as a turn checkpoint) and one that sends the reply
    // back verbatim (an agent-loop step) restores it all. Without --cache-keep-reply a hybrid keeps the prompt end only (generation moved the
    // recurrent state on: put the prompt-end state back and trim the KV). A request cancelled
    // during prefill holds whole chunks: its state at n_past is exact.
    cache::commit_input in;
    in.k = s.key;
    int32_t n_keep = s.n_past;
    cache::blob_ptr guard_final;  // the entry's own final state when it ends at the guard
    if (s.replay > 0) {
        // The request ended on its first token, before the rolled-back prompt tokens were
        // decoded again: the entry ends at the guard, with the guard's state as its own (put
        // back so that the sequence holds it plainly, not as a pending rollback).
        if (s.captured.empty() || s.captured.back().n_tokens != s.n_past ||
            !st_.set_state(s.seq, *s.captured.back().recurrent, true)) {
            LINEAGE_TRACE(store_.trace(), "not stored: the engine could not put the guard state back");
            store_.abandon(s.plan, s.reserved_bytes);
            pool_.release(s.seq);
            s.seq = -1;
            return;
        }
        guard_final = std::move(s.captured.back().recurrent);
        s.captured.pop_back();
    }
    const bool keep_reply = hybrid_ && store_.cfg().keep_reply && store_.cfg().lineage && s.prompt_end_recurrent;
    if (keep_reply && s.n_past > s.prompt_size()) {
        // With the resend guard at prompt - 1 the prompt end would restore one token more than
        // it, at the price of a checkpoint that thins the last-user one away after an agent step.
        // Where the guard merged into a point a few tokens back (--cache-guard-merge), the prompt
        // end takes its place: an agent step that sends the reply back continues from it.
        const bool guard_taken = std::any_of(s.plan.captures.begin(), s.plan.captures.end(),
                                             [](const cache::capture_point & c) { return c.kind == cache::point_kind::guard; });
        if (!store_.cfg().resend_checkpoint || !guard_taken) {
            in.captured.push_back({s.prompt_size(), cache::point_kind::turn, s.prompt_end_recurrent});
        }
        keep_reply_checkpoints(s, in);
    } else if (hybrid_ && s.n_past > s.prompt_size()) {
        n_keep = s.prompt_size();
        if (!s.prompt_end_recurrent || !st_.set_state(s.seq, *s.prompt_end_recurrent, true) ||
            !st_.seq_rm(s.seq, n_keep, -1)) {
            LINEAGE_TRACE(store_.trace(), "not stored: {}",
                          s.prompt_end_recurrent ? "the engine could not put the prompt-end state back"
                                                 : "the prompt-end state was not kept (no RAM for it)");
            store_.abandon(s.plan, s.reserved_bytes);
            pool_.release(s.seq);
            s.seq = -1;
            return;
        }
    }
    cache::tokens all = s.req->prompt;
    all.insert(all.end(), s.generated.begin(), s.generated.end());
    in.toks.assign(all.begin(), all.begin() + n_keep);
    in.seq = s.seq;
    in.device_bytes = st_.state_size(s.seq, false);
    in.final_recurrent = guard_final ? std::move(guard_final)
                                     : (n_keep == s.prompt_size() ? s.prompt_end_recurrent : nullptr);
    for (auto & c : s.captured) {
        in.captured.push_back(std::move(c));
    }
    s.captured.clear();
    in.reserved_bytes = s.reserved_bytes;
    // The prompt's hints the commit reads (cache_hints derives from cache::prompt_hints; its
    // position lists stay with the request).
    in.hints.history_tokens = s.req->cache.history_tokens;
    in.hints.last_user_tokens = s.req->cache.last_user_tokens;
    in.hints.multi_turn = s.req->cache.multi_turn;
    in.warmed = s.req->warmup;  // whole or preempted: a later restore of it is a warm-up hit
    in.evicted_uses = s.plan.evicted_uses;
    if (s.plan.absorbs || s.plan.twin != 0 || !s.plan.inherited.empty()) {  // a copy may carry its source's restore points
        in.absorbed = std::move(s.plan);
    }
    if (!store_.commit(std::move(in), now_s)) {
        pool_.release(s.seq);
    }
    s.seq = -1;
    pool_.drain_released();
    s.stats.commit_s = seconds_since(t0);
}

void lifecycle::keep_reply_checkpoints(slot & s, cache::commit_input & in) {
    if (s.reply_candidates.empty()) {
        return;
    }
    const int32_t p = s.prompt_size();
    const int32_t decoded = s.n_past - p;
    // The decoded tokens only: the last sampled one was not decoded when the request ended by
    // length (an end-of-generation token is never in `generated`).
    const cache::tokens reply(s.generated.begin(), s.generated.begin() + std::min<size_t>(s.generated.size(), decoded));
    const int32_t whole = round_trip_ ? std::min(round_trip_(reply), decoded) : decoded;
    // A prompt that sends the reply's text back parts from the entry at p + whole at the
    // latest: the candidates after it can never be restored.
    std::string kept;
    for (auto & c : s.reply_candidates) {
        if (c.n_tokens <= p + whole) {
            kept += fmt::format("{}{}", kept.empty() ? "" : " ", c.n_tokens);
            in.captured.push_back(std::move(c));
        }
    }
    spdlog::debug("request {}: kept the reply checkpoints at [{}] (the reply comes back from its text for {} of {} "
                  "tokens)",
                  s.req->id, kept, whole, decoded);
    LINEAGE_TRACE(store_.trace(), "kept the reply checkpoints at [{}]: the reply comes back from its text for {} of {} "
                  "tokens", kept, whole, decoded);
    s.reply_candidates.clear();  // the others go with the slot; commit releases their reservations
}

void lifecycle::commit_rungs(slot & s, double now_s) {
    const auto t0 = clock::now();
    if (s.seq < 0) {
        return;
    }
    cache::trace_scope trace(store_.trace(), s.req->id, s.req->warmup);
    if (s.reset_since || !s.use_cache) {
        store_.count_deferred_rungs("dropped", static_cast<int64_t>(s.captured.size()));
        store_.abandon(s.plan, s.reserved_bytes);
    } else {
        store_.add_rungs(s.key, *s.req->ladder_anchor, std::move(s.captured), s.reserved_bytes, now_s);
    }
    s.captured.clear();
    s.reserved_bytes = 0;
    pool_.release(s.seq);
    s.seq = -1;
    pool_.drain_released();
    s.stats.commit_s = seconds_since(t0);
}

void lifecycle::abandon(slot & s) {
    if (s.seq < 0) {
        return;
    }
    if (s.use_cache) {
        store_.abandon(s.plan, s.reserved_bytes);
    }
    pool_.release(s.seq);
    s.seq = -1;
}

}  // namespace lineage::scheduler
