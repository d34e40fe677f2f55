// scheduler::disk_link: the scheduler's side of tier 2; see disk_link.h.
#include "scheduler/disk_link.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

namespace lineage::scheduler {

disk_link::disk_link(cache::store & store, sequence_states & st, const cache::config & cfg,
                     const std::string & model_path, bool hybrid)
    : store_(store), st_(st), dir_(cfg.disk_dir), idle_s_(cfg.disk_idle_s),
      max_unwritten_s_(cfg.disk_max_unwritten_s) {
    if (!cfg.enabled || (cfg.disk_dir.empty() && cfg.redis_url.empty())) {
        return;
    }
    const std::string model = cache::model_fingerprint(model_path);
    if (!cfg.disk_dir.empty()) {
        try {
            cache::disk_config dc;
            dc.dir = cfg.disk_dir;
            dc.capacity_bytes = cfg.disk_capacity_bytes;
            dc.model = model;
            dc.rule = cache::restore_settings::from(cfg, hybrid);
            tier_ = std::make_unique<cache::disk_tier>(dc);
            store_.attach_disk(tier_.get());
        } catch (const std::exception & e) {
            spdlog::warn("disk tier off: {}", e.what());
        }
    }
    if (!cfg.redis_url.empty()) {
        cache::redis_config rc;
        rc.url = cfg.redis_url;
        rc.ns = cfg.redis_namespace;
        rc.timeout_ms = cfg.redis_timeout_ms;
        rc.chunk_bytes = cfg.redis_chunk_bytes;
        rc.model = model;
        rc.rule = cache::restore_settings::from(cfg, hybrid);
        redis_ = std::make_unique<cache::redis_tier>(rc);  // the URL was checked with the flags
        store_.attach_remote(redis_.get());
        spdlog::info("tier 3: Redis at {}, namespace {}, timeout {} ms, chunks of {} bytes", rc.url, rc.ns,
                     rc.timeout_ms, rc.chunk_bytes);
    }
}

disk_link::~disk_link() {
    close();
}

void disk_link::close() {
    store_.attach_disk(nullptr);
    store_.attach_remote(nullptr);
    tier_.reset();
    redis_.reset();
}

void disk_link::write(cache::disk_job j) {
    if (!on()) {
        return;
    }
    cache::disk_write w;
    w.entry_id = j.entry_id;
    w.rec.bucket = j.k.bucket;
    w.rec.session = j.k.session;
    w.rec.tenant = j.k.tenant;
    w.rec.toks = std::move(j.toks);
    w.rec.history = j.history;
    w.rec.anchor = j.anchor;
    // A parked sequence's state is read here, on the engine thread, before it is released.
    w.rec.full = j.seq >= 0 ? cache::make_blob(st_.get_state(j.seq, false)) : std::move(j.full);
    w.rec.checkpoints = std::move(j.checkpoints);
    w.ancestors = std::move(j.ancestors);
    w.last_use = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    if (redis_) {
        cache::disk_write copy = w;  // the states are shared, not copied
        copy.ancestors.clear();      // tier-2 file ids
        redis_->write(std::move(copy));
    }
    if (tier_) {
        tier_->write(std::move(w));
    }
}

void disk_link::housekeeping(bool idle, double now_s) {
    if (!on()) {
        return;
    }
    // The store tracks one copy per entry: the disk's when there is a disk tier, else Redis's.
    if (redis_) {
        for (const auto & c : redis_->take_completions()) {
            if (!tier_) {
                store_.disk_written(c.entry_id, c.file);
            }
        }
    }
    if (tier_) {
        for (const auto & c : tier_->take_completions()) {
            store_.disk_written(c.entry_id, c.file);
        }
    }
    // RAM release: idle entries whose file has landed give their RAM back (cache::config
    // ram_release_s); one pass a second is enough for a threshold in seconds.
    if (tier_ && now_s - last_release_s_ >= 1.0) {
        last_release_s_ = now_s;
        if (const uint64_t freed = store_.release_written(now_s); freed > 0) {
            spdlog::debug("cache: released {:.1f} MiB of RAM held by idle entries already on disk",
                          static_cast<double>(freed) / (1 << 20));
        }
    }
    if (idle) {
        for (auto & j : store_.take_idle_writes(now_s, idle_s_)) {
            write(std::move(j));
        }
    }
    if (auto j = store_.take_overdue_write(now_s, max_unwritten_s_)) {
        // Busy or not: when busy this costs the step one state read (device entries) and a copy.
        const auto t0 = std::chrono::steady_clock::now();
        write(std::move(*j));
        const double read_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (tier_) {
            tier_->count_overdue_write(read_s);
        }
        spdlog::debug("disk tier: writing an entry unwritten for --cache-disk-max-unwritten-s ({}; state read "
                      "{:.2f} ms)", idle ? "idle" : "engine busy", read_s * 1e3);
    }
}

void disk_link::flush(double now_s, const std::function<void()> & drain) {
    if (!on()) {
        return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    drain();
    auto jobs = store_.take_idle_writes(now_s, -1);
    const size_t n_jobs = jobs.size();
    for (auto & j : jobs) {
        write(std::move(j));
    }
    if (redis_) {
        redis_->drain();
        const auto rs = redis_->get_stats();
        spdlog::info("tier 3: {} entries written to Redis this run ({:.1f} MiB), {} failed", rs.writes,
                     static_cast<double>(rs.bytes_written) / (1 << 20), rs.write_failures);
    }
    if (!tier_) {
        return;
    }
    const auto st = tier_->get_stats();
    if (st.queued > 0) {
        spdlog::info("disk tier: writing {} cache entries to {} before exit ({} jobs queued)...", n_jobs, dir_,
                     st.queued);
    }
    tier_->drain();
    const auto done = tier_->get_stats();
    spdlog::info("disk tier: {} files ({:.1f} MiB) in {} at exit; {} written this run ({:.1f} MiB) in {:.2f} s at "
                 "shutdown",
                 done.files, static_cast<double>(done.bytes) / (1 << 20), dir_, done.writes,
                 static_cast<double>(done.bytes_written) / (1 << 20),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

std::future<cache::disk_load_result> disk_link::load(cache::file_id f, const std::string & bucket,
                                                     const cache::tokens & prompt, int32_t n_restore,
                                                     std::function<void()> on_done, bool remote) {
    cache::disk_expect want;
    want.bucket = bucket;
    want.prefix.assign(prompt.begin(), prompt.begin() + std::clamp<int32_t>(n_restore, 0, static_cast<int32_t>(prompt.size())));
    if (remote) {
        return redis_->load(f, std::move(want), std::move(on_done));
    }
    return tier_->load(f, std::move(want), std::move(on_done));
}

}  // namespace lineage::scheduler
