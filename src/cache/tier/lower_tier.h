// cache::lower_tier: what every tier below RAM is to the rest of the cache (disk, Redis;
// docs/architecture.md "Tiers below RAM"). It answers `best` through the one restore rule over
// its catalog (tier_lookup), and queues writes, loads, removals and resets on its own
// tier_worker; the derived tier supplies only its I/O (tier_io) and its stats.
// Threads: the public methods are called from the engine thread (reset also from HTTP
// threads); the tier_io methods run on the worker thread. A derived tier calls start() at the
// end of its constructor and stop() first in its destructor (the worker calls into it).
//
// A new tier is its folder (a class derived from lower_tier, an `open_<name>_tier` function and an
// `add_<name>_flags` function that declares its flags) and one row in cache/tier_table.cpp; the
// server's flags, the store, the scheduler, stats, /metrics and reset loop over the rows.
#pragma once

#include "cache/stats.h"
#include "cache/tier/tier_catalog.h"
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
class tier_lookup {
public:
    virtual ~tier_lookup() = default;
    /** Longest restore point of a copy in `bucket` for `prompt`, strictly longer than
     *  `longer_than` tokens and at most |prompt| - 1, chosen by the rule memory uses
     *  (restore_rule.h: in-session first, another session's only when strictly longer, the same
     *  tie order and APC clamp). */
    virtual std::optional<tier_candidate> best(const std::string & bucket, const std::string & session,
                                               const tokens & prompt, int32_t longer_than) const = 0;
};

/** Whether a tier answers lookups with what it holds (GET /ready, docs/prompt-cache.md
 *  "Readiness"): `warming` until it has read its index (a shared tier: until it has mirrored the
 *  index every replica writes), `ready` once it has, `unavailable` when it was declared down
 *  after its timeout (the replica serves without it; a lookup there finds nothing). Only
 *  `warming` keeps a replica out of a load balancer. */
enum class tier_readiness { warming, ready, unavailable };
const char * to_string(tier_readiness r);

struct tier_state {
    tier_readiness state = tier_readiness::ready;
    std::string detail;  ///< what it waits for, or why it is unavailable ("" when ready)
};

/** What the store knows of a tier below RAM besides its lookups (store::attach_tier). */
struct tier_traits {
    /** "disk", "redis": the tier in restored_from() and the `tier` label of
     *  lineage_prompt_cache_tier_hits_total; GET /v1/cache/stats `tier_hits` is keyed by it. */
    std::string name;
    /** Copies shared by every replica (Redis): no replica supersedes one (a copy is never an
     *  ancestor to delete), an anchor is handed over as soon as it is pinned, and RAM is not
     *  released on such a copy's word (another replica, or the tier's own eviction, may drop it). */
    bool shared = false;
    /** The rejections key (GET /v1/cache/stats `rejections`) of a hit whose copy could not be
     *  loaded: "disk_damaged", "redis_failed". */
    std::string load_failed;
    /** How the decision log names one of its copies: "disk file", "tier-3 (Redis) entry". */
    std::string copy_noun;
};

class lower_tier : public tier_lookup, protected tier_io {
public:
    ~lower_tier() override;
    lower_tier(const lower_tier &) = delete;
    lower_tier & operator=(const lower_tier &) = delete;

    /** "disk tier", "tier 3": the worker's name, for log lines. */
    const std::string & name() const { return name_; }
    /** Its name and rules for the store. */
    const tier_traits & traits() const { return traits_; }
    /** Queues a write (write-behind, or a pinned anchor) behind the jobs before it; a write past
     *  the tier's bound is dropped, counted (write_dropped) and completed as failed. */
    void write(tier_write w);
    /** Queues the read of copy `id` ahead of every write; `on_done` runs on the worker thread
     *  once the future is ready (to wake the engine thread). A damaged, missing or foreign copy
     *  comes back as an error (counted by the tier); the request then prefills cold. */
    std::future<tier_load_result> load(copy_id id, tier_expect want = {}, std::function<void()> on_done = {});
    /** Queues the deletion of copies the store superseded. */
    void remove(std::vector<copy_id> ids);
    /** Writes done, failed or dropped since the last call. */
    std::vector<tier_completion> take_completions();
    /** Blocks until every job queued before it is done (after a tick, for a tier that ticks:
     *  Redis reads its index first). */
    void drain();
    /** POST /v1/cache/reset: after the jobs queued before it (writes included), deletes every
     *  copy of this model (`tenant`: only that tenant's); blocks; returns copies and bytes freed. */
    std::pair<int64_t, uint64_t> reset(const std::optional<std::string> & tenant = std::nullopt);

    /** Appends the tier's figures to `s.tiers`, as a tier_report named traits().name (each figure
     *  described once for GET /v1/cache/stats and /metrics: cache/figure.h stat_figure), and may set
     *  s.bytes[name] (the bytes its copies take). */
    virtual void report(stats & s) const = 0;
    /** Where the copies go, for log lines: a directory, a URL. */
    virtual std::string location() const = 0;
    /** One INFO line for the log at shutdown, after drain() ("" for none). */
    virtual std::string exit_summary() const { return {}; }
    /** A write forced by --cache-disk-max-unwritten-s and the engine thread's seconds spent
     *  reading its state, for a tier that counts them. Default: not counted. */
    virtual void count_overdue_write(double read_seconds) { (void) read_seconds; }
    /** Whether it is warm (tier_readiness); any thread. Default: ready (a tier that reads its
     *  index before its constructor returns, as the disk tier does). */
    virtual tier_state readiness() const { return {}; }
    /** Jobs waiting on the tier's worker. */
    int64_t queued() const { return worker_.queued(); }

protected:
    lower_tier(worker_config cfg, tier_traits traits);
    /** Starts the worker: the end of the derived constructor. */
    void start() { worker_.start(); }
    /** Finishes the queued jobs and joins: first in the derived destructor. */
    void stop() { worker_.stop(); }
    /** Asks the worker for a tick_now() before its next job that is not a load (on the worker
     *  thread, e.g. from load_now: after the load is answered). */
    void request_tick() { worker_.request_tick(); }
    /** A write dropped by the bound (worker_config::max_queued_writes), for the tier's stats. */
    virtual void write_dropped() {}

private:
    const std::string name_;
    const tier_traits traits_;
    const bool ticks_;
    tier_worker worker_;
};

}  // namespace lineage::cache
