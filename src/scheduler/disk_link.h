// scheduler::disk_link: the scheduler's side of tiers 2 and 3 (docs/architecture.md "Tier 2 (disk)
// as implemented", "Tier 3 (Redis) as implemented"): opens the disk tier and the Redis tier
// (--cache-redis) and attaches them to the store; every write-behind job goes to both, turns the
// store's disk jobs into writes (reading a parked entry's state from its sequence on the engine
// thread), feeds the disk thread's completions back to the store, writes idle entries (and, under
// load, entries unwritten too long, one per step), queues loads, and flushes everything at
// shutdown. Without --cache-dir (or when the tier cannot be opened) every call
// is a no-op. Thread safety: engine thread only (the tier's own thread is behind its queue).
// Ownership: owns the disk tier; borrows the store and the states; detaches the tier from the
// store before it is destroyed.
#pragma once

#include "cache/tier/disk/disk_tier.h"
#include "cache/tier/redis/redis_tier.h"
#include "cache/store/store.h"
#include "scheduler/sequence_states.h"

#include <functional>
#include <future>
#include <memory>
#include <string>

namespace lineage::scheduler {

class disk_link {
public:
    /** Opens the tier in cfg.disk_dir when the cache is on and a directory is given (WARNs and
     *  runs without it when it cannot be opened). `model_path` fingerprints the files. */
    disk_link(cache::store & store, sequence_states & st, const cache::config & cfg, const std::string & model_path,
              bool hybrid);
    ~disk_link();
    disk_link(const disk_link &) = delete;
    disk_link & operator=(const disk_link &) = delete;

    bool on() const { return tier_ != nullptr || redis_ != nullptr; }
    /** Queues the write of `j` (a parked entry's state is read now, before its id is released). */
    void write(cache::disk_job j);
    /** Completions back to the store; when `idle`, writes entries idle for --cache-disk-idle-s;
     *  busy or not, writes at most one entry unwritten for --cache-disk-max-unwritten-s (called
     *  once per engine step: at most one forced state read per step). */
    void housekeeping(bool idle, double now_s);
    /** At shutdown: writes every entry without a copy (`drain` first releases what the store let
     *  go of) and waits for the disk thread. */
    void flush(double now_s, const std::function<void()> & drain);
    /** Queues the read of file `f` ahead of writes, for a request of `bucket` whose prompt's
     *  first `n_restore` tokens it restores (the tier checks the file holds them); `on_done`
     *  runs on the disk thread. `remote`: `f` is a tier-3 mirror entry, read by the Redis thread.
     *  REQUIRES: on(), n_restore <= |prompt|. */
    std::future<cache::disk_load_result> load(cache::file_id f, const std::string & bucket,
                                              const cache::tokens & prompt, int32_t n_restore,
                                              std::function<void()> on_done, bool remote = false);
    /** The tier (nullptr when off), for stats and reset. */
    cache::disk_tier * tier() { return tier_.get(); }
    /** Tier 3 (nullptr when off), for stats. */
    cache::redis_tier * redis() { return redis_.get(); }
    /** Detaches from the store and stops the disk thread (before the members its callbacks
     *  touch go). Idempotent. */
    void close();

private:
    cache::store & store_;
    sequence_states & st_;
    std::string dir_;
    double idle_s_;
    double max_unwritten_s_;
    double last_release_s_ = -1;  // the last RAM-release pass (housekeeping, at most one a second)
    std::unique_ptr<cache::disk_tier> tier_;
    std::unique_ptr<cache::redis_tier> redis_;
};

}  // namespace lineage::scheduler
