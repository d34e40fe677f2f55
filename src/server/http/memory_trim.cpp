// server::memory_trim: the trimming thread (memory_trim.h).
#include "server/http/memory_trim.h"

#include <malloc.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

namespace lineage::server {

memory_trimmer::memory_trimmer(double interval_s) {
    if (interval_s > 0) {
        thread_ = std::thread([this, interval_s] { run(interval_s); });
    }
}

memory_trimmer::~memory_trimmer() {
    {
        util::lock_guard lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) {
        thread_.join();
    }
}

void memory_trimmer::run(double interval_s) {
    // At most a day: a longer one (1e300) would overflow the clock's nanoseconds.
    const auto interval = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(std::min(interval_s, 86400.0)));
    uint64_t seen = 0;
    for (;;) {
        {
            const auto deadline = std::chrono::steady_clock::now() + interval;
            util::unique_lock lock(mu_);
            while (!stop_ && lock.wait_until(cv_, deadline) != std::cv_status::timeout) {
            }
            if (stop_) {
                return;
            }
        }
        const uint64_t ended = ended_.load(std::memory_order_relaxed);
        if (ended == seen) {
            continue;
        }
        seen = ended;
        const auto t0 = std::chrono::steady_clock::now();
        const int released = malloc_trim(0);
        trims_.fetch_add(1, std::memory_order_relaxed);
        spdlog::debug("memory trim: {} in {:.1f} ms", released ? "memory released" : "nothing to release",
                      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
}

}  // namespace lineage::server
