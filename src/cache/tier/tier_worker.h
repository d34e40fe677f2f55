// cache::tier_worker: the one queue and thread every tier below RAM runs its I/O on (disk,
// Redis; docs/architecture.md "Tiers below RAM: one worker"). A tier keeps only its own I/O
// (tier_io: write a record, load one, remove, reset, a periodic tick); the worker owns the job
// queue, the thread, the order (loads jump the queue: a request waits on them), the bound on
// queued writes, the completions the engine thread collects, the barrier of drain(), and what
// happens when a job throws (a load comes back as an io error, a reset as nothing freed, a write
// as a failed completion), so that no tier can get one of these rules wrong or different.
// Threads: public methods are called from any thread (the engine thread, HTTP threads for
// reset); the tier_io methods run on the worker thread only, one job at a time.
// Ownership: borrows the tier_io, which must call stop() in its destructor before its own
// members go (the thread calls into it).
#pragma once

#include "cache/tier/copy_record.h"
#include "cache/types.h"
#include "util/status.h"
#include "util/thread_annotations.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace lineage::cache {

/** A write the engine thread hands over: the entry's record and the files it supersedes. */
struct tier_write {
    uint64_t entry_id = 0;            ///< store entry id (for the completion)
    copy_record rec;                  ///< rec.model is filled by the tier
    std::vector<copy_id> ancestors;   ///< deleted once rec is durable
    double last_use = 0;              ///< wall-clock seconds (LRU order across restarts)
};

/** What a load must find besides the file its row describes: the request's bucket and the
 *  prompt's first n_restore tokens (the restored prefix must equal them). Empty: not checked. */
struct tier_expect {
    std::string bucket;
    tokens prefix;
    checkpoint_filter keep{};  ///< the checkpoints the restore uses (a file tier reads only these into blobs)
};

/** The outcome of a write, collected by the engine thread (take_completions). */
struct tier_completion {
    uint64_t entry_id = 0;
    copy_id file = 0;                 ///< 0: not written (see result); else the tier's id of the copy
    util::status result;              ///< why it was not written
    uint64_t bytes = 0;               ///< written: the copy's size, bytes (the tier's write_now sets it)
    double seconds = 0;               ///< the worker's time for the write, queueing excluded (tier_cost)
};

/** What a tier does on its worker thread, one call at a time. */
class tier_io {
public:
    virtual ~tier_io() = default;
    /** Writes `w` (rec.model is the tier's to fill); the completion says where or why not. */
    virtual tier_completion write_now(tier_write & w) = 0;
    /** Reads copy `id` and checks it against `want`; damage and absence come back as errors. */
    virtual tier_load_result load_now(copy_id id, const tier_expect & want) = 0;
    /** Deletes copies the store no longer needs (superseded). Default: nothing to do. */
    virtual void remove_now(const std::vector<copy_id> & ids) { (void) ids; }
    /** Deletes every copy of this model (`tenant`: only that tenant's); returns copies and
     *  bytes freed. */
    virtual std::pair<int64_t, uint64_t> reset_now(const std::optional<std::string> & tenant) = 0;
    /** Periodic work between jobs, every worker_config::tick_s (Redis reads its index); returns
     *  true when more is due at once. Default: none. */
    virtual bool tick_now() { return false; }
};

struct worker_config {
    std::string name;              ///< in log lines: "disk tier", "tier 3"
    /** Most writes queued at once; a write past it is dropped (a failed completion, "queue
     *  full") rather than holding its state in memory while the tier lags. 0 = no bound. */
    size_t max_queued_writes = 0;
    /** Seconds between tier_io::tick_now calls while idle; 0 = never. */
    double tick_s = 0;
};

class tier_worker {
public:
    tier_worker(tier_io & io, worker_config cfg);
    /** stop() */
    ~tier_worker();
    tier_worker(const tier_worker &) = delete;
    tier_worker & operator=(const tier_worker &) = delete;

    /** Starts the thread; call once the tier is ready for its first job. */
    void start();
    /** Finishes every queued job (writes included), then joins the thread. Idempotent. */
    void stop();

    /** Queues a write behind the jobs before it; false when dropped by the bound (its failed
     *  completion is recorded). */
    bool write(tier_write w);
    /** Queues a load ahead of every write (behind earlier loads); `on_done` runs on the worker
     *  thread once the future is ready (to wake the engine thread). */
    std::future<tier_load_result> load(copy_id id, tier_expect want, std::function<void()> on_done = {});
    /** Queues the deletion of copies (no-op for an empty list). */
    void remove(std::vector<copy_id> ids);
    /** After the jobs queued before it, runs tier_io::reset_now; blocks until done. */
    std::pair<int64_t, uint64_t> reset(std::optional<std::string> tenant);
    /** Blocks until every job queued before it is done; `tick_first`: run a tick before that. */
    void drain(bool tick_first = false);
    /** Asks for a tick before the next job that is not a load. */
    void request_tick();
    /** Writes done, failed or dropped since the last call. */
    std::vector<tier_completion> take_completions();
    /** Jobs waiting (not the one running). */
    int64_t queued() const;

private:
    struct job {
        enum class kind { write, load, remove, reset, barrier } k = kind::barrier;
        tier_write w;
        copy_id id = 0;
        tier_expect want;
        std::vector<copy_id> ids;
        std::shared_ptr<std::promise<tier_load_result>> load_done;
        std::function<void()> on_done;
        std::shared_ptr<std::promise<std::pair<int64_t, uint64_t>>> reset_done;
        std::optional<std::string> tenant;
        std::shared_ptr<std::promise<void>> barrier;
    };

    void run();
    void execute(job & j);
    void fail(job & j, const std::string & what);
    void push(job j, bool front);
    void complete(tier_completion c);

    tier_io & io_;
    const worker_config cfg_;

    mutable util::mutex mu_;
    std::condition_variable cv_;
    std::deque<job> queue_ GUARDED_BY(mu_);
    size_t queued_writes_ GUARDED_BY(mu_) = 0;
    bool stopping_ GUARDED_BY(mu_) = false;
    bool tick_now_ GUARDED_BY(mu_) = false;
    std::vector<tier_completion> completions_ GUARDED_BY(mu_);
    std::thread thread_;
};

}  // namespace lineage::cache
