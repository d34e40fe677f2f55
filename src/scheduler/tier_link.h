// scheduler::tier_link: the scheduler's side of the tiers below RAM (docs/architecture.md "Tiers
// below RAM", "Tier 2 (disk) as implemented", "Tier 3 (Redis) as implemented"): opens the tiers
// the flags name (cache::tier_table(), one row a tier, in the order the store consults them)
// and attaches them to the store; every write-behind job goes to every tier,
// turns the store's jobs into writes (reading a parked entry's state from its sequence on the
// engine thread), feeds the first tier's completions back to the store, writes idle entries
// (and, under load, entries unwritten too long, one per step), queues loads on the tier a plan
// names, loops stats and reset over the tiers, and flushes everything at shutdown. With no tier
// open (no --cache-dir nor --cache-redis, or none could be opened) every call is a no-op.
// Thread safety: engine thread only (each tier's own thread is behind its queue).
// Ownership: owns the tiers; borrows the store and the states; detaches the tiers from the
// store before they are destroyed.
#pragma once

#include "cache/store/store.h"
#include "cache/tier_table.h"
#include "cache/tier/lower_tier.h"
#include "scheduler/sequence_states.h"

#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

namespace lineage::scheduler {

class tier_link {
public:
    /** Opens every tier of `table` that cfg names (none when the cache is off; a tier that
     *  cannot be opened WARNs and is left out). `model_path` fingerprints the copies. Stats list
     *  every row's tier, open or off. `table` must outlive the link. */
    tier_link(cache::store & store, sequence_states & st, const cache::config & cfg, const std::string & model_path,
              bool hybrid, const std::vector<cache::tier_row> & table = cache::tier_table());
    /** Attaches `tiers` (in the store's order) instead of those the flags name: unit tests, with
     *  an in-memory tier. */
    tier_link(cache::store & store, sequence_states & st, const cache::config & cfg,
              std::vector<std::unique_ptr<cache::lower_tier>> tiers);
    ~tier_link();
    tier_link(const tier_link &) = delete;
    tier_link & operator=(const tier_link &) = delete;

    bool on() const { return !tiers_.empty(); }
    /** Queues the write of `j` on every tier (a parked entry's state is read now, before its id
     *  is released); the files it supersedes go to the first tier only (the copies the store
     *  tracks), and not when that tier is shared. */
    void write(cache::tier_job j);
    /** Completions back to the store; when `idle`, writes entries idle for --cache-disk-idle-s;
     *  busy or not, writes at most one entry unwritten for --cache-disk-max-unwritten-s (called
     *  once per engine step: at most one forced state read per step). */
    void housekeeping(bool idle, double now_s);
    /** At shutdown: writes every entry without a copy (`drain` first releases what the store let
     *  go of) and waits for every tier's thread. */
    void flush(double now_s, const std::function<void()> & drain);
    /** Queues the read of copy `f` of tier `tier` (restore_plan::tier) ahead of writes, for a
     *  request of `bucket` whose prompt's first `n_restore` tokens it restores (the tier checks
     *  the copy holds them), keeping the checkpoints `keep` names in memory
     *  (store::checkpoints_to_read); `on_done` runs on the tier's thread.
     *  REQUIRES: 0 <= tier < number of tiers, n_restore <= |prompt|. */
    std::future<cache::tier_load_result> load(int32_t tier, cache::copy_id f, const std::string & bucket,
                                              const cache::tokens & prompt, int32_t n_restore,
                                              cache::checkpoint_filter keep, std::function<void()> on_done);
    /** Every tier's figures into `s.tiers`, in the table's order: an open tier's own
     *  (lower_tier::report), a tier that is off its zeros; then any open tier outside the table. */
    void report(cache::stats & s) const;
    /** Each open tier's name and readiness (lower_tier::readiness), in the store's order. Any
     *  thread between construction and close() (the list of tiers changes only there). */
    std::vector<std::pair<std::string, cache::tier_state>> readiness() const;
    /** Deletes every tier's copies (`tenant`: only that tenant's) and records what was freed in
     *  `r`; after a full reset the writes finished before it are dropped (their copies are gone
     *  and the store forgot their entries). */
    void reset(cache::reset_result & r, const std::optional<std::string> & tenant);
    /** Detaches from the store and stops the tiers' threads (before the members their callbacks
     *  touch go). Idempotent. */
    void close();

private:
    void attach();

    cache::store & store_;
    sequence_states & st_;
    double idle_s_;
    double max_unwritten_s_;
    double last_release_s_ = -1;  // the last RAM-release pass (housekeeping, at most one a second)
    const std::vector<cache::tier_row> & table_;             // the tiers this server knows
    std::vector<std::unique_ptr<cache::lower_tier>> tiers_;  // the store's order
};

}  // namespace lineage::scheduler
