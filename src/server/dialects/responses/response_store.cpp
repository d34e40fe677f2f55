// server::response_store: SQLite persistence, TTL and byte-cap eviction of stored responses.
#include "server/dialects/responses/response_store.h"

#include "server/dialects/responses/reasoning_seal.h"

#include <spdlog/spdlog.h>
#include <sqlite3.h>

#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <vector>

namespace fs = std::filesystem;

namespace lineage::server {

namespace {

double wall_s() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A prepared statement, finalized on scope exit.
class stmt {
public:
    stmt(sqlite3 * db, const char * sql) {
        if (sqlite3_prepare_v2(db, sql, -1, &s_, nullptr) != SQLITE_OK) {
            throw std::runtime_error(std::string("responses store: ") + sqlite3_errmsg(db));
        }
    }
    ~stmt() { sqlite3_finalize(s_); }
    stmt(const stmt &) = delete;
    stmt & operator=(const stmt &) = delete;
    sqlite3_stmt * get() const { return s_; }
    int step() { return sqlite3_step(s_); }
    void text(int i, const std::string & v) { sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT); }
    std::string col_text(int i) const {
        const auto * p = reinterpret_cast<const char *>(sqlite3_column_blob(s_, i));
        return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(s_, i))) : std::string();
    }

private:
    sqlite3_stmt * s_ = nullptr;
};

}  // namespace

response_store::response_store(response_store_config cfg, clock now)
    : cfg_(std::move(cfg)), now_(now ? std::move(now) : clock(wall_s)) {
    std::string path = cfg_.path.empty() ? std::string(":memory:") : cfg_.path;
    if (path != ":memory:") {
        std::error_code ec;
        const fs::path parent = fs::path(path).parent_path();
        if (!parent.empty()) {
            fs::create_directories(parent, ec);
        }
        if (ec) {
            spdlog::warn("responses store: cannot create {} ({}); stored responses are kept in memory only",
                         parent.string(), ec.message());
            path = ":memory:";
        }
    }
    try {
        open(path);
    } catch (const std::runtime_error & e) {
        if (db_) {
            sqlite3_close(db_);
            db_ = nullptr;
        }
        bool reopened = false;
        if (path != ":memory:" && fs::exists(path)) {
            // A file SQLite cannot read loses its responses, not the store.
            const std::string aside = path + ".damaged";
            std::error_code ec;
            fs::rename(path, aside, ec);
            for (const char * ext : {"-wal", "-shm"}) {
                fs::remove(path + ext, ec);
            }
            spdlog::warn("responses store: {} could not be read ({}); moved to {}, starting an empty store", path,
                         e.what(), aside);
            try {
                open(path);
                reopened = true;
            } catch (const std::runtime_error & e2) {
                if (db_) {
                    sqlite3_close(db_);
                    db_ = nullptr;
                }
                spdlog::warn("responses store: {} ({})", path, e2.what());
            }
        } else {
            spdlog::warn("responses store: cannot open {} ({})", path, e.what());
        }
        if (!reopened) {
            spdlog::warn("responses store: stored responses are kept in memory only");
            open(":memory:");
        }
    }
}

response_store::~response_store() {
    if (db_) {
        sqlite3_close(db_);
    }
}

void response_store::exec(const char * sql) {
    char * err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
        std::string msg = err ? err : sqlite3_errmsg(db_);
        sqlite3_free(err);
        throw std::runtime_error(msg + " (in: " + sql + ")");
    }
}

void response_store::open(const std::string & path) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                        nullptr) != SQLITE_OK) {
        throw std::runtime_error(db_ ? sqlite3_errmsg(db_) : "out of memory");
    }
    sqlite3_busy_timeout(db_, 5000);
    if (path != ":memory:") {
        exec("PRAGMA journal_mode=WAL");
        exec("PRAGMA synchronous=NORMAL");
    }
    exec("CREATE TABLE IF NOT EXISTS responses ("
         " id TEXT PRIMARY KEY, created REAL NOT NULL, use INTEGER NOT NULL, bytes INTEGER NOT NULL,"
         " body BLOB NOT NULL, conversation BLOB NOT NULL, tenant TEXT NOT NULL DEFAULT '')");
    // Stores written before tenants scoped responses gain the column; their rows belong to the
    // tenant "" (a server without API keys).
    bool has_tenant = false;
    {
        stmt cols(db_, "PRAGMA table_info(responses)");
        while (cols.step() == SQLITE_ROW) {
            has_tenant = has_tenant || cols.col_text(1) == "tenant";
        }
    }
    if (!has_tenant) {
        exec("ALTER TABLE responses ADD COLUMN tenant TEXT NOT NULL DEFAULT ''");
    }
    exec("CREATE INDEX IF NOT EXISTS responses_by_use ON responses(use)");
    exec("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v BLOB NOT NULL)");
    {
        stmt q(db_, "SELECT COALESCE(MAX(use), 0) FROM responses");
        if (q.step() == SQLITE_ROW) {
            next_use_ = sqlite3_column_int64(q.get(), 0) + 1;
        }
    }
    {
        stmt q(db_, "SELECT v FROM meta WHERE k = 'reasoning_key'");
        if (q.step() == SQLITE_ROW) {
            key_ = q.col_text(0);
        }
    }
    if (key_.size() != 32) {
        key_ = reasoning_seal::random_key();
        stmt ins(db_, "INSERT OR REPLACE INTO meta (k, v) VALUES ('reasoning_key', ?)");
        sqlite3_bind_blob(ins.get(), 1, key_.data(), static_cast<int>(key_.size()), SQLITE_TRANSIENT);
        if (ins.step() != SQLITE_DONE) {
            throw std::runtime_error(sqlite3_errmsg(db_));
        }
    }
    path_ = path;
}

uint64_t response_store::size_of(const stored_response & r) {
    return r.id.size() + r.body.size() + r.conversation.size();
}

void response_store::purge_expired() {
    stmt d(db_, "DELETE FROM responses WHERE created <= ?");
    sqlite3_bind_double(d.get(), 1, now_() - cfg_.ttl_s);
    d.step();
}

bool response_store::put(const stored_response & r) {
    const uint64_t size = size_of(r);
    if (size > cfg_.capacity_bytes) {
        spdlog::warn("responses store: response {} ({} bytes) is larger than --responses-capacity-bytes ({}); not stored",
                     r.id, size, cfg_.capacity_bytes);
        return false;
    }
    std::lock_guard<std::mutex> lk(mu_);
    try {
        purge_expired();
        {
            stmt d(db_, "DELETE FROM responses WHERE id = ?");
            d.text(1, r.id);
            d.step();
        }
        // Least recently used first until the new one fits.
        uint64_t used = 0;
        {
            stmt q(db_, "SELECT COALESCE(SUM(bytes), 0) FROM responses");
            if (q.step() == SQLITE_ROW) {
                used = static_cast<uint64_t>(sqlite3_column_int64(q.get(), 0));
            }
        }
        if (used + size > cfg_.capacity_bytes) {
            std::vector<std::string> victims;
            stmt q(db_, "SELECT id, bytes FROM responses ORDER BY use ASC");
            while (used + size > cfg_.capacity_bytes && q.step() == SQLITE_ROW) {
                victims.push_back(q.col_text(0));
                used -= static_cast<uint64_t>(sqlite3_column_int64(q.get(), 1));
            }
            for (const auto & id : victims) {
                stmt d(db_, "DELETE FROM responses WHERE id = ?");
                d.text(1, id);
                d.step();
                spdlog::debug("responses store: evicted {} (byte cap)", id);
            }
        }
        stmt ins(db_, "INSERT INTO responses (id, created, use, bytes, body, conversation, tenant) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?)");
        ins.text(1, r.id);
        sqlite3_bind_double(ins.get(), 2, r.created_s > 0 ? r.created_s : now_());
        sqlite3_bind_int64(ins.get(), 3, next_use_++);
        sqlite3_bind_int64(ins.get(), 4, static_cast<sqlite3_int64>(size));
        sqlite3_bind_blob(ins.get(), 5, r.body.data(), static_cast<int>(r.body.size()), SQLITE_TRANSIENT);
        sqlite3_bind_blob(ins.get(), 6, r.conversation.data(), static_cast<int>(r.conversation.size()), SQLITE_TRANSIENT);
        ins.text(7, r.tenant);
        if (ins.step() != SQLITE_DONE) {
            throw std::runtime_error(sqlite3_errmsg(db_));
        }
    } catch (const std::runtime_error & e) {
        spdlog::warn("responses store: storing {} failed: {}", r.id, e.what());
        return false;
    }
    return true;
}

std::optional<stored_response> response_store::get(const std::string & id, const std::string & tenant) {
    std::lock_guard<std::mutex> lk(mu_);
    try {
        purge_expired();
        stored_response r;
        {
            stmt q(db_, "SELECT id, created, body, conversation, tenant FROM responses WHERE id = ? AND tenant = ?");
            q.text(1, id);
            q.text(2, tenant);
            if (q.step() != SQLITE_ROW) {
                return std::nullopt;
            }
            r.id = q.col_text(0);
            r.created_s = sqlite3_column_double(q.get(), 1);
            r.body = q.col_text(2);
            r.conversation = q.col_text(3);
            r.tenant = q.col_text(4);
        }
        stmt u(db_, "UPDATE responses SET use = ? WHERE id = ?");
        sqlite3_bind_int64(u.get(), 1, next_use_++);
        u.text(2, id);
        u.step();
        return r;
    } catch (const std::runtime_error & e) {
        spdlog::warn("responses store: reading {} failed: {}", id, e.what());
        return std::nullopt;
    }
}

bool response_store::remove(const std::string & id, const std::string & tenant) {
    std::lock_guard<std::mutex> lk(mu_);
    try {
        purge_expired();
        stmt d(db_, "DELETE FROM responses WHERE id = ? AND tenant = ?");
        d.text(1, id);
        d.text(2, tenant);
        d.step();
        return sqlite3_changes(db_) > 0;
    } catch (const std::runtime_error & e) {
        spdlog::warn("responses store: deleting {} failed: {}", id, e.what());
        return false;
    }
}

size_t response_store::count() const {
    std::lock_guard<std::mutex> lk(mu_);
    stmt q(db_, "SELECT COUNT(*) FROM responses");
    return q.step() == SQLITE_ROW ? static_cast<size_t>(sqlite3_column_int64(q.get(), 0)) : 0;
}

uint64_t response_store::bytes() const {
    std::lock_guard<std::mutex> lk(mu_);
    stmt q(db_, "SELECT COALESCE(SUM(bytes), 0) FROM responses");
    return q.step() == SQLITE_ROW ? static_cast<uint64_t>(sqlite3_column_int64(q.get(), 0)) : 0;
}

}  // namespace lineage::server
