// scheduler::impl: the engine thread's state, shared by the files that implement it
// (scheduler.cpp: construction, the loop, admission and the batched step;
// scheduler_finish.cpp: sampling, finishing and failing a slot; scheduler_api.cpp: the public
// API's calls into the engine thread). Private to src/scheduler.
// Thread safety: members are the engine thread's unless GUARDED_BY(mu_).
#pragma once

#include "scheduler/scheduler.h"

#include "cache/store/store.h"
#include "engine/context.h"
#include "engine/lora.h"
#include "engine/model.h"
#include "scheduler/admission.h"
#include "scheduler/tier_link.h"
#include "scheduler/lifecycle.h"
#include "scheduler/lora_turns.h"
#include "scheduler/metrics.h"
#include "scheduler/sequence_pool.h"
#include "scheduler/sequence_states.h"
#include "scheduler/settings.h"
#include "scheduler/slot.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>

#include <unistd.h>

namespace lineage::scheduler {

struct scheduler::impl {
    /** Steps in a row a long prefill may sit out while a short one (<= n_batch / 4 tokens
     *  left) runs alone: bounds the delay short requests can cause it (step()). */
    static constexpr int32_t max_prefill_deferrals = 4;

    impl(const engine::model & m, const params & p);
    ~impl();

    // --- cross-thread ---
    void submit(std::shared_ptr<generation_request> req);
    template <typename F> auto run_on_engine(F f, bool when_idle = false) -> decltype(f());
    void stop();

    // --- engine thread ---
    void loop();
    /** What one turn of loop() took from under mu_ (take_round) for the rest of the turn
     *  (run_round): the tasks to run, the requests admitted in this round, a warm-up to start,
     *  and whether a running warm-up is preempted (a request is admitted or waits). */
    struct loop_round {
        std::deque<std::function<void()>> tasks;
        std::deque<std::function<void()>> idle_tasks;  // only when no slot is active
        std::deque<std::shared_ptr<generation_request>> admitted;
        std::shared_ptr<generation_request> warmup;
        bool preempt = false;
        /** A warm-up of a next turn is queued: a running ladder job yields to it (a next turn
         *  comes sooner than a new session). */
        bool preempt_ladder = false;
    };
    /** The first half of a turn of loop(), under mu_ (`lk`): waits for work while nothing
     *  computes (at most 20 ms while a state is being read, else 1 s; not while a warm-up can
     *  start on an idle engine), then fills `round` (tasks, idle tasks when no slot is active,
     *  select_admitted, preemption, a warm-up on an idle engine). False when stopping. */
    bool take_round(util::unique_lock & lk, loop_round & round) REQUIRES(mu_);
    /** The queued requests admitted this round, as many as there are idle slots, in admission
     *  order (admission.h), past the retry and prefix holds and the long-prefill limit; removes
     *  them from queue_ (drop_admitted). None while an idle task waits. */
    std::deque<std::shared_ptr<generation_request>> select_admitted() REQUIRES(mu_);
    /** The queue as select_admitted ranks it (rank_queue). */
    struct queue_ranking {
        std::vector<size_t> order;        // indexes into queue_, in admission order
        std::vector<int64_t> new_tokens;  // per queued request: tokens left to compute after its stored prefix
        std::vector<int32_t> stored;      // per queued request: the longest prefix a stored state holds (tokens)
        int32_t long_running = 0;         // prefills running with over long_tokens tokens left
    };
    /** Ranks queue_: each request's stored prefix (store::longest_match) and new tokens, their
     *  admission order, and the requests (not warm-ups) prefilling over `long_tokens` tokens. */
    queue_ranking rank_queue(int32_t long_tokens) REQUIRES(mu_);
    /** Removes the requests `taken` (by index) from queue_; each one left that arrived before
     *  an admitted one counts a pass-over (count_passed_over). */
    void drop_admitted(const std::vector<bool> & taken) REQUIRES(mu_);
    /** The second half of a turn of loop(), mu_ not held: runs `round`'s tasks, finishes the
     *  cancelled slots, preempts a warm-up, admits the requests, polls the loads, then steps
     *  (or, idle, expires the store and trims the pools), tier housekeeping, the invariants and
     *  serving_ (takes mu_). */
    void run_round(loop_round & round);
    /** After the loop: commits what the running requests computed and fails them, fails the
     *  queued ones, runs the tasks left (takes mu_), flushes the tiers. */
    void shut_down();
    void admit(std::shared_ptr<generation_request> req);
    /** admit()'s cache decision for `s` (its request just set): use_cache and its key, a bypass
     *  counted and traced (cache_prompt false, cache off, a reloaded LoRA adapter, a reset since
     *  it arrived). False when `s` was a warm-up dropped (a reset of its scope, or an entry
     *  already holds its prompt): the slot is reset, nothing else to do. */
    bool choose_cache_use(slot & s);
    /** admit()'s plan for `s`: the store's restore plan (the running requests' states too), or
     *  a hybrid's cold split points when it does not use the cache; lookup_s in seconds; a
     *  restore point inside an image (never expected) falls back to a cold plan. */
    void plan_restore(slot & s);
    /** admit()'s last part: `s`'s sequence (take_device's, or acquire_sequence), its sampler
     *  (fails the slot on no free sequence or a bad grammar), then the restore: a tier read
     *  (phase loading, the tier's thread notifies) or start_prefill. `again`: a second plan
     *  after a failed tier read (complete_load); the restore's time still counts from the first. */
    void start_restore(slot & s, bool again = false);
    void end_warmup(slot & s, bool whole);
    /** Ladder jobs (cache::config::ladder_defer; docs/architecture.md "Ladder jobs"): queues
     *  one for the rungs `rungs` of the anchor `anchor` that `s`'s request pinned (engine
     *  thread). */
    void queue_ladder_job(const slot & s, cache::tokens anchor, std::vector<int32_t> rungs);
    /** A ladder job's run ends (`whole`: its stretch is prefilled; else a request preempted
     *  it): its rungs join the anchor, and what is left goes back to the queue (the rest of a
     *  preempted stretch at the front, dropped after max_warmup_preemptions runs preempted before
     *  their first rung; the next stretch at the back). */
    void end_ladder_job(slot & s, bool whole);
    /** A ladder job ended for good (all its rungs made, or dropped): its anchor may be released
     *  from RAM again (store::hold_for_rungs). */
    void end_rung_hold(const generation_request & job);
    void start_prefill(slot & s);
    /** Moves `s`'s sequence (restored, nothing prefilled yet) to a free id next to another
     *  active slot's when it is next to none: with a KV buffer per sequence llama.cpp computes
     *  a step's sequences in one micro-batch only when their ids are consecutive, so two
     *  sequences decoding side by side on ids 0 and 2 cost two graphs a step. The move copies
     *  the state (n_past tokens) once, to a free id there or to the id of the shortest parked
     *  entry there, which goes to RAM first (sequence_pool::acquire_next_to); nothing happens
     *  when neither is possible. docs/architecture.md "One micro-batch per step". */
    void place_next_to_active(slot & s);
    /** Whether sequences are placed next to running ones: --place-sequences with a KV buffer per
     *  sequence (with --kv-unified every sequence shares one buffer, so ids do not matter). */
    bool placing() const { return p_.place_sequences && !p_.kv_unified; }
    /** The sequence id a restore other than take_device writes into: with --place-sequences one
     *  next to an active slot's (sequence_pool::acquire_next_to, never demoting the entry the
     *  plan restores from), so that place_next_to_active has nothing to copy again; else, or
     *  when there is none, sequence_pool::acquire's. nullopt when every id is busy. */
    std::optional<int32_t> acquire_sequence(const slot & s);
    void poll_loads();
    /** A tier read of `s` is done: the store completes the plan (tier_loaded). Where the copy
     *  could not be loaded (deleted meanwhile, damaged), `s` is planned again once without it
     *  (store::retract_lookup, plan_restore): what memory still holds restores, not a cold
     *  prefill; after a reset since it arrived, or a second failure, it prefills cold. */
    void complete_load(slot & s);
    /** The read hold: true while a request (not a warm-up) is in phase loading (its state read
     *  from a tier in flight) with at most `short_prefill` prompt tokens to prefill after its
     *  restore point, and was admitted less than read_hold_bound_s() ago. The step's long
     *  prefills then sit out (plan_prefill's hold_long): without the hold a read that ends
     *  during a long prefill's pass waits for the whole pass (~1 s for 512 tokens on the bench
     *  model on 2 CPU cores), as the first requests after a restart did (docs/architecture.md
     *  "Prefill order"). */
    bool read_hold(int32_t short_prefill) const;
    /** How long a read hold may last, seconds from the short request's admission: one
     *  --batch-size pass at the measured prefill rate (tier_cost::prefill_tokens_per_s), so the
     *  hold never delays a long prefill by more than the pass it would have computed. Before
     *  a pass is measured (right after a start): 1 s on the CPU (a 512-token pass of the 2B bench
     *  model on 2 cores takes ~1 s; a larger model's longer), 0 (no hold) on a GPU, whose pass
     *  is tens of milliseconds against a read of hundreds. */
    double read_hold_bound_s() const;
    void step();
    /** step()'s first part: finishes the slots whose client left (or, decoding, asked to stop),
     *  applies the LoRA set this step serves (next_lora_set) and decodes the images due in its
     *  prefilling slots. Returns that set. */
    std::vector<float> begin_step();
    /** The step's tokens (at most --batch-size): each decoding slot of `lora`'s set (with the
     *  tokens a guard rollback replays), then the prefill chunks plan_prefill picks; sets the
     *  slots' logits_idx and chunk. `hold`: whether the read hold held long prefills back. */
    std::vector<engine::batch_token> build_batch(const std::vector<float> & lora, bool & hold);
    /** Decodes `batch`, demoting parked sequences from the device while the KV is full; `dt`:
     *  its seconds. Logs (debug) the sequences in the step and their runs of consecutive ids. */
    engine::decode_result decode_batch(const std::vector<engine::batch_token> & batch, double & dt);
    /** After a decoded step of `dt` seconds: feeds a prefill pass to the tier cost rule, then
     *  moves each slot on (a prefill chunk: count_pass, after_prefill_chunk; a decode:
     *  after_decode, sample_and_emit). */
    void end_step(const std::vector<engine::batch_token> & batch, double dt);
    void after_prefill_chunk(slot & s);
    /** Encodes and decodes the image `m` that starts at s.n_past (the projector's eval), then
     *  moves n_past past it and takes the captures there; fails the slot when the engine fails
     *  (kv_full when no parked sequence can leave the device to make room). */
    void decode_image(slot & s, const media_span & m);
    /** Counts one prefill pass of `s` (its chunk just computed, n_past not yet moved) and
     *  whether the chunk was cut short at a capture point (request_stats::prefill_splits). */
    void count_pass(slot & s);
    /** True while queued `r` waits for a running request to compute the prefix they share
     *  (admission.h prefix_hold; `stored`: the longest prefix of `r` a stored state holds,
     *  store::longest_match); counts the hold once. Engine thread, under mu_. */
    bool held_for_prefix(generation_request & r, int32_t stored, clock::time_point now);
    /** True when a request admitted in this round (`admitted`) shares at least
     *  --prompt-cache-min-prefix tokens of `r`'s prompt in its bucket: `r` is then decided in the
     *  next round, when that one is running and the prefix hold can see it. */
    bool shares_with(const std::deque<std::shared_ptr<generation_request>> & admitted,
                     const generation_request & r) const;
    /** The running requests' sequences that `s` (being admitted) may restore from
     *  (cache::live_state): prefilling or decoding slots other than `s` that use the cache, are
     *  no warm-up, hold no image and replay nothing (a rollback guard in flight). */
    std::vector<cache::live_state> live_states(const slot & s) const;
    /** The sequence ids of the active slots. */
    std::vector<int32_t> active_seqs() const;
    /** Orders `batch` by sequence id (prefill_order.h order_by_sequence) and moves the slots'
     *  logits_idx with it. */
    void order_by_sequence(std::vector<engine::batch_token> & batch);
    void emit(slot & s, const engine::sampled_token & st);
    /** Samples slot `s`'s next token and emits it; fails the request instead when the step took
     *  over its sampling_params::max_step_s. */
    void sample_and_emit(slot & s);
    void finish(slot & s, finish_reason why);
    void fail(slot & s, request_failure why);
    void reset_slot(slot & s);
    void record(slot & s, finish_reason why);
    double now_s() const { return seconds_since(started_); }

    const engine::model & model_;
    params p_;
    bool hybrid_;
    /** The resend guard is taken by rolling the recurrent state back (config::guard_rollback,
     *  and the engine keeps a rollback snapshot for this architecture). */
    bool guard_rollback_ = false;
    int32_t max_seq_tokens_;
    std::unique_ptr<engine::context> ctx_;
    std::unique_ptr<engine_states> states_;   // ctx_ as the lifecycle sees it
    cache::store store_;
    std::unique_ptr<tier_link> tiers_;
    std::unique_ptr<sequence_pool> pool_;
    std::unique_ptr<lifecycle> life_;
    std::atomic<bool> load_ready_{false};  // set by the disk thread when a load finished
    std::atomic<bool> serving_{false};     // scheduler::serving()
    /** Resets run (scheduler::reset_epoch); bumped on the engine thread by a reset. */
    std::atomic<uint64_t> resets_{0};
    uint64_t last_full_reset_ = 0;                       // engine thread: resets_ after the last reset of everything
    std::map<std::string, uint64_t> tenant_resets_;      // engine thread: resets_ after each tenant's last reset
    /** A reset of `r`'s scope (everything, or its tenant) ran after it arrived (engine thread). */
    bool reset_since(const generation_request & r) const;
    /** After a reset (engine thread): the slots in its scope (`tenant`; nullopt: all) store
     *  nothing of what they computed, a warm-up among them is dropped. */
    void fence_reset(const std::optional<std::string> & tenant);
    metrics metrics_;
    request_log requests_;  // the last requests and their outcomes (GET /v1/cache/requests)
    std::vector<slot> slots_;
    int32_t n_seq_ = 0;                  // sequence ids [0, n_seq_): active and parked
    /** LINEAGE_CHECK_INVARIANTS=1: the slots' and the store's invariants after every step
     *  (a broken one is logged and aborts the process: a test harness sees it at once). */
    bool check_invariants_ = false;
    clock::time_point started_ = clock::now();
    void verify() const;
    /** The warm-up queue's counters into `s` (engine thread; takes mu_). */
    void add_warmup_stats(cache::stats & s);
    std::vector<std::unique_ptr<engine::lora_adapter>> loras_;  // id = index
    std::vector<float> applied_lora_;  // the set the context applies now (empty: none)
    uint64_t lora_epoch_ = 0;          // adapter generation (reload_lora)
    size_t lora_turn_ = 0;             // slot whose adapter set the next step serves first

    util::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::shared_ptr<generation_request>> queue_ GUARDED_BY(mu_);
    warmup_queue warmups_ GUARDED_BY(mu_);  // background warm-ups, run when nothing else is
    /** Ladder jobs waiting for an idle engine (after the warm-ups: a next turn comes sooner than
     *  a new session). */
    std::deque<std::shared_ptr<generation_request>> ladder_jobs_ GUARDED_BY(mu_);
    /** A ladder job starts no earlier than this: ladder_idle_delay after the last round that
     *  served a request, so that the warm-up of the next turn, rendered on its own thread once
     *  the reply is out, is queued first (engine thread). */
    clock::time_point ladder_not_before_ GUARDED_BY(mu_) = {};
    /** Requests still queued after this round's admissions (take_round; engine thread): with the
     *  other active slots, whether a prefill passes over its deferrable ladder rungs
     *  (slot::defer_rungs). */
    size_t queued_after_round_ = 0;
    std::deque<std::function<void()>> tasks_ GUARDED_BY(mu_);
    std::deque<std::function<void()>> idle_tasks_ GUARDED_BY(mu_);  // run when no slot is active
    bool stopping_ GUARDED_BY(mu_) = false;
    std::thread thread_;
};

template <typename F>
auto scheduler::impl::run_on_engine(F f, bool when_idle) -> decltype(f()) {
    using R = decltype(f());
    auto task = std::make_shared<std::packaged_task<R()>>(std::move(f));
    auto fut = task->get_future();
    {
        util::lock_guard lk(mu_);
        if (stopping_) {
            return R{};
        }
        (when_idle ? idle_tasks_ : tasks_).push_back([task] { (*task)(); });
    }
    cv_.notify_one();
    return fut.get();
}

}  // namespace lineage::scheduler
