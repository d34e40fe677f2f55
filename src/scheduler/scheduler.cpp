// scheduler: the engine thread: its loop, admission, the batched step and finishing. The
// rest sits behind narrow seams: settings.h (parameters in effect), sequence_pool.h (sequence
// ids, demotion), lifecycle.h (restore, capture, commit over sequence_states), disk_link.h
// (tier 2). See scheduler.h for the contract, docs/architecture.md for the map.
#include "scheduler/scheduler.h"

#include "cache/store.h"
#include "engine/context.h"
#include "engine/lora.h"
#include "engine/model.h"
#include "scheduler/admission.h"
#include "scheduler/disk_link.h"
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
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string_view>
#include <thread>

#include <unistd.h>

namespace lineage::scheduler {

struct scheduler::impl {
    impl(const engine::model & m, const params & p);
    ~impl();

    // --- cross-thread ---
    void submit(std::shared_ptr<generation_request> req);
    template <typename F> auto run_on_engine(F f, bool when_idle = false) -> decltype(f());
    void stop();

    // --- engine thread ---
    void loop();
    void admit(std::shared_ptr<generation_request> req);
    void end_warmup(slot & s, bool whole);
    void start_prefill(slot & s);
    void poll_loads();
    void complete_load(slot & s);
    void step();
    void after_prefill_chunk(slot & s);
    void emit(slot & s, const engine::sampled_token & st);
    void finish(slot & s, finish_reason why);
    void fail(slot & s, request_failure why);
    void reset_slot(slot & s);
    void record(slot & s, finish_reason why);
    double now_s() const { return seconds_since(started_); }

    const engine::model & model_;
    params p_;
    bool hybrid_;
    int32_t max_seq_tokens_;
    std::unique_ptr<engine::context> ctx_;
    std::unique_ptr<engine_states> states_;   // ctx_ as the lifecycle sees it
    cache::store store_;
    std::unique_ptr<disk_link> disk_;
    std::unique_ptr<sequence_pool> pool_;
    std::unique_ptr<lifecycle> life_;
    std::atomic<bool> load_ready_{false};  // set by the disk thread when a load finished
    metrics metrics_;
    std::vector<slot> slots_;
    int32_t n_seq_ = 0;                  // sequence ids [0, n_seq_): active and parked
    /** LINEAGE_CHECK_INVARIANTS=1: the slots' and the store's invariants after every step
     *  (a broken one is logged and aborts the process: a test harness sees it at once). */
    bool check_invariants_ = false;
    clock::time_point started_ = clock::now();
    void verify() const;
    std::vector<std::unique_ptr<engine::lora_adapter>> loras_;  // id = index
    std::vector<float> applied_lora_;  // the set the context applies now (empty: none)
    uint64_t lora_epoch_ = 0;          // adapter generation (reload_lora)
    size_t lora_turn_ = 0;             // slot whose adapter set the next step serves first

    util::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::shared_ptr<generation_request>> queue_ GUARDED_BY(mu_);
    warmup_queue warmups_ GUARDED_BY(mu_);  // background warm-ups, run when nothing else is
    std::deque<std::function<void()>> tasks_ GUARDED_BY(mu_);
    std::deque<std::function<void()>> idle_tasks_ GUARDED_BY(mu_);  // run when no slot is active
    bool stopping_ GUARDED_BY(mu_) = false;
    std::thread thread_;
};

scheduler::impl::impl(const engine::model & m, const params & p)
    : model_(m),
      p_(with_family_settings(p, m.family() != engine::memory_family::dense)),
      hybrid_(m.family() != engine::memory_family::dense),
      max_seq_tokens_(0),
      store_(p_.cache, m.family() != engine::memory_family::dense) {
    if (p_.n_ctx <= 0) {
        p_.n_ctx = default_n_ctx(m);
    }
    max_seq_tokens_ = m.n_ctx_train() > 0 ? std::min(p_.n_ctx, m.n_ctx_train()) : p_.n_ctx;
    engine::context_params cp;
    cp.n_seq = p_.n_parallel + std::max(0, p_.cache.device_slots);
    // Every sequence (live or parked) can hold max_seq_tokens_: per-sequence buffers split
    // the pool evenly; a unified pool of the same size lets one sequence take more.
    cp.n_ctx = max_seq_tokens_ * cp.n_seq;
    cp.kv_unified = p_.kv_unified;
    cp.n_batch = p_.n_batch;
    cp.n_ubatch = p_.n_ubatch;
    cp.n_threads = p_.n_threads;
    ctx_ = std::make_unique<engine::context>(m, cp);
    for (const auto & path : p_.lora_paths) {
        loras_.push_back(std::make_unique<engine::lora_adapter>(m, path));
    }
    states_ = std::make_unique<engine_states>(*ctx_);
    apply_capacity_default(*ctx_, model_, p_, store_, cp.n_seq, max_seq_tokens_, hybrid_);
    slots_.resize(static_cast<size_t>(p_.n_parallel));
    n_seq_ = cp.n_seq;
    if (const char * v = std::getenv("LINEAGE_CHECK_INVARIANTS"); v != nullptr && std::string_view(v) == "1") {
        check_invariants_ = true;
        spdlog::info("scheduler: checking the slots' and the cache's invariants after every step "
                     "(LINEAGE_CHECK_INVARIANTS=1)");
    }
    if (p_.cache.trace) {
        store_.trace().set_sink(cache::tracer::log_sink());
    }
    disk_ = std::make_unique<disk_link>(store_, *states_, p_.cache, m.path(), hybrid_);
    pool_ = std::make_unique<sequence_pool>(*states_, store_, cp.n_seq,
                                            [this](cache::disk_job j) { disk_->write(std::move(j)); });
    life_ = std::make_unique<lifecycle>(*states_, store_, *pool_, hybrid_);
    spdlog::info("scheduler: {} parallel sequences, {} parked on the device, {} tokens per sequence ({} KV pool "
                 "of {} tokens), batch {}, "
                 "cache {} ({} mode, {} family, RAM budget {:.1f} MiB)",
                 p_.n_parallel, p_.cache.device_slots, max_seq_tokens_, p_.kv_unified ? "one unified" : "per-sequence",
                 ctx_->n_ctx(), p_.n_batch,
                 p_.cache.enabled ? "on" : "off", p_.cache.lineage ? "lineage" : "exact",
                 hybrid_ ? "hybrid" : "dense", static_cast<double>(p_.cache.ram_bytes) / (1 << 20));
    thread_ = std::thread([this] { loop(); });
}

scheduler::impl::~impl() {
    stop();
    // The disk thread goes before the members its load callbacks touch (cv_, load_ready_).
    disk_->close();
}

void scheduler::impl::stop() {
    {
        util::lock_guard lk(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable() && std::this_thread::get_id() != thread_.get_id()) {
        thread_.join();
    }
}

void scheduler::impl::submit(std::shared_ptr<generation_request> req) {
    {
        util::lock_guard lk(mu_);
        if (!stopping_ && req->warmup) {
            if (p_.cache.enabled && p_.cache.warmup) {
                warmups_.push(std::move(req));
            }
            req = nullptr;  // nobody waits on a warm-up's events
        } else if (!stopping_) {
            queue_.push_back(std::move(req));
            req = nullptr;
        }
    }
    if (req) {
        generation_event e;
        e.type = generation_event::kind::error;
        e.failure = {failure_kind::shutting_down, "the server is shutting down; retry on another instance"};
        req->events->push(std::move(e));
        return;
    }
    cv_.notify_one();
}

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

void scheduler::impl::loop() {
    for (;;) {
        std::deque<std::function<void()>> tasks;
        std::deque<std::function<void()>> idle_tasks;
        std::deque<std::shared_ptr<generation_request>> admitted;
        std::shared_ptr<generation_request> warmup;
        bool preempt = false;
        {
            util::unique_lock lk(mu_);
            const bool computing = std::any_of(slots_.begin(), slots_.end(), [](const slot & s) {
                return s.ph == slot::phase::prefill || s.ph == slot::phase::decode;
            });
            const bool loading = std::any_of(slots_.begin(), slots_.end(),
                                             [](const slot & s) { return s.ph == slot::phase::loading; });
            const bool any_active = std::any_of(slots_.begin(), slots_.end(), [](const slot & s) { return s.active(); });
            if (!computing) {
                const auto until = clock::now() + (loading ? std::chrono::milliseconds(20) : std::chrono::milliseconds(1000));
                // An idle engine with a warm-up queued does not wait: it starts the warm-up.
                while (!stopping_ && queue_.empty() && tasks_.empty() && idle_tasks_.empty() && !load_ready_.load() &&
                       (warmups_.empty() || any_active)) {
                    if (lk.wait_until(cv_, until) == std::cv_status::timeout) {
                        break;
                    }
                }
            }
            if (stopping_) {
                break;
            }
            tasks.swap(tasks_);
            // Idle tasks (an adapter reload) wait for the slots to empty; no request is
            // admitted while one waits, so it cannot be starved.
            if (std::none_of(slots_.begin(), slots_.end(), [](const slot & s) { return s.active(); })) {
                idle_tasks.swap(idle_tasks_);
            }
            // New requests join between steps, as many as there are idle slots. One that repeats
            // a running request's prompt waits for that one's client to answer (the retry hold).
            const auto now = clock::now();
            for (auto & s : slots_) {
                if (!s.active() && !queue_.empty() && idle_tasks_.empty()) {
                    auto & r = *queue_.front();
                    if (retry_hold(slots_, r, now)) {
                        break;
                    }
                    if (r.held_since) {
                        spdlog::info("request {}: admitted after a {:.1f} ms retry hold (it repeats a running "
                                     "request's prompt)",
                                     r.id, std::chrono::duration<double, std::milli>(now - *r.held_since).count());
                    }
                    admitted.push_back(std::move(queue_.front()));
                    queue_.pop_front();
                }
            }
            // A warm-up yields to any foreground request (parking what it did), and starts only
            // on an idle engine: it never delays a request by more than the chunk in flight.
            preempt = !queue_.empty() || !admitted.empty();
            if (!preempt && !any_active && !warmups_.empty()) {
                warmup = warmups_.pop();
            }
        }
        for (auto & t : tasks) {
            t();
        }
        for (auto & t : idle_tasks) {
            t();
        }
        // A request whose client left is committed before new ones are planned: a retry sent
        // right after a dropped stream then finds what the dropped request had computed.
        for (auto & s : slots_) {
            if ((s.ph == slot::phase::prefill || s.ph == slot::phase::decode) && s.req->cancelled->load()) {
                finish(s, finish_reason::cancelled);
            }
        }
        for (auto & s : slots_) {
            if (preempt && s.active() && s.req->warmup) {
                end_warmup(s, /*whole=*/false);
            }
        }
        for (auto & r : admitted) {
            admit(std::move(r));
        }
        if (warmup) {
            admit(std::move(warmup));
        }
        poll_loads();
        const bool computing = std::any_of(slots_.begin(), slots_.end(), [](const slot & s) {
            return s.ph == slot::phase::prefill || s.ph == slot::phase::decode;
        });
        const bool busy = std::any_of(slots_.begin(), slots_.end(), [](const slot & s) { return s.active(); });
        if (computing) {
            step();
        } else if (!busy) {
            store_.expire(now_s());
            pool_->drain_released();
        }
        disk_->housekeeping(!busy, now_s());
        if (check_invariants_) {
            verify();
        }
    }
    // Shutdown: everything in flight or queued gets an error.
    for (auto & s : slots_) {
        if (s.active()) {
            fail(s, {failure_kind::shutting_down, "the server is shutting down"});
        }
    }
    util::lock_guard lk(mu_);
    for (auto & r : queue_) {
        generation_event e;
        e.type = generation_event::kind::error;
        e.failure = {failure_kind::shutting_down, "the server is shutting down"};
        r->events->push(std::move(e));
    }
    queue_.clear();
    for (auto & t : tasks_) {
        t();
    }
    tasks_.clear();
    for (auto & t : idle_tasks_) {
        t();
    }
    idle_tasks_.clear();
    disk_->flush(now_s(), [this] { pool_->drain_released(); });
}

void scheduler::impl::verify() const {
    try {
        check_invariants(slots_, n_seq_);
        store_.check_invariants();
    } catch (const std::logic_error & e) {
        spdlog::critical("invariant broken: {}", e.what());
        std::abort();
    }
}

void scheduler::impl::admit(std::shared_ptr<generation_request> req) {
    auto it = std::find_if(slots_.begin(), slots_.end(), [](const slot & s) { return !s.active(); });
    slot & s = *it;
    reset_slot(s);
    s.req = std::move(req);
    s.stats.prompt_tokens = s.prompt_size();
    s.stats.queue_s = seconds_since(s.req->submitted);
    if (s.req->prompt.empty() || s.prompt_size() >= max_seq_tokens_) {
        fail(s, {failure_kind::prompt_too_long,
                 "the prompt has " + std::to_string(s.prompt_size()) + " tokens; this server holds at most " +
                 std::to_string(max_seq_tokens_ - 1) + " per request"});
        return;
    }
    if (s.req->cancelled->load()) {
        finish(s, finish_reason::cancelled);
        return;
    }
    cache::trace_scope trace(store_.trace(), s.req->id);
    s.use_cache = p_.cache.enabled && s.req->cache.cache_prompt;
    s.key = {s.req->cache.bucket, s.req->cache.session_key, s.req->cache.dims};
    s.key.tenant = s.req->cache.tenant;
    if (s.use_cache && !s.req->lora.empty() && s.req->lora_epoch != lora_epoch_) {
        s.use_cache = false;
        store_.count_bypassed();
        LINEAGE_TRACE(store_.trace(), "cache bypassed (a LoRA adapter file was reloaded after this request was "
                      "keyed); {} prompt tokens to prefill", s.prompt_size());
    } else if (!s.use_cache) {
        store_.count_bypassed();
        LINEAGE_TRACE(store_.trace(), "cache bypassed ({}); {} prompt tokens to prefill",
                      p_.cache.enabled ? "cache_prompt=false" : "cache off", s.prompt_size());
    }
    if (s.req->warmup && store_.covers(s.key, s.req->prompt)) {
        // The committed entry already holds the next turn's prefix (a dense tool step whose
        // re-render is the generated text), or a later request got there first.
        store_.warmup_counters().skipped["not_needed"]++;
        LINEAGE_TRACE(store_.trace(), "warm-up of {} tokens not needed: an entry holds them", s.prompt_size());
        reset_slot(s);
        return;
    }
    const auto t0 = clock::now();
    cache::plan_hints hints{s.req->cache.anchor_tokens, s.req->cache.history_tokens, s.req->cache.tools_anchor_tokens,
                            s.req->cache.line_starts, s.req->cache.last_user_tokens};
    if (s.use_cache && s.req->warmup) {
        s.plan = store_.plan_warmup(s.key, s.req->prompt, hints, now_s());
    } else if (s.use_cache) {
        s.plan = store_.plan(s.key, s.req->prompt, hints, now_s(), s.req->cache.breakpoint_tokens);
    } else if (hybrid_) {
        // Split where a first request with the cache on would capture (nothing is captured):
        // Mamba2's chunked scan depends on the split, so cache off then computes as a miss.
        s.plan.captures = store_.cold_split_points(s.req->prompt, hints, s.req->cache.breakpoint_tokens);
    }
    s.stats.lookup_s = seconds_since(t0);
    if (s.plan.op == cache::restore_op::take_device) {
        s.seq = s.plan.device_seq;
    } else if (auto seq = pool_->acquire(s.plan.source)) {
        s.seq = *seq;
    } else {
        store_.abandon(s.plan, 0);
        fail(s, {failure_kind::no_free_sequence, "no free sequence: all are busy; retry shortly"});
        return;
    }
    const uint32_t seed = s.req->sampling.seed >= 0 ? static_cast<uint32_t>(s.req->sampling.seed)
                                                     : static_cast<uint32_t>(std::random_device{}());
    try {
        if (!s.req->warmup) {  // a warm-up samples nothing
            s.smpl = std::make_unique<engine::sampler>(model_, s.req->sampling.engine_params(seed));
        }
    } catch (const std::invalid_argument & e) {  // a grammar the routes could not check
        fail(s, {failure_kind::bad_grammar, e.what()});
        return;
    }
    s.restore_started = clock::now();
    if (s.plan.op == cache::restore_op::load_disk) {
        // The disk thread reads the file; the other slots keep computing meanwhile.
        s.ph = slot::phase::loading;
        s.load = disk_->load(s.plan.disk_file, s.key.bucket, s.req->prompt, s.plan.n_restore, [this] {
            load_ready_ = true;
            cv_.notify_one();
        });
        return;
    }
    start_prefill(s);
}

void scheduler::impl::end_warmup(slot & s, bool whole) {
    // What was prefilled is parked as the conversation's entry, a preempted part included.
    cache::trace_scope trace(store_.trace(), s.req->id);
    const int32_t at = s.n_past;
    const int32_t prefilled = std::max(0, s.n_past - s.stats.cached_tokens);
    if (s.ph == slot::phase::loading) {
        life_->abandon(s);  // preempted while its file was read: nothing computed yet
        s.load = {};        // the read's result is dropped
    } else {
        life_->commit(s, now_s());
    }
    auto & wc = store_.warmup_counters();
    (whole ? wc.runs : wc.preempted)++;
    LINEAGE_TRACE(store_.trace(), "warm-up {} at {}/{} tokens: restored {} ({}), prefilled {}",
                  whole ? "stored" : "preempted by a request, parked", at, s.prompt_size(), s.stats.cached_tokens,
                  s.stats.hit_kind, prefilled);
    spdlog::info("warm-up {}: {} | prefix {} tokens, cached {} ({}), prefilled {} | restore {:.1f} ms, prefill {:.1f} ms, "
                 "capture {:.1f} ms, commit {:.1f} ms | total {:.1f} ms",
                 s.req->id, whole ? "stored" : "preempted", s.prompt_size(), s.stats.cached_tokens, s.stats.hit_kind,
                 prefilled, s.stats.restore_s * 1e3, s.stats.prefill_s * 1e3, s.stats.capture_s * 1e3,
                 s.stats.commit_s * 1e3, seconds_since(s.restore_started) * 1e3);
    auto job = std::move(s.req);
    reset_slot(s);
    if (!whole && ++job->preemptions > max_warmup_preemptions) {
        wc.skipped["preempted_too_often"]++;  // its parked part still serves the next request
    } else if (!whole) {
        util::lock_guard lk(mu_);
        warmups_.push_front(std::move(job));  // resumes from what it parked on an idle engine
    }
}

void scheduler::impl::poll_loads() {
    load_ready_ = false;
    for (auto & s : slots_) {
        if (s.ph == slot::phase::loading && s.load.valid() &&
            s.load.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
            complete_load(s);
        }
    }
}

void scheduler::impl::complete_load(slot & s) {
    cache::trace_scope trace(store_.trace(), s.req->id);
    if (auto st = store_.disk_loaded(s.key, s.plan, s.load.get(), now_s()); !st) {
        spdlog::info("request {}: {}; prefilling cold", s.req->id, st.message());
    }
    pool_->drain_released();
    start_prefill(s);
}

void scheduler::impl::start_prefill(slot & s) {
    s.ph = slot::phase::prefill;
    life_->restore(s, now_s());
}

void scheduler::impl::step() {
    // Cancellation is checked between steps: a client that left costs at most one chunk.
    for (auto & s : slots_) {
        if (s.active() && s.req->cancelled->load()) {
            finish(s, finish_reason::cancelled);
        } else if (s.ph == slot::phase::decode && s.req->stop_requested->load()) {
            finish(s, finish_reason::stop);
        }
    }
    // One llama_decode applies one LoRA set: only the slots with the chosen set join this step.
    const std::vector<float> lora = next_lora_set(slots_, lora_turn_);
    std::vector<engine::batch_token> batch;
    int32_t budget = p_.n_batch;
    for (auto & s : slots_) {
        s.logits_idx = -1;
        s.chunk = 0;
        if (s.ph == slot::phase::decode && budget > 0 && s.req->lora == lora) {
            s.logits_idx = static_cast<int32_t>(batch.size());
            batch.push_back({s.pending, s.n_past, s.seq, true});
            budget--;
        }
    }
    for (auto & s : slots_) {
        if (s.ph != slot::phase::prefill || budget <= 0 || s.req->lora != lora) {
            continue;
        }
        // The chunk ends exactly at the next capture point so the state there can be taken.
        const int32_t n = std::min(budget, s.next_stop() - s.n_past);
        for (int32_t i = 0; i < n; ++i) {
            const int32_t pos = s.n_past + i;
            const bool last = pos + 1 == s.prompt_size() && !s.req->warmup;  // a warm-up samples nothing
            if (last) {
                s.logits_idx = static_cast<int32_t>(batch.size());
            }
            batch.push_back({s.req->prompt[static_cast<size_t>(pos)], pos, s.seq, last});
        }
        s.chunk = n;
        budget -= n;
    }
    if (batch.empty()) {
        return;
    }
    if (lora != applied_lora_) {
        std::vector<const engine::lora_adapter *> adapters;
        for (const auto & a : loras_) {
            adapters.push_back(a.get());
        }
        ctx_->set_loras(adapters, lora);
        applied_lora_ = lora;
    }
    const auto t0 = clock::now();
    engine::decode_result rc = ctx_->decode(batch);
    while (rc == engine::decode_result::no_kv_space && pool_->demote_one(0)) {
        rc = ctx_->decode(batch);  // parked sequences left the device: try again
    }
    const double dt = seconds_since(t0);
    if (rc != engine::decode_result::ok) {
        const bool full = rc == engine::decode_result::no_kv_space;
        for (auto & s : slots_) {
            if (s.active() && (s.chunk > 0 || s.logits_idx >= 0)) {
                fail(s, full ? request_failure{failure_kind::kv_full,
                                               "the KV cache is full with the requests in flight; retry, or raise "
                                               "--ctx-size"}
                             : request_failure{failure_kind::decode_failed, "the engine failed to decode the batch"});
            }
        }
        return;
    }
    for (auto & s : slots_) {
        if (s.ph == slot::phase::prefill && s.chunk > 0) {
            s.stats.prefill_s += dt;
            s.n_past += s.chunk;
            if (s.req->warmup) {
                store_.warmup_counters().tokens += s.chunk;
            }
            after_prefill_chunk(s);
        } else if (s.ph == slot::phase::decode && s.logits_idx >= 0) {
            s.n_past += 1;
            emit(s, s.smpl->sample(*ctx_, s.logits_idx, s.req->sampling.logprobs));
        }
    }
}

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
    emit(s, s.smpl->sample(*ctx_, s.logits_idx, s.req->sampling.logprobs));
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
    } else if (s.n_past + 1 >= max_seq_tokens_) {
        finish(s, finish_reason::length);
    }
}

void scheduler::impl::finish(slot & s, finish_reason why) {
    s.stats.completion_tokens = static_cast<int32_t>(s.generated.size());
    if (s.ph == slot::phase::decode) {
        s.stats.decode_s = seconds_since(s.first_token_at);
    }
    life_->commit(s, now_s());
    record(s, why);
    generation_event e;
    e.type = generation_event::kind::done;
    e.finish = why;
    e.stats = s.stats;
    const auto & st = s.stats;
    spdlog::info("request {}: {} | prompt {} tokens, cached {} ({}), completion {} | lookup {:.1f} ms, restore {:.1f} "
                 "ms, prefill {:.1f} ms, capture {:.1f} ms, commit {:.1f} ms | TTFT {:.1f} ms, decode {:.1f} tok/s",
                 s.req->id, to_string(why), st.prompt_tokens, st.cached_tokens, st.hit_kind, st.completion_tokens,
                 st.lookup_s * 1e3, st.restore_s * 1e3, st.prefill_s * 1e3, st.capture_s * 1e3, st.commit_s * 1e3,
                 st.ttft_s * 1e3,
                 st.decode_s > 0 && st.completion_tokens > 1 ? (st.completion_tokens - 1) / st.decode_s : 0.0);
    s.req->events->push(std::move(e));
    reset_slot(s);
}

void scheduler::impl::fail(slot & s, request_failure why) {
    life_->abandon(s);
    if (s.req && s.req->warmup) {
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
    // rest is decode) from the restore point.
    s.stats.prefilled_tokens = std::max(0, std::min(s.n_past, s.prompt_size()) - s.stats.cached_tokens);
    metrics_.record(s.stats, why, s.use_cache, s.req ? s.req->cache.tenant : std::string());
}

void scheduler::impl::reset_slot(slot & s) {
    s.ph = slot::phase::idle;
    s.req.reset();
    s.seq = -1;
    s.n_past = 0;
    s.use_cache = false;
    s.plan = cache::restore_plan{};
    s.next_capture = 0;
    s.captured.clear();
    s.prompt_end_recurrent.reset();
    s.reserved_bytes = 0;
    s.smpl.reset();
    s.logits_idx = -1;
    s.chunk = 0;
    s.pending = -1;
    s.generated.clear();
    s.stats = request_stats{};
}

// --- public API ---

scheduler::scheduler(const engine::model & m, const params & p) : impl_(std::make_unique<impl>(m, p)) {}

scheduler::~scheduler() = default;

void scheduler::submit(std::shared_ptr<generation_request> req) {
    impl_->submit(std::move(req));
}

int32_t scheduler::max_sequence_tokens() const {
    return impl_->max_seq_tokens_;
}

cache::stats scheduler::snapshot_stats() {
    return impl_->run_on_engine([this] {
        cache::stats s = impl_->store_.get_stats();
        {
            util::lock_guard lk(impl_->mu_);
            const auto & q = impl_->warmups_;
            s.warmup.queued = q.received;
            s.warmup.active = std::count_if(impl_->slots_.begin(), impl_->slots_.end(),
                                            [](const slot & x) { return x.active() && x.req->warmup; });
            s.warmup.skipped["replaced"] += q.replaced;
            s.warmup.skipped["queue_full"] += q.dropped;
        }
        if (auto * d = impl_->disk_->tier()) {
            s.disk = d->get_stats();
            s.bytes["disk"] = s.disk.bytes;
        }
        return s;
    });
}

metrics_snapshot scheduler::snapshot_metrics() const {
    return impl_->metrics_.snapshot();
}

cache::reset_result scheduler::reset_cache() {
    return impl_->run_on_engine([this] {
        auto r = impl_->store_.reset();
        impl_->pool_->drain_released();
        if (auto * d = impl_->disk_->tier()) {
            std::tie(r.disk_files_freed, r.disk_bytes_freed) = d->reset();
            d->take_completions();  // writes finished before the reset: their files are gone
        }
        spdlog::info("cache: reset freed {} entries, {} bytes", r.entries_freed, r.bytes_freed);
        return r;
    });
}

cache::reset_result scheduler::reset_cache_of(const std::string & tenant) {
    return impl_->run_on_engine([this, &tenant] {
        auto r = impl_->store_.reset_if([&](const cache::key & k) { return k.tenant == tenant; });
        impl_->pool_->drain_released();
        spdlog::info("cache: reset of tenant {} freed {} entries, {} bytes", tenant, r.entries_freed, r.bytes_freed);
        return r;
    });
}

std::string scheduler::reload_lora(size_t id, uint64_t epoch) {
    return impl_->run_on_engine(
        [this, id, epoch]() -> std::string {
            auto & slot_adapter = impl_->loras_.at(id);
            std::unique_ptr<engine::lora_adapter> fresh;
            try {
                fresh = std::make_unique<engine::lora_adapter>(impl_->model_, slot_adapter->path());
            } catch (const std::exception & e) {
                return e.what();
            }
            // The context must not point at the adapter freed below: back to the base model.
            impl_->ctx_->set_loras({}, {});
            impl_->applied_lora_.clear();
            slot_adapter = std::move(fresh);
            impl_->lora_epoch_ = epoch;
            spdlog::info("lora: adapter {} reloaded from {} (generation {})", id, slot_adapter->path(), epoch);
            return "";
        },
        /*when_idle=*/true);
}

void scheduler::stop() {
    impl_->stop();
}

}  // namespace lineage::scheduler
