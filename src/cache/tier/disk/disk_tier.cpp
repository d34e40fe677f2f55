// cache::disk_tier: tier T2; see disk_tier.h. The startup scan and the disk thread's jobs; the
// SQLite statements are disk_index's.
#include "cache/tier/disk/disk_tier.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <stdexcept>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace lineage::cache {

namespace fs = std::filesystem;

namespace {

double wall_s() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void fsync_dir(const std::string & dir) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
    }
}

}  // namespace

tier_traits disk_tier::kind() {
    return tier_traits{.name = "disk", .shared = false, .load_failed = "disk_damaged", .copy_noun = "disk file"};
}

disk_tier::disk_tier(disk_config cfg)
    : lower_tier(worker_config{.name = "disk tier"}, kind()), cfg_(std::move(cfg)), catalog_(cfg_.rule) {
    std::error_code ec;
    const bool created = fs::create_directories(cfg_.dir, ec);
    if (ec) {
        throw std::runtime_error("cannot create the cache directory " + cfg_.dir + ": " + ec.message());
    }
    if (created) {
        // The files hold conversations' states: readable and writable by this user only.
        fs::permissions(cfg_.dir, fs::perms::owner_all, fs::perm_options::replace, ec);
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
    const std::string index = cfg_.dir + "/index.sqlite";
    try {
        try {
            index_ = std::make_unique<disk_index>(index);
            startup_scan();
        } catch (const index_damaged & e) {
            // A damaged index loses no file: it is moved aside, a new one started, and the sound
            // blob files are indexed again from their headers (which carry their identity).
            index_.reset();
            const std::string aside = index + ".damaged";
            std::error_code ec;
            fs::rename(index, aside, ec);
            for (const char * ext : {"-wal", "-shm"}) {
                fs::rename(index + ext, aside + ext, ec);
            }
            spdlog::warn("disk tier: the index {} is damaged ({}); moved to {}, rebuilding it from the files' headers",
                         index, e.what(), aside);
            catalog_.clear();
            stats_.files = 0;
            stats_.bytes = 0;
            stats_.anchor_files = 0;
            count_damage(std::string("index"));
            index_ = std::make_unique<disk_index>(index);
            startup_scan();
        }
    } catch (...) {
        index_.reset();
        ::close(lock_fd_);
        throw;
    }
    start();
}

disk_tier::~disk_tier() {
    stop();  // the queued jobs first (writes at shutdown included)
    try {
        tick_now();  // last uses not yet written (the worker has stopped: this thread owns the index)
    } catch (const std::exception & e) {
        spdlog::warn("disk tier: last uses not written at shutdown: {}", e.what());
    }
    index_.reset();
    if (lock_fd_ >= 0) {
        ::close(lock_fd_);
    }
}

void disk_tier::count_damage(const std::string & kind) {
    stats_.damaged++;
    stats_.damage[kind]++;
}

void disk_tier::count_damage(tier_load_error e) {
    util::lock_guard lk(mu_);
    count_damage(std::string(to_string(e)));
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

std::string disk_tier::path_of(copy_id id, const char * ext) const {
    return cfg_.dir + "/" + std::to_string(id) + ext;
}

std::optional<tier_candidate> disk_tier::best(const std::string & bucket, const std::string & session,
                                              const tokens & prompt, int32_t longer_than) const {
    util::lock_guard lk(mu_);
    return catalog_.best(bucket, session, prompt, longer_than);
}

std::unique_ptr<lower_tier> open_disk_tier(const config & cfg, const std::string & model, bool hybrid) {
    if (!cfg.enabled || cfg.disk_dir.empty()) {
        return nullptr;
    }
    try {
        disk_config dc;
        dc.dir = cfg.disk_dir;
        dc.capacity_bytes = cfg.disk_capacity_bytes;
        dc.model = model;
        dc.rule = restore_settings::from(cfg, hybrid);
        return std::make_unique<disk_tier>(dc);
    } catch (const std::exception & e) {
        spdlog::warn("disk tier off: {}", e.what());
        return nullptr;
    }
}

tier_report describe(const disk_stats & d, int64_t requests_committed) {
    // In the order GET /v1/cache/stats lists them, which also places each /metrics family (stats.h).
    const auto per_request = requests_committed > 0 ? d.bytes_written / static_cast<uint64_t>(requests_committed) : 0;
    return tier_report{
        .name = "disk",
        .enabled = d.enabled,
        .hits_help = "Restores served from a tier-2 file.",
        .figures = {
            figure("dir", d.dir),
            figure("files", d.files, "files", "Tier-2 files of this model."),
            figure("capacity_bytes", d.capacity_bytes, "capacity_bytes",
                   "Byte cap of the tier-2 files (--cache-disk-capacity-bytes)."),
            figure("bytes", d.bytes),
            figure("anchor_files", d.anchor_files),
            figure("writes", d.writes, "writes_total", "Tier-2 files written."),
            figure("bytes_written", d.bytes_written, "written_bytes_total", "Bytes written to tier-2 files."),
            figure("bytes_written_per_request", per_request),
            figure("write_failures", d.write_failures),
            figure("loads", d.loads, "loads_total", "Tier-2 files read for a restore."),
            figure("bytes_read", d.bytes_read),
            figure("damaged", d.damaged),
            figure_map(
                "damage", d.damage, "damaged_total",
                "Damaged tier-2 files and index rows found (deleted; never served), by kind: corrupt, truncated, "
                "bad_magic, identity, not_regular, other_model, missing, io, index_row, index.",
                "kind", {"corrupt", "truncated", "bad_magic", "identity", "not_regular", "index_row", "index"}),
            figure("ignored_other_model", d.ignored_other_model),
            figure("ignored_other_format", d.ignored_other_format),
            figure("discarded_old_format", d.discarded_old_format),
            figure("removed_at_startup", d.removed_at_startup),
            figure("reindexed", d.reindexed),
            figure("overdue_writes", d.overdue_writes, "overdue_writes_total",
                   "Tier-2 writes forced by --cache-disk-max-unwritten-s (the engine busy or not)."),
            figure("overdue_read_seconds", d.overdue_read_seconds, "overdue_read_seconds_total",
                   "Engine-thread seconds spent reading the states of the forced writes."),
            figure_series("evictions", d.evictions, "evictions_total",
                          "Tier-2 files deleted, by reason: capacity (LRU under the cap), superseded (a successor was "
                          "written).",
                          "reason", "capacity"),
            figure_series("superseded", d.superseded, "evictions_total", {}, "reason", "superseded"),
            figure("queued", d.queued),
        }};
}

void disk_tier::report(stats & s) const {
    const disk_stats d = get_stats();
    s.tiers.push_back(describe(d, s.requests_committed));
    s.bytes["disk"] = d.bytes;
}

std::string disk_tier::exit_summary() const {
    const disk_stats st = get_stats();
    return fmt::format("disk tier: {} files ({:.1f} MiB) in {} at exit; {} written this run ({:.1f} MiB)", st.files,
                       static_cast<double>(st.bytes) / (1 << 20), cfg_.dir, st.writes,
                       static_cast<double>(st.bytes_written) / (1 << 20));
}

disk_stats disk_tier::get_stats() const {
    disk_stats s;
    {
        util::lock_guard lk(mu_);
        s = stats_;
    }
    s.queued = queued();
    return s;
}

void disk_tier::check_invariants() const {
    util::lock_guard lk(mu_);
    catalog_.check_invariants();
    int64_t files = 0, anchors = 0;
    uint64_t bytes = 0;
    for (const auto & [id, f] : catalog_.files()) {
        files++;
        anchors += f.anchor ? 1 : 0;
        bytes += f.bytes;
    }
    if (files != stats_.files || bytes != stats_.bytes || anchors != stats_.anchor_files) {
        throw std::logic_error("disk tier invariant broken: stats say " + std::to_string(stats_.files) + " files, " +
                               std::to_string(stats_.bytes) + " bytes; the catalog holds " + std::to_string(files) +
                               ", " + std::to_string(bytes));
    }
}

void disk_tier::remove_now(const std::vector<copy_id> & ids) {
    for (copy_id id : ids) {
        delete_file(id, file_removal::superseded);
    }
}

std::pair<int64_t, uint64_t> disk_tier::reset_now(const std::optional<std::string> & tenant) {
    std::vector<copy_id> ids;
    uint64_t bytes = 0;
    {
        util::lock_guard lk(mu_);
        for (const auto & [id, e] : catalog_.files()) {
            if (!tenant || e.tenant == *tenant) {
                ids.push_back(id);
                bytes += e.bytes;
            }
        }
    }
    for (copy_id id : ids) {
        delete_file(id, file_removal::reset);
    }
    return {static_cast<int64_t>(ids.size()), bytes};
}

void disk_tier::delete_file(copy_id id, file_removal why) {
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
    index_->erase(static_cast<int64_t>(id));
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
        copy_id victim = 0;
        {
            util::lock_guard lk(mu_);
            if (stats_.bytes + bytes <= cfg_.capacity_bytes) {
                return true;
            }
            // Least recently used; anchors are the last candidates, not exempt
            // (--cache-disk-capacity-bytes).
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

tier_completion disk_tier::write_failed(tier_completion done, std::string why) {
    done.result = util::status::error(std::move(why));
    util::lock_guard lk(mu_);
    stats_.write_failures++;
    return done;
}

tier_completion disk_tier::write_now(tier_write & w) {
    w.rec.model = cfg_.model;
    tier_completion done;
    done.entry_id = w.entry_id;
    const uint64_t size = copy_record_size(w.rec);
    if (!make_room(size)) {
        if (!warned_too_large_) {
            warned_too_large_ = true;
            spdlog::warn(
                "disk tier: an entry of {} bytes is larger than the disk capacity of {} bytes and is not "
                "written; raise --cache-disk-capacity-bytes (this warning is printed once)",
                size, cfg_.capacity_bytes);
        }
        return write_failed(std::move(done), "larger than the disk capacity");
    }
    if (next_id_ > max_copy_id) {
        return write_failed(std::move(done), "no file id left");
    }
    const copy_id id = next_id_++;
    w.rec.id = id;
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
        spdlog::warn("disk tier: writing {} failed: {}", tmp, written.message());
        return write_failed(std::move(done), written.message());
    }
    fsync_dir(cfg_.dir);
    if (!index_->insert(id, w.rec, size, w.last_use)) {
        const std::string why = "index insert failed: " + index_->error();
        spdlog::warn("disk tier: {}", why);
        fs::remove(path_of(id), ec);
        return write_failed(std::move(done), why);
    }
    {
        util::lock_guard lk(mu_);
        entry e;
        e.id = id;
        e.bucket = w.rec.bucket;
        e.session = w.rec.session;
        e.tenant = w.rec.tenant;
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
    for (copy_id old : w.ancestors) {
        delete_file(old, file_removal::superseded);
    }
    done.file = id;
    done.bytes = size;
    return done;
}

void disk_tier::count_overdue_write(double read_seconds) {
    util::lock_guard lk(mu_);
    stats_.overdue_writes++;
    stats_.overdue_read_seconds += read_seconds;
}

namespace {

/** Why the sound file `r` is not the one its row `f` and the request `want` name ("" when it is). */
std::string identity_mismatch(const copy_record & r, const tier_catalog::file & f, const tier_expect & want) {
    if (r.id != f.id) {
        return "its header names file " + std::to_string(r.id);
    }
    if (r.bucket != f.bucket || r.session != f.session || r.tenant != f.tenant || r.toks != f.toks ||
        r.history != f.history || r.anchor != f.anchor) {
        return "its key or tokens differ from its index row";
    }
    if (!want.bucket.empty() && r.bucket != want.bucket) {
        return "its bucket is not the request's";
    }
    if (want.prefix.size() > r.toks.size() || !std::equal(want.prefix.begin(), want.prefix.end(), r.toks.begin())) {
        return "its tokens do not start with the prompt's " + std::to_string(want.prefix.size()) + " restored tokens";
    }
    return {};
}

}  // namespace

bool disk_tier::tick_now() {
    std::vector<std::pair<copy_id, double>> uses;
    uses.swap(pending_touches_);
    index_->touch(uses);
    return false;
}

tier_load_result disk_tier::load_now(copy_id id, const tier_expect & want) {
    std::optional<entry> row;
    {
        util::lock_guard lk(mu_);
        if (entry * f = catalog_.find(id)) {
            f->last_use = wall_s();
            row = *f;
        }
    }
    tier_load_result r;
    if (!row) {
        r.error = tier_load_error::missing;
        r.detail = "file " + std::to_string(id) + " was deleted before it could be loaded";
    } else {
        try {
            r = read_disk_file(path_of(id), cfg_.model, want.keep);
        } catch (const std::exception & e) {  // e.g. bad_alloc for a section the size of the disk
            r = tier_load_result{};
            r.error = tier_load_error::io;
            r.detail = e.what();
        }
        if (r.error == tier_load_error::none) {
            if (std::string why = identity_mismatch(*r.record, *row, want); !why.empty()) {
                r.error = tier_load_error::identity;
                r.detail = std::move(why);
                r.record.reset();
            }
        }
        if (r.error == tier_load_error::none) {
            // The index row's last use is written after the load is answered (tick_now), not on
            // the request's path: one SQLite transaction with a sync to disk took 1-64 ms here
            // (docs/prompt-cache.md, the T2 disk tier's index).
            pending_touches_.emplace_back(id, wall_s());
            request_tick();
            util::lock_guard lk(mu_);
            stats_.loads++;
            stats_.bytes_read += row->bytes;  // the whole file was read, kept or not
        } else {
            spdlog::warn("disk tier: file {} failed its checks ({}: {}); deleted, the request prefills cold",
                         path_of(id), to_string(r.error), r.detail);
            count_damage(r.error);
            delete_file(id, file_removal::damaged);
        }
    }
    return r;
}

}  // namespace lineage::cache
