// cache::disk_tier: the startup scan (docs/prompt-cache.md "Disk tier"): the index's rows checked
// against their files' headers, damaged rows and files dropped and counted, crash leftovers
// removed, and sound files the index lost indexed again from their headers. Runs in the
// constructor, before the disk thread starts; see disk_tier.h.
#include "cache/tier/disk/disk_tier.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <set>

#include <sys/stat.h>

namespace lineage::cache {

namespace fs = std::filesystem;

namespace {

/** True when `stem` is the canonical decimal name of an id in [1, max_copy_id]. */
bool canonical_id(const std::string & stem, copy_id & id) {
    if (stem.empty() || stem.size() > 15 || stem[0] == '0' ||
        !std::all_of(stem.begin(), stem.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return false;
    }
    id = std::stoull(stem);
    return id >= 1 && id <= max_copy_id;
}

}  // namespace

std::string disk_tier::check_indexed(const entry & f) const {
    const std::string path = path_of(f.id);
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
        return errno == ENOENT ? "missing" : "io";
    }
    if (!S_ISREG(st.st_mode)) {
        return "not_regular";
    }
    if (static_cast<uint64_t>(st.st_size) != f.bytes) {
        return "truncated";
    }
    const tier_load_result h = read_disk_header(path);
    if (h.error != tier_load_error::none) {
        return to_string(h.error);
    }
    const copy_record & r = *h.record;
    bool same = r.id == f.id && r.model == cfg_.model && r.bucket == f.bucket && r.session == f.session &&
                r.tenant == f.tenant &&
                h.n_tokens == static_cast<int32_t>(f.toks.size()) && h.digest == tokens_digest(f.toks) &&
                r.history == f.history && r.anchor == f.anchor && r.checkpoints.size() == f.checkpoints.size();
    for (size_t i = 0; same && i < f.checkpoints.size(); ++i) {
        same = r.checkpoints[i].n_tokens == f.checkpoints[i].n_tokens && r.checkpoints[i].kind == f.checkpoints[i].kind;
    }
    return same ? "" : "identity";
}

bool disk_tier::reindex(const std::string & path, const std::string & stem) {
    copy_id id = 0;
    if (!canonical_id(stem, id)) {
        return false;
    }
    tier_load_result h = read_disk_header(path, /*with_tokens=*/true);
    if (h.error != tier_load_error::none || h.record->id != id) {
        return false;
    }
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
        return false;
    }
    copy_record & r = *h.record;
    const auto bytes = static_cast<uint64_t>(st.st_size);
    const double mtime = static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) * 1e-9;
    if (!index_->insert(id, r, bytes, mtime)) {
        return false;
    }
    next_id_ = std::max(next_id_, id + 1);
    stats_.reindexed++;
    if (r.model != cfg_.model) {
        stats_.ignored_other_model++;
        return true;
    }
    entry e;
    e.id = id;
    e.bucket = std::move(r.bucket);
    e.session = std::move(r.session);
    e.tenant = std::move(r.tenant);
    e.toks = std::move(r.toks);
    e.checkpoints = std::move(r.checkpoints);
    e.history = r.history;
    e.anchor = r.anchor;
    e.bytes = bytes;
    e.last_use = mtime;
    catalog_.add(std::move(e));
    return true;
}

void disk_tier::startup_scan() {
    index_scan sc = index_->scan(cfg_.model);
    std::set<std::string> kept;  // file names the index accounts for
    for (const auto & [rowid, why] : sc.damaged) {
        spdlog::warn("disk tier: index row {} is damaged ({}); dropped with its file", rowid, why);
        index_->erase(rowid);
        if (rowid >= 1 && static_cast<uint64_t>(rowid) <= max_copy_id) {
            std::error_code ec;
            fs::remove(path_of(static_cast<copy_id>(rowid)), ec);
        }
        count_damage(std::string("index_row"));
    }
    for (copy_id id : sc.older_format) {
        index_->erase(static_cast<int64_t>(id));
        std::error_code ec;
        fs::remove(path_of(id), ec);
        stats_.discarded_old_format++;
    }
    for (copy_id id : sc.foreign) {
        kept.insert(std::to_string(id) + ".lcache");
        next_id_ = std::max(next_id_, id + 1);
    }
    stats_.ignored_other_model += sc.other_model;
    stats_.ignored_other_format += sc.newer_format;
    for (auto & f : sc.files) {
        const std::string damage = check_indexed(f);
        if (damage == "missing") {
            stats_.removed_at_startup++;  // deleted behind the index's back: nothing to serve
        } else if (!damage.empty()) {
            spdlog::warn("disk tier: file {} failed its startup check ({}); deleted", path_of(f.id), damage);
            count_damage(damage);
        }
        if (!damage.empty()) {
            index_->erase(static_cast<int64_t>(f.id));
            std::error_code ec;
            fs::remove(path_of(f.id), ec);
            continue;
        }
        kept.insert(std::to_string(f.id) + ".lcache");
        next_id_ = std::max(next_id_, f.id + 1);
        catalog_.add(std::move(f));
    }
    // Temporary files of writes a crash interrupted; files renamed but never indexed (or whose
    // index was lost) are indexed again from their headers when sound, else deleted. File
    // names never set an id: a stray name cannot move next_id_.
    std::error_code ec;
    std::vector<fs::path> names;
    for (const auto & de : fs::directory_iterator(cfg_.dir, ec)) {
        names.push_back(de.path());
    }
    for (const auto & p : names) {
        const std::string ext = p.extension().string();
        if (ext == ".tmp") {
            fs::remove(p, ec);
            stats_.removed_at_startup++;
        } else if (ext == ".lcache" && !kept.count(p.filename().string())) {
            if (!reindex(p.string(), p.stem().string())) {
                fs::remove(p, ec);
                stats_.removed_at_startup++;
            }
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
        spdlog::info("disk tier: ignored {} files written by another model and {} written in a newer format version "
                     "(left in place; they never match this server)",
                     stats_.ignored_other_model, stats_.ignored_other_format);
    }
    if (stats_.discarded_old_format > 0) {
        spdlog::info("disk tier: deleted {} files written in an older format version", stats_.discarded_old_format);
    }
    if (stats_.reindexed > 0) {
        spdlog::info("disk tier: indexed {} sound files again that the index did not list", stats_.reindexed);
    }
    if (stats_.removed_at_startup > 0) {
        spdlog::info("disk tier: removed {} temporary, unindexed or missing files left by an earlier run",
                     stats_.removed_at_startup);
    }
    if (stats_.damaged > 0) {
        spdlog::warn("disk tier: {} damaged files or index rows found and deleted at startup", stats_.damaged);
    }
    if (stats_.bytes > cfg_.capacity_bytes) {
        make_room(0);  // the cap was lowered since the last run
    }
}

}  // namespace lineage::cache
