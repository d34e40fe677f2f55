// cache::disk_index: the SQLite index of the tier-2 files; see disk_index.h.
#include "cache/tier/disk/disk_index.h"

#include <sqlite3.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace lineage::cache {

namespace {

constexpr int64_t max_tokens = 1ll << 26;        // far above any context length we serve
constexpr size_t max_checkpoints_row = 1u << 12;  // as the file format's bound

/** RAII prepared statement. */
class stmt {
public:
    stmt(sqlite3 * db, const char * sql) {
        if (sqlite3_prepare_v2(db, sql, -1, &s_, nullptr) != SQLITE_OK) {
            throw index_damaged(std::string("disk index: ") + sqlite3_errmsg(db));
        }
    }
    ~stmt() { sqlite3_finalize(s_); }
    stmt(const stmt &) = delete;
    stmt & operator=(const stmt &) = delete;
    sqlite3_stmt * get() const { return s_; }
    int step() { return sqlite3_step(s_); }

private:
    sqlite3_stmt * s_ = nullptr;
};

std::string encode_checkpoints(const std::vector<checkpoint> & cps) {
    std::string s;
    for (const auto & c : cps) {
        s += (s.empty() ? "" : ",") + std::to_string(c.n_tokens) + ":" + std::to_string(static_cast<int>(c.kind));
    }
    return s;
}

/** Parses a decimal integer in [lo, hi] from [p, end); false on anything else. */
bool parse_int(const char * p, const char * end, int64_t lo, int64_t hi, int64_t & out) {
    if (p == end || end - p > 18) {
        return false;
    }
    int64_t v = 0;
    for (; p != end; ++p) {
        if (*p < '0' || *p > '9') {
            return false;
        }
        v = v * 10 + (*p - '0');
    }
    if (v < lo || v > hi) {
        return false;
    }
    out = v;
    return true;
}

/** Strict inverse of encode_checkpoints for a file of `n_tokens`: "n:kind" items, ascending n
 *  in [1, n_tokens), known kinds. */
bool decode_checkpoints(const std::string & s, int32_t n_tokens, std::vector<checkpoint> & out) {
    size_t i = 0;
    while (i < s.size()) {
        size_t comma = s.find(',', i);
        if (comma == std::string::npos) {
            comma = s.size();
        }
        const size_t colon = s.find(':', i);
        if (colon == std::string::npos || colon >= comma) {
            return false;
        }
        int64_t n = 0, kind = 0;
        if (!parse_int(s.data() + i, s.data() + colon, 1, n_tokens - 1, n) ||
            !parse_int(s.data() + colon + 1, s.data() + comma, 0, static_cast<int64_t>(last_point_kind), kind) ||
            (!out.empty() && n <= out.back().n_tokens) || out.size() >= max_checkpoints_row) {
            return false;
        }
        out.push_back({static_cast<int32_t>(n), static_cast<point_kind>(kind), nullptr});
        i = comma + 1;
        if (comma + 1 == s.size()) {
            return false;  // a trailing comma
        }
    }
    return true;
}

bool is_text(sqlite3_stmt * s, int col) {
    return sqlite3_column_type(s, col) == SQLITE_TEXT;
}

std::string text_of(sqlite3_stmt * s, int col) {
    const auto * p = reinterpret_cast<const char *>(sqlite3_column_text(s, col));
    return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(s, col))) : std::string();
}

bool int_in(sqlite3_stmt * s, int col, int64_t lo, int64_t hi, int64_t & out) {
    if (sqlite3_column_type(s, col) != SQLITE_INTEGER) {
        return false;
    }
    out = sqlite3_column_int64(s, col);
    return out >= lo && out <= hi;
}

/** Validates the columns of a row of this model and format into `f`; the reason otherwise. */
std::string parse_row(sqlite3_stmt * s, tier_catalog::file & f) {
    int64_t v = 0;
    if (!is_text(s, 3) || sqlite3_column_bytes(s, 3) == 0) {
        return "bucket is not a non-empty text";
    }
    f.bucket = text_of(s, 3);
    if (!is_text(s, 4)) {
        return "session is not a text";
    }
    f.session = text_of(s, 4);
    if (!is_text(s, 12)) {
        return "tenant is not a text";
    }
    f.tenant = text_of(s, 12);
    if (!int_in(s, 5, 1, max_tokens, v)) {
        return "n_tokens is not an integer in [1, 2^26]";
    }
    const auto n = static_cast<int32_t>(v);
    if (sqlite3_column_type(s, 11) != SQLITE_BLOB || sqlite3_column_bytes(s, 11) != n * static_cast<int>(sizeof(token))) {
        return "tokens is not a blob of n_tokens tokens";
    }
    const auto * t = static_cast<const uint8_t *>(sqlite3_column_blob(s, 11));
    f.toks.resize(static_cast<size_t>(n));
    std::memcpy(f.toks.data(), t, f.toks.size() * sizeof(token));
    if (!int_in(s, 6, -1, n, v)) {
        return "history is not an integer in [-1, n_tokens]";
    }
    f.history = static_cast<int32_t>(v);
    if (!int_in(s, 7, 0, 1, v)) {
        return "anchor is not 0 or 1";
    }
    f.anchor = v != 0;
    if (!is_text(s, 8) || !decode_checkpoints(text_of(s, 8), n, f.checkpoints)) {
        return "checkpoints is not a list of ascending n:kind within the file";
    }
    if (!int_in(s, 9, 1, INT64_MAX, v)) {
        return "bytes is not a positive integer";
    }
    f.bytes = static_cast<uint64_t>(v);
    const int lt = sqlite3_column_type(s, 10);
    const double last_use = sqlite3_column_double(s, 10);
    if ((lt != SQLITE_FLOAT && lt != SQLITE_INTEGER) || !std::isfinite(last_use)) {
        return "last_use is not a finite number";
    }
    f.last_use = last_use;
    return {};
}

}  // namespace

disk_index::disk_index(const std::string & path) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        nullptr) != SQLITE_OK) {
        std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
        sqlite3_close(db_);
        db_ = nullptr;
        throw index_damaged("cannot open the disk index " + path + ": " + why);
    }
    try {
        sqlite3_busy_timeout(db_, 5000);
        // WAL: a crash mid-transaction leaves the last committed index; FULL: a row is durable
        // before the files it supersedes are deleted.
        exec("PRAGMA journal_mode=WAL");
        exec("PRAGMA synchronous=FULL");
        {
            stmt q(db_, "PRAGMA quick_check");
            std::string verdict;
            int rc = 0;
            while ((rc = q.step()) == SQLITE_ROW) {
                verdict += (verdict.empty() ? "" : "; ") + text_of(q.get(), 0);
            }
            if (rc != SQLITE_DONE) {
                throw index_damaged(std::string("disk index: quick_check failed: ") + sqlite3_errmsg(db_));
            }
            if (verdict != "ok") {
                throw index_damaged("disk index: quick_check: " + verdict.substr(0, 300));
            }
        }
        exec("CREATE TABLE IF NOT EXISTS files ("
             " id INTEGER PRIMARY KEY, model TEXT NOT NULL, format INTEGER NOT NULL,"
             " bucket TEXT NOT NULL, session TEXT NOT NULL, n_tokens INTEGER NOT NULL,"
             " history INTEGER NOT NULL, anchor INTEGER NOT NULL, checkpoints TEXT NOT NULL,"
             " bytes INTEGER NOT NULL, last_use REAL NOT NULL, created REAL NOT NULL, tokens BLOB NOT NULL,"
             " tenant TEXT NOT NULL DEFAULT '')");
        // Format 3 added the tenant column: an index of format 2 gains it (its rows, all of an
        // older format, are then discarded by the scan like any older row).
        bool has_tenant = false;
        {
            stmt cols(db_, "PRAGMA table_info(files)");
            while (cols.step() == SQLITE_ROW) {
                has_tenant = has_tenant || text_of(cols.get(), 1) == "tenant";
            }
        }
        if (!has_tenant) {
            exec("ALTER TABLE files ADD COLUMN tenant TEXT NOT NULL DEFAULT ''");
        }
    } catch (...) {
        sqlite3_close(db_);
        db_ = nullptr;
        throw;
    }
}

disk_index::~disk_index() {
    if (db_) {
        sqlite3_close(db_);
    }
}

void disk_index::exec(const char * sql) {
    char * err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
        std::string msg = err ? err : "unknown error";
        sqlite3_free(err);
        throw index_damaged("disk index: " + msg + " (in: " + sql + ")");
    }
}

std::string disk_index::error() const {
    return sqlite3_errmsg(db_);
}

index_scan disk_index::scan(const std::string & model) {
    index_scan out;
    stmt q(db_, "SELECT id, model, format, bucket, session, n_tokens, history, anchor, checkpoints, bytes, last_use, "
                "tokens, tenant FROM files");
    int rc = 0;
    while ((rc = q.step()) == SQLITE_ROW) {
        sqlite3_stmt * s = q.get();
        const int64_t rowid = sqlite3_column_int64(s, 0);
        int64_t format = 0;
        if (rowid < 1 || static_cast<uint64_t>(rowid) > max_copy_id) {
            out.damaged.emplace_back(rowid, "id out of [1, 2^48]");
            continue;
        }
        if (!is_text(s, 1) || !int_in(s, 2, 0, UINT32_MAX, format)) {
            out.damaged.emplace_back(rowid, "model is not a text or format not an integer");
            continue;
        }
        const auto id = static_cast<copy_id>(rowid);
        if (format < copy_format_version) {
            out.older_format.push_back(id);
            continue;
        }
        if (format > copy_format_version || text_of(s, 1) != model) {
            (format > copy_format_version ? out.newer_format : out.other_model)++;
            out.foreign.push_back(id);
            continue;
        }
        tier_catalog::file f;
        f.id = id;
        if (std::string why = parse_row(s, f); !why.empty()) {
            out.damaged.emplace_back(rowid, why);
            continue;
        }
        out.files.push_back(std::move(f));
    }
    if (rc != SQLITE_DONE) {
        throw index_damaged(std::string("disk index: reading the rows failed after ") +
                            std::to_string(out.files.size() + out.foreign.size() + out.damaged.size()) +
                            " rows: " + sqlite3_errmsg(db_));
    }
    return out;
}

bool disk_index::insert(copy_id id, const copy_record & r, uint64_t bytes, double last_use) {
    stmt ins(db_, "INSERT INTO files (id, model, format, bucket, session, n_tokens, history, anchor, checkpoints, "
                  "bytes, last_use, created, tokens, tenant) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    sqlite3_stmt * s = ins.get();
    sqlite3_bind_int64(s, 1, static_cast<sqlite3_int64>(id));
    sqlite3_bind_text(s, 2, r.model.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(s, 3, static_cast<int>(copy_format_version));
    sqlite3_bind_text(s, 4, r.bucket.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 5, r.session.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(s, 6, static_cast<int>(r.toks.size()));
    sqlite3_bind_int(s, 7, r.history);
    sqlite3_bind_int(s, 8, r.anchor ? 1 : 0);
    sqlite3_bind_text(s, 9, encode_checkpoints(r.checkpoints).c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 10, static_cast<sqlite3_int64>(bytes));
    sqlite3_bind_double(s, 11, last_use);
    sqlite3_bind_double(s, 12, last_use);
    sqlite3_bind_blob(s, 13, r.toks.data(), static_cast<int>(r.toks.size() * sizeof(token)), SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 14, r.tenant.c_str(), -1, SQLITE_TRANSIENT);
    return ins.step() == SQLITE_DONE;
}

void disk_index::erase(int64_t id) {
    stmt d(db_, "DELETE FROM files WHERE id = ?");
    sqlite3_bind_int64(d.get(), 1, id);
    d.step();
}

void disk_index::touch(const std::vector<std::pair<copy_id, double>> & uses) {
    if (uses.empty()) {
        return;
    }
    if (sqlite3_exec(db_, "BEGIN", nullptr, nullptr, nullptr) != SQLITE_OK) {
        return;  // the last uses are lost: the eviction order after a restart is a little older
    }
    // Never leave the transaction open: every later insert and erase would run inside it.
    bool committed = false;
    try {
        stmt u(db_, "UPDATE files SET last_use = ? WHERE id = ?");
        for (const auto & [id, last_use] : uses) {
            sqlite3_bind_double(u.get(), 1, last_use);
            sqlite3_bind_int64(u.get(), 2, static_cast<sqlite3_int64>(id));
            u.step();
            sqlite3_reset(u.get());
        }
        committed = sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) == SQLITE_OK;
    } catch (...) {
        sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
        throw;
    }
    if (!committed) {
        sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    }
}

}  // namespace lineage::cache
