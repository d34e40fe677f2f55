// cache::disk_index: the SQLite index of the tier-2 files (docs/prompt-cache.md "Disk tier"):
// one row per blob file (its key, tokens, restore points, size, last use). It is the only source
// of file ids (never a file name); every column of every row is validated when it is read, and
// the database is checked (PRAGMA quick_check) when it is opened, so that a damaged index is a
// counted, logged event and never a crash or a silently wrong catalog.
// Thread safety: not thread-safe; disk_tier's disk thread (and its constructor) owns it.
// Ownership: owns the SQLite connection.
#pragma once

#include "cache/tier/tier_catalog.h"
#include "cache/tier/disk/disk_format.h"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

struct sqlite3;

namespace lineage::cache {

/** Thrown when the index cannot be opened, fails its integrity check or a read fails mid-scan:
 *  the caller moves it aside and starts a new one. */
class index_damaged : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/** What a scan of the index found. */
struct index_scan {
    /** Rows of the scanned model in this format version, every column validated. */
    std::vector<tier_catalog::file> files;
    /** Valid rows of another model or of a newer format version: left alone, never used. */
    std::vector<copy_id> foreign;
    int64_t other_model = 0, newer_format = 0;
    /** Rows of an older format version: their files are discarded. */
    std::vector<copy_id> older_format;
    /** Damaged rows: the row id (SQLite rowid) and why (one line). */
    std::vector<std::pair<int64_t, std::string>> damaged;
};

class disk_index {
public:
    /** Opens (creating) the index at `path` (WAL, synchronous FULL) and runs PRAGMA quick_check.
     *  Throws index_damaged with the reason when it cannot be opened or read, or the check fails. */
    explicit disk_index(const std::string & path);
    ~disk_index();
    disk_index(const disk_index &) = delete;
    disk_index & operator=(const disk_index &) = delete;

    /** Reads every row. A row with a NULL, a wrong type or an out-of-range value in any column
     *  (ids in [1, max_copy_id], tokens a non-empty int32 array of n_tokens, history in
     *  [-1, n_tokens], checkpoints ascending in [1, n_tokens) of known kinds, bytes > 0, a finite
     *  last use) is listed in `damaged`, never thrown. Throws index_damaged when a read fails
     *  mid-scan (rows after it unknown). */
    index_scan scan(const std::string & model);

    /** Inserts the row of file `id` holding `r` (`bytes` its file size). Returns false when the
     *  insert fails (the reason in error()). */
    bool insert(copy_id id, const copy_record & r, uint64_t bytes, double last_use);
    /** Deletes the row with SQLite rowid `id` (a file id, or a damaged row's rowid). */
    void erase(int64_t id);
    /** Sets files' last use (id, wall-clock seconds), in one transaction: one sync to disk for
     *  all of them (synchronous=FULL). A row that is gone is skipped; an error leaves the rows as
     *  they were (only the eviction order after a restart reads them). */
    void touch(const std::vector<std::pair<copy_id, double>> & uses);
    /** The last SQLite error message. */
    std::string error() const;

private:
    void exec(const char * sql);
    sqlite3 * db_ = nullptr;
};

}  // namespace lineage::cache
