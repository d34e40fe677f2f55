// cache::disk_tier: tier T2 (docs/architecture.md "Tier 2 (disk) as implemented"). Entries written
// by the engine thread's write-behind (idle, leaving RAM, shutdown) become blob files
// (disk_format.h) in --cache-dir with a SQLite index (WAL) of their key, tokens, restore points,
// sizes and last use, so that the first requests after a restart restore from disk instead of a
// cold prefill.
//
// Threads: the tier's worker thread (tier_worker.h: the queue, loads first, completions) owns the
// files and the SQLite connection; the engine thread calls best() (an in-memory catalog indexed
// by bucket, disk_catalog.h, under a mutex), queues write/load/remove jobs and takes completions
// (docs/architecture.md "Threads and checked rules": queues between them).
//
// Rules:
// - file ids come from the index (one past the largest indexed id, never a file name); a write
//   goes to <id>.tmp, is fsync'd, renamed to <id>.lcache (directory fsync'd), then indexed; only
//   then are the files it supersedes (its ancestors) deleted;
// - usage stays <= capacity_bytes at all times: before a write, least recently used files are
//   deleted, anchors last (the last candidates, not exempt: docs/architecture.md "Entry states"); a
//   write larger than the cap is skipped (WARN once); a write never evicts itself;
// - damage (docs/prompt-cache.md "Disk tier") is counted by kind (disk_stats::damage), deleted and
//   logged, never served: a file that fails its checks on load, or whose identity (id, bucket,
//   session, tokens in its header) differs from its index row or from the request's prompt, is a
//   counted miss; only regular files are opened, and sizes are checked before allocating;
// - at startup: every indexed file's header is checked against its row; rows with a damaged
//   column are dropped with their files; *.tmp files are deleted; sound .lcache files missing
//   from the index are indexed again from their headers, others deleted; rows of an older format
//   are discarded, of another model or a newer format left alone (one INFO line, counts); an
//   index that fails PRAGMA quick_check or a read is moved to index.sqlite.damaged and rebuilt
//   from the files' headers (WARN, counted);
// - one server per directory: an flock on <dir>/lock; a second server fails to open it.
#pragma once

#include "cache/tier/disk/disk_catalog.h"
#include "cache/tier/disk/disk_format.h"
#include "cache/tier/disk/disk_index.h"
#include "cache/stats.h"
#include "cache/config.h"
#include "cache/tier/lower_tier.h"
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

/** Why a tier-2 file is deleted (disk_stats counts superseded and capacity; the log names it). */
enum class file_removal { superseded, capacity, damaged, reset };
std::string_view to_string(file_removal r);

/** The disk tier as cache::config sets it (--cache-dir, --cache-disk-capacity-bytes), for
 *  scheduler::disk_link's table of tiers: nullptr when the cache is off or no --cache-dir is
 *  given, and when the directory cannot be opened (a WARN says why; the server runs without it).
 *  `model`: model_fingerprint() of the served model; `hybrid`: the restore rule's. */
std::unique_ptr<lower_tier> open_disk_tier(const config & cfg, const std::string & model, bool hybrid);

class disk_tier final : public lower_tier {
public:
    /** What the store knows of this tier (store::attach_tier): its name, sharing and nouns. */
    static tier_traits kind();

    /** Opens (creating) cfg.dir and its index, cleans up after a crash, loads the catalog of
     *  this model and starts the worker. Throws std::runtime_error with the reason when
     *  the directory or index cannot be opened or another server holds the directory. */
    explicit disk_tier(disk_config cfg);
    /** Finishes the queued jobs (writes included) and joins the worker. */
    ~disk_tier() override;

    std::optional<disk_candidate> best(const std::string & bucket, const std::string & session,
                                       const tokens & prompt, int32_t longer_than) const override;
    // write, load, remove, take_completions, drain and reset: lower_tier's. A load checks the
    // file against its index row and the request's `want` (a file that fails, or holds another
    // identity, is an error, counted as damage and deleted; the request prefills cold) and
    // marks it used (LRU); a write past the capacity is a failed completion (WARN once).

    /** Counts a write forced by --cache-disk-max-unwritten-s and the engine thread's seconds
     *  spent reading its state (disk_stats::overdue_writes). */
    void count_overdue_write(double read_seconds) override;
    disk_stats get_stats() const;
    /** stats::disk, and bytes["disk"] (its files' size). */
    void report(stats & s) const override;
    /** reset_result::disk_files_freed, disk_bytes_freed. */
    void record_reset(reset_result & r, std::pair<int64_t, uint64_t> freed) const override;
    /** Files and bytes in the directory, and what this run wrote. */
    std::string location() const override { return cfg_.dir; }
    std::string exit_summary() const override;
    const disk_config & cfg() const { return cfg_; }
    /** The catalog's invariants (disk_catalog.h), and files/bytes/anchor_files equal to the
     *  catalog's count and sums; throws std::logic_error naming the first broken one. */
    void check_invariants() const;

private:
    using entry = disk_catalog::file;

    /** Constructor only, before the worker starts: nothing else can hold mu_. Throws
     *  index_damaged (the caller moves the index aside and calls it again). */
    void startup_scan() NO_THREAD_SAFETY_ANALYSIS;
    /** Startup: checks an indexed file of this model against its row; the damage kind or "". */
    std::string check_indexed(const entry & f) const;
    /** Startup: indexes again a sound file of `path` missing from the index; false when it is
     *  not one (the caller deletes it). */
    bool reindex(const std::string & path, const std::string & stem) NO_THREAD_SAFETY_ANALYSIS;
    void count_damage(disk_load_error e);
    void count_damage(const std::string & kind) REQUIRES(mu_);
    // tier_io, on the worker thread:
    disk_completion write_now(disk_write & w) override;
    disk_load_result load_now(file_id id, const disk_expect & want) override;
    void remove_now(const std::vector<file_id> & ids) override;
    std::pair<int64_t, uint64_t> reset_now(const std::optional<std::string> & tenant) override;
    disk_completion write_failed(disk_completion done, std::string why);
    void delete_file(file_id id, file_removal why);
    bool make_room(uint64_t bytes);
    std::string path_of(file_id id, const char * ext = ".lcache") const;

    disk_config cfg_;
    int lock_fd_ = -1;
    std::unique_ptr<disk_index> index_;  // worker thread only (and the constructor)

    mutable util::mutex mu_;
    disk_catalog catalog_ GUARDED_BY(mu_);
    disk_stats stats_ GUARDED_BY(mu_);
    file_id next_id_ = 1;               // worker thread: one past the largest indexed id
    bool warned_too_large_ = false;     // worker thread
};

}  // namespace lineage::cache
