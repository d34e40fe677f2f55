// server::memory_trim: gives the heap memory that requests freed back to the system.
// Why: glibc keeps freed memory in its arenas (one per HTTP thread, up to 8 per core) for
// reuse and returns only the top of each heap: after hostile bodies whose JSON and template
// values took gigabytes for a moment, RSS stayed at 14 GB for a server whose baseline is
// 138 MB, and one malloc_trim(0) brought it back to 149 MB (tiny-qwen35; the
// figures are in docs/prompt-cache.md "Security and failure model"). malloc_trim walks every
// arena and returns each free page (madvise), so it runs on a thread of its own, at most once
// per interval and only when requests ended since the last run (an idle server costs nothing).
// Thread safety: note_request_end() and trims() from any thread. Ownership: owns its thread,
// joined by the destructor.
#pragma once

#include "util/thread_annotations.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <thread>

namespace lineage::server {

class memory_trimmer {
public:
    /** Starts the thread that trims every `interval_s` seconds (> 0; more than a day counts
     *  as a day) when a request ended since the last trim; `interval_s` == 0: no thread,
     *  never trims. */
    explicit memory_trimmer(double interval_s);
    ~memory_trimmer();
    memory_trimmer(const memory_trimmer &) = delete;
    memory_trimmer & operator=(const memory_trimmer &) = delete;

    /** Records that a request ended (its response was written); lock-free. */
    void note_request_end() { ended_.fetch_add(1, std::memory_order_relaxed); }

    /** malloc_trim calls made so far (tests, logs). */
    uint64_t trims() const { return trims_.load(std::memory_order_relaxed); }

private:
    void run(double interval_s);

    std::atomic<uint64_t> ended_{0};
    std::atomic<uint64_t> trims_{0};
    util::mutex mu_;
    std::condition_variable cv_;
    bool stop_ GUARDED_BY(mu_) = false;
    std::thread thread_;
};

}  // namespace lineage::server
