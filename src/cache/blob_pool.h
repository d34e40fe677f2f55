// cache::blob_pool: recycles the buffers of freed state blobs, so that a capture copies a state
// into memory that is already resident instead of a fresh allocation.
// Why: a state blob of a hybrid model is MBs (a Qwen3.5 recurrent state is ~5 MB on bench-qwen35)
// and blobs of 4 MiB and more are mmap'd fresh (main.cpp's M_MMAP_THRESHOLD), so every capture
// paid a page fault per 4 KiB page: 17.5 ms to fill a fresh 5 MB buffer against 1.0 ms for a
// resident one on the 2-core dev VM (docs/architecture.md "Recycled state buffers"). A warm turn
// takes ~6 such captures (turn, guard, prompt end, reply checkpoints), and as many blobs of the
// same size are freed by the turn before it (thinned checkpoints, unkept reply candidates), so
// the freed buffers are handed to the next captures.
// Bound: at most `max_buffers` idle buffers and `max_idle_bytes` in all; a buffer idle for
// longer than `max_idle_s` is freed by the next call that touches the pool. Blobs under
// `min_bytes` (cheap to allocate) are never pooled.
// Thread safety: every function may be called from any thread (blobs are freed by whichever
// thread drops the last reference: the engine thread, a tier thread, an HTTP thread).
#pragma once

#include "cache/figure.h"
#include "cache/types.h"
#include "util/thread_annotations.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace lineage::cache {

/** Counters of the process-wide pool (GET /v1/cache/stats "buffer_pool"). */
struct blob_pool_stats {
    int64_t reused = 0;           ///< take() calls served by an idle buffer
    int64_t allocated = 0;        ///< take() calls of at least min_bytes that allocated
    int64_t idle_buffers = 0;     ///< buffers held for reuse now
    uint64_t idle_bytes = 0;      ///< their capacity, bytes (resident: counted in the process's RSS)
    uint64_t max_idle_bytes = 0;  ///< the bound on idle_bytes

    /** Every figure, in the order GET /v1/cache/stats lists them under "buffer_pool"; on /metrics:
     *  lineage_prompt_cache_state_buffers_total{source} and _state_buffer_idle_bytes. */
    std::vector<stat_figure> describe() const;
};

class blob_pool {
public:
    using clock = std::chrono::steady_clock;
    static constexpr size_t min_bytes = 256 * 1024;

    /** The process's pool (default bounds: 8 buffers, 64 MiB, 60 s idle). */
    static blob_pool & instance();

    /** Sets the bounds; idle buffers over them are freed now. */
    void configure(int64_t max_buffers, uint64_t max_idle_bytes, double max_idle_s);

    /** A blob of exactly `n` bytes: an idle buffer of capacity n..n*5/4 when there is one (its
     *  contents are unspecified: the caller overwrites them), else a new one (zeroed). */
    blob take(size_t n);

    /** Keeps the buffer of `b` for a later take() when it is at least min_bytes and the bounds
     *  allow, else frees it. */
    void give(blob && b);

    /** Frees every idle buffer older than max_idle_s (and all of them when `all`). */
    void trim(bool all = false);

    blob_pool_stats stats() const;

private:
    struct idle {
        blob b;
        clock::time_point since;
    };
    void trim_locked(clock::time_point now, bool all) REQUIRES(mu_);

    mutable util::mutex mu_;
    std::vector<idle> idle_ GUARDED_BY(mu_);
    uint64_t idle_bytes_ GUARDED_BY(mu_) = 0;
    int64_t max_buffers_ GUARDED_BY(mu_) = 8;
    uint64_t max_idle_bytes_ GUARDED_BY(mu_) = 64ull << 20;
    double max_idle_s_ GUARDED_BY(mu_) = 60.0;
    int64_t reused_ GUARDED_BY(mu_) = 0;
    int64_t allocated_ GUARDED_BY(mu_) = 0;
};

/** A blob of `n` bytes from the process's pool (blob_pool::take). */
blob take_blob(size_t n);

}  // namespace lineage::cache
