// cache::disk_tier: tier T2 (docs/architecture.md "Tier 2 (disk) as implemented"). Entries written
// by the engine thread's write-behind (idle, leaving RAM, shutdown) become blob files
// (disk_format.h) in --cache-dir with a SQLite index (WAL) of their key, tokens, restore points,
// sizes and last use, so that the first requests after a restart restore from disk instead of a
// cold prefill.
//
// Threads: the tier's worker thread (tier_worker.h: the queue, loads first, completions) owns the
// files and the SQLite connection; the engine thread calls best() (an in-memory catalog indexed
// by bucket, tier_catalog.h, under a mutex), queues write/load/remove jobs and takes completions
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

#include "cache/tier/tier_catalog.h"
#include "cache/tier/disk/disk_format.h"
#include "cache/tier/disk/disk_index.h"
#include "cache/stats.h"
#include "cache/config.h"
#include "cache/tier/lower_tier.h"
#include "cache/tier/tier_flags.h"
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

/** Tier 2 (disk) counters and gauges (docs/prompt-cache.md "`GET /v1/cache/stats`"). */
struct disk_stats {
    bool enabled = false;
    std::string dir;                  ///< --cache-dir
    uint64_t capacity_bytes = 0;      ///< --cache-disk-capacity-bytes
    int64_t files = 0;                ///< files of this model in the index
    uint64_t bytes = 0;               ///< their size on disk, bytes (<= capacity_bytes)
    int64_t anchor_files = 0;
    int64_t writes = 0;               ///< files written
    uint64_t bytes_written = 0;       ///< bytes written since start
    int64_t write_failures = 0;       ///< writes that failed (I/O error, or larger than the cap)
    int64_t loads = 0;                ///< files read for a restore
    uint64_t bytes_read = 0;
    /** Damaged files and index rows found (each deleted; the request, if any, prefilled cold):
     *  the sum of `damage`. */
    int64_t damaged = 0;
    /** By kind: a file's check (checksum "corrupt", "truncated", "bad_magic", "identity": not the
     *  file its row or the prompt names, "not_regular", "other_model", "io"), "index_row" (a row
     *  with a NULL, wrong type or out-of-range column), "index" (the index failed its integrity
     *  check or a read; moved aside). */
    std::map<std::string, int64_t> damage;
    int64_t superseded = 0;           ///< files deleted once their successor was durable
    int64_t evictions = 0;            ///< files deleted to stay under the cap (LRU)
    int64_t ignored_other_model = 0;  ///< files of another model found at startup (left alone)
    int64_t ignored_other_format = 0; ///< files of a newer format version found at startup (left alone)
    int64_t discarded_old_format = 0; ///< files of an older format version found at startup (deleted)
    int64_t removed_at_startup = 0;   ///< temporary, unreadable unindexed or missing files cleaned up at startup
    int64_t reindexed = 0;            ///< sound files missing from the index, indexed again at startup
    /** Writes forced by --cache-disk-max-unwritten-s (the engine busy or not) and the engine
     *  thread's seconds spent handing them over (reading a parked sequence's state). */
    int64_t overdue_writes = 0;
    double overdue_read_seconds = 0;
    int64_t queued = 0;               ///< jobs waiting for the disk thread
};

/** `st` as GET /v1/cache/stats ("disk", "disk_hits") and /metrics (lineage_prompt_cache_disk_*)
 *  show it, described once; default-constructed, a disk tier that is off. `requests_committed`
 *  (stats::requests_committed) gives bytes_written_per_request. */
tier_report describe(const disk_stats & st, int64_t requests_committed);

/** Why a tier-2 file is deleted (disk_stats counts superseded and capacity; the log names it). */
enum class file_removal { superseded, capacity, damaged, reset };
std::string_view to_string(file_removal r);

/** The disk tier's flags (--cache-disk, --cache-dir, --cache-disk-capacity-bytes,
 *  --cache-disk-idle-s, --cache-disk-max-unwritten-s), bound to their fields of `cc`
 *  (disk_flags.cpp; cache/tier_table.h). */
void add_disk_flags(flag_sink & add, config & cc);

/** The disk tier as cache::config sets it (--cache-dir, --cache-disk-capacity-bytes), for
 *  cache::tier_table(): nullptr when the cache is off or no --cache-dir is
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

    std::optional<tier_candidate> best(const std::string & bucket, const std::string & session,
                                       const tokens & prompt, int32_t longer_than) const override;
    // write, load, remove, take_completions, drain and reset: lower_tier's. A load checks the
    // file against its index row and the request's `want` (a file that fails, or holds another
    // identity, is an error, counted as damage and deleted; the request prefills cold) and
    // marks it used (LRU); a write past the capacity is a failed completion (WARN once).

    /** Counts a write forced by --cache-disk-max-unwritten-s and the engine thread's seconds
     *  spent reading its state (disk_stats::overdue_writes). */
    void count_overdue_write(double read_seconds) override;
    disk_stats get_stats() const;
    /** Its figures (describe) into stats::tiers, and bytes["disk"] (its files' size). */
    void report(stats & s) const override;
    /** Files and bytes in the directory, and what this run wrote. */
    std::string location() const override { return cfg_.dir; }
    std::string exit_summary() const override;
    const disk_config & cfg() const { return cfg_; }
    /** The catalog's invariants (tier_catalog.h), and files/bytes/anchor_files equal to the
     *  catalog's count and sums; throws std::logic_error naming the first broken one. */
    void check_invariants() const;

private:
    using entry = tier_catalog::file;

    /** Constructor only, before the worker starts: nothing else can hold mu_. Throws
     *  index_damaged (the caller moves the index aside and calls it again). */
    void startup_scan() NO_THREAD_SAFETY_ANALYSIS;
    /** Startup: checks an indexed file of this model against its row; the damage kind or "". */
    std::string check_indexed(const entry & f) const;
    /** Startup: indexes again a sound file of `path` missing from the index; false when it is
     *  not one (the caller deletes it). */
    bool reindex(const std::string & path, const std::string & stem) NO_THREAD_SAFETY_ANALYSIS;
    void count_damage(tier_load_error e);
    void count_damage(const std::string & kind) REQUIRES(mu_);
    // tier_io, on the worker thread:
    tier_completion write_now(tier_write & w) override;
    tier_load_result load_now(copy_id id, const tier_expect & want) override;
    void remove_now(const std::vector<copy_id> & ids) override;
    std::pair<int64_t, uint64_t> reset_now(const std::optional<std::string> & tenant) override;
    /** Writes the last uses of the files loaded since the last call to the index (requested
     *  after each load, so that the load's answer does not wait for SQLite's sync). */
    bool tick_now() override;
    tier_completion write_failed(tier_completion done, std::string why);
    void delete_file(copy_id id, file_removal why);
    bool make_room(uint64_t bytes);
    std::string path_of(copy_id id, const char * ext = ".lcache") const;

    disk_config cfg_;
    int lock_fd_ = -1;
    std::unique_ptr<disk_index> index_;  // worker thread only (and the constructor)

    mutable util::mutex mu_;
    tier_catalog catalog_ GUARDED_BY(mu_);
    disk_stats stats_ GUARDED_BY(mu_);
    copy_id next_id_ = 1;               // worker thread: one past the largest indexed id
    bool warned_too_large_ = false;     // worker thread
    std::vector<std::pair<copy_id, double>> pending_touches_;  // worker thread: loads' last uses to write
};

}  // namespace lineage::cache
