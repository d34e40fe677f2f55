// scheduler::impl: the whole prompt in, sampling, finishing (commit) and failing (abandon) a
// slot, and the per-request metrics; see scheduler_impl.h.
#include "scheduler/scheduler_impl.h"

#include <cstdio>

namespace lineage::scheduler {

void scheduler::impl::after_prefill_chunk(slot & s) {
    if (!life_->after_chunk(s, now_s())) {
        return;
    }
    if (s.req->warmup) {
        end_warmup(s, /*whole=*/true);
        return;
    }
    // The whole prompt is in: sample.
    s.ph = slot::phase::decode;
    s.first_token_at = clock::now();
    s.stats.ttft_s = seconds_since(s.req->submitted);
    sample_and_emit(s);
}

void scheduler::impl::sample_and_emit(slot & s) {
    const auto t0 = clock::now();
    const engine::sampled_token st = s.smpl->sample(*ctx_, s.logits_idx, s.req->sampling.logprobs);
    const double dt = seconds_since(t0);
    const double bound = s.req->sampling.max_step_s;
    if (bound > 0 && dt > bound) {
        // The probe at admission (engine::grammar_step_seconds) walks only the grammar's first
        // steps; a grammar whose cost grows later is stopped at its first step over the bound,
        // so the other requests wait at most one such step on its account.
        char took[32];
        char lim[32];
        std::snprintf(took, sizeof took, "%.0f", dt * 1e3);
        std::snprintf(lim, sizeof lim, "%g", bound * 1e3);
        fail(s, {failure_kind::grammar_too_costly,
                 std::string("enforcing this request's grammar took ") + took + " ms for one generated token; this "
                     "server allows at most " + lim + " ms (--max-grammar-ms), as the other requests wait while it "
                     "runs: send a smaller constraint (fewer alternatives), or start the server with a larger "
                     "--max-grammar-ms"});
        return;
    }
    emit(s, st);
}

void scheduler::impl::emit(slot & s, const engine::sampled_token & st) {
    const token t = st.tok;
    if (model_.is_eog(t)) {
        finish(s, finish_reason::stop);
        return;
    }
    s.generated.push_back(t);
    s.pending = t;
    generation_event e;
    e.type = generation_event::kind::token;
    e.tok = t;
    e.piece = model_.token_to_piece(t, false);
    if (s.req->sampling.logprobs) {
        e.logprob = st.logprob;
        e.top_logprobs = st.top;
    }
    s.req->events->push(std::move(e));
    const int32_t max_tokens = s.req->sampling.max_tokens;
    if (max_tokens >= 0 && static_cast<int32_t>(s.generated.size()) >= max_tokens) {
        finish(s, finish_reason::length);
    } else if (s.n_past + s.replay + 1 >= max_seq_tokens_) {
        finish(s, finish_reason::length);
    }
}

void scheduler::impl::finish(slot & s, finish_reason why) {
    s.stats.completion_tokens = static_cast<int32_t>(s.generated.size());
    if (s.ph == slot::phase::decode) {
        s.stats.decode_s = seconds_since(s.first_token_at);
    }
    if (s.ph == slot::phase::loading) {
        // Ended while its tier read was in flight (a cancel, a shutdown): nothing is computed
        // yet, so nothing is stored; reset_slot drops the read's result.
        life_->abandon(s);
    } else {
        life_->commit(s, now_s());
    }
    record(s, why);
    generation_event e;
    e.type = generation_event::kind::done;
    e.finish = why;
    e.stats = s.stats;
    const auto & st = s.stats;
    std::string splits;
    for (const auto & [kind, n] : st.prefill_splits_by_kind) {
        splits += (splits.empty() ? ": " : ", ") + kind + " " + std::to_string(n);
    }
    spdlog::info(
        "request {}: {} | prompt {} tokens, cached {} ({}), completion {} | "
        "lookup {:.1f} ms, restore {:.1f} ms{}{}{}{}, prefill {:.1f} ms in {} passes ({} split{}), "
        "capture {:.1f} ms, commit {:.1f} ms | TTFT {:.1f} ms, decode {:.1f} tok/s",
        s.req->id, to_string(why), st.prompt_tokens, st.cached_tokens, st.hit_kind, st.completion_tokens,
        st.lookup_s * 1e3, st.restore_s * 1e3, st.restore_op.empty() ? "" : " (", st.restore_op,
        st.restore_op.empty() ? "" : ")",
        st.moved_tokens < 0 ? std::string()
                            : fmt::format(" (moved {} tokens next to a running sequence)", st.moved_tokens),
        st.prefill_s * 1e3, st.prefill_passes, st.prefill_splits, splits, st.capture_s * 1e3, st.commit_s * 1e3,
        st.ttft_s * 1e3, st.decode_s > 0 && st.completion_tokens > 1 ? (st.completion_tokens - 1) / st.decode_s : 0.0);
    spdlog::debug("engine: {} graphs reused of {} llama_decode calls", ctx_->graphs_reused(), ctx_->decode_calls());
    s.req->events->push(std::move(e));
    reset_slot(s);
}

void scheduler::impl::fail(slot & s, request_failure why) {
    life_->abandon(s);
    if (s.req && s.req->ladder()) {
        store_.count_deferred_rungs("dropped", static_cast<int64_t>(s.req->ladder_rungs.size()));
        end_rung_hold(*s.req);
    } else if (s.req && s.req->warmup) {
        store_.warmup_counters().wasted++;  // dropped unfinished
    }
    generation_event e;
    e.type = generation_event::kind::error;
    e.failure = std::move(why);
    if (s.req) {
        record(s, finish_reason::error);
    }
    e.stats = s.stats;
    spdlog::warn("request {}: failed ({}): {}", s.req ? s.req->id : 0, to_string(e.failure.kind), e.failure.message);
    if (s.req) {
        s.req->events->push(std::move(e));
    }
    reset_slot(s);
}

void scheduler::impl::record(slot & s, finish_reason why) {
    if (s.req->warmup) {
        return;  // not a request: counted in the cache's warm-up stats
    }
    // Prompt tokens the engine computed: the prefill reached n_past (capped at the prompt; the
    // rest is decode) from the restore point; a guard rollback's replay is not counted twice.
    s.stats.prefilled_tokens =
        std::max(0, std::min(s.n_past + s.replay, s.prompt_size()) - s.stats.cached_tokens);
    metrics_.record(s.stats, why, s.use_cache, s.req ? s.req->cache.tenant : std::string());
    requests_.record(request_record{
        .id = s.req->id,
        .at_s = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(),
        .tenant = s.req->cache.tenant,
        .finish = to_string(why),
        .prompt_tokens = s.stats.prompt_tokens,
        .cached_tokens = s.stats.cached_tokens,
        .prefilled_tokens = s.stats.prefilled_tokens,
        .completion_tokens = s.stats.completion_tokens,
        .ttft_s = s.stats.ttft_s,
        .hit_kind = s.stats.hit_kind,
        .miss_cause = s.stats.miss_cause,
        .restored_from = s.stats.restored_from});
}

void scheduler::impl::reset_slot(slot & s) {
    s.ph = slot::phase::idle;
    s.req.reset();
    s.seq = -1;
    s.n_past = 0;
    s.use_cache = false;
    s.reset_since = false;
    s.load = {};  // a read in flight is dropped with its request
    s.replanned = false;
    s.skip_tier = -1;
    s.guard_rollback = false;
    s.replay = 0;
    s.plan = cache::restore_plan{};
    s.next_capture = 0;
    s.captured.clear();
    s.prompt_end_recurrent.reset();
    s.reply_candidates.clear();
    s.reply_stride = 0;
    s.reserved_bytes = 0;
    s.smpl.reset();
    s.logits_idx = -1;
    s.chunk = 0;
    s.deferred_steps = 0;
    s.pending = -1;
    s.generated.clear();
    s.stats = request_stats{};
}

}  // namespace lineage::scheduler
