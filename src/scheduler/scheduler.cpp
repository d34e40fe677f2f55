#include "scheduler/scheduler.h"

#include "cache/capacity.h"
#include "cache/disk_tier.h"
#include "cache/store.h"
#include "engine/context.h"
#include "engine/model.h"
#include "scheduler/metrics.h"
#include "scheduler/slot.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include <unistd.h>

namespace lineage::scheduler {

using clock = std::chrono::steady_clock;

namespace {

double seconds_since(clock::time_point t) {
    return std::chrono::duration<double>(clock::now() - t).count();
}

/** Default pool: the model's trained context, capped so that a laptop can hold it. */
int32_t default_n_ctx(const engine::model & m) {
    const int32_t train = m.n_ctx_train() > 0 ? m.n_ctx_train() : 4096;
    return std::min(train, 16384);
}

/** The family's settings become the store's (docs/prompt-cache.md "Configuration"): dense
 *  families use --prompt-cache-capacity-bytes / -max-entries / -ttl, hybrid families (whose
 *  entries are session snapshots plus checkpoints, seed 001 "Session Snapshots") the snapshot
 *  trio. A budget of 0 is filled in later by apply_capacity_default(). */
params with_family_settings(params p, bool hybrid) {
    auto & c = p.cache;
    // A budget given only through the other family's flag is still the operator's budget (e.g.
    // --cache-ram-bytes, the alias of --prompt-cache-capacity-bytes, on a hybrid model).
    if (hybrid && c.snapshot_capacity_bytes == 0 && c.kv_capacity_bytes != 0) {
        spdlog::info("cache: hybrid model: the RAM budget is --prompt-cache-capacity-bytes ({} bytes), as "
                     "--prompt-cache-snapshot-capacity-bytes is not set",
                     c.kv_capacity_bytes);
        c.snapshot_capacity_bytes = c.kv_capacity_bytes;
    } else if (!hybrid && c.kv_capacity_bytes == 0 && c.snapshot_capacity_bytes != 0) {
        spdlog::info("cache: dense model: the RAM budget is --prompt-cache-snapshot-capacity-bytes ({} bytes), as "
                     "--prompt-cache-capacity-bytes is not set",
                     c.snapshot_capacity_bytes);
        c.kv_capacity_bytes = c.snapshot_capacity_bytes;
    }
    if (hybrid) {
        c.ram_bytes = c.snapshot_capacity_bytes;
        c.max_entries = c.snapshot_max_entries;
        c.ttl_s = c.snapshot_ttl_s;
        c.budget_flag = "--prompt-cache-snapshot-capacity-bytes";
        c.ttl_flag = "--prompt-cache-snapshot-ttl";
    } else {
        c.ram_bytes = c.kv_capacity_bytes;
        c.budget_flag = "--prompt-cache-capacity-bytes";
        c.ttl_flag = "--prompt-cache-ttl";
    }
    return p;
}

/** Bytes of a sequence's whole state (KV + recurrent) as fixed + per_token * tokens. */
struct state_size_model {
    uint64_t fixed = 0;
    uint64_t per_token = 0;
    uint64_t at(int64_t n_tokens) const { return fixed + per_token * static_cast<uint64_t>(n_tokens); }
};

/** Measures state_size_model on sequence 0 of an empty context: the state after one and after
 *  two decoded tokens (the difference is one KV row over all attention layers; the rest is the
 *  recurrent state and headers). Leaves the context empty. nullopt when a decode fails. */
std::optional<state_size_model> measure_state_sizes(engine::context & ctx) {
    const engine::seq_id s = 0;
    std::optional<state_size_model> out;
    if (ctx.decode({{0, 0, s, true}}) == engine::decode_result::ok) {
        const uint64_t one = ctx.state_size(s, false);
        if (ctx.decode({{0, 1, s, true}}) == engine::decode_result::ok) {
            const uint64_t two = ctx.state_size(s, false);
            if (two >= one && one >= two - one) {
                out = state_size_model{one - (two - one), two - one};
            }
        }
    }
    ctx.clear();
    return out;
}

/** The plan of a cold prefill that replaces `p` (its restore failed): from token 0 every
 *  planned capture lies ahead and is still taken. */
cache::restore_plan cold_plan(cache::restore_plan p) {
    cache::restore_plan cold;
    cold.captures = std::move(p.captures);
    return cold;
}

}  // namespace

const char * to_string(finish_reason r) {
    switch (r) {
        case finish_reason::none: return "none";
        case finish_reason::stop: return "stop";
        case finish_reason::length: return "length";
        case finish_reason::cancelled: return "cancelled";
        case finish_reason::error: return "error";
    }
    return "?";
}

void event_channel::push(generation_event e) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        q_.push_back(std::move(e));
    }
    cv_.notify_one();
}

std::optional<generation_event> event_channel::pop(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lk(mu_);
    if (!cv_.wait_for(lk, timeout, [this] { return !q_.empty(); })) {
        return std::nullopt;
    }
    generation_event e = std::move(q_.front());
    q_.pop_front();
    return e;
}

struct scheduler::impl {
    impl(const engine::model & m, const params & p);
    ~impl();

    // --- cross-thread ---
    void submit(std::shared_ptr<generation_request> req);
    template <typename F> auto run_on_engine(F f) -> decltype(f());
    void stop();

    // --- engine thread ---
    void loop();
    /** Sets the store's byte budget when its flag is 0 (seed 001 "Model-aware capacity
     *  defaults") and WARNs when one representative entry cannot fit. Before the loop starts. */
    void apply_capacity_default(int32_t n_seq);
    void admit(std::shared_ptr<generation_request> req);
    bool acquire_seq(slot & s, uint64_t protect);
    void release_seq(int32_t seq);
    void drain_released();
    bool demote_one(uint64_t protect);
    bool restore(slot & s);
    void start_prefill(slot & s);
    void poll_loads();
    void complete_load(slot & s);
    void write_to_disk(cache::disk_job j);
    void disk_housekeeping(bool idle);
    void flush_to_disk();
    void capture(slot & s, const cache::capture_point & c);
    void step();
    void after_prefill_chunk(slot & s);
    void emit(slot & s, const engine::sampled_token & st);
    void finish(slot & s, finish_reason why);
    void fail(slot & s, int status, const std::string & type, const std::string & msg);
    void commit(slot & s);
    void reset_slot(slot & s);
    void record(slot & s, finish_reason why);
    double now_s() const { return seconds_since(started_); }

    const engine::model & model_;
    params p_;
    bool hybrid_;
    int32_t max_seq_tokens_;
    std::unique_ptr<engine::context> ctx_;
    cache::store store_;
    std::unique_ptr<cache::disk_tier> disk_;
    std::atomic<bool> load_ready_{false};  // set by the disk thread when a load finished
    metrics metrics_;
    std::vector<slot> slots_;
    std::vector<int32_t> free_seqs_;
    clock::time_point started_ = clock::now();

    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::shared_ptr<generation_request>> queue_;  // GUARDED_BY(mu_)
    std::deque<std::function<void()>> tasks_;                // GUARDED_BY(mu_)
    bool stopping_ = false;                                  // GUARDED_BY(mu_)
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
    apply_capacity_default(cp.n_seq);
    slots_.resize(static_cast<size_t>(p_.n_parallel));
    if (p_.cache.trace) {
        store_.trace().set_sink(cache::tracer::log_sink());
    }
    for (int32_t s = cp.n_seq - 1; s >= 0; --s) {
        free_seqs_.push_back(s);
    }
    if (p_.cache.enabled && !p_.cache.disk_dir.empty()) {
        try {
            cache::disk_config dc;
            dc.dir = p_.cache.disk_dir;
            dc.capacity_bytes = p_.cache.disk_capacity_bytes;
            dc.model = cache::model_fingerprint(m.path());
            dc.hybrid = hybrid_;
            disk_ = std::make_unique<cache::disk_tier>(dc);
            store_.attach_disk(disk_.get());
        } catch (const std::exception & e) {
            spdlog::warn("disk tier off: {}", e.what());
        }
    }
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
    store_.attach_disk(nullptr);
    disk_.reset();
}

void scheduler::impl::apply_capacity_default(int32_t n_seq) {
    const auto sizes = measure_state_sizes(*ctx_);
    const int64_t rep_tokens = cache::representative_tokens(max_seq_tokens_);
    const uint64_t entry = sizes ? sizes->at(rep_tokens) : 0;
    if (p_.cache.ram_bytes == 0) {
        const uint64_t phys =
            static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
        const uint64_t pool = sizes ? static_cast<uint64_t>(n_seq) * sizes->at(max_seq_tokens_) : 0;
        const uint64_t used = model_.size_bytes() + pool;
        const uint64_t left = phys > used ? phys - used : 0;
        const uint64_t cap = cache::capacity_default(entry, left, hybrid_);
        spdlog::info("cache: model-aware {} capacity default {} bytes ({}): entry {} bytes at {} tokens, ceiling "
                     "{} bytes (a quarter of {} bytes left = {} physical - {} weights - {} KV pool), floor {} bytes",
                     hybrid_ ? "snapshot" : "KV store", cap, p_.cache.budget_flag, entry, rep_tokens, left / 4, left,
                     phys, model_.size_bytes(), pool,
                     hybrid_ ? cache::snapshot_capacity_floor_bytes : cache::kv_capacity_floor_bytes);
        p_.cache.ram_bytes = cap;
        store_.set_budget(cap);
    }
    if (entry > p_.cache.ram_bytes) {
        spdlog::warn("cache: one entry of {} tokens takes {} bytes, more than the whole budget of {} bytes: such "
                     "entries can never be kept in RAM; raise {}",
                     rep_tokens, entry, p_.cache.ram_bytes, p_.cache.budget_flag);
    }
}

void scheduler::impl::stop() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable() && std::this_thread::get_id() != thread_.get_id()) {
        thread_.join();
    }
}

void scheduler::impl::submit(std::shared_ptr<generation_request> req) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (!stopping_) {
            queue_.push_back(std::move(req));
            req = nullptr;
        }
    }
    if (req) {
        generation_event e;
        e.type = generation_event::kind::error;
        e.http_status = 503;
        e.error_type = "server_error";
        e.message = "the server is shutting down; retry on another instance";
        req->events->push(std::move(e));
        return;
    }
    cv_.notify_one();
}

template <typename F>
auto scheduler::impl::run_on_engine(F f) -> decltype(f()) {
    using R = decltype(f());
    auto task = std::make_shared<std::packaged_task<R()>>(std::move(f));
    auto fut = task->get_future();
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (stopping_) {
            return R{};
        }
        tasks_.push_back([task] { (*task)(); });
    }
    cv_.notify_one();
    return fut.get();
}

void scheduler::impl::loop() {
    for (;;) {
        std::deque<std::function<void()>> tasks;
        std::deque<std::shared_ptr<generation_request>> admitted;
        {
            std::unique_lock<std::mutex> lk(mu_);
            const bool computing = std::any_of(slots_.begin(), slots_.end(), [](const slot & s) {
                return s.ph == slot::phase::prefill || s.ph == slot::phase::decode;
            });
            const bool loading = std::any_of(slots_.begin(), slots_.end(),
                                             [](const slot & s) { return s.ph == slot::phase::loading; });
            if (!computing) {
                cv_.wait_for(lk, loading ? std::chrono::milliseconds(20) : std::chrono::milliseconds(1000), [this] {
                    return stopping_ || !queue_.empty() || !tasks_.empty() || load_ready_.load();
                });
            }
            if (stopping_) {
                break;
            }
            tasks.swap(tasks_);
            // New requests join between steps, as many as there are idle slots.
            for (auto & s : slots_) {
                if (!s.active() && !queue_.empty()) {
                    admitted.push_back(std::move(queue_.front()));
                    queue_.pop_front();
                }
            }
        }
        for (auto & t : tasks) {
            t();
        }
        // A request whose client left is committed before new ones are planned: a retry sent
        // right after a dropped stream then finds what the dropped request had computed.
        for (auto & s : slots_) {
            if ((s.ph == slot::phase::prefill || s.ph == slot::phase::decode) && s.req->cancelled->load()) {
                finish(s, finish_reason::cancelled);
            }
        }
        for (auto & r : admitted) {
            admit(std::move(r));
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
            drain_released();
        }
        disk_housekeeping(!busy);
    }
    // Shutdown: everything in flight or queued gets an error.
    for (auto & s : slots_) {
        if (s.active()) {
            fail(s, 503, "server_error", "the server is shutting down");
        }
    }
    std::lock_guard<std::mutex> lk(mu_);
    for (auto & r : queue_) {
        generation_event e;
        e.type = generation_event::kind::error;
        e.http_status = 503;
        e.error_type = "server_error";
        e.message = "the server is shutting down";
        r->events->push(std::move(e));
    }
    queue_.clear();
    for (auto & t : tasks_) {
        t();
    }
    tasks_.clear();
    flush_to_disk();
}

void scheduler::impl::write_to_disk(cache::disk_job j) {
    if (!disk_) {
        return;
    }
    cache::disk_write w;
    w.entry_id = j.entry_id;
    w.rec.bucket = j.k.bucket;
    w.rec.session = j.k.session;
    w.rec.toks = std::move(j.toks);
    w.rec.history = j.history;
    w.rec.anchor = j.anchor;
    // A parked sequence's state is read here, on the engine thread, before it is released.
    w.rec.full = j.seq >= 0 ? cache::make_blob(ctx_->get_state(j.seq, false)) : std::move(j.full);
    w.rec.checkpoints = std::move(j.checkpoints);
    w.ancestors = std::move(j.ancestors);
    w.last_use = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    disk_->write(std::move(w));
}

void scheduler::impl::disk_housekeeping(bool idle) {
    if (!disk_) {
        return;
    }
    for (const auto & c : disk_->take_completions()) {
        store_.disk_written(c.entry_id, c.file);
    }
    if (idle) {
        for (auto & j : store_.take_idle_writes(now_s(), p_.cache.disk_idle_s)) {
            write_to_disk(std::move(j));
        }
    }
}

void scheduler::impl::flush_to_disk() {
    if (!disk_) {
        return;
    }
    const auto t0 = clock::now();
    drain_released();
    auto jobs = store_.take_idle_writes(now_s(), -1);
    const size_t n_jobs = jobs.size();
    for (auto & j : jobs) {
        write_to_disk(std::move(j));
    }
    const auto st = disk_->get_stats();
    if (st.queued > 0) {
        spdlog::info("disk tier: writing {} cache entries to {} before exit ({} jobs queued)...", n_jobs,
                     p_.cache.disk_dir, st.queued);
    }
    disk_->drain();
    const auto done = disk_->get_stats();
    spdlog::info("disk tier: {} files ({:.1f} MiB) in {} at exit; {} written this run ({:.1f} MiB) in {:.2f} s at "
                 "shutdown",
                 done.files, static_cast<double>(done.bytes) / (1 << 20), p_.cache.disk_dir, done.writes,
                 static_cast<double>(done.bytes_written) / (1 << 20), seconds_since(t0));
}

void scheduler::impl::release_seq(int32_t seq) {
    ctx_->seq_rm(seq, -1, -1);
    free_seqs_.push_back(seq);
}

void scheduler::impl::drain_released() {
    // Entries that left the store for lack of room are written to disk first: a parked one's
    // state is read before its sequence is released.
    for (auto & j : store_.take_spills()) {
        write_to_disk(std::move(j));
    }
    for (int32_t seq : store_.take_released_seqs()) {
        release_seq(seq);
    }
}

bool scheduler::impl::demote_one(uint64_t protect) {
    auto victim = store_.device_lru();
    if (victim && victim->id == protect) {
        // The entry a request is about to restore from stays; try the next one.
        victim.reset();
        for (const auto & e : store_.entries()) {
            if (e.where == cache::tier::device && e.id != protect) {
                victim = e;  // entries() is most recent first: keep the last match (LRU)
            }
        }
    }
    if (!victim) {
        return false;
    }
    const size_t size = ctx_->state_size(victim->seq, false);
    cache::blob_ptr blob;
    uint64_t reserved = 0;
    if (store_.reserve(size, victim->id)) {
        reserved = size;
        blob = cache::make_blob(ctx_->get_state(victim->seq, false));
    }
    spdlog::debug("cache: entry {} ({} tokens) leaves the device for {}", victim->id, victim->n_tokens,
                  blob ? "RAM" : "nowhere (over budget)");
    store_.demote(victim->id, blob, reserved);
    drain_released();
    return true;
}

bool scheduler::impl::acquire_seq(slot & s, uint64_t protect) {
    drain_released();
    while (free_seqs_.empty()) {
        if (!demote_one(protect)) {
            return false;
        }
    }
    s.seq = free_seqs_.back();
    free_seqs_.pop_back();
    ctx_->seq_rm(s.seq, -1, -1);
    return true;
}

void scheduler::impl::admit(std::shared_ptr<generation_request> req) {
    auto it = std::find_if(slots_.begin(), slots_.end(), [](const slot & s) { return !s.active(); });
    slot & s = *it;
    reset_slot(s);
    s.req = std::move(req);
    s.stats.prompt_tokens = s.prompt_size();
    s.stats.queue_s = seconds_since(s.req->submitted);
    if (s.req->prompt.empty() || s.prompt_size() >= max_seq_tokens_) {
        fail(s, 400, "invalid_request_error",
             "the prompt has " + std::to_string(s.prompt_size()) + " tokens; this server holds at most " +
                 std::to_string(max_seq_tokens_ - 1) + " per request");
        return;
    }
    if (s.req->cancelled->load()) {
        finish(s, finish_reason::cancelled);
        return;
    }
    cache::trace_scope trace(store_.trace(), s.req->id);
    s.use_cache = p_.cache.enabled && s.req->cache.cache_prompt;
    s.key = {s.req->cache.bucket, s.req->cache.session_key, s.req->cache.dims};
    if (!s.use_cache) {
        LINEAGE_TRACE(store_.trace(), "cache bypassed ({}); {} prompt tokens to prefill",
                      p_.cache.enabled ? "cache_prompt=false" : "cache off", s.prompt_size());
    }
    const auto t0 = clock::now();
    cache::plan_hints hints{s.req->cache.anchor_tokens, s.req->cache.history_tokens, s.req->cache.tools_anchor_tokens};
    if (s.use_cache) {
        s.plan = store_.plan(s.key, s.req->prompt, hints, now_s(), s.req->cache.breakpoint_tokens);
    } else if (hybrid_) {
        // Split where a first request with the cache on would capture (nothing is captured):
        // Mamba2's chunked scan depends on the split, so cache off then computes as a miss.
        s.plan.captures = store_.cold_split_points(s.req->prompt, hints, s.req->cache.breakpoint_tokens);
    }
    s.stats.lookup_s = seconds_since(t0);
    if (s.plan.op == cache::restore_op::take_device) {
        s.seq = s.plan.device_seq;
    } else if (!acquire_seq(s, s.plan.source)) {
        store_.abandon(s.plan, 0);
        fail(s, 503, "server_error", "no free sequence: all are busy; retry shortly");
        return;
    }
    const uint32_t seed = s.req->sampling.seed >= 0 ? static_cast<uint32_t>(s.req->sampling.seed)
                                                     : static_cast<uint32_t>(std::random_device{}());
    try {
        s.smpl = std::make_unique<engine::sampler>(model_, s.req->sampling.engine_params(seed));
    } catch (const std::invalid_argument & e) {  // a grammar the routes could not check
        fail(s, 400, "invalid_request_error", e.what());
        return;
    }
    s.restore_started = clock::now();
    if (s.plan.op == cache::restore_op::load_disk) {
        // The disk thread reads the file; the other slots keep computing meanwhile.
        s.ph = slot::phase::loading;
        s.load = disk_->load(s.plan.disk_file, [this] {
            load_ready_ = true;
            cv_.notify_one();
        });
        return;
    }
    start_prefill(s);
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
    cache::disk_load_result r = s.load.get();
    cache::trace_scope trace(store_.trace(), s.req->id);
    auto & p = s.plan;
    if (r.error == cache::disk_load_error::none && r.record && hybrid_ && p.n_restore < p.source_tokens) {
        // A hybrid restore short of the file's length needs the checkpoint the index named.
        const bool has = std::any_of(r.record->checkpoints.begin(), r.record->checkpoints.end(),
                                     [&](const cache::checkpoint & c) { return c.n_tokens == p.n_restore && c.recurrent; });
        if (!has) {
            r.error = cache::disk_load_error::corrupt;
            r.detail = "the file has no checkpoint at " + std::to_string(p.n_restore) + " as its index says";
            r.record.reset();
        }
    }
    if (r.error != cache::disk_load_error::none || !r.record) {
        spdlog::info("request {}: disk file {} not loaded ({}: {}); prefilling cold", s.req->id, p.disk_file,
                     cache::to_string(r.error), r.detail);
        store_.disk_load_failed(p);
        p = cold_plan(std::move(p));
        start_prefill(s);
        return;
    }
    cache::disk_record & rec = *r.record;
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
        // the request's commit, as from a RAM entry (RAM reserved for them).
        for (auto & c : rec.checkpoints) {
            const uint64_t size = c.recurrent ? c.recurrent->size() : 0;
            if (c.n_tokens <= p.n_restore && store_.reserve(size)) {
                p.inflight_bytes += size;
                p.inherited.push_back(std::move(c));
            }
        }
    } else if (p.kind == cache::point_kind::anchor && store_.reserve(rec.full->size())) {
        // A system prompt seen before the restart: pinned in RAM again (its file stays).
        store_.commit_anchor(s.key, rec.toks, rec.full, rec.full->size(), now_s(), p.disk_file);
        drain_released();
    }
    start_prefill(s);
}

void scheduler::impl::start_prefill(slot & s) {
    const auto t1 = s.restore_started;
    if (!restore(s)) {
        spdlog::error("request {}: restoring {} at {} failed; prefilling cold", s.req->id,
                      cache::to_string(s.plan.kind), s.plan.n_restore);
        LINEAGE_TRACE(store_.trace(), "restoring {} at {} failed in the engine; prefilling cold",
                      cache::to_string(s.plan.kind), s.plan.n_restore);
        store_.abandon(s.plan, 0);
        s.plan = cold_plan(std::move(s.plan));
        ctx_->seq_rm(s.seq, -1, -1);
    }
    s.stats.restore_s = seconds_since(t1);
    s.n_past = s.plan.n_restore;
    s.stats.cached_tokens = s.plan.n_restore;
    s.stats.hit_kind = std::string(cache::to_string(s.plan.kind));
    s.ph = slot::phase::prefill;
    if (s.plan.op == cache::restore_op::load_disk && s.plan.absorbs && hybrid_ && s.plan.n_restore == s.plan.source_tokens) {
        // The file's final state becomes a turn checkpoint of the new entry (seed 000 "final").
        const size_t size = ctx_->state_size(s.seq, true);
        if (store_.reserve(size)) {
            s.plan.inflight_bytes += size;
            s.plan.inherited.push_back(
                {s.plan.source_tokens, cache::point_kind::turn, cache::make_blob(ctx_->get_state(s.seq, true))});
        }
    }
    s.plan.full.reset();  // the loaded state is in the sequence now
    spdlog::debug("request {}: {}", s.req->id, s.use_cache ? s.plan.reason : "cache bypassed (cache_prompt=false)");
    // A capture exactly at the restore point (an anchor restored through a sibling) is taken now.
    while (s.next_capture < s.plan.captures.size() && s.plan.captures[s.next_capture].n_tokens == s.n_past) {
        capture(s, s.plan.captures[s.next_capture++]);
    }
}

bool scheduler::impl::restore(slot & s) {
    const auto & p = s.plan;
    switch (p.op) {
        case cache::restore_op::none:
            return true;
        case cache::restore_op::take_device:
            // Continue the parked sequence itself: no KV is copied. Restoring an earlier point
            // of it puts that checkpoint's recurrent state in place and trims the KV.
            if (p.recurrent && !ctx_->set_state(s.seq, *p.recurrent, true)) {
                return false;
            }
            if (p.n_restore < p.source_tokens && !ctx_->seq_rm(s.seq, p.n_restore, -1)) {
                return false;
            }
            return ctx_->seq_pos_max(s.seq) + 1 == p.n_restore;
        case cache::restore_op::share_device:
            // The parked entry's KV [0, n) (shared cells in a unified pool, a device copy with
            // per-sequence buffers), then the restore point's recurrent state, then the trim.
            ctx_->seq_cp(p.device_seq, s.seq, p.n_restore);
            if (p.recurrent && !ctx_->set_state(s.seq, *p.recurrent, true)) {
                return false;
            }
            if (p.n_restore < p.source_tokens && !ctx_->seq_rm(s.seq, p.n_restore, -1)) {
                return false;
            }
            return ctx_->seq_pos_max(s.seq) + 1 == p.n_restore;
        case cache::restore_op::load_ram:
        case cache::restore_op::load_disk:
            // Whole state at the entry's length, then the checkpoint, then trim the KV.
            if (!ctx_->set_state(s.seq, *p.full, false)) {
                return false;
            }
            if (p.recurrent && !ctx_->set_state(s.seq, *p.recurrent, true)) {
                return false;
            }
            if (p.n_restore < p.source_tokens && !ctx_->seq_rm(s.seq, p.n_restore, -1)) {
                return false;
            }
            return ctx_->seq_pos_max(s.seq) + 1 == p.n_restore;
    }
    return false;
}

void scheduler::impl::capture(slot & s, const cache::capture_point & c) {
    const auto t0 = clock::now();
    const bool whole = c.kind == cache::point_kind::anchor;
    if (!whole && !hybrid_) {
        return;
    }
    cache::trace_scope trace(store_.trace(), s.req->id);
    const size_t size = ctx_->state_size(s.seq, !whole);
    if (!store_.reserve(size)) {
        LINEAGE_TRACE(store_.trace(), "{} capture at {} skipped: no RAM for its {}", cache::to_string(c.kind),
                      c.n_tokens, cache::human_bytes(size));
        s.stats.capture_s += seconds_since(t0);
        return;
    }
    auto blob = cache::make_blob(ctx_->get_state(s.seq, !whole));
    if (whole) {
        cache::tokens prefix(s.req->prompt.begin(), s.req->prompt.begin() + c.n_tokens);
        store_.commit_anchor(s.key, std::move(prefix), std::move(blob), size, now_s());
        drain_released();
        spdlog::debug("request {}: pinned anchor at {} tokens ({} bytes)", s.req->id, c.n_tokens, size);
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

void scheduler::impl::step() {
    // Cancellation is checked between steps: a client that left costs at most one chunk.
    for (auto & s : slots_) {
        if (s.active() && s.req->cancelled->load()) {
            finish(s, finish_reason::cancelled);
        } else if (s.ph == slot::phase::decode && s.req->stop_requested->load()) {
            finish(s, finish_reason::stop);
        }
    }
    std::vector<engine::batch_token> batch;
    int32_t budget = p_.n_batch;
    for (auto & s : slots_) {
        s.logits_idx = -1;
        s.chunk = 0;
        if (s.ph == slot::phase::decode && budget > 0) {
            s.logits_idx = static_cast<int32_t>(batch.size());
            batch.push_back({s.pending, s.n_past, s.seq, true});
            budget--;
        }
    }
    for (auto & s : slots_) {
        if (s.ph != slot::phase::prefill || budget <= 0) {
            continue;
        }
        // The chunk ends exactly at the next capture point so the state there can be taken.
        const int32_t n = std::min(budget, s.next_stop() - s.n_past);
        for (int32_t i = 0; i < n; ++i) {
            const int32_t pos = s.n_past + i;
            const bool last = pos + 1 == s.prompt_size();
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
    const auto t0 = clock::now();
    engine::decode_result rc = ctx_->decode(batch);
    while (rc == engine::decode_result::no_kv_space && demote_one(0)) {
        rc = ctx_->decode(batch);  // parked sequences left the device: try again
    }
    const double dt = seconds_since(t0);
    if (rc != engine::decode_result::ok) {
        const bool full = rc == engine::decode_result::no_kv_space;
        for (auto & s : slots_) {
            if (s.active() && (s.chunk > 0 || s.logits_idx >= 0)) {
                fail(s, full ? 503 : 500, "server_error",
                     full ? "the KV cache is full with the requests in flight; retry, or raise --ctx-size"
                          : "the engine failed to decode the batch");
            }
        }
        return;
    }
    for (auto & s : slots_) {
        if (s.ph == slot::phase::prefill && s.chunk > 0) {
            s.stats.prefill_s += dt;
            s.n_past += s.chunk;
            after_prefill_chunk(s);
        } else if (s.ph == slot::phase::decode && s.logits_idx >= 0) {
            s.n_past += 1;
            emit(s, s.smpl->sample(*ctx_, s.logits_idx, s.req->sampling.logprobs));
        }
    }
}

void scheduler::impl::after_prefill_chunk(slot & s) {
    while (s.next_capture < s.plan.captures.size() && s.plan.captures[s.next_capture].n_tokens == s.n_past) {
        if (s.use_cache) {
            capture(s, s.plan.captures[s.next_capture]);
        }
        s.next_capture++;
    }
    if (s.n_past < s.prompt_size()) {
        return;
    }
    // The whole prompt is in: keep the recurrent state at the prompt end (the entry's own
    // restore point once generation has moved the sequence on), then sample.
    if (s.use_cache && hybrid_) {
        const auto t0 = clock::now();
        const size_t size = ctx_->state_size(s.seq, true);
        if (store_.reserve(size)) {
            s.reserved_bytes += size;
            s.prompt_end_recurrent = cache::make_blob(ctx_->get_state(s.seq, true));
        }
        s.stats.capture_s += seconds_since(t0);
    }
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
    commit(s);
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

void scheduler::impl::fail(slot & s, int status, const std::string & type, const std::string & msg) {
    if (s.seq >= 0) {
        if (s.use_cache) {
            store_.abandon(s.plan, s.reserved_bytes);
        }
        release_seq(s.seq);
        s.seq = -1;
    }
    generation_event e;
    e.type = generation_event::kind::error;
    e.http_status = status;
    e.error_type = type;
    e.message = msg;
    if (s.req) {
        record(s, finish_reason::error);
    }
    e.stats = s.stats;
    spdlog::warn("request {}: failed ({}): {}", s.req ? s.req->id : 0, status, msg);
    if (s.req) {
        s.req->events->push(std::move(e));
    }
    reset_slot(s);
}

void scheduler::impl::commit(slot & s) {
    const auto t0 = clock::now();
    if (s.seq < 0) {
        return;
    }
    if (!s.use_cache) {
        release_seq(s.seq);
        s.seq = -1;
        return;
    }
    cache::trace_scope trace(store_.trace(), s.req->id);
    // The entry is the state at the prompt end for hybrids (generation moved the recurrent
    // state on: put the prompt-end state back and trim the KV), or everything decoded for
    // dense models (any prefix of their KV is a restore point). A request cancelled during
    // prefill holds whole chunks: its state at n_past is exact.
    cache::commit_input in;
    in.k = s.key;
    int32_t n_keep = s.n_past;
    if (hybrid_ && s.n_past > s.prompt_size()) {
        n_keep = s.prompt_size();
        if (!s.prompt_end_recurrent || !ctx_->set_state(s.seq, *s.prompt_end_recurrent, true) ||
            !ctx_->seq_rm(s.seq, n_keep, -1)) {
            LINEAGE_TRACE(store_.trace(), "not stored: {}",
                          s.prompt_end_recurrent ? "the engine could not put the prompt-end state back"
                                                 : "the prompt-end state was not kept (no RAM for it)");
            store_.abandon(s.plan, s.reserved_bytes);
            release_seq(s.seq);
            s.seq = -1;
            return;
        }
    }
    cache::tokens all = s.req->prompt;
    all.insert(all.end(), s.generated.begin(), s.generated.end());
    in.toks.assign(all.begin(), all.begin() + n_keep);
    in.seq = s.seq;
    in.device_bytes = ctx_->state_size(s.seq, false);
    in.final_recurrent = n_keep == s.prompt_size() ? s.prompt_end_recurrent : nullptr;
    in.captured = std::move(s.captured);
    in.reserved_bytes = s.reserved_bytes;
    in.history_tokens = s.req->cache.history_tokens;
    if (s.plan.absorbs) {
        in.absorbed = std::move(s.plan);
    }
    if (!store_.commit(std::move(in), now_s())) {
        release_seq(s.seq);
    }
    s.seq = -1;
    drain_released();
    s.stats.commit_s = seconds_since(t0);
}

void scheduler::impl::record(slot & s, finish_reason why) {
    // Prompt tokens the engine computed: the prefill reached n_past (capped at the prompt; the
    // rest is decode) from the restore point.
    s.stats.prefilled_tokens = std::max(0, std::min(s.n_past, s.prompt_size()) - s.stats.cached_tokens);
    metrics_.record(s.stats, why, s.use_cache);
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
        if (impl_->disk_) {
            s.disk = impl_->disk_->get_stats();
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
        impl_->drain_released();
        if (impl_->disk_) {
            std::tie(r.disk_files_freed, r.disk_bytes_freed) = impl_->disk_->reset();
            impl_->disk_->take_completions();  // writes finished before the reset: their files are gone
        }
        spdlog::info("cache: reset freed {} entries, {} bytes", r.entries_freed, r.bytes_freed);
        return r;
    });
}

void scheduler::stop() {
    impl_->stop();
}

}  // namespace lineage::scheduler
