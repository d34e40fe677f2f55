// scheduler::admission: who may join the next step, as decisions over the slots and the queued
// requests, kept apart from the loop so that they are unit-tested without an engine
// (tests/scheduler/test_admission.cpp):
//  - the retry hold: a request that repeats a running request's whole prompt waits until that
//    request's client is known to be there (or gone: it is then cancelled and committed first),
//    so a retry sent right after a dropped stream restores what the dropped request computed
//    instead of racing its cancellation (docs/architecture.md "Retries");
//  - the admission order: among queued requests, the one with the fewest tokens left to compute
//    (its prompt less what the cache holds of it) goes first, so a warm agent turn does not wait
//    behind a cold prefill of a long prompt; a request passed over max_passed_over times goes
//    first; a long prefill leaves one slot to the others (docs/architecture.md "Admission order");
//  - the warm-up queue: background warm-ups waiting for an idle engine, one per conversation
//    (a newer one replaces the job it extends), bounded (docs/prompt-cache.md "Warm-up").
// Thread safety: retry_hold runs on the engine thread; a warmup_queue is guarded by its
// owner's lock. Ownership: the queue shares its requests with the scheduler.
#pragma once

#include "scheduler/request.h"
#include "scheduler/slot.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

namespace lineage::scheduler {

/** The longest a repeated request is held for its predecessor's probe: a client answers
 *  within one event or one poll of its HTTP thread (100 ms); past this it is admitted anyway. */
inline constexpr std::chrono::milliseconds retry_hold_limit{250};

/** Times a queued request may see a later one admitted before it (admission_order) before it goes
 *  first whatever its size: a cold prefill of a long prompt then waits at most this many shorter
 *  requests' service (seconds each for a warm turn) beyond its place in arrival order, against
 *  the minutes its own prefill takes on a CPU. */
inline constexpr int32_t max_passed_over = 8;

/** The order in which the queued requests `queue` (arrival order) may be admitted, as indices
 *  into it: first those passed over max_passed_over times or more (arrival order), then the
 *  others by `new_tokens` of each (the prompt tokens it would compute: its length less the
 *  longest prefix a stored state holds, an estimate: a hybrid restores only at a restore point
 *  at or before it), ascending, ties in arrival order. Shortest-job-first on what the cache
 *  leaves to compute is the policy of SGLang's cache-aware scheduler ("lpm", longest prefix
 *  match first, python/sglang/srt/managers/schedule_policy.py), with a bound on the wait. */
std::vector<size_t> admission_order(const std::deque<std::shared_ptr<generation_request>> & queue,
                                    const std::vector<int64_t> & new_tokens);

/** A prefill of more than this many --batch-size chunks is long (admission_blocked): on a CPU a
 *  few seconds' work at least, a cold first prompt of an agent session tens of them. */
inline constexpr int32_t long_prefill_batches = 4;

/** True when a request with `new_tokens` to compute (admission_order's estimate) must wait
 *  although a slot is idle: it is a long prefill (more than `long_tokens`) and `long_running`
 *  slots already run one (a prefill with more than `long_tokens` left), as many as may at once:
 *  all but one of the `parallel` slots (one when there is one). The slot left free serves the warm
 *  turns that arrive meanwhile in seconds instead of after the long prefills; the engine computes
 *  about as many tokens a second with one long prefill as with two, so the long ones lose little
 *  (the first of two ends its prefill sooner, the second about as late). */
bool admission_blocked(int64_t new_tokens, int32_t long_tokens, int32_t long_running, int32_t parallel);

/** After an admission round: every request still queued (`taken[i]` false) that arrived before
 *  an admitted one (`taken[j]` true, j > i) counts one more pass-over. */
void count_passed_over(std::deque<std::shared_ptr<generation_request>> & queue, const std::vector<bool> & taken);

/** Times a warm-up may be preempted and resumed before it is dropped. */
inline constexpr int32_t max_warmup_preemptions = 3;
/** How long an engine idles after serving a request before a ladder job may start
 *  (docs/architecture.md "Ladder jobs"): the warm-up of the next turn is rendered on its own
 *  thread once the reply is out (18-90 ms for the e2e agents' 20k-token prompts on 2 cores) and
 *  goes first. */
inline constexpr std::chrono::milliseconds ladder_idle_delay{250};

/** The running request whose whole prompt `r` repeats or extends (all but its last token at
 *  least), in the same cache bucket, that can answer a probe and is not cancelled; nullptr
 *  when none. Warm-ups never count. */
const slot * repeated_by(const std::vector<slot> & slots, const generation_request & r);

/** True while `r` (queued, using the cache) must wait: a running request it repeats has not yet
 *  answered the probe this asks it (r.held_since marks the start), and the hold is younger than
 *  `limit`. A predecessor that was cancelled meanwhile ends the hold: the loop commits it before
 *  it admits `r`. */
bool retry_hold(const std::vector<slot> & slots, generation_request & r, std::chrono::steady_clock::time_point now,
                std::chrono::milliseconds limit = retry_hold_limit);

/** The prefix hold (docs/prompt-cache.md "Parallel requests on one prefix"): the running request
 *  whose prefill will, within the prompt prefix that `r` (queued) shares with it, reach a restore
 *  point longer than `stored` (the longest prefix `r` shares with a stored state, tokens) that it
 *  has not computed yet; nullptr when none. Once that slot passes the point, `r` restores from
 *  its sequence (cache::live_state) instead of prefilling the prefix beside it: one engine
 *  computes a shared prefix once, and `r` waits no longer than computing it itself would take.
 *  The point is, for a dense family (`hybrid` false), the shared prefix (all but `r`'s last
 *  token at most); for a hybrid one, the furthest capture point of that slot's plan or its prompt
 *  end within the shared prefix. Points shorter than `min_prefix` do not hold. Requests that
 *  bypass the cache, warm-ups and requests with images neither hold nor are held. */
const slot * prefix_hold(const std::vector<slot> & slots, const generation_request & r, bool hybrid, int32_t stored,
                         int32_t min_prefix);

/** Warm-up jobs waiting for an idle engine. */
class warmup_queue {
public:
    explicit warmup_queue(size_t capacity = 16) : capacity_(capacity) {}

    /** Adds `job` at the back. A queued job of the same bucket whose prompt `job`'s extends is
     *  replaced (counted in `replaced`); when full, the oldest job goes (`dropped`). */
    void push(std::shared_ptr<generation_request> job);
    /** Puts a preempted job back at the front (it goes first once the engine is idle). */
    void push_front(std::shared_ptr<generation_request> job);
    /** The oldest job; nullptr when empty. */
    std::shared_ptr<generation_request> pop();
    bool empty() const { return q_.empty(); }
    size_t size() const { return q_.size(); }

    int64_t received = 0;  ///< jobs pushed (push_front not counted)
    int64_t replaced = 0;  ///< jobs replaced by a newer one of the same conversation
    int64_t dropped = 0;   ///< jobs dropped because the queue was full
    /** Renders and tokenizations the pushed jobs' prefixes took (generation_request::prepared). */
    int64_t renders = 0;
    int64_t tokenizations = 0;

private:
    size_t capacity_;
    std::deque<std::shared_ptr<generation_request>> q_;
};

}  // namespace lineage::scheduler
