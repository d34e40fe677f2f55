// cache::redis_tier: tier T3, a prompt cache shared by replicas through Redis (docs/prompt-cache.md
// "Tier 3: Redis shared by replicas"). Entries the write-behind hands to tier 2 (idle, leaving RAM,
// shutdown, unwritten too long) and anchors as soon as they are pinned are also written here, in
// the copy_record layout (copy_record.h) split into checksummed chunks (redis_format.h), with an index entry each;
// every replica mirrors the index in a tier_catalog (tokens and restore points, no states), so
// a lookup is in memory and uses the shared restore rule; a hit is read by this thread while
// the request's slot waits in its loading phase, exactly like a disk hit.
// Redis is a cache: a missing chunk (evicted, FLUSHALL) or a damaged or foreign one is a
// counted miss; Redis down or slow never fails a request (every call has --cache-redis-timeout-ms,
// then the connection is dropped, counted, and tried again after a second).
// Threads: the tier's worker thread (the Redis thread; tier_worker.h) owns the connection and
// reads the index on its tick; the engine thread calls best() (the mirror, under a mutex) and
// queues jobs. Ownership: owns the worker, the connection and the mirror.
#pragma once

#include "cache/tier/tier_catalog.h"
#include "cache/tier/copy_record.h"
#include "cache/tier/tier_worker.h"
#include "cache/tier/redis/redis_format.h"
#include "cache/stats.h"
#include "cache/config.h"
#include "cache/tier/lower_tier.h"
#include "cache/tier/tier_flags.h"
#include "util/status.h"
#include "util/thread_annotations.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

struct redisContext;

namespace lineage::cache {

/** A parsed --cache-redis URL: redis://host[:port][/db]. */
struct redis_url {
    std::string host;
    int port = 6379;
    int db = 0;
};
/** Parses `url`; the error says what is wrong with it. */
util::expected<redis_url> parse_redis_url(const std::string & url);

struct redis_config {
    std::string url;                 ///< --cache-redis
    std::string ns = "lineage";      ///< --cache-redis-namespace (key prefix)
    int timeout_ms = 200;            ///< --cache-redis-timeout-ms: connect and each call
    uint64_t chunk_bytes = 4u << 20; ///< --cache-redis-chunk-bytes: payload bytes per chunk
    std::string model;               ///< model_fingerprint() of the served model
    restore_settings rule;           ///< the store's restore rule
    double poll_s = 0.2;             ///< how often the index is read for other replicas' entries
    double retry_s = 1.0;            ///< how long after a failure the connection is tried again
};

/** Tier 3 (Redis, shared by replicas) counters and gauges (docs/prompt-cache.md "Tier 3: Redis
 *  shared by replicas"). */
struct redis_stats {
    bool enabled = false;
    std::string url;                  ///< --cache-redis
    std::string ns;                   ///< --cache-redis-namespace
    bool connected = false;           ///< the last call reached Redis
    int64_t entries = 0;              ///< index entries mirrored (this model's, every replica's)
    int64_t writes = 0;               ///< entries written (chunks + index entry)
    uint64_t bytes_written = 0;       ///< chunk bytes written
    int64_t chunks_written = 0;
    int64_t write_failures = 0;       ///< writes not done: Redis down or slow, or queue full
    int64_t loads = 0;                ///< entries read for a restore
    uint64_t bytes_read = 0;
    /** Calls that failed (timeout, connection refused or lost, an error reply): the connection
     *  is dropped and tried again after a second; the request goes on without tier 3. */
    int64_t errors = 0;
    int64_t timeouts = 0;             ///< of which timeouts (--cache-redis-timeout-ms)
    int64_t connects = 0;             ///< connections opened
    int64_t vanished = 0;             ///< hits whose chunks were gone (evicted, FLUSHALL): misses
    /** Damaged or foreign chunks and index entries found (never served; deleted from Redis):
     *  the sum of `damage`, by kind: corrupt, truncated, bad_magic (a key of another Redis type
     *  where a chunk belongs too), identity, other_format of an entry; index (an index member
     *  that is no entry key scored by a sequence, or scored above the counter, e.g. +inf:
     *  skipped or removed), counter (the sequence counter not a number in range: repaired),
     *  wrong_type (the index or an index entry a key of another type), too_large (an index entry
     *  past 32 MiB: skipped). */
    int64_t damaged = 0;
    std::map<std::string, int64_t> damage;
    int64_t index_resets = 0;         ///< the index vanished or restarted (FLUSHALL): mirror cleared
    int64_t queued = 0;               ///< jobs waiting for the Redis thread
};

/** `st` as GET /v1/cache/stats ("redis", "redis_hits") and /metrics (lineage_prompt_cache_redis_*)
 *  show it, described once; default-constructed, a Redis tier that is off. */
tier_report describe(const redis_stats & st);

/** Tier 3's flags (--cache-redis, --cache-redis-namespace, --cache-redis-timeout-ms,
 *  --cache-redis-chunk-bytes), bound to their fields of `cc` (redis_flags.cpp; the URL is checked
 *  with parse_redis_url). */
void add_redis_flags(flag_sink & add, config & cc);

/** Tier 3 as cache::config sets it (--cache-redis and its options), for cache::tier_table(): nullptr when the cache is off or no URL is given (the URL was checked with
 *  the flags); an INFO line says where it points. `model`: model_fingerprint() of the served
 *  model; `hybrid`: the restore rule's. */
std::unique_ptr<lower_tier> open_redis_tier(const config & cfg, const std::string & model, bool hybrid);

class redis_tier final : public lower_tier {
public:
    /** What the store knows of this tier (store::attach_tier): its name, sharing and nouns. */
    static tier_traits kind();

    /** Starts the worker (the Redis thread, which connects; Redis need not be up). Throws
     *  std::invalid_argument when the URL cannot be parsed. */
    explicit redis_tier(redis_config cfg);
    /** Finishes the queued jobs (writes included, each bounded by the timeout) and joins. */
    ~redis_tier() override;

    /** The mirror's best restore point (tier_lookup's contract); a candidate's id names a
     *  mirror entry (not a file). */
    std::optional<tier_candidate> best(const std::string & bucket, const std::string & session,
                                       const tokens & prompt, int32_t longer_than) const override;
    // write (dropped, counted, when 64 are queued), load (a vanished entry comes back as error
    // missing, a damaged one counted as damage), take_completions (`file`: 1 when written),
    // drain (reads the index first) and reset: lower_tier's. A reset deletes from Redis every
    // entry of this model the mirror lists after a full read of the index (any replica's;
    // `tenant`: only that tenant's) -- index entry, meta and chunks, UNLINKed in pipelines of 256
    // entries -- and forgets them here even when Redis cannot be reached, so this replica never
    // restores them again; other models' entries in the namespace stay.
    redis_stats get_stats() const;
    /** warming from the start until the first read of the whole index, or until the first call
     *  fails (connect or read, each bounded by --cache-redis-timeout-ms): then unavailable, the
     *  replica serving without tier 3, until a later read of the whole index makes it ready. */
    tier_state readiness() const override;
    /** Its figures (describe) into stats::tiers. */
    void report(stats & s) const override;
    /** Entries written to Redis this run, and failures. */
    std::string location() const override { return cfg_.url; }
    std::string exit_summary() const override;

private:
    struct remote_entry {
        std::string ek;
        uint64_t payload_bytes = 0;
        uint32_t n_chunks = 0;
        uint64_t n_tokens = 0;  ///< its tokens in the mirror
    };
    /** One reply per command (nullptr for all when the connection failed: dropped, counted). */
    struct reply_set;

    // tier_io, on the worker thread:
    tier_completion write_now(tier_write & w) override;
    tier_load_result load_now(copy_id id, const tier_expect & want) override;
    std::pair<int64_t, uint64_t> reset_now(const std::optional<std::string> & tenant) override;
    /** Reads the index for other replicas' entries; true when more is left to read
     *  (redis_mirror.cpp). */
    bool tick_now() override;
    /** The counter, after redis_poll_script checked and repaired it and the index; nullopt when
     *  Redis could not be asked (then unavailable). */
    std::optional<int64_t> read_counter();
    /** The next page (index_page members) of the index after cursor_ up to `seq`: the members that
     *  are entry keys scored by a sequence into `fresh` (the others counted); `last_score`: the
     *  highest score read, `n_read`: members read. False when Redis failed. */
    bool read_index_page(int64_t seq, std::vector<std::pair<std::string, int64_t>> & fresh, double & last_score,
                         size_t & n_read);
    /** The metas of `fresh`, each bounded before it is read, into the mirror (mirror_meta).
     *  False when Redis failed. */
    bool read_metas(const std::vector<std::pair<std::string, int64_t>> & fresh);
    static constexpr size_t index_page = 512;
    bool connected();
    void drop_connection(const std::string & why);
    /** Sends the commands as one pipeline; false (connection dropped) on an I/O error or timeout.
     *  An error reply (WRONGTYPE, OOM, ...) is one of `out`'s replies, not a failure. */
    bool pipeline(const std::vector<std::vector<std::string>> & cmds, reply_set & out);
    /** True when no reply of `rs` is an error; else counts one error (the connection is fine). */
    bool all_ok(const reply_set & rs);
    /** Counts and logs what redis_check_script repaired (redis_format.h: `fixed` bits, `removed`
     *  members), the counter now at `n`. */
    void count_repairs(int64_t n, int64_t fixed, int64_t removed);
    /** Adds index entry `ek` (scored `seq`; its meta's `bytes`) to the mirror, replacing an older
     *  copy of it; a meta that does not decode is counted as damage, another model's skipped. */
    void mirror_meta(const std::string & ek, int64_t seq, const std::string & bytes);
    /** Reads and checks entry `e`'s chunks into `payload` (chunk 0 first, then batches of at most
     *  64 MiB); `bytes`: chunk bytes read; `n_owned`: how many of its chunk keys are known to be
     *  the entry's (all once chunk 0 checked out, else 1), to delete on damage. */
    tier_load_result read_chunks(const remote_entry & e, std::string & payload, uint64_t & bytes, uint32_t & n_owned);
    void forget(copy_id id);
    /** Removes copy `id` from the mirror (forget() without the lock). */
    void unmirror(copy_id id) REQUIRES(mu_);
    void count_damage(tier_load_error e);
    void count_damage(const std::string & kind);
    /** The whole index has been read (up to the sequence read before it): ready. */
    void index_read();
    void write_dropped() override;

    redis_config cfg_;
    redis_url url_;
    redis_keys keys_;
    redisContext * ctx_ = nullptr;        // Redis thread
    double next_connect_ = 0;             // Redis thread: monotonic seconds
    int64_t last_seq_ = 0;                // Redis thread: the counter when the index was last read whole
    double cursor_ = 0;                   // Redis thread: the index read up to this score

    mutable util::mutex mu_;
    tier_catalog mirror_ GUARDED_BY(mu_);
    std::map<copy_id, remote_entry> remote_ GUARDED_BY(mu_);
    std::map<std::string, copy_id> by_key_ GUARDED_BY(mu_);
    std::deque<copy_id> order_ GUARDED_BY(mu_);  // oldest first, for the mirror's bounds
    uint64_t mirror_tokens_ GUARDED_BY(mu_) = 0;  // tokens the mirror holds (redis_max_mirror_tokens)
    copy_id next_id_ GUARDED_BY(mu_) = 1;
    redis_stats stats_ GUARDED_BY(mu_);
    tier_state ready_ GUARDED_BY(mu_);
};

}  // namespace lineage::cache
