// cache::blob_pool: see blob_pool.h.
#include "cache/blob_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <utility>

namespace lineage::cache {

namespace {

constexpr size_t huge_page = 2u << 20;

/** Asks the kernel to back the 2 MiB-aligned part of [p, p+n) with transparent huge pages
 *  (madvise MADV_HUGEPAGE). Called on a fresh buffer before its first touch: a 4 KiB page fault
 *  costs ~15 us on the 2-core dev VM, where a fresh 40 MiB buffer took 131 ms to fill against
 *  11 ms with huge pages (bench_cache BM_FreshBuffer; docs/architecture.md "Recycled state
 *  buffers"). No effect where THP is "never"; failure is harmless (the buffer keeps 4 KiB pages). */
void advise_huge_pages(void * p, size_t n) {
    const auto lo = (reinterpret_cast<uintptr_t>(p) + huge_page - 1) & ~(uintptr_t{huge_page} - 1);
    const auto hi = (reinterpret_cast<uintptr_t>(p) + n) & ~(uintptr_t{huge_page} - 1);
    if (hi > lo) {
        (void) madvise(reinterpret_cast<void *>(lo), hi - lo, MADV_HUGEPAGE);
    }
}

}  // namespace

std::vector<stat_figure> blob_pool_stats::describe() const {
    return {
        figure_series("reused", reused, "state_buffers_total",
                      "State buffers of 256 KiB or more taken for captures and loads, by source: reused (a freed "
                      "buffer kept resident), allocated (new memory, a page fault per 4 KiB page).",
                      "source", "reused"),
        figure_series("allocated", allocated, "state_buffers_total", "", "source", "allocated"),
        figure("idle_buffers", idle_buffers),
        figure("idle_bytes", idle_bytes, "state_buffer_idle_bytes",
               "Bytes of freed state buffers kept for reuse (resident, outside the cache's budget)."),
        figure("max_idle_bytes", max_idle_bytes),
    };
}

blob_pool & blob_pool::instance() {
    // Never destroyed: blobs held by statics or by threads still running at exit return their
    // buffers through it.
    static blob_pool * pool = new blob_pool;
    return *pool;
}

void blob_pool::configure(int64_t max_buffers, uint64_t max_idle_bytes, double max_idle_s) {
    util::lock_guard lk(mu_);
    max_buffers_ = std::max<int64_t>(0, max_buffers);
    max_idle_bytes_ = max_idle_bytes;
    max_idle_s_ = std::max(0.0, max_idle_s);
    // Over the new bounds: the oldest go first.
    while (!idle_.empty() &&
           (static_cast<int64_t>(idle_.size()) > max_buffers_ || idle_bytes_ > max_idle_bytes_)) {
        idle_bytes_ -= idle_.front().b.capacity();
        idle_.erase(idle_.begin());
    }
}

blob blob_pool::take(size_t n) {
    blob out;
    if (n >= min_bytes) {
        util::lock_guard lk(mu_);
        const auto now = clock::now();
        trim_locked(now, false);
        // The smallest idle buffer that fits, and not one much larger (kept for larger states).
        auto best = idle_.end();
        for (auto it = idle_.begin(); it != idle_.end(); ++it) {
            const size_t cap = it->b.capacity();
            if (cap >= n && cap <= n + n / 4 && (best == idle_.end() || cap < best->b.capacity())) {
                best = it;
            }
        }
        if (best != idle_.end()) {
            out = std::move(best->b);
            idle_bytes_ -= out.capacity();
            idle_.erase(best);
            ++reused_;
        } else {
            ++allocated_;
        }
    }
    if (out.capacity() < n && n >= 2 * huge_page) {
        out.reserve(n);  // allocated, not yet touched: resize() below faults its pages in
        advise_huge_pages(out.data(), n);
    }
    out.resize(n);  // within the capacity of a reused buffer: no allocation
    return out;
}

void blob_pool::give(blob && b) {
    const size_t cap = b.capacity();
    if (cap < min_bytes) {
        return;
    }
    blob dropped;  // freed after the lock is released
    {
        util::lock_guard lk(mu_);
        const auto now = clock::now();
        trim_locked(now, false);
        if (max_buffers_ == 0 || cap > max_idle_bytes_) {
            dropped = std::move(b);
            return;
        }
        // Room by dropping the oldest idle buffers: the newest sizes are the ones in use.
        while (!idle_.empty() &&
               (static_cast<int64_t>(idle_.size()) >= max_buffers_ || idle_bytes_ + cap > max_idle_bytes_)) {
            idle_bytes_ -= idle_.front().b.capacity();
            idle_.erase(idle_.begin());
        }
        idle_bytes_ += cap;
        idle_.push_back({std::move(b), now});
    }
}

void blob_pool::trim(bool all) {
    util::lock_guard lk(mu_);
    trim_locked(clock::now(), all);
}

void blob_pool::trim_locked(clock::time_point now, bool all) {
    const auto max_age = std::chrono::duration<double>(max_idle_s_);
    // A plain loop, not erase_if with a lambda: -Wthread-safety does not see the lambda run
    // under mu_.
    for (auto it = idle_.begin(); it != idle_.end();) {
        if (all || now - it->since > max_age) {
            idle_bytes_ -= it->b.capacity();
            it = idle_.erase(it);
        } else {
            ++it;
        }
    }
}

blob_pool_stats blob_pool::stats() const {
    util::lock_guard lk(mu_);
    blob_pool_stats s;
    s.reused = reused_;
    s.allocated = allocated_;
    s.idle_buffers = static_cast<int64_t>(idle_.size());
    s.idle_bytes = idle_bytes_;
    s.max_idle_bytes = max_idle_bytes_;
    return s;
}

blob take_blob(size_t n) { return blob_pool::instance().take(n); }

blob_ptr make_blob(blob b) {
    return blob_ptr(new blob(std::move(b)), [](const blob * p) {
        // The last reference is gone: nothing reads the buffer any more.
        blob_pool::instance().give(std::move(*const_cast<blob *>(p)));
        delete p;
    });
}

}  // namespace lineage::cache
