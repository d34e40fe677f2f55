// scheduler::request_log: the last requests that ended with their cache outcome (tokens restored
// and computed, TTFT, restore point kind, tier, miss cause), and every request's outcome counted
// in fixed time buckets over a sliding window: what the cache page draws (GET /v1/cache/requests,
// docs/prompt-cache.md "Cache page"). Owned by the scheduler, which records each request as it
// ends (the component that does the work measures it); warm-ups are not requests.
// Thread safety: every method may be called from any thread (one mutex, held for one record or
// one copy). Memory: at most max_recent records and window_s / bucket_s buckets per tenant.
#pragma once

#include "util/thread_annotations.h"

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

namespace lineage::scheduler {

/** One request that ended, as the cache page lists it. */
struct request_record {
    uint64_t id = 0;
    double at_s = 0;     ///< when it ended, Unix seconds (wall clock)
    std::string tenant;  ///< its API key's tenant ("" without keys)
    std::string finish;  ///< stop, length, cancelled, error
    int32_t prompt_tokens = 0;
    int32_t cached_tokens = 0;     ///< prompt tokens restored from the cache
    int32_t prefilled_tokens = 0;  ///< prompt tokens computed
    int32_t completion_tokens = 0;
    double ttft_s = 0;          ///< submission to first sampled token, seconds (0: none sampled)
    std::string hit_kind;       ///< request_stats::hit_kind ("miss", "turn", "guard", ...)
    std::string miss_cause;     ///< request_stats::miss_cause ("" for a full hit)
    std::string restored_from;  ///< request_stats::restored_from ("" for a miss)
};

/** Outcomes of the requests that ended in one bucket, counted as cache::stats counts them: a
 *  request that restored >= 1 token is a hit (by kind, and a short hit by cause when it has
 *  one), one that restored none a miss by cause; a bypass (cache_prompt false, cache off) is
 *  neither, and counts only in misses_by_cause["bypassed"]. */
struct outcome_counts {
    int64_t requests = 0;
    int64_t hits = 0;
    int64_t misses = 0;
    int64_t tokens_restored = 0;
    int64_t tokens_computed = 0;
    std::map<std::string, int64_t> hits_by_kind;
    std::map<std::string, int64_t> misses_by_cause;  ///< "key_differs:tenant" keeps its dimension
    std::map<std::string, int64_t> short_hits_by_cause;

    void add(const request_record & r);
    void add(const outcome_counts & o);
};

struct outcome_bucket {
    int64_t start_s = 0;  ///< Unix seconds, a multiple of bucket_s; the bucket is [start_s, start_s + bucket_s)
    outcome_counts counts;
};

struct request_log_snapshot {
    std::vector<request_record> recent;  ///< newest first, at most max_recent
    int64_t bucket_s = 0;
    /** Every bucket of the window ending with the one holding `now_s`, oldest first, empty ones
     *  included (window_s / bucket_s of them). */
    std::vector<outcome_bucket> buckets;
};

class request_log {
public:
    /** REQUIRES: max_recent >= 1, bucket_s >= 1, window_s a multiple of bucket_s, >= bucket_s. */
    explicit request_log(size_t max_recent = 64, int64_t bucket_s = 10, int64_t window_s = 900);

    /** Records a request that ended; `r.at_s` decides its bucket. Buckets older than the window
     *  before r.at_s are dropped. */
    void record(request_record r);

    /** The records and buckets of `tenant` (nullptr: every tenant's, as the admin key sees
     *  them), for the window ending at `now_s` (Unix seconds). */
    request_log_snapshot snapshot(const std::string * tenant, double now_s) const;

private:
    struct bucket {
        int64_t start_s = 0;
        std::map<std::string, outcome_counts> by_tenant;
    };
    int64_t bucket_of(double t) const;

    const size_t max_recent_;
    const int64_t bucket_s_;
    const int64_t window_s_;
    mutable util::mutex mu_;
    std::deque<request_record> recent_ GUARDED_BY(mu_);  // newest at the front
    std::deque<bucket> buckets_ GUARDED_BY(mu_);         // ascending start_s
};

}  // namespace lineage::scheduler
