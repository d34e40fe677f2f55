// scheduler: the engine thread. It owns the llama_context (through engine::context), the
// cache's device and RAM tiers, and the queue of admitted requests; it runs continuous
// batching: up to n_parallel sequences prefill/decode together in one llama_decode per step,
// and new requests join between steps (docs/architecture.md "Threads and checked rules").
// Thread safety: submit(), readiness(), snapshot_stats(), snapshot_metrics(), reset_cache(), reload_lora() and stop() may be
// called from any thread; everything else happens on the engine thread. Ownership: move-only owner of the
// engine thread; the model must outlive it.
#pragma once

#include "cache/config.h"
#include "cache/stats.h"
#include "cache/store/store.h"
#include "cache/tier/lower_tier.h"
#include "engine/device.h"
#include "scheduler/metrics.h"
#include "scheduler/request.h"
#include "scheduler/request_log.h"
#include "util/status.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace lineage::engine {
class model;
}

namespace lineage::scheduler {

struct params {
    int32_t n_parallel = 4;     ///< sequences decoded together (--parallel)
    int32_t n_ctx = 0;          ///< tokens one sequence may hold; 0 = n_ctx_train capped at 16384 (--ctx-size)
    bool kv_unified = false;    ///< one KV pool shared by all sequences (--kv-unified); see engine::context_params
    /** Move a restored sequence next to a running one's id (--place-sequences; per-sequence KV
     *  buffers only): scheduler::impl::place_next_to_active. */
    bool place_sequences = true;
    int32_t n_batch = 512;      ///< tokens per llama_decode call = prefill chunk size (--batch-size)
    int32_t n_ubatch = 512;     ///< physical micro-batch (--ubatch-size)
    int32_t n_threads = 0;      ///< 0 = hardware threads (--threads)
    int32_t n_threads_batch = 0;  ///< threads of a prefill; 0 = n_threads (--threads-batch)
    int32_t flash_attn = -1;    ///< -1 auto, 0 off, 1 on (--flash-attn); engine::context_params
    std::string type_k = "f16"; ///< KV cache type of K (--cache-type-k); engine::kv_cache_types()
    std::string type_v = "f16"; ///< KV cache type of V (--cache-type-v)
    /** Bytes the device may hold for the model and the KV cache of every sequence, active and
     *  parked (--cache-device-bytes); 0 = `device`'s memory. Startup refuses a plan above it
     *  (memory_plan.h). */
    uint64_t device_budget_bytes = 0;
    /** The device's memory, read before the model was loaded (engine::read_device_memory). */
    engine::device_memory device;
    std::vector<std::string> lora_paths;  ///< LoRA adapter GGUFs, id = index (--lora, --lora-scaled)
    /** The multimodal projector (--mmproj) that decodes requests' images; nullptr = none (the
     *  routes then refuse images). Borrowed: outlives the scheduler. */
    engine::projector * projector = nullptr;
    cache::config cache;
};

class scheduler {
public:
    /** Creates the context and starts the engine thread. Throws std::runtime_error when the
     *  context cannot be created (e.g. n_ctx too large for memory). */
    scheduler(const engine::model & m, const params & p);
    ~scheduler();  ///< stops the engine thread; pending requests get an error event
    scheduler(const scheduler &) = delete;
    scheduler & operator=(const scheduler &) = delete;

    /** Queues `req`; its events arrive on req->events. Never blocks on the engine. */
    void submit(std::shared_ptr<generation_request> req);

    /** True while a request (not a warm-up) is queued or running; read without waiting for the
     *  engine thread (an atomic it updates each turn of its loop, and submit() sets). The
     *  warm-up renderer waits for false before it renders (server/run/warmup.h). */
    bool serving() const;

    /** Largest prompt + completion a single sequence may hold, tokens. */
    int32_t max_sequence_tokens() const;

    /** Each tier below RAM and whether it is warm (cache::lower_tier::readiness; GET /ready);
     *  empty when none is open. Does not wait for the engine thread. */
    std::vector<std::pair<std::string, cache::tier_state>> readiness() const;

    /** A consistent copy of the cache counters (taken on the engine thread). */
    cache::stats snapshot_stats();

    /** A consistent copy of the per-request counters and histograms (GET /metrics). Does not
     *  wait for the engine thread. */
    metrics_snapshot snapshot_metrics() const;

    /** The entries and anchors of the device and RAM tiers with their restore points, most
     *  recently used first (taken on the engine thread; GET /v1/cache/entries). */
    std::vector<cache::entry_view> snapshot_entries();

    /** The last requests that ended and their outcomes over the last 15 minutes in 10-second
     *  buckets (request_log.h), of `tenant` (nullptr: all). Does not wait for the engine thread. */
    request_log_snapshot snapshot_requests(const std::string * tenant) const;

    /** Frees every cache entry (POST /v1/cache/reset): device, RAM, tier-2 files and this
     *  model's tier-3 entries in Redis (every replica's; redis_tier::reset); returns what was
     *  freed. */
    cache::reset_result reset_cache();

    /** Frees the entries of `tenant` (cache::key::tenant; a tenant's POST /v1/cache/reset) in
     *  every tier: device, RAM, its tier-2 files and its tier-3 entries in Redis. REQUIRES:
     *  `tenant` non-empty. */
    cache::reset_result reset_cache_of(const std::string & tenant);
    /** The reset generation: how many resets (of everything or of a tenant) have run. A request
     *  stamped with it when it arrives (cache_hints::reset_epoch) and that a reset of its scope
     *  follows stores nothing: requests in flight, queued or still being prepared then, and the
     *  warm-ups of their replies. Any thread. */
    uint64_t reset_epoch() const;
    /** Reloads LoRA adapter `id` from its file (its content changed) once no request is in
     *  flight: admission pauses until then, requests queued meanwhile wait. From then on the
     *  engine's adapter generation is `epoch` (generation_request::lora_epoch). Returns ok on
     *  success, else why llama.cpp refused the file (the old adapter then stays loaded).
     *  REQUIRES: id < params.lora_paths.size(). */
    util::status reload_lora(size_t id, uint64_t epoch);

    /** Stops accepting work and joins the engine thread. Idempotent. */
    void stop();

    struct impl;

private:
    std::unique_ptr<impl> impl_;
};

}  // namespace lineage::scheduler
