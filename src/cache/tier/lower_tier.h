// cache::lower_tier: what every tier below RAM is to the rest of the cache (disk, Redis;
// docs/architecture.md "Tiers below RAM"). It answers `best` through the one restore rule over
// its catalog (disk_lookup), and queues writes, loads, removals and resets on its own
// tier_worker; the derived tier supplies only its I/O (tier_io) and its stats.
// Threads: the public methods are called from the engine thread (reset also from HTTP
// threads); the tier_io methods run on the worker thread. A derived tier calls start() at the
// end of its constructor and stop() first in its destructor (the worker calls into it).
#pragma once

#include "cache/tier/disk/disk_catalog.h"
#include "cache/tier/tier_worker.h"

#include <cstdint>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace lineage::cache {

/** What the store consults for something longer than its best device/RAM restore point. */
class disk_lookup {
public:
    virtual ~disk_lookup() = default;
    /** Longest restore point of a copy in `bucket` for `prompt`, strictly longer than
     *  `longer_than` tokens and at most |prompt| - 1, chosen by the rule memory uses
     *  (restore_rule.h: in-session first, another session's only when strictly longer, the same
     *  tie order and APC clamp). */
    virtual std::optional<disk_candidate> best(const std::string & bucket, const std::string & session,
                                               const tokens & prompt, int32_t longer_than) const = 0;
};

class lower_tier : public disk_lookup, protected tier_io {
public:
    ~lower_tier() override;
    lower_tier(const lower_tier &) = delete;
    lower_tier & operator=(const lower_tier &) = delete;

    /** "disk tier", "tier 3": the worker's name, for log lines. */
    const std::string & name() const { return name_; }
    /** Queues a write (write-behind, or a pinned anchor) behind the jobs before it; a write past
     *  the tier's bound is dropped, counted (write_dropped) and completed as failed. */
    void write(disk_write w);
    /** Queues the read of copy `id` ahead of every write; `on_done` runs on the worker thread
     *  once the future is ready (to wake the engine thread). A damaged, missing or foreign copy
     *  comes back as an error (counted by the tier); the request then prefills cold. */
    std::future<disk_load_result> load(file_id id, disk_expect want = {}, std::function<void()> on_done = {});
    /** Queues the deletion of copies the store superseded. */
    void remove(std::vector<file_id> ids);
    /** Writes done, failed or dropped since the last call. */
    std::vector<disk_completion> take_completions();
    /** Blocks until every job queued before it is done (after a tick, for a tier that ticks:
     *  Redis reads its index first). */
    void drain();
    /** POST /v1/cache/reset: after the jobs queued before it (writes included), deletes every
     *  copy of this model (`tenant`: only that tenant's); blocks; returns copies and bytes freed. */
    std::pair<int64_t, uint64_t> reset(const std::optional<std::string> & tenant = std::nullopt);

protected:
    explicit lower_tier(worker_config cfg);
    /** Starts the worker: the end of the derived constructor. */
    void start() { worker_.start(); }
    /** Finishes the queued jobs and joins: first in the derived destructor. */
    void stop() { worker_.stop(); }
    /** Jobs waiting, for the tier's stats. */
    int64_t queued() const { return worker_.queued(); }
    /** A write dropped by the bound (worker_config::max_queued_writes), for the tier's stats. */
    virtual void write_dropped() {}

private:
    const std::string name_;
    const bool ticks_;
    tier_worker worker_;
};

}  // namespace lineage::cache
