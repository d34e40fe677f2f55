// scheduler::slot: one active request on the engine thread: its sequence id, where its prefill
// stands, the restore plan it follows, the states it captured, its sampler and timings.
// Thread safety: engine thread only. Ownership: owns its sampler; shares the request.
#pragma once

#include "cache/store/store.h"
#include "engine/context.h"
#include "scheduler/request.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <vector>

namespace lineage::scheduler {

using clock = std::chrono::steady_clock;

/** Seconds from `t` to now. */
inline double seconds_since(clock::time_point t) {
    return std::chrono::duration<double>(clock::now() - t).count();
}

struct slot {
    /** Phases (the engine thread moves a slot through them):
     *    idle --admit, plan load_tier--> loading (the disk thread reads the tier-2 file)
     *    loading --read done (store::tier_loaded)--> prefill
     *    idle --admit--> prefill --the whole prompt in--> decode
     *    prefill|decode --EOG, max_tokens, stop string, cancel--> idle (lifecycle::commit)
     *    any --failure (engine, no sequence, shutdown)--> idle (lifecycle::abandon) */
    enum class phase { idle, loading, prefill, decode };

    std::shared_ptr<generation_request> req;
    phase ph = phase::idle;
    int32_t seq = -1;                 ///< llama.cpp sequence id holding this request's state
    int32_t n_past = 0;               ///< tokens in the sequence (positions [0, n_past))
    bool use_cache = false;           ///< cache on and cache_prompt true
    /** A POST /v1/cache/reset of its scope ran while it was active (scheduler fence_reset): it
     *  is served to the end, and captures, pins and commits nothing. */
    bool reset_since = false;
    /** The resend guard (prompt - 1) is taken by rolling the recurrent state back after the
     *  prefill, not by splitting it (config::guard_rollback; engine support; not a warm-up). */
    bool guard_rollback = false;
    /** Prompt tokens the next decode step computes again before `pending` (1 after a guard
     *  rollback took the last prompt token out of the sequence; else 0). n_past + replay is
     *  where the prompt stands. */
    int32_t replay = 0;
    cache::key key;
    cache::restore_plan plan;
    std::future<cache::tier_load_result> load;  ///< phase loading: the tier-2 read in flight
    /** Its tier copy could not be loaded and it was planned again (scheduler complete_load):
     *  a second failure prefills cold rather than plan a third time. */
    bool replanned = false;
    /** replanned: the tier whose read failed, not consulted again (cache::plan_hints::skip_tier)
     *  unless its copy was just gone (missing); -1 otherwise. */
    int32_t skip_tier = -1;
    std::chrono::steady_clock::time_point restore_started;
    size_t next_capture = 0;          ///< index into plan.captures
    std::vector<cache::checkpoint> captured;
    cache::blob_ptr prompt_end_recurrent;  ///< hybrid: recurrent state after the whole prompt
    /** hybrid, --cache-reply-step: recurrent states taken during decode (n_tokens = prompt +
     *  decoded tokens), ascending, at most config::max_reply_candidates; commit keeps one. */
    std::vector<cache::checkpoint> reply_candidates;
    int32_t reply_stride = 0;         ///< decoded tokens between reply candidates (0: not started)
    uint64_t reserved_bytes = 0;      ///< RAM reserved in the cache for captured states
    std::unique_ptr<engine::sampler> smpl;
    int32_t logits_idx = -1;          ///< index in the current batch of this slot's output row
    int32_t chunk = 0;                ///< prompt tokens of this slot in the current batch
    int32_t deferred_steps = 0;       ///< steps in a row this prefill sat out for a short one
    token pending = -1;               ///< sampled token not yet decoded
    std::vector<token> generated;
    request_stats stats;
    std::chrono::steady_clock::time_point first_token_at;

    bool active() const { return ph != phase::idle; }
    int32_t prompt_size() const { return static_cast<int32_t>(req->prompt.size()); }
    /** Whether the prefill passes over its deferrable ladder rungs now (the scheduler sets it
     *  before each step: true while no other request runs or waits; cache::capture_point::
     *  deferrable; docs/architecture.md "Ladder jobs"). */
    bool defer_rungs = false;
    /** The index of the next planned capture that ends a pass (not at_pass_end, and not a
     *  deferrable rung while defer_rungs), or plan.captures.size(). */
    size_t next_split() const {
        size_t i = next_capture;
        while (i < plan.captures.size() &&
               (plan.captures[i].at_pass_end || (plan.captures[i].deferrable && defer_rungs))) {
            ++i;
        }
        return i;
    }
    /** Where the current prefill chunk must end: the next capture point that is not taken at a
     *  pass end (cache::capture_point::at_pass_end), or the prompt end. A guard at prompt - 1
     *  taken by rollback does not stop it (lifecycle::after_chunk takes it). */
    int32_t next_stop() const {
        const size_t i = next_split();
        if (i >= plan.captures.size()) {
            return prompt_size();
        }
        const auto & c = plan.captures[i];
        if (guard_rollback && c.kind == cache::point_kind::guard && c.n_tokens == prompt_size() - 1) {
            return prompt_size();
        }
        return c.n_tokens;
    }
    /** The image of the prompt that starts at n_past (decoded next, as one unit), or nullptr. */
    const media_span * image_at_past() const {
        for (const auto & m : req->media) {
            if (m.span.begin == n_past) {
                return &m;
            }
        }
        return nullptr;
    }
    /** Where the current text chunk must end: next_stop(), or the next image's start. */
    int32_t text_stop() const {
        int32_t stop = next_stop();
        for (const auto & m : req->media) {
            if (m.span.begin >= n_past) {
                return std::min(stop, m.span.begin);
            }
        }
        return stop;
    }
};

/** Throws std::logic_error naming the first broken invariant of slot `s` (index `i` in the
 *  message) between two engine steps (the phases above), items 1-5 and the range of item 6 of
 *  check_invariants below. */
void check_invariants(const slot & s, size_t i, int32_t n_seq_max);

/** Throws std::logic_error naming the first broken invariant of the slots between two engine
 *  steps (the phases above):
 *  1. idle: no request, no sequence, nothing reserved, captured or being read;
 *  2. loading: a load_tier plan with its tier-2 read in flight, a sequence acquired, nothing
 *     prefilled yet;
 *  3. prefill: a sequence, plan.n_restore <= n_past < the prompt length, n_past not inside an
 *     image (an image is decoded as one unit); the captures before next_capture lie at or
 *     before n_past, the next one after it (it is taken when reached);
 *  4. decode: the whole prompt in (n_past + replay; replay 0 or 1), every capture passed, a sampler;
 *  5. prefill|decode: the checkpoints taken ascend strictly and lie in [1, n_past];
 *  6. active slots hold distinct sequence ids in [0, n_seq_max).
 *  The scheduler checks them after every step when LINEAGE_CHECK_INVARIANTS=1 (the e2e tests
 *  set it), the lifecycle unit tests after every transition. */
void check_invariants(const std::vector<slot> & slots, int32_t n_seq_max);

}  // namespace lineage::scheduler
