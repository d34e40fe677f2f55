// scheduler: the engine thread: its loop, admission, the batched step and finishing. The
// rest sits behind narrow seams: settings.h (parameters in effect), sequence_pool.h (sequence
// ids, demotion), lifecycle.h (restore, capture, commit over sequence_states), tier_link.h
// (tier 2). See scheduler.h for the contract, docs/architecture.md for the map.
#include "scheduler/scheduler_impl.h"

#include "cache/blob_pool.h"
#include "engine/resident.h"
#include "scheduler/prefill_order.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <limits>

namespace lineage::scheduler {

namespace {

// The resend guard by rollback (config.h) is asked for and possible: one recurrent-state
// snapshot per sequence. llama.cpp keeps the last (1 + n_rs_seq) tokens of a sequence in one
// ubatch: n_ubatch > 2. With the cache off a prefill computes what a first request with it on
// does: the same.
bool wants_rollback(const params & p, bool hybrid) {
    return hybrid && p.cache.lineage && p.cache.resend_checkpoint && p.cache.guard_rollback &&
           std::min(p.n_ubatch, p.n_batch) > 2;
}

// The context of `p` (n_ctx resolved): n_seq sequences (live and parked) of max_seq_tokens each.
engine::context_params context_params_of(const params & p, int32_t max_seq_tokens, bool want_rollback) {
    engine::context_params cp;
    cp.n_seq = p.n_parallel + p.cache.device_slots;
    // Every sequence (live or parked) can hold max_seq_tokens: per-sequence buffers split
    // the pool evenly; a unified pool of the same size lets one sequence take more.
    cp.n_ctx = max_seq_tokens * cp.n_seq;
    // A step asks for one logits row per sequence at most (step(): the last prompt token or the
    // decoded one), as llama-server's --parallel: llama.cpp then sizes its prefill graph's
    // compute buffer for that many rows, not n_batch (engine/context.h).
    cp.n_outputs_max = cp.n_seq;
    cp.kv_unified = p.kv_unified;
    cp.n_batch = p.n_batch;
    cp.n_ubatch = p.n_ubatch;
    cp.n_threads = p.n_threads;
    cp.n_threads_batch = p.n_threads_batch;
    cp.flash_attn = p.flash_attn;
    cp.type_k = p.type_k;
    cp.type_v = p.type_v;
    cp.n_rs_seq = want_rollback ? 1 : 0;
    return cp;
}

// Says how the resend guard is taken: by rollback (`taken`), or why --cache-guard-rollback
// has no effect.
void log_guard_rollback(bool taken, bool wanted, const params & p, bool hybrid) {
    if (taken) {
        spdlog::info("scheduler: the resend guard (prompt - 1) is taken by rolling the recurrent state back after "
                     "the prefill (--cache-guard-rollback): no prefill split there");
    } else if (wanted) {
        spdlog::info("scheduler: --cache-guard-rollback: llama.cpp cannot roll this architecture's recurrent state "
                     "back; the resend guard splits the prefill (one more forward pass per request)");
    } else if (p.cache.guard_rollback) {
        spdlog::info("scheduler: --cache-guard-rollback has no effect here: {}",
                     !hybrid ? "a dense model restores any prefix, it takes no resend guard"
                     : !p.cache.lineage ? "exact mode takes no checkpoints"
                     : !p.cache.resend_checkpoint ? "--cache-resend-checkpoint is off"
                                                  : "llama.cpp needs --ubatch-size and --batch-size above 2 for it");
    }
}

// A reply comes back as text: how much of it tokenizes back to the decoded tokens (none when
// the tokenizer fails: no reply checkpoint is kept then).
int32_t tokens_kept_as_text(const engine::model & m, const cache::tokens & generated) {
    const auto text = m.detokenize(generated, true);
    const auto again = text ? m.tokenize(*text, true, false) : util::expected<cache::tokens>(text.error());
    if (!again) {
        spdlog::warn("reply checkpoints: the reply could not be tokenized again ({}); none kept",
                     again.error().message());
        return 0;
    }
    const auto [a, b] = std::mismatch(generated.begin(), generated.end(), again->begin(), again->end());
    return static_cast<int32_t>(a - generated.begin());
}

}  // namespace

scheduler::impl::impl(const engine::model & m, const params & p)
    : model_(m),
      p_(with_device_settings(with_family_settings(p, m.family() != engine::memory_family::dense), m.offloaded())),
      hybrid_(m.family() != engine::memory_family::dense),
      max_seq_tokens_(0),
      store_(p_.cache, m.family() != engine::memory_family::dense) {
    if (p_.n_ctx <= 0) {
        p_.n_ctx = default_n_ctx(m);
    }
    max_seq_tokens_ = m.n_ctx_train() > 0 ? std::min(p_.n_ctx, m.n_ctx_train()) : p_.n_ctx;
    const bool want_rollback = wants_rollback(p_, hybrid_);
    engine::context_params cp = context_params_of(p_, max_seq_tokens_, want_rollback);
    // The memory plan, before the pool is allocated: a plan that does not fit refuses the start.
    // The probe decodes two tokens on a thread of its own that ends there, never on the
    // caller's: with an OpenMP build of ggml the first thread that computes keeps a pool of
    // OpenMP workers for life, and a second computing thread (the engine thread) adds its own.
    // libgomp then manages more threads than there are CPUs and throttles its spin-waits to ~100
    // iterations, so every ggml barrier sleeps in futex (docs/architecture.md "One computing
    // thread"). A thread that ends gives its pool back.
    const auto sizes = probe_state_sizes(m, cp);
    if (sizes) {
        const memory_plan plan = plan_of(m, p_, *sizes, max_seq_tokens_, p_.cache.device_slots);
        if (const util::status why = refusal(plan); !why.is_ok()) {
            throw std::runtime_error(why.message());
        }
    } else {
        spdlog::warn("memory plan: the state sizes could not be measured; no plan checked");
    }
    // On the CPU alone: the probe's decode has just read every weight. Unmapped now (they stay in
    // the page cache), they are not resident while llama.cpp clears the KV buffers below, so the
    // process's peak RSS is not the weights and the whole cleared KV at once; once the new
    // context's zero pages are given back, they are mapped again (engine/resident.h).
    uint64_t unmapped = 0;
    if (!m.offloaded()) {
        unmapped = engine::unmap_file_pages(m.path());
        if (unmapped > 0) {
            spdlog::info(
                "engine: {:.1f} MiB of model weights read by the memory probe unmapped while the context is "
                "created (in the page cache meanwhile)",
                static_cast<double>(unmapped) / (1 << 20));
        }
    }
    // On the CPU alone the KV cache is host memory that llama.cpp clears at its whole size: its
    // zero pages go back to the kernel, and RSS grows as tokens are written (engine/resident.h).
    cp.release_zero_pages = !m.offloaded();
    // A parked sequence shared into another is then copied at its used length, not as its whole
    // buffer, which would make the destination's whole --ctx-size of KV resident again
    // (engine::context_params::share_by_state_copy).
    cp.share_by_state_copy = !m.offloaded();
    ctx_ = std::make_unique<engine::context>(m, cp);
    if (ctx_->released_zero_bytes() > 0) {
        spdlog::info("engine: {:.1f} MiB of the context's buffers (KV cache, recurrent state) were still zero and went "
                     "back to the kernel: RSS counts them as tokens are written",
                     static_cast<double>(ctx_->released_zero_bytes()) / (1 << 20));
    }
    if (unmapped > 0 && m.repacked()) {
        // Most weights were copied into the extra buffer types: a pass reads few file pages, and
        // mapping every tensor's range again would hold the weights twice.
        spdlog::info("engine: the weights are in llama.cpp's extra CPU buffer types (--repack): the few a pass "
                     "reads from the file are mapped as it reads them");
    } else if (unmapped > 0) {
        // The weights every pass reads, mapped now rather than by the first request's first pass,
        // a page fault a page (engine/resident.h map_file_ranges).
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<engine::file_range> weights;
        for (const auto & [begin, end] : m.pass_weight_ranges()) {
            weights.push_back({begin, end});
        }
        const uint64_t mapped = engine::map_file_ranges(m.path(), weights);
        spdlog::info("engine: {:.1f} MiB of model weights mapped again in {:.1f} ms",
                     static_cast<double>(mapped) / (1 << 20),
                     std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    guard_rollback_ = want_rollback && ctx_->rollback_depth() >= 1;
    log_guard_rollback(guard_rollback_, want_rollback, p_, hybrid_);
    for (const auto & path : p_.lora_paths) {
        loras_.push_back(std::make_unique<engine::lora_adapter>(m, path));
    }
    states_ = std::make_unique<engine_states>(*ctx_);
    apply_capacity_default(sizes, model_, p_, store_, cp.n_seq, max_seq_tokens_, hybrid_);
    if (sizes) {
        spdlog::info("{}", describe(plan_of(m, p_, *sizes, max_seq_tokens_, p_.cache.device_slots)));
    }
    // Freed state buffers are recycled for the next captures (cache/blob_pool.h): at most 8 idle,
    // 64 MiB or 1/16 of the RAM budget where that is more, each for at most a minute.
    cache::blob_pool::instance().configure(8, std::max<uint64_t>(64ull << 20, store_.budget() / 16), 60.0);
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
    tiers_ = std::make_unique<tier_link>(store_, *states_, p_.cache, m.path(), hybrid_);
    pool_ = std::make_unique<sequence_pool>(*states_, store_, cp.n_seq,
                                            [this](cache::tier_job j) { tiers_->write(std::move(j)); });
    life_ = std::make_unique<lifecycle>(*states_, store_, *pool_, hybrid_, [this](const cache::tokens & generated) {
        return tokens_kept_as_text(model_, generated);
    });
    life_->on_rungs_owed([this](const slot & s, cache::tokens anchor, std::vector<int32_t> rungs) {
        queue_ladder_job(s, std::move(anchor), std::move(rungs));
    });
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
    tiers_->close();
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
    if (!req->cache.reset_epoch) {
        req->cache.reset_epoch = resets_.load();
    }
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
            serving_.store(true);
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

void scheduler::impl::loop() {
    for (;;) {
        loop_round round;
        {
            util::unique_lock lk(mu_);
            if (!take_round(lk, round)) {
                break;  // stopping
            }
        }
        run_round(round);
    }
    shut_down();
}

bool scheduler::impl::take_round(util::unique_lock & lk, loop_round & round) {
    const bool computing = std::any_of(slots_.begin(), slots_.end(), [](const slot & s) {
        return s.ph == slot::phase::prefill || s.ph == slot::phase::decode;
    });
    const bool loading = std::any_of(slots_.begin(), slots_.end(),
                                     [](const slot & s) { return s.ph == slot::phase::loading; });
    const bool any_active = std::any_of(slots_.begin(), slots_.end(), [](const slot & s) { return s.active(); });
    if (!computing) {
        auto until = clock::now() + (loading ? std::chrono::milliseconds(20) : std::chrono::milliseconds(1000));
        if (!ladder_jobs_.empty() && !any_active) {
            until = std::min(until, std::max(clock::now(), ladder_not_before_));
        }
        // An idle engine with a warm-up queued does not wait: it starts the warm-up (a ladder
        // job once ladder_idle_delay has passed since the last request).
        while (!stopping_ && queue_.empty() && tasks_.empty() && idle_tasks_.empty() && !load_ready_.load() &&
               ((warmups_.empty() && (ladder_jobs_.empty() || clock::now() < ladder_not_before_)) || any_active)) {
            if (lk.wait_until(cv_, until) == std::cv_status::timeout) {
                break;
            }
        }
    }
    if (stopping_) {
        return false;
    }
    round.tasks.swap(tasks_);
    // Idle tasks (an adapter reload) wait for the slots to empty; no request is
    // admitted while one waits, so it cannot be starved.
    if (std::none_of(slots_.begin(), slots_.end(), [](const slot & s) { return s.active(); })) {
        round.idle_tasks.swap(idle_tasks_);
    }
    round.admitted = select_admitted();
    // A warm-up yields to any foreground request (parking what it did), and starts only
    // on an idle engine: it never delays a request by more than the chunk in flight.
    round.preempt = !queue_.empty() || !round.admitted.empty();
    round.preempt_ladder = !warmups_.empty();
    // Each request admitted this round counts the others admitted with it as waiting.
    queued_after_round_ = queue_.size() + (round.admitted.empty() ? 0 : round.admitted.size() - 1);
    if (!round.preempt && !any_active && !warmups_.empty()) {
        round.warmup = warmups_.pop();
    } else if (!round.preempt && !any_active && !ladder_jobs_.empty() && clock::now() >= ladder_not_before_) {
        round.warmup = std::move(ladder_jobs_.front());
        ladder_jobs_.pop_front();
    }
    return true;
}

namespace {

/** Logs what held `r` before its admission now (a retry hold, a prefix hold: info, in ms) and
 *  how many earlier requests it goes ahead of (`ahead`; debug). Engine thread, under mu_. */
void log_admission(const generation_request & r, clock::time_point now, std::ptrdiff_t ahead) {
    if (r.held_since) {
        spdlog::info("request {}: admitted after a {:.1f} ms retry hold (it repeats a running "
                     "request's prompt)",
                     r.id, std::chrono::duration<double, std::milli>(now - *r.held_since).count());
    }
    if (r.prefix_held_since) {
        spdlog::info("request {}: admitted after a {:.1f} ms prefix hold (a running request computed "
                     "the prefix it shares)",
                     r.id, std::chrono::duration<double, std::milli>(now - *r.prefix_held_since).count());
    }
    if (ahead > 0) {
        spdlog::debug("request {}: admitted ahead of {} earlier request(s): fewer tokens to compute", r.id,
                      ahead);
    }
}

}  // namespace

std::deque<std::shared_ptr<generation_request>> scheduler::impl::select_admitted() {
    std::deque<std::shared_ptr<generation_request>> admitted;
    // New requests join between steps, as many as there are idle slots. One that repeats
    // a running request's prompt waits for that one's client to answer (the retry hold).
    // One that shares a prefix with a request still prefilling it waits for that one to
    // compute it (the prefix hold) and lets the requests behind it go first.
    const auto now = clock::now();
    // In admission order (admission.h): the fewest tokens left to compute first, a request
    // passed over max_passed_over times before all.
    const bool idle_slot = idle_tasks_.empty() &&
                           std::any_of(slots_.begin(), slots_.end(), [](const slot & s) { return !s.active(); });
    const int32_t long_tokens = long_prefill_batches * p_.n_batch;
    queue_ranking q;
    if (idle_slot && !queue_.empty()) {
        q = rank_queue(long_tokens);
    }
    std::vector<bool> taken(queue_.size(), false);
    size_t next = 0;
    for (auto & s : slots_) {
        if (s.active() || !idle_tasks_.empty()) {
            continue;
        }
        while (next < q.order.size()) {
            auto & r = *queue_[q.order[next]];
            if (retry_hold(slots_, r, now)) {
                next = q.order.size();
                break;
            }
            if (held_for_prefix(r, q.stored[q.order[next]], now) || shares_with(admitted, r)) {
                ++next;  // a request admitted this round shares its prefix: decided next round
                continue;
            }
            const int64_t cost = q.new_tokens[q.order[next]];
            if (admission_blocked(cost, long_tokens, q.long_running, static_cast<int32_t>(slots_.size()))) {
                ++next;  // a long prefill runs already: the free slot waits for shorter requests
                continue;
            }
            q.long_running += cost > long_tokens ? 1 : 0;
            log_admission(r, now,
                          std::count(taken.begin(), taken.begin() + static_cast<std::ptrdiff_t>(q.order[next]), false));
            taken[q.order[next]] = true;
            admitted.push_back(queue_[q.order[next]]);
            ++next;
            break;
        }
    }
    if (std::find(taken.begin(), taken.end(), true) != taken.end()) {
        drop_admitted(taken);
    }
    return admitted;
}

scheduler::impl::queue_ranking scheduler::impl::rank_queue(int32_t long_tokens) {
    queue_ranking q;
    q.new_tokens.reserve(queue_.size());
    q.stored.reserve(queue_.size());
    for (const auto & r : queue_) {
        q.stored.push_back(p_.cache.enabled ? store_.longest_match(r->cache.bucket, r->prompt) : 0);
        q.new_tokens.push_back(static_cast<int64_t>(r->prompt.size()) - (r->cache.cache_prompt ? q.stored.back() : 0));
    }
    q.order = admission_order(queue_, q.new_tokens);
    for (const auto & s : slots_) {
        q.long_running += s.ph == slot::phase::prefill && s.req && !s.req->warmup &&
                                  s.prompt_size() - s.n_past > long_tokens
                              ? 1
                              : 0;
    }
    return q;
}

void scheduler::impl::drop_admitted(const std::vector<bool> & taken) {
    count_passed_over(queue_, taken);
    std::deque<std::shared_ptr<generation_request>> rest;
    for (size_t i = 0; i < queue_.size(); ++i) {
        if (!taken[i]) {
            rest.push_back(std::move(queue_[i]));
        }
    }
    queue_.swap(rest);
}

void scheduler::impl::run_round(loop_round & round) {
    for (auto & t : round.tasks) {
        t();
    }
    for (auto & t : round.idle_tasks) {
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
        if ((round.preempt || (round.preempt_ladder && s.active() && s.req->ladder())) && s.active() && s.req->warmup) {
            end_warmup(s, /*whole=*/false);
        }
    }
    for (auto & r : round.admitted) {
        admit(std::move(r));
    }
    if (round.warmup) {
        admit(std::move(round.warmup));
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
        cache::blob_pool::instance().trim();
    }
    tiers_->housekeeping(!busy, now_s());
    if (check_invariants_) {
        verify();
    }
    {
        util::lock_guard lk(mu_);
        serving_.store(!queue_.empty() || std::any_of(slots_.begin(), slots_.end(),
                                                      [](const slot & s) { return s.active() && !s.req->warmup; }));
        if (serving_.load()) {
            ladder_not_before_ = clock::now() + ladder_idle_delay;
        }
    }
}

void scheduler::impl::shut_down() {
    // Shutdown: everything in flight or queued gets an error. What a running request computed
    // is committed first, as for a client that left: one that continued its conversation's
    // entry holds the only copy of it, and the flush below writes only what the store holds.
    for (auto & s : slots_) {
        if (s.active()) {
            if (s.req->ladder()) {
                life_->commit_rungs(s, now_s());  // the rungs made so far join their anchor
            } else if (s.ph == slot::phase::prefill || s.ph == slot::phase::decode) {
                life_->commit(s, now_s());  // leaves s.seq -1: fail() then abandons nothing
            }
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
    tiers_->flush(now_s(), [this] { pool_->drain_released(); });
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
    s.stats.prepared = s.req->prepared;
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
    cache::trace_scope trace(store_.trace(), s.req->id, s.req->warmup);
    if (s.req->preemptions == 0) {  // a resumed warm-up was prepared once, before its first run
        LINEAGE_TRACE(store_.trace(), "prepared: renders {}, tokenizations {}", s.req->prepared.renders,
                      s.req->prepared.tokenizations);
    }
    if (!choose_cache_use(s)) {
        return;
    }
    plan_restore(s);
    start_restore(s);
}

bool scheduler::impl::choose_cache_use(slot & s) {
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
    if (s.use_cache && reset_since(*s.req)) {
        if (s.req->ladder()) {
            store_.count_deferred_rungs("dropped", static_cast<int64_t>(s.req->ladder_rungs.size()));
            end_rung_hold(*s.req);
            LINEAGE_TRACE(store_.trace(), "ladder job dropped: the cache was reset after its anchor was pinned");
            reset_slot(s);
            return false;
        }
        if (s.req->warmup) {
            // Queued (or rendered) before a reset of its scope: what it would store is what the
            // reset removed.
            store_.warmup_counters().skipped["reset"]++;
            LINEAGE_TRACE(store_.trace(), "warm-up of {} tokens dropped: the cache was reset after its reply",
                          s.prompt_size());
            reset_slot(s);
            return false;
        }
        s.use_cache = false;
        store_.count_bypassed();
        LINEAGE_TRACE(store_.trace(), "cache bypassed (the cache was reset after this request arrived: nothing it "
                      "computes is stored); {} prompt tokens to prefill", s.prompt_size());
    }
    if (s.req->ladder()) {
        if (!store_.holds_anchor(s.key, *s.req->ladder_anchor)) {
            store_.count_deferred_rungs("dropped", static_cast<int64_t>(s.req->ladder_rungs.size()));
            end_rung_hold(*s.req);
            LINEAGE_TRACE(store_.trace(), "ladder job dropped: the anchor at {} tokens is gone",
                          s.req->ladder_anchor->size());
            reset_slot(s);
            return false;
        }
        return true;
    }
    if (s.req->warmup && store_.covers(s.key, s.req->prompt)) {
        // The committed entry already holds the next turn's prefix (a dense tool step whose
        // re-render is the generated text), or a later request got there first.
        store_.warmup_counters().skipped["not_needed"]++;
        LINEAGE_TRACE(store_.trace(), "warm-up of {} tokens not needed: an entry holds them", s.prompt_size());
        reset_slot(s);
        return false;
    }
    return true;
}

void scheduler::impl::plan_restore(slot & s) {
    const auto t0 = clock::now();
    std::vector<cache::token_span> media;
    for (const auto & m : s.req->media) {
        media.push_back(m.span);
    }
    cache::plan_hints hints{s.req->cache, media};  // the prompt's hints, as prepared, and its images
    hints.skip_tier = s.skip_tier;
    std::vector<cache::live_state> live;
    if (s.use_cache && !s.req->warmup && media.empty()) {
        live = live_states(s);
        hints.live = live;
    }

    if (s.use_cache && s.req->ladder()) {
        // One stretch of rungs: from the latest held state before the first, through those
        // before the next held state (store::plan_ladder_job); the prompt ends at its last rung.
        s.plan = store_.plan_ladder_job(s.key, *s.req->ladder_anchor, s.req->ladder_rungs);
        const int32_t end = s.plan.captures.empty() ? s.plan.n_restore : s.plan.captures.back().n_tokens;
        s.req->prompt.assign(s.req->ladder_anchor->begin(), s.req->ladder_anchor->begin() + std::max(1, end));
    } else if (s.use_cache && s.req->warmup) {
        s.plan = store_.plan_warmup(s.key, s.req->prompt, hints, now_s());
    } else if (s.use_cache) {
        s.plan = store_.plan(s.key, s.req->prompt, hints, now_s());
    } else if (hybrid_) {
        // Split where a first request with the cache on would capture (nothing is captured):
        // Mamba2's chunked scan depends on the split, so cache off then computes as a miss.
        s.plan.captures = store_.cold_split_points(s.req->prompt, hints);
    }
    s.stats.lookup_s = seconds_since(t0);
    // A warm-up samples nothing (its guard splits); a bypass rolls back as a miss does.
    s.guard_rollback = guard_rollback_ && !s.req->warmup;
    if (cache::clamp_to_spans(media, s.plan.n_restore) != s.plan.n_restore) {
        // Cannot happen (an image's pseudo-tokens match whole or part at its start, and no
        // point is captured inside one); an engine cannot resume half-way through an image.
        spdlog::error("request {}: restore point {} inside an image; prefilling cold", s.req->id, s.plan.n_restore);
        store_.abandon(s.plan, 0);
        s.plan = cache::cold_plan(std::move(s.plan));
    }
}

void scheduler::impl::start_restore(slot & s, bool again) {
    if (s.plan.op == cache::restore_op::take_device) {
        s.seq = s.plan.device_seq;
    } else if (auto seq = acquire_sequence(s)) {
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
    if (!again) {
        s.restore_started = clock::now();
    }
    if (s.plan.op == cache::restore_op::load_tier) {
        // The tier's thread reads the copy; the other slots keep computing meanwhile.
        s.ph = slot::phase::loading;
        s.load = tiers_->load(s.plan.tier, s.plan.tier_copy, s.key.bucket, s.req->prompt, s.plan.n_restore,
                              store_.checkpoints_to_read(s.plan), [this] {
                                  load_ready_ = true;
                                  cv_.notify_one();
                              });
        return;
    }
    start_prefill(s);
}

bool scheduler::impl::reset_since(const generation_request & r) const {
    const uint64_t at = r.cache.reset_epoch.value_or(0);
    if (at < last_full_reset_) {
        return true;
    }
    const auto it = tenant_resets_.find(r.cache.tenant);
    return it != tenant_resets_.end() && at < it->second;
}

void scheduler::impl::fence_reset(const std::optional<std::string> & tenant) {
    for (auto & s : slots_) {
        if (!s.active() || !s.use_cache || s.reset_since || (tenant && s.req->cache.tenant != *tenant)) {
            continue;
        }
        cache::trace_scope trace(store_.trace(), s.req->id, s.req->warmup);
        if (s.req->ladder()) {
            store_.count_deferred_rungs("dropped", static_cast<int64_t>(s.req->ladder_rungs.size()));
            end_rung_hold(*s.req);
        } else if (s.req->warmup) {
            store_.warmup_counters().skipped["reset"]++;
        }
        if (s.req->warmup) {
            LINEAGE_TRACE(store_.trace(), "warm-up dropped at {}/{} tokens: the cache was reset", s.n_past,
                          s.prompt_size());
            life_->abandon(s);
            s.load = {};  // a read in flight: its result is dropped
            reset_slot(s);
            continue;
        }
        // Served to the end; nothing it computed (a read in flight included) is stored.
        s.reset_since = true;
        LINEAGE_TRACE(store_.trace(), "the cache was reset at {}/{} tokens: this request stores nothing", s.n_past,
                      s.prompt_size());
    }
}

void scheduler::impl::queue_ladder_job(const slot & s, cache::tokens anchor, std::vector<int32_t> rungs) {
    auto job = std::make_shared<generation_request>();
    job->id = 0;  // not a request: its log lines and trace must not be read as the pinning request's
    job->cache = s.req->cache;
    job->lora = s.req->lora;
    job->lora_epoch = s.req->lora_epoch;
    job->warmup = true;
    job->prompt = anchor;
    job->ladder_anchor = std::make_shared<const cache::tokens>(std::move(anchor));
    job->ladder_rungs = std::move(rungs);
    store_.hold_for_rungs(s.key, *job->ladder_anchor, true);
    util::lock_guard lk(mu_);
    ladder_jobs_.push_back(std::move(job));
}

void scheduler::impl::end_rung_hold(const generation_request & job) {
    cache::key k{job.cache.bucket, job.cache.session_key, job.cache.dims};
    k.tenant = job.cache.tenant;
    store_.hold_for_rungs(k, *job.ladder_anchor, false);
}

void scheduler::impl::end_ladder_job(slot & s, bool whole) {
    cache::trace_scope trace(store_.trace(), s.req->id, s.req->warmup);
    const int32_t at = s.n_past;
    const int32_t prefilled = std::max(0, s.n_past - s.stats.cached_tokens);
    const auto made = static_cast<int32_t>(s.captured.size());
    if (s.ph == slot::phase::loading) {
        life_->abandon(s);
        s.load = {};
    } else {
        life_->commit_rungs(s, now_s());
    }
    auto job = std::move(s.req);
    // Made, or passed over (no RAM for them): either way not made again.
    std::erase_if(job->ladder_rungs, [&](int32_t r) { return r <= at; });
    spdlog::info(
        "ladder job: {} at {}/{} tokens: restored {} ({}), prefilled {}, {} rung(s) made, {} "
        "left | restore {:.1f} ms, prefill {:.1f} ms, capture {:.1f} ms | total {:.1f} ms",
        whole ? "stretch done" : "preempted by a request", at, job->ladder_anchor->size(), s.stats.cached_tokens,
        s.stats.hit_kind, prefilled, made, job->ladder_rungs.size(), s.stats.restore_s * 1e3, s.stats.prefill_s * 1e3,
        s.stats.capture_s * 1e3, seconds_since(s.restore_started) * 1e3);
    reset_slot(s);
    if (job->ladder_rungs.empty()) {
        end_rung_hold(*job);
        return;
    }
    // A run that made a rung kept it (the next restores it): only runs preempted before their
    // first rung count towards the cap.
    if (!whole && made == 0 && ++job->preemptions > max_warmup_preemptions) {
        store_.count_deferred_rungs("dropped", static_cast<int64_t>(job->ladder_rungs.size()));
        end_rung_hold(*job);
        return;
    }
    job->prompt = *job->ladder_anchor;
    util::lock_guard lk(mu_);
    if (whole) {
        ladder_jobs_.push_back(std::move(job));
    } else {
        ladder_jobs_.push_front(std::move(job));
    }
}

void scheduler::impl::end_warmup(slot & s, bool whole) {
    if (s.req->ladder()) {
        end_ladder_job(s, whole);
        return;
    }
    // What was prefilled is parked as the conversation's entry, a preempted part included.
    cache::trace_scope trace(store_.trace(), s.req->id, s.req->warmup);
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
    cache::trace_scope trace(store_.trace(), s.req->id, s.req->warmup);
    cache::tier_load_result r = s.load.get();
    s.plan.tier_read_s = r.seconds;
    const bool gone = r.error == cache::tier_load_error::missing;  // that copy, not the tier
    const cache::restore_plan first = s.plan;                      // as planned (tier_loaded may make it cold)
    if (s.reset_since) {  // read from a copy the reset deleted: not restored
        r.error = cache::tier_load_error::missing;
        r.detail = "the cache was reset while it was read";
        r.record.reset();
    }
    if (auto st = store_.tier_loaded(s.key, s.plan, std::move(r), now_s()); !st) {
        if (!s.reset_since && s.use_cache && !s.replanned) {
            // The copy is gone (a successor superseded it, the disk budget or a check deleted
            // it): planned again, the lookup counted once. An entry or anchor in memory, a
            // running request's sequence or another copy then restores what it holds; after a
            // damaged copy, an I/O error or a timeout, not that tier's.
            pool_->drain_released();
            s.replanned = true;
            s.skip_tier = gone ? -1 : first.tier;
            store_.retract_lookup(first, s.prompt_size());
            pool_->release(s.seq);
            s.seq = -1;
            const double first_lookup_s = s.stats.lookup_s;
            plan_restore(s);
            s.stats.lookup_s += first_lookup_s;
            spdlog::info("request {}: {}; planned again: {}", s.req->id, st.message(),
                         s.plan.reason.empty() ? "miss" : s.plan.reason);
            LINEAGE_TRACE(store_.trace(), "planned again after the failed read: {} of {} tokens restored",
                          s.plan.n_restore, s.prompt_size());
            start_restore(s, true);
            return;
        }
        spdlog::info("request {}: {}; prefilling cold", s.req->id, st.message());
        LINEAGE_TRACE(store_.trace(), "prefilling cold after the failed read{}",
                      s.reset_since ? " (the cache was reset)" : s.replanned ? " (its second)" : "");
    }
    pool_->drain_released();
    start_prefill(s);
}

bool scheduler::impl::read_hold(int32_t short_prefill) const {
    const double bound = read_hold_bound_s();
    return std::any_of(slots_.begin(), slots_.end(), [&](const slot & s) {
        return s.ph == slot::phase::loading && !s.req->warmup && s.prompt_size() - s.plan.n_restore <= short_prefill &&
               seconds_since(s.restore_started) < bound;
    });
}

double scheduler::impl::read_hold_bound_s() const {
    if (const auto rate = store_.cost().prefill_tokens_per_s(); rate && *rate > 0) {
        return p_.n_batch / *rate;
    }
    return model_.offloaded() ? 0.0 : 1.0;
}

void scheduler::impl::start_prefill(slot & s) {
    s.ph = slot::phase::prefill;
    life_->restore(s, now_s());
    place_next_to_active(s);
}

std::optional<int32_t> scheduler::impl::acquire_sequence(const slot & s) {
    const std::vector<int32_t> active = active_seqs();
    if (placing() && !active.empty()) {
        // A restore that writes a sequence (a load, a copy, a miss) writes it next to a running
        // one at once, as place_next_to_active would after it: one state copy, not two.
        if (auto seq = pool_->acquire_next_to(active, std::numeric_limits<int32_t>::max(), s.plan.source)) {
            return seq;
        }
    }
    return pool_->acquire(s.plan.source, active);
}

void scheduler::impl::place_next_to_active(slot & s) {
    if (!placing() || s.seq < 0) {
        return;
    }
    std::vector<int32_t> others = active_seqs();
    others.erase(std::remove(others.begin(), others.end(), s.seq), others.end());
    if (others.empty() || next_to_any(s.seq, others)) {
        return;  // alone, or already next to one
    }
    // A parked entry there goes to RAM: one state read now, a load instead of a take when it is
    // next used; a conversation keeps its sequence id from turn to turn (take_device), so one move
    // serves the rest of it.
    const std::optional<int32_t> to = pool_->acquire_next_to(others, std::numeric_limits<int32_t>::max());
    if (!to) {
        return;
    }
    const auto t0 = clock::now();
    const int32_t from = s.seq;
    // The slot owns its sequence whatever the restore was (a taken entry left the store; the
    // other ops acquired it): after the copy the old id goes back to the pool.
    if (s.n_past > 0 && !states_->seq_cp(from, *to, s.n_past)) {
        pool_->release(*to);
        spdlog::warn("request {}: copying sequence {} to {} failed; it stays on {}", s.req->id, from, *to, from);
        return;
    }
    pool_->release(from);
    s.seq = *to;
    s.stats.restore_s += seconds_since(t0);
    s.stats.moved_tokens = s.n_past;
    spdlog::debug("request {}: sequence {} moved to {} next to the running one(s) ({} tokens, {:.1f} ms)", s.req->id,
                  from, *to, s.n_past, seconds_since(t0) * 1e3);
}

void scheduler::impl::step() {
    const std::vector<float> lora = begin_step();
    bool hold = false;
    std::vector<engine::batch_token> batch = build_batch(lora, hold);
    if (batch.empty()) {
        if (hold) {
            // Only held prefills: wait for the read (its callback notifies) rather than spin.
            util::unique_lock lk(mu_);
            if (!load_ready_.load() && !stopping_ && queue_.empty()) {
                lk.wait_until(cv_, clock::now() + std::chrono::milliseconds(5));
            }
        }
        return;
    }
    order_by_sequence(batch);
    double dt = 0;
    const engine::decode_result rc = decode_batch(batch, dt);
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
    end_step(batch, dt);
}

std::vector<float> scheduler::impl::begin_step() {
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
    if (lora != applied_lora_) {
        std::vector<const engine::lora_adapter *> adapters;
        for (const auto & a : loras_) {
            adapters.push_back(a.get());
        }
        ctx_->set_loras(adapters, lora);
        applied_lora_ = lora;
    }
    // An image is decoded as one unit, on its own (its embeddings, not tokens), before the
    // text chunks of the step.
    for (auto & s : slots_) {
        while (s.ph == slot::phase::prefill && s.req->lora == lora && !s.req->cancelled->load()) {
            const media_span * m = s.image_at_past();
            if (m == nullptr) {
                break;
            }
            decode_image(s, *m);
        }
    }
    return lora;
}

std::vector<engine::batch_token> scheduler::impl::build_batch(const std::vector<float> & lora, bool & hold) {
    std::vector<engine::batch_token> batch;
    int32_t budget = p_.n_batch;
    // A prefill passes over its deferrable ladder rungs while it has the engine to itself (no
    // other request running or waiting; warm-ups and ladder jobs yield anyway): a ladder job
    // makes them on the idle engine afterwards. Beside others, it splits at them (an engine
    // serving several requests seldom idles before the next new session: docs/architecture.md
    // "Ladder jobs").
    const auto serving = [](const slot & x) { return x.active() && !x.req->warmup; };
    const auto n_serving = std::count_if(slots_.begin(), slots_.end(), serving);
    for (auto & s : slots_) {
        s.defer_rungs = queued_after_round_ == 0 && n_serving - (serving(s) ? 1 : 0) == 0;
    }
    for (auto & s : slots_) {
        s.logits_idx = -1;
        s.chunk = 0;
        if (s.ph == slot::phase::decode && budget > s.replay && s.req->lora == lora) {
            // After a guard rollback the first step computes the rolled-back prompt token(s)
            // again before the first sampled one (no logits for them).
            for (int32_t i = 0; i < s.replay; ++i) {
                const int32_t pos = s.n_past + i;
                batch.push_back({s.req->prompt[static_cast<size_t>(pos)], pos, s.seq, false});
            }
            s.logits_idx = static_cast<int32_t>(batch.size());
            batch.push_back({s.pending, s.n_past + s.replay, s.seq, true});
            budget -= 1 + s.replay;
        }
    }
    // Prefills take the rest, fewest prompt tokens left first; a short one runs without the
    // long ones' chunks, and so does a short one whose state is still being read (prefill_order.h).
    const int32_t short_prefill = std::max(1, p_.n_batch / 4);
    hold = read_hold(short_prefill);
    for (const auto & [sp, n] : plan_prefill(slots_, lora, budget, short_prefill, max_prefill_deferrals, hold)) {
        auto & s = *sp;
        for (int32_t i = 0; i < n; ++i) {
            const int32_t pos = s.n_past + i;
            const bool last = pos + 1 == s.prompt_size() && !s.req->warmup;  // a warm-up samples nothing
            if (last) {
                s.logits_idx = static_cast<int32_t>(batch.size());
            }
            batch.push_back({s.req->prompt[static_cast<size_t>(pos)], pos, s.seq, last});
        }
        s.chunk = n;
    }
    return batch;
}

engine::decode_result scheduler::impl::decode_batch(const std::vector<engine::batch_token> & batch, double & dt) {
    const auto t0 = clock::now();
    engine::decode_result rc = ctx_->decode(batch);
    while (rc == engine::decode_result::no_kv_space && pool_->demote_one(0)) {
        rc = ctx_->decode(batch);  // parked sequences left the device: try again
    }
    dt = seconds_since(t0);
    if (spdlog::should_log(spdlog::level::debug)) {
        // Sequences in the step, and the runs of consecutive ids among them: with per-sequence KV
        // buffers llama.cpp computes one micro-batch per run (prefill_order.h, order_by_sequence).
        std::vector<int32_t> seqs;
        for (const auto & t : batch) {
            if (seqs.empty() || seqs.back() != t.seq) {
                seqs.push_back(t.seq);
            }
        }
        int32_t runs = 0;
        for (size_t i = 0; i < seqs.size(); ++i) {
            runs += i == 0 || seqs[i] != seqs[i - 1] + 1;
        }
        spdlog::debug("engine step: {} tokens, sequences {} in {} runs, in {:.1f} ms", batch.size(),
                      fmt::join(seqs, ","), runs, dt * 1e3);
    }
    return rc;
}

void scheduler::impl::end_step(const std::vector<engine::batch_token> & batch, double dt) {
    if (std::any_of(slots_.begin(), slots_.end(), [](const slot & s) { return s.ph == slot::phase::prefill && s.chunk > 0; })) {
        // A prefill pass: the rate the tier cost rule weighs a tier copy's read against.
        double positions = 0;
        for (const auto & t : batch) {
            positions += t.pos;
        }
        store_.cost().observe_prefill(static_cast<int32_t>(batch.size()), dt, positions);
    }
    for (auto & s : slots_) {
        if (s.ph == slot::phase::prefill && s.chunk > 0) {
            s.stats.prefill_s += dt;
            count_pass(s);
            s.n_past += s.chunk;
            if (s.req->warmup && !s.req->ladder()) {
                store_.warmup_counters().tokens += s.chunk;
            }
            after_prefill_chunk(s);
        } else if (s.ph == slot::phase::decode && s.logits_idx >= 0) {
            s.n_past += 1 + s.replay;
            s.replay = 0;
            life_->after_decode(s);
            sample_and_emit(s);
        }
    }
}

std::vector<int32_t> scheduler::impl::active_seqs() const {
    std::vector<int32_t> out;
    for (const auto & s : slots_) {
        if (s.active() && s.seq >= 0) {
            out.push_back(s.seq);
        }
    }
    return out;
}

bool scheduler::impl::shares_with(const std::deque<std::shared_ptr<generation_request>> & admitted,
                                  const generation_request & r) const {
    if (!p_.cache.enabled || !p_.cache.lineage || !r.cache.cache_prompt || r.warmup) {
        return false;
    }
    return std::any_of(admitted.begin(), admitted.end(), [&](const auto & a) {
        return a->cache.cache_prompt && a->cache.bucket == r.cache.bucket &&
               cache::common_prefix(a->prompt, r.prompt) >= std::max(1, p_.cache.min_prefix);
    });
}

bool scheduler::impl::held_for_prefix(generation_request & r, int32_t stored, clock::time_point now) {
    if (!p_.cache.enabled || !p_.cache.lineage) {
        return false;
    }
    const slot * by = prefix_hold(slots_, r, hybrid_, stored, p_.cache.min_prefix);
    if (by == nullptr) {
        return false;
    }
    if (!r.prefix_held_since) {
        r.prefix_held_since = now;
        store_.count_prefix_hold();
        spdlog::debug("request {}: waits for request {} to compute the prefix they share", r.id, by->req->id);
    }
    return true;
}

std::vector<cache::live_state> scheduler::impl::live_states(const slot & s) const {
    std::vector<cache::live_state> out;
    for (const auto & o : slots_) {
        if (&o == &s || (o.ph != slot::phase::prefill && o.ph != slot::phase::decode) || !o.use_cache || o.reset_since ||
            o.req->warmup || !o.req->media.empty() || o.replay != 0 || o.seq < 0 || o.n_past <= 0 ||
            o.key.bucket != s.key.bucket) {
            continue;
        }
        cache::live_state l;
        l.request = o.req->id;
        l.seq = o.seq;
        l.bucket = o.key.bucket;
        l.session = o.key.session;
        // Its sequence holds the prompt, then the generated tokens decoded so far.
        const auto n_prompt = static_cast<size_t>(std::min(o.n_past, o.prompt_size()));
        l.toks.assign(o.req->prompt.begin(), o.req->prompt.begin() + static_cast<std::ptrdiff_t>(n_prompt));
        for (size_t i = 0; static_cast<int32_t>(l.toks.size()) < o.n_past && i < o.generated.size(); ++i) {
            l.toks.push_back(o.generated[i]);
        }
        if (static_cast<int32_t>(l.toks.size()) != o.n_past) {
            continue;  // not a state of known tokens
        }
        // Its restore points: those it restored with (the point and what it inherited) and
        // those its prefill captured; each holds the recurrent state at a prefix of its KV.
        auto add = [&](const cache::checkpoint & c) {
            if (c.recurrent && c.n_tokens > 0 && c.n_tokens < o.n_past) {
                l.checkpoints.push_back(c);
            }
        };
        if (o.plan.recurrent) {
            add({o.plan.n_restore, o.plan.kind, o.plan.recurrent});
        }
        for (const auto & c : o.plan.inherited) {
            add(c);
        }
        for (const auto & c : o.captured) {
            add(c);
        }
        if (o.prompt_end_recurrent && o.prompt_size() < o.n_past) {
            l.checkpoints.push_back({o.prompt_size(), cache::point_kind::turn, o.prompt_end_recurrent});
        }
        std::stable_sort(l.checkpoints.begin(), l.checkpoints.end(),
                         [](const cache::checkpoint & a, const cache::checkpoint & b) { return a.n_tokens < b.n_tokens; });
        l.checkpoints.erase(std::unique(l.checkpoints.begin(), l.checkpoints.end(),
                                        [](const cache::checkpoint & a, const cache::checkpoint & b) {
                                            return a.n_tokens == b.n_tokens;
                                        }),
                            l.checkpoints.end());
        out.push_back(std::move(l));
    }
    return out;
}

void scheduler::impl::order_by_sequence(std::vector<engine::batch_token> & batch) {
    if (std::is_sorted(batch.begin(), batch.end(), [](const auto & a, const auto & b) { return a.seq < b.seq; })) {
        return;
    }
    const std::vector<int32_t> where = lineage::scheduler::order_by_sequence(batch);
    for (auto & s : slots_) {  // the slots' logits rows follow their tokens
        if (s.logits_idx >= 0) {
            s.logits_idx = where[static_cast<size_t>(s.logits_idx)];
        }
    }
}

void scheduler::impl::count_pass(slot & s) {
    s.stats.prefill_passes++;
    // A chunk that ends where the cache captures a restore point, short of the prompt end: a
    // split (slot::next_stop). Counted before after_prefill_chunk moves next_capture on.
    const int32_t stop = s.next_stop();
    const size_t split = s.next_split();
    if (s.n_past + s.chunk == stop && stop < s.prompt_size() && split < s.plan.captures.size()) {
        s.stats.prefill_splits++;
        s.stats.prefill_splits_by_kind[std::string(cache::to_string(s.plan.captures[split].kind))]++;
    }
}

void scheduler::impl::decode_image(slot & s, const media_span & m) {
    const int32_t n = m.span.end - m.span.begin;
    if (p_.projector == nullptr || !m.chunk || m.span.end >= s.prompt_size()) {
        // The routes refuse both (no --mmproj; a prompt that ends with an image).
        fail(s, {failure_kind::decode_failed, "the request has an image the engine cannot decode here (no projector, "
                                              "or the prompt ends with it)"});
        return;
    }
    const auto t0 = clock::now();
    int32_t rc = p_.projector->eval(*ctx_, *m.chunk, s.n_past, s.seq);
    while (rc == 1 && pool_->demote_one(0)) {
        ctx_->seq_rm(s.seq, s.n_past, -1);  // a part of the image that went in before the KV ran out
        rc = p_.projector->eval(*ctx_, *m.chunk, s.n_past, s.seq);  // parked sequences left the device
    }
    if (rc != 0) {
        fail(s, rc == 1 ? request_failure{failure_kind::kv_full,
                                          "the KV cache is full with the requests in flight; retry, or raise --ctx-size"}
                        : request_failure{failure_kind::decode_failed, "the engine failed to decode an image"});
        return;
    }
    s.stats.prefill_s += seconds_since(t0);
    s.stats.prefill_passes++;
    s.n_past += n;
    if (s.req->warmup && !s.req->ladder()) {
        store_.warmup_counters().tokens += n;
    }
    after_prefill_chunk(s);
}

}  // namespace lineage::scheduler
