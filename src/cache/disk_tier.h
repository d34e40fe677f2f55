// cache::disk_tier: tier T2 (DESIGN.md "Tiers"; issue 6). Entries written by the engine
// thread's write-behind (idle, leaving RAM, shutdown) become blob files (disk_format.h) in
// --cache-dir with a SQLite index (WAL) of their key, tokens, restore points, sizes and last use,
// so that the first requests after a restart restore from disk instead of a cold prefill.
//
// Threads: the disk thread owns the files and the SQLite connection; the engine thread calls
// best() (an in-memory catalog indexed by bucket, disk_catalog.h, under a mutex), queues write/load/remove jobs and takes
// completions (DESIGN.md "Threads and ownership": queues between them). Loads jump the queue.
//
// Rules:
// - file ids come from the index (one past the largest indexed id, never a file name); a write
//   goes to <id>.tmp, is fsync'd, renamed to <id>.lcache (directory fsync'd), then indexed; only
//   then are the files it supersedes (its ancestors) deleted;
// - usage stays <= capacity_bytes at all times: before a write, least recently used files are
//   deleted, anchors last (seed 000: "the last candidates, not exempt"); a write larger than
//   the cap is skipped (WARN once); a write never evicts itself;
// - damage (issue 15) is counted by kind (disk_stats::damage), deleted and logged, never served:
//   a file that fails its checks on load, or whose identity (id, bucket, session, tokens in its
//   header) differs from its index row or from the request's prompt, is a counted miss; only
//   regular files are opened, and sizes are checked before allocating;
// - at startup: every indexed file's header is checked against its row; rows with a damaged
//   column are dropped with their files; *.tmp files are deleted; sound .lcache files missing
//   from the index are indexed again from their headers, others deleted; rows of an older format
//   are discarded, of another model or a newer format left alone (one INFO line, counts); an
//   index that fails PRAGMA quick_check or a read is moved to index.sqlite.damaged and rebuilt
//   from the files' headers (WARN, counted);
// - one server per directory: an flock on <dir>/lock; a second server fails to open it.
#pragma once

#include "cache/disk_catalog.h"
#include "cache/disk_format.h"
#include "cache/disk_index.h"
#include "cache/stats.h"
#include "cache/types.h"
#include "util/thread_annotations.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace lineage::cache {

struct disk_config {
    std::string dir;                    ///< created if missing
    uint64_t capacity_bytes = 16ull << 30;
    std::string model;                  ///< model_fingerprint() of the served model
    /** The restore rule (restore_rule.h), the store's: hybrid (restore points inside a file are
     *  its checkpoints only), APC. */
    restore_settings rule;
};

/** What the store consults for something longer than its best device/RAM restore point. */
class disk_lookup {
public:
    virtual ~disk_lookup() = default;
    /** Longest restore point of a file in `bucket` for `prompt`, strictly longer than
     *  `longer_than` tokens and at most |prompt| - 1, chosen by the rule memory uses
     *  (restore_rule.h: in-session first, another session's only when strictly longer, the same
     *  tie order and APC clamp). */
    virtual std::optional<disk_candidate> best(const std::string & bucket, const std::string & session,
                                               const tokens & prompt, int32_t longer_than) const = 0;
};

/** Why a tier-2 file is deleted (disk_stats counts superseded and capacity; the log names it). */
enum class file_removal { superseded, capacity, damaged, reset };
std::string_view to_string(file_removal r);

/** A write the engine thread hands over: the entry's record and the files it supersedes. */
struct disk_write {
    uint64_t entry_id = 0;            ///< store entry id (for the completion)
    disk_record rec;                  ///< rec.model is filled by the tier
    std::vector<file_id> ancestors;   ///< deleted once rec is durable
    double last_use = 0;              ///< wall-clock seconds (LRU order across restarts)
};

/** What a load must find besides the file its row describes: the request's bucket and the
 *  prompt's first n_restore tokens (the restored prefix must equal them). Empty: not checked. */
struct disk_expect {
    std::string bucket;
    tokens prefix;
};

struct disk_completion {
    uint64_t entry_id = 0;
    file_id file = 0;                 ///< 0: not written (see result)
    util::status result;              ///< why it was not written
};

class disk_tier : public disk_lookup {
public:
    /** Opens (creating) cfg.dir and its index, cleans up after a crash, loads the catalog of
     *  this model and starts the disk thread. Throws std::runtime_error with the reason when
     *  the directory or index cannot be opened or another server holds the directory. */
    explicit disk_tier(disk_config cfg);
    /** Finishes the queued jobs (writes included) and joins the disk thread. */
    ~disk_tier() override;
    disk_tier(const disk_tier &) = delete;
    disk_tier & operator=(const disk_tier &) = delete;

    std::optional<disk_candidate> best(const std::string & bucket, const std::string & session,
                                       const tokens & prompt, int32_t longer_than) const override;

    /** Queues a write (write-behind). */
    void write(disk_write w);
    /** Queues a load ahead of writes; `on_done` runs on the disk thread after the future is
     *  ready (to wake the engine thread). A damaged or missing file, or one whose identity is
     *  not its row's or does not hold `want` (error identity), comes back as an error, is
     *  counted as damage and deleted; the request then prefills cold. Marks the file used (LRU). */
    std::future<disk_load_result> load(file_id id, disk_expect want = {}, std::function<void()> on_done = {});
    /** Counts a write forced by --cache-disk-max-unwritten-s and the engine thread's seconds
     *  spent reading its state (disk_stats::overdue_writes). */
    void count_overdue_write(double read_seconds);
    /** Queues the deletion of files (e.g. superseded ones). */
    void remove(std::vector<file_id> ids);
    /** Writes done or failed since the last call. */
    std::vector<disk_completion> take_completions();
    /** Blocks until every queued job is done. */
    void drain();
    /** Deletes every file of this model (POST /v1/cache/reset); returns files and bytes freed. */
    std::pair<int64_t, uint64_t> reset();
    /** Deletes the files of this model whose key has tenant `tenant` (a tenant's POST
     *  /v1/cache/reset), after the jobs queued before it (writes included); returns files and
     *  bytes freed. */
    std::pair<int64_t, uint64_t> reset_tenant(const std::string & tenant);

    disk_stats get_stats() const;
    const disk_config & cfg() const { return cfg_; }
    /** The catalog's invariants (disk_catalog.h), and files/bytes/anchor_files equal to the
     *  catalog's count and sums; throws std::logic_error naming the first broken one. */
    void check_invariants() const;

private:
    using entry = disk_catalog::file;
    struct job {
        enum class kind { write, load, remove, reset, barrier } k = kind::barrier;
        disk_write w;
        file_id id = 0;
        disk_expect want;
        std::vector<file_id> ids;
        std::shared_ptr<std::promise<disk_load_result>> load_done;
        std::function<void()> on_done;
        std::shared_ptr<std::promise<std::pair<int64_t, uint64_t>>> reset_done;
        std::optional<std::string> tenant;  ///< reset: only this tenant's files
        std::shared_ptr<std::promise<void>> barrier;
    };

    /** Constructor only, before the disk thread starts: nothing else can hold mu_. Throws
     *  index_damaged (the caller moves the index aside and calls it again). */
    void startup_scan() NO_THREAD_SAFETY_ANALYSIS;
    /** Startup: checks an indexed file of this model against its row; the damage kind or "". */
    std::string check_indexed(const entry & f) const;
    /** Startup: indexes again a sound file of `path` missing from the index; false when it is
     *  not one (the caller deletes it). */
    bool reindex(const std::string & path, const std::string & stem) NO_THREAD_SAFETY_ANALYSIS;
    void count_damage(disk_load_error e);
    void count_damage(const std::string & kind) REQUIRES(mu_);
    void run();
    void do_write(job & j);
    void do_load(job & j);
    void delete_file(file_id id, file_removal why);
    bool make_room(uint64_t bytes);
    std::string path_of(file_id id, const char * ext = ".lcache") const;
    void push(job j, bool front);
    std::pair<int64_t, uint64_t> queue_reset(std::optional<std::string> tenant);

    disk_config cfg_;
    int lock_fd_ = -1;
    std::unique_ptr<disk_index> index_;  // disk thread only (and the constructor)

    mutable util::mutex mu_;
    disk_catalog catalog_ GUARDED_BY(mu_);
    disk_stats stats_ GUARDED_BY(mu_);
    std::vector<disk_completion> completions_ GUARDED_BY(mu_);
    file_id next_id_ = 1;               // disk thread: one past the largest indexed id
    bool warned_too_large_ = false;     // disk thread

    mutable util::mutex qmu_;
    std::condition_variable qcv_;
    std::deque<job> queue_ GUARDED_BY(qmu_);
    bool busy_ GUARDED_BY(qmu_) = false;  // a job is running
    bool stopping_ GUARDED_BY(qmu_) = false;
    std::condition_variable idle_cv_;
    std::thread thread_;
};

}  // namespace lineage::cache
