// util::lower_this_thread_priority, util::run_at_lower_priority: work at a higher nice value (a
// lower CPU priority) than the engine's threads. Why: on a machine with few cores, the HTTP threads' CPU
// work (parsing a multi-megabyte body, rendering a chat template, tokenizing, probing a grammar's
// cost) competes with the engine's compute threads, and ggml's threads wait for each other at
// every operation, so one preempted engine thread stalls the whole step: a client sending costly
// bodies slowed every other request's prefill. The kernel then gives the HTTP work what the
// engine leaves.
// Thread safety: affects only the calling thread (Linux: nice is per thread); any thread.
#pragma once

#include <cerrno>

#include <exception>
#include <thread>
#include <utility>

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace lineage::util {

/** Raises the calling thread's nice value to `nice` (1-19) unless it is already there or higher;
 *  once per thread (later calls are free). A thread cannot lower its nice value again without
 *  CAP_SYS_NICE, so this is for threads that stay at the lower priority (the HTTP workers).
 *  Returns false when the kernel refused (the thread keeps its priority); 0 or less: nothing. */
inline bool lower_this_thread_priority(int nice) {
    thread_local int done = -1;  // the nice value set (or found) for this thread; -1: not yet
    if (nice <= 0 || done >= nice) {
        return true;
    }
    const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
    errno = 0;
    const int now = ::getpriority(PRIO_PROCESS, tid);
    if (errno == 0 && now >= nice) {
        done = now;
        return true;
    }
    if (::setpriority(PRIO_PROCESS, tid, nice) != 0) {
        done = nice;  // not asked again
        return false;
    }
    done = nice;
    return true;
}

/** Runs `f` on a thread of its own at nice `nice` (lower_this_thread_priority) and waits for it;
 *  an exception `f` throws is thrown here. For one request's costly preparation: the calling
 *  thread keeps its priority for the requests it serves next (a thread cannot take a lower nice
 *  value back without CAP_SYS_NICE). `nice` 0 or less: `f` runs here. */
template <class F>
void run_at_lower_priority(int nice, F && f) {
    if (nice <= 0) {
        f();
        return;
    }
    std::exception_ptr failure;
    std::thread t([&] {
        lower_this_thread_priority(nice);
        try {
            f();
        } catch (...) {
            failure = std::current_exception();
        }
    });
    t.join();
    if (failure) {
        std::rethrow_exception(failure);
    }
}

}  // namespace lineage::util
