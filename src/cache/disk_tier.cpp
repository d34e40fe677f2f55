// cache::disk_tier: tier T2; see disk_tier.h. One file (~620 lines): the startup scan, the disk
// thread's jobs and the index statements share the SQLite connection and its helpers.
#include "cache/disk_tier.h"

#include <spdlog/spdlog.h>
#include <sqlite3.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <stdexcept>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace lineage::cache {

namespace fs = std::filesystem;

namespace {

double wall_s() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string encode_checkpoints(const std::vector<checkpoint> & cps) {
    std::string s;
    for (const auto & c : cps) {
        s += (s.empty() ? "" : ",") + std::to_string(c.n_tokens) + ":" + std::to_string(static_cast<int>(c.kind));
    }
    return s;
}

std::vector<checkpoint> decode_checkpoints(const std::string & s) {
    std::vector<checkpoint> out;
    size_t i = 0;
    while (i < s.size()) {
        size_t comma = s.find(',', i);
        if (comma == std::string::npos) {
            comma = s.size();
        }
        const std::string item = s.substr(i, comma - i);
        const size_t colon = item.find(':');
        if (colon != std::string::npos) {
            const int kind = std::atoi(item.c_str() + colon + 1);
            if (kind >= 0 && kind <= static_cast<int>(last_point_kind)) {
                out.push_back({std::atoi(item.c_str()), static_cast<point_kind>(kind), nullptr});
            }
        }
        i = comma + 1;
    }
    return out;
}

void fsync_dir(const std::string & dir) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
    }
}

/** RAII prepared statement. */
class stmt {
public:
    stmt(sqlite3 * db, const char * sql) {
        if (sqlite3_prepare_v2(db, sql, -1, &s_, nullptr) != SQLITE_OK) {
            throw std::runtime_error(std::string("disk index: ") + sqlite3_errmsg(db));
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

}  // namespace

disk_tier::disk_tier(disk_config cfg) : cfg_(std::move(cfg)), catalog_(cfg_.rule) {
    std::error_code ec;
    fs::create_directories(cfg_.dir, ec);
    if (ec) {
        throw std::runtime_error("cannot create the cache directory " + cfg_.dir + ": " + ec.message());
    }
    const std::string lock = cfg_.dir + "/lock";
    lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd_ < 0) {
        throw std::runtime_error("cannot open " + lock + ": " + std::strerror(errno));
    }
    if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
        ::close(lock_fd_);
        throw std::runtime_error("the cache directory " + cfg_.dir +
                                 " is in use by another server (its lock file is held); give each server its own "
                                 "--cache-dir");
    }
    stats_.enabled = true;
    stats_.dir = cfg_.dir;
    stats_.capacity_bytes = cfg_.capacity_bytes;
    try {
        try {
            open_index();
            startup_scan();
        } catch (const std::runtime_error & e) {
            // A damaged index loses the tier's contents, not the tier: it is moved aside and a
            // new one started; the blob files it listed are unindexed now and removed.
            if (db_) {
                sqlite3_close(db_);
                db_ = nullptr;
            }
            const std::string index = cfg_.dir + "/index.sqlite";
            const std::string aside = index + ".damaged";
            std::error_code ec;
            fs::rename(index, aside, ec);
            for (const char * ext : {"-wal", "-shm"}) {
                fs::remove(index + ext, ec);
            }
            spdlog::warn("disk tier: the index {} could not be read ({}); moved to {}, starting an empty index", index,
                         e.what(), aside);
            catalog_.clear();
            stats_ = disk_stats{};
            stats_.enabled = true;
            stats_.dir = cfg_.dir;
            stats_.capacity_bytes = cfg_.capacity_bytes;
            open_index();
            startup_scan();
        }
    } catch (...) {
        if (db_) {
            sqlite3_close(db_);
        }
        ::close(lock_fd_);
        throw;
    }
    thread_ = std::thread([this] { run(); });
}

disk_tier::~disk_tier() {
    {
        util::lock_guard lk(qmu_);
        stopping_ = true;
    }
    qcv_.notify_all();
    if (thread_.joinable()) {
        thread_.join();
    }
    if (db_) {
        sqlite3_close(db_);
    }
    if (lock_fd_ >= 0) {
        ::close(lock_fd_);
    }
}

void disk_tier::exec(const char * sql) {
    char * err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
        std::string msg = err ? err : "unknown error";
        sqlite3_free(err);
        throw std::runtime_error("disk index: " + msg + " (in: " + sql + ")");
    }
}

void disk_tier::open_index() {
    const std::string path = cfg_.dir + "/index.sqlite";
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        nullptr) != SQLITE_OK) {
        throw std::runtime_error("cannot open the disk index " + path + ": " +
                                 (db_ ? sqlite3_errmsg(db_) : "out of memory"));
    }
    sqlite3_busy_timeout(db_, 5000);
    // WAL: a crash mid-transaction leaves the last committed index; FULL: a row is durable
    // before the files it supersedes are deleted.
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=FULL");
    exec("CREATE TABLE IF NOT EXISTS files ("
         " id INTEGER PRIMARY KEY, model TEXT NOT NULL, format INTEGER NOT NULL,"
         " bucket TEXT NOT NULL, session TEXT NOT NULL, n_tokens INTEGER NOT NULL,"
         " history INTEGER NOT NULL, anchor INTEGER NOT NULL, checkpoints TEXT NOT NULL,"
         " bytes INTEGER NOT NULL, last_use REAL NOT NULL, created REAL NOT NULL, tokens BLOB NOT NULL)");
}

void disk_tier::startup_scan() {
    std::set<file_id> indexed;
    std::vector<file_id> drop;
    {
        stmt q(db_, "SELECT id, model, format, bucket, session, history, anchor, checkpoints, bytes, last_use, tokens "
                    "FROM files");
        while (q.step() == SQLITE_ROW) {
            sqlite3_stmt * s = q.get();
            const auto id = static_cast<file_id>(sqlite3_column_int64(s, 0));
            next_id_ = std::max(next_id_, id + 1);
            indexed.insert(id);
            const std::string model = reinterpret_cast<const char *>(sqlite3_column_text(s, 1));
            const int format = sqlite3_column_int(s, 2);
            if (format != static_cast<int>(disk_format_version)) {
                stats_.ignored_other_format++;
                continue;
            }
            if (model != cfg_.model) {
                stats_.ignored_other_model++;
                continue;
            }
            entry e;
            e.id = id;
            e.bucket = reinterpret_cast<const char *>(sqlite3_column_text(s, 3));
            e.session = reinterpret_cast<const char *>(sqlite3_column_text(s, 4));
            e.history = sqlite3_column_int(s, 5);
            e.anchor = sqlite3_column_int(s, 6) != 0;
            e.checkpoints = decode_checkpoints(reinterpret_cast<const char *>(sqlite3_column_text(s, 7)));
            e.bytes = static_cast<uint64_t>(sqlite3_column_int64(s, 8));
            e.last_use = sqlite3_column_double(s, 9);
            const auto * t = static_cast<const token *>(sqlite3_column_blob(s, 10));
            e.toks.assign(t, t + sqlite3_column_bytes(s, 10) / static_cast<int>(sizeof(token)));
            std::error_code ec;
            const auto size = fs::file_size(path_of(id), ec);
            if (ec || size != e.bytes || e.toks.empty()) {
                drop.push_back(id);  // the file is gone or was cut short after it was indexed
                continue;
            }
            catalog_.add(std::move(e));
        }
    }
    for (file_id id : drop) {
        stmt d(db_, "DELETE FROM files WHERE id = ?");
        sqlite3_bind_int64(d.get(), 1, static_cast<sqlite3_int64>(id));
        d.step();
        std::error_code ec;
        fs::remove(path_of(id), ec);
        stats_.removed_at_startup++;
    }
    // Temporary files of writes a crash interrupted, and files renamed but never indexed.
    std::error_code ec;
    for (const auto & de : fs::directory_iterator(cfg_.dir, ec)) {
        const auto & p = de.path();
        const std::string ext = p.extension().string();
        if (ext == ".tmp") {
            fs::remove(p, ec);
            stats_.removed_at_startup++;
        } else if (ext == ".lcache") {
            const std::string stem = p.stem().string();
            char * end = nullptr;
            const auto id = static_cast<file_id>(std::strtoull(stem.c_str(), &end, 10));
            if (end == nullptr || *end != '\0' || !indexed.count(id)) {
                fs::remove(p, ec);
                stats_.removed_at_startup++;
            }
            next_id_ = std::max(next_id_, id + 1);
        }
    }
    for (const auto & [id, e] : catalog_.files()) {
        stats_.files++;
        stats_.bytes += e.bytes;
        stats_.anchor_files += e.anchor ? 1 : 0;
    }
    spdlog::info("disk tier: {} ({} files of this model, {:.1f} MiB, capacity {:.1f} MiB)", cfg_.dir, stats_.files,
                 static_cast<double>(stats_.bytes) / (1 << 20), static_cast<double>(cfg_.capacity_bytes) / (1 << 20));
    if (stats_.ignored_other_model + stats_.ignored_other_format > 0) {
        spdlog::info("disk tier: ignored {} files written by another model and {} written in another format version "
                     "(left in place; they never match this server)",
                     stats_.ignored_other_model, stats_.ignored_other_format);
    }
    if (stats_.removed_at_startup > 0) {
        spdlog::info("disk tier: removed {} temporary, unindexed or missing files left by an earlier run",
                     stats_.removed_at_startup);
    }
    if (stats_.bytes > cfg_.capacity_bytes) {
        make_room(0);  // the cap was lowered since the last run
    }
}

std::string_view to_string(file_removal r) {
    switch (r) {
        case file_removal::superseded: return "superseded";
        case file_removal::capacity: return "capacity";
        case file_removal::damaged: return "damaged";
        case file_removal::reset: return "reset";
    }
    return "?";
}

std::string disk_tier::path_of(file_id id, const char * ext) const {
    return cfg_.dir + "/" + std::to_string(id) + ext;
}

std::optional<disk_candidate> disk_tier::best(const std::string & bucket, const std::string & session,
                                              const tokens & prompt, int32_t longer_than) const {
    util::lock_guard lk(mu_);
    return catalog_.best(bucket, session, prompt, longer_than);
}

void disk_tier::push(job j, bool front) {
    {
        util::lock_guard lk(qmu_);
        if (front) {
            queue_.push_front(std::move(j));
        } else {
            queue_.push_back(std::move(j));
        }
    }
    qcv_.notify_one();
}

void disk_tier::write(disk_write w) {
    job j;
    j.k = job::kind::write;
    j.w = std::move(w);
    push(std::move(j), false);
}

std::future<disk_load_result> disk_tier::load(file_id id, std::function<void()> on_done) {
    job j;
    j.k = job::kind::load;
    j.id = id;
    j.load_done = std::make_shared<std::promise<disk_load_result>>();
    j.on_done = std::move(on_done);
    auto fut = j.load_done->get_future();
    push(std::move(j), true);
    return fut;
}

void disk_tier::remove(std::vector<file_id> ids) {
    if (ids.empty()) {
        return;
    }
    job j;
    j.k = job::kind::remove;
    j.ids = std::move(ids);
    push(std::move(j), false);
}

std::vector<disk_completion> disk_tier::take_completions() {
    util::lock_guard lk(mu_);
    std::vector<disk_completion> out;
    out.swap(completions_);
    return out;
}

void disk_tier::drain() {
    job j;
    j.k = job::kind::barrier;
    j.barrier = std::make_shared<std::promise<void>>();
    auto fut = j.barrier->get_future();
    push(std::move(j), false);
    fut.wait();
}

std::pair<int64_t, uint64_t> disk_tier::reset() {
    job j;
    j.k = job::kind::reset;
    j.reset_done = std::make_shared<std::promise<std::pair<int64_t, uint64_t>>>();
    auto fut = j.reset_done->get_future();
    push(std::move(j), false);
    return fut.get();
}

disk_stats disk_tier::get_stats() const {
    disk_stats s;
    {
        util::lock_guard lk(mu_);
        s = stats_;
    }
    util::lock_guard lk(qmu_);
    s.queued = static_cast<int64_t>(queue_.size());
    return s;
}

void disk_tier::run() {
    for (;;) {
        job j;
        {
            util::unique_lock lk(qmu_);
            while (!stopping_ && queue_.empty()) {
                lk.wait(qcv_);
            }
            if (queue_.empty()) {
                break;  // stopping, and everything queued is done (writes at shutdown included)
            }
            j = std::move(queue_.front());
            queue_.pop_front();
        }
        try {
            switch (j.k) {
                case job::kind::write: do_write(j); break;
                case job::kind::load: do_load(j); break;
                case job::kind::remove:
                    for (file_id id : j.ids) {
                        delete_file(id, file_removal::superseded);
                    }
                    break;
                case job::kind::reset: {
                    std::vector<file_id> ids;
                    uint64_t bytes = 0;
                    {
                        util::lock_guard lk(mu_);
                        for (const auto & [id, e] : catalog_.files()) {
                            ids.push_back(id);
                            bytes += e.bytes;
                        }
                    }
                    for (file_id id : ids) {
                        delete_file(id, file_removal::reset);
                    }
                    j.reset_done->set_value({static_cast<int64_t>(ids.size()), bytes});
                    break;
                }
                case job::kind::barrier: j.barrier->set_value(); break;
            }
        } catch (const std::exception & e) {
            spdlog::error("disk tier: {}", e.what());
            if (j.load_done) {
                disk_load_result r;
                r.error = disk_load_error::io;
                r.detail = e.what();
                j.load_done->set_value(std::move(r));
                if (j.on_done) {
                    j.on_done();
                }
            }
        }
    }
}

void disk_tier::delete_file(file_id id, file_removal why) {
    uint64_t bytes = 0;
    bool anchor = false;
    {
        util::lock_guard lk(mu_);
        auto gone = catalog_.remove(id);
        if (!gone) {
            return;
        }
        bytes = gone->bytes;
        anchor = gone->anchor;
        stats_.files--;
        stats_.bytes -= bytes;
        stats_.anchor_files -= anchor ? 1 : 0;
        if (why == file_removal::superseded) {
            stats_.superseded++;
        } else if (why == file_removal::capacity) {
            stats_.evictions++;
        }
    }
    // Index row first: a crash in between leaves an unindexed file, removed at startup.
    stmt d(db_, "DELETE FROM files WHERE id = ?");
    sqlite3_bind_int64(d.get(), 1, static_cast<sqlite3_int64>(id));
    d.step();
    std::error_code ec;
    fs::remove(path_of(id), ec);
    if (why != file_removal::reset) {
        spdlog::debug("disk tier: deleted file {} ({} bytes{}): {}", id, bytes, anchor ? ", anchor" : "",
                      to_string(why));
    }
}

bool disk_tier::make_room(uint64_t bytes) {
    if (bytes > cfg_.capacity_bytes) {
        return false;
    }
    for (;;) {
        file_id victim = 0;
        {
            util::lock_guard lk(mu_);
            if (stats_.bytes + bytes <= cfg_.capacity_bytes) {
                return true;
            }
            // Least recently used; anchors are the last candidates, not exempt (seed 000).
            const entry * v = nullptr;
            for (const auto & [id, e] : catalog_.files()) {
                if (v == nullptr || std::pair(e.anchor, e.last_use) < std::pair(v->anchor, v->last_use)) {
                    v = &e;
                }
            }
            if (v == nullptr) {
                return false;
            }
            victim = v->id;
        }
        delete_file(victim, file_removal::capacity);
    }
}

void disk_tier::do_write(job & j) {
    disk_write & w = j.w;
    w.rec.model = cfg_.model;
    disk_completion done;
    done.entry_id = w.entry_id;
    const uint64_t size = disk_file_size(w.rec);
    if (!make_room(size)) {
        done.result = util::status::error("larger than the disk capacity");
        if (!warned_too_large_) {
            warned_too_large_ = true;
            spdlog::warn("disk tier: an entry of {} bytes is larger than the disk capacity of {} bytes and is not "
                         "written; raise --cache-disk-capacity-bytes (this warning is printed once)",
                         size, cfg_.capacity_bytes);
        }
        util::lock_guard lk(mu_);
        stats_.write_failures++;
        completions_.push_back(std::move(done));
        return;
    }
    const file_id id = next_id_++;
    const std::string tmp = path_of(id, ".tmp");
    util::status written = write_disk_file(tmp, w.rec);
    std::error_code ec;
    if (written) {
        fs::rename(tmp, path_of(id), ec);
        if (ec) {
            written = util::status::error(ec.message());
        }
    }
    if (!written) {
        fs::remove(tmp, ec);
        done.result = written;
        spdlog::warn("disk tier: writing {} failed: {}", tmp, written.message());
        util::lock_guard lk(mu_);
        stats_.write_failures++;
        completions_.push_back(std::move(done));
        return;
    }
    fsync_dir(cfg_.dir);
    {
        stmt ins(db_, "INSERT INTO files (id, model, format, bucket, session, n_tokens, history, anchor, checkpoints, "
                      "bytes, last_use, created, tokens) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)");
        sqlite3_stmt * s = ins.get();
        sqlite3_bind_int64(s, 1, static_cast<sqlite3_int64>(id));
        sqlite3_bind_text(s, 2, cfg_.model.c_str(), -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(s, 3, static_cast<int>(disk_format_version));
        sqlite3_bind_text(s, 4, w.rec.bucket.c_str(), -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(s, 5, w.rec.session.c_str(), -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(s, 6, static_cast<int>(w.rec.toks.size()));
        sqlite3_bind_int(s, 7, w.rec.history);
        sqlite3_bind_int(s, 8, w.rec.anchor ? 1 : 0);
        sqlite3_bind_text(s, 9, encode_checkpoints(w.rec.checkpoints).c_str(), -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(s, 10, static_cast<sqlite3_int64>(size));
        sqlite3_bind_double(s, 11, w.last_use);
        sqlite3_bind_double(s, 12, wall_s());
        sqlite3_bind_blob(s, 13, w.rec.toks.data(), static_cast<int>(w.rec.toks.size() * sizeof(token)),
                          SQLITE_TRANSIENT);
        if (ins.step() != SQLITE_DONE) {
            done.result = util::status::error(std::string("index insert failed: ") + sqlite3_errmsg(db_));
            spdlog::warn("disk tier: {}", done.result.message());
            fs::remove(path_of(id), ec);
            util::lock_guard lk(mu_);
            stats_.write_failures++;
            completions_.push_back(std::move(done));
            return;
        }
    }
    {
        util::lock_guard lk(mu_);
        entry e;
        e.id = id;
        e.bucket = w.rec.bucket;
        e.session = w.rec.session;
        e.toks = w.rec.toks;
        for (const auto & c : w.rec.checkpoints) {
            e.checkpoints.push_back({c.n_tokens, c.kind, nullptr});
        }
        e.history = w.rec.history;
        e.anchor = w.rec.anchor;
        e.bytes = size;
        e.last_use = w.last_use;
        catalog_.add(std::move(e));
        stats_.files++;
        stats_.bytes += size;
        stats_.anchor_files += w.rec.anchor ? 1 : 0;
        stats_.writes++;
        stats_.bytes_written += size;
    }
    spdlog::debug("disk tier: wrote file {} ({} tokens, {} checkpoints, {} bytes{})", id, w.rec.toks.size(),
                  w.rec.checkpoints.size(), size, w.rec.anchor ? ", anchor" : "");
    // The successor is durable (file fsync'd, row committed): the files it supersedes go.
    for (file_id old : w.ancestors) {
        delete_file(old, file_removal::superseded);
    }
    done.file = id;
    util::lock_guard lk(mu_);
    completions_.push_back(std::move(done));
}

void disk_tier::do_load(job & j) {
    bool known = false;
    {
        util::lock_guard lk(mu_);
        if (entry * f = catalog_.find(j.id)) {
            known = true;
            f->last_use = wall_s();
        }
    }
    disk_load_result r;
    if (!known) {
        r.error = disk_load_error::missing;
        r.detail = "file " + std::to_string(j.id) + " was deleted before it could be loaded";
    } else {
        r = read_disk_file(path_of(j.id), cfg_.model);
        if (r.error == disk_load_error::none) {
            stmt u(db_, "UPDATE files SET last_use = ? WHERE id = ?");
            sqlite3_bind_double(u.get(), 1, wall_s());
            sqlite3_bind_int64(u.get(), 2, static_cast<sqlite3_int64>(j.id));
            u.step();
            util::lock_guard lk(mu_);
            stats_.loads++;
            stats_.bytes_read += disk_file_size(*r.record);
        } else {
            spdlog::warn("disk tier: file {} failed its checks ({}: {}); deleted, the request prefills cold",
                         path_of(j.id), to_string(r.error), r.detail);
            {
                util::lock_guard lk(mu_);
                stats_.damaged++;
            }
            delete_file(j.id, file_removal::damaged);
        }
    }
    j.load_done->set_value(std::move(r));
    if (j.on_done) {
        j.on_done();
    }
}

}  // namespace lineage::cache
