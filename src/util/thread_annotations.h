// util/thread_annotations.h: clang's thread-safety annotations (-Wthread-safety; as in LevelDB's
// port/thread_annotations.h), so that "guarded by" is checked by the compiler instead of being a
// comment, and a mutex type that carries them (libstdc++'s std::mutex has none). The macros
// expand to nothing on compilers without the analysis (GCC builds are unchanged).
// Build with the check: cmake -DLINEAGE_THREAD_SAFETY=ON (clang, -Wthread-safety -Werror).
// Thread safety: util::mutex is a std::mutex; util::lock_guard / unique_lock hold it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define LINEAGE_TSA(x) __attribute__((x))
#else
#define LINEAGE_TSA(x)
#endif

#define CAPABILITY(x) LINEAGE_TSA(capability(x))
#define SCOPED_CAPABILITY LINEAGE_TSA(scoped_lockable)
#define GUARDED_BY(x) LINEAGE_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) LINEAGE_TSA(pt_guarded_by(x))
#define REQUIRES(...) LINEAGE_TSA(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) LINEAGE_TSA(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) LINEAGE_TSA(acquire_capability(__VA_ARGS__))
#define RELEASE(...) LINEAGE_TSA(release_capability(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS LINEAGE_TSA(no_thread_safety_analysis)

namespace lineage::util {

/** std::mutex with the capability annotation. */
class CAPABILITY("mutex") mutex {
public:
    void lock() ACQUIRE() { m_.lock(); }
    void unlock() RELEASE() { m_.unlock(); }
    /** The wrapped mutex, for std::condition_variable (REQUIRES: held by the caller). */
    std::mutex & native() { return m_; }

private:
    std::mutex m_;
};

/** Holds `m` for the scope (std::lock_guard with the annotation). */
class SCOPED_CAPABILITY lock_guard {
public:
    explicit lock_guard(mutex & m) ACQUIRE(m) : m_(m) { m_.lock(); }
    ~lock_guard() RELEASE() { m_.unlock(); }
    lock_guard(const lock_guard &) = delete;
    lock_guard & operator=(const lock_guard &) = delete;

private:
    mutex & m_;
};

/** Holds `m` for the scope and can wait on a condition variable while holding it. */
class SCOPED_CAPABILITY unique_lock {
public:
    explicit unique_lock(mutex & m) ACQUIRE(m) : lk_(m.native()) {}
    ~unique_lock() RELEASE() {}
    unique_lock(const unique_lock &) = delete;
    unique_lock & operator=(const unique_lock &) = delete;

    /** cv.wait(): releases the mutex while waiting and holds it again on return (the analysis
     *  sees it held throughout, which is what the caller observes). Loop on the condition in
     *  the caller, where the analysis sees the guarded members read under the lock. */
    void wait(std::condition_variable & cv) { cv.wait(lk_); }
    /** cv.wait_until(deadline); std::cv_status::timeout when the deadline passed. */
    template <typename Clock, typename Duration>
    std::cv_status wait_until(std::condition_variable & cv, std::chrono::time_point<Clock, Duration> deadline) {
        return cv.wait_until(lk_, deadline);
    }

private:
    std::unique_lock<std::mutex> lk_;
};

}  // namespace lineage::util
