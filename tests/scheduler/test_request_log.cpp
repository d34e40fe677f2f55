// Tests of scheduler::request_log (the cache page's last requests and outcome buckets,
// docs/prompt-cache.md "Cache page"): outcomes counted as cache::stats counts them, the newest
// records first and capped, buckets aligned and filled over the whole window, old buckets
// dropped, and a tenant seeing only its own requests.
#include "scheduler/request_log.h"

#include <gtest/gtest.h>

using namespace lineage::scheduler;

namespace {

request_record rec(uint64_t id, double at, std::string tenant, int32_t cached, int32_t computed, std::string kind,
                   std::string cause = "") {
    request_record r;
    r.id = id;
    r.at_s = at;
    r.tenant = std::move(tenant);
    r.finish = "stop";
    r.prompt_tokens = cached + computed;
    r.cached_tokens = cached;
    r.prefilled_tokens = computed;
    r.hit_kind = std::move(kind);
    r.miss_cause = std::move(cause);
    return r;
}

}  // namespace

TEST(RequestLog, CountsHitsMissesShortHitsAndBypassesAsTheCacheStatsDo) {
    request_log log(8, 10, 60);
    log.record(rec(1, 1000.0, "", 0, 50, "miss", "no_shared_prefix"));
    log.record(rec(2, 1001.0, "", 40, 12, "turn"));
    log.record(rec(3, 1002.0, "", 10, 90, "anchor", "evicted"));  // a short hit
    log.record(rec(4, 1003.0, "", 0, 30, "miss", "bypassed"));    // neither hit nor miss
    log.record(rec(5, 1004.0, "", 0, 20, "miss", "key_differs:tenant"));
    const request_log_snapshot s = log.snapshot(nullptr, 1005.0);
    ASSERT_EQ(s.buckets.size(), 6u);
    const outcome_counts & c = s.buckets.back().counts;
    EXPECT_EQ(s.buckets.back().start_s, 1000);
    EXPECT_EQ(c.requests, 5);
    EXPECT_EQ(c.hits, 2);
    EXPECT_EQ(c.misses, 2);
    EXPECT_EQ(c.tokens_restored, 50);
    EXPECT_EQ(c.tokens_computed, 202);
    EXPECT_EQ(c.hits_by_kind, (std::map<std::string, int64_t>{{"anchor", 1}, {"turn", 1}}));
    EXPECT_EQ(c.misses_by_cause,
              (std::map<std::string, int64_t>{{"bypassed", 1}, {"key_differs:tenant", 1}, {"no_shared_prefix", 1}}));
    EXPECT_EQ(c.short_hits_by_cause, (std::map<std::string, int64_t>{{"evicted", 1}}));
}

TEST(RequestLog, RecentIsNewestFirstAndCapped) {
    request_log log(3, 10, 60);
    for (uint64_t id = 1; id <= 5; ++id) {
        log.record(rec(id, 100.0 + static_cast<double>(id), "", 0, 1, "miss", "no_shared_prefix"));
    }
    const request_log_snapshot s = log.snapshot(nullptr, 106.0);
    ASSERT_EQ(s.recent.size(), 3u);
    EXPECT_EQ(s.recent[0].id, 5u);
    EXPECT_EQ(s.recent[1].id, 4u);
    EXPECT_EQ(s.recent[2].id, 3u);
    // The buckets still count all five: the cap is on the records only.
    int64_t n = 0;
    for (const auto & b : s.buckets) {
        n += b.counts.requests;
    }
    EXPECT_EQ(n, 5);
}

TEST(RequestLog, BucketsCoverTheWindowEndingNowOldestFirstAndDropOldOnes) {
    request_log log(8, 10, 30);
    log.record(rec(1, 95.5, "", 0, 1, "miss", "no_shared_prefix"));  // bucket 90
    log.record(rec(2, 119.9, "", 5, 1, "turn"));                     // bucket 110
    request_log_snapshot s = log.snapshot(nullptr, 121.0);           // window: 100, 110, 120
    ASSERT_EQ(s.buckets.size(), 3u);
    EXPECT_EQ(s.bucket_s, 10);
    EXPECT_EQ(s.buckets[0].start_s, 100);
    EXPECT_EQ(s.buckets[1].start_s, 110);
    EXPECT_EQ(s.buckets[2].start_s, 120);
    EXPECT_EQ(s.buckets[0].counts.requests, 0);  // request 1 is before the window
    EXPECT_EQ(s.buckets[1].counts.hits, 1);
    EXPECT_EQ(s.buckets[2].counts.requests, 0);
    // A record 40 s later drops the buckets before its window; a snapshot at an earlier time
    // then finds nothing of them.
    log.record(rec(3, 160.0, "", 0, 1, "miss", "no_shared_prefix"));
    s = log.snapshot(nullptr, 121.0);
    EXPECT_EQ(s.buckets[1].counts.requests, 0);
    EXPECT_EQ(s.recent.size(), 3u);
}

TEST(RequestLog, ATenantSeesOnlyItsOwnRequestsTheAdminAll) {
    request_log log(8, 10, 60);
    log.record(rec(1, 200.0, "alice", 0, 10, "miss", "no_shared_prefix"));
    log.record(rec(2, 201.0, "bob", 7, 3, "turn"));
    log.record(rec(3, 202.0, "alice", 9, 1, "guard"));
    const std::string alice = "alice";
    const request_log_snapshot a = log.snapshot(&alice, 203.0);
    ASSERT_EQ(a.recent.size(), 2u);
    EXPECT_EQ(a.recent[0].id, 3u);
    EXPECT_EQ(a.recent[1].id, 1u);
    EXPECT_EQ(a.buckets.back().counts.requests, 2);
    EXPECT_EQ(a.buckets.back().counts.hits, 1);
    EXPECT_EQ(a.buckets.back().counts.tokens_restored, 9);
    const request_log_snapshot all = log.snapshot(nullptr, 203.0);
    EXPECT_EQ(all.recent.size(), 3u);
    EXPECT_EQ(all.buckets.back().counts.requests, 3);
    EXPECT_EQ(all.buckets.back().counts.tokens_restored, 16);
    const std::string carol = "carol";
    EXPECT_TRUE(log.snapshot(&carol, 203.0).recent.empty());
}

TEST(RequestLog, RefusesAWindowThatIsNotWholeBuckets) {
    EXPECT_THROW(request_log(8, 10, 25), std::invalid_argument);
    EXPECT_THROW(request_log(0, 10, 60), std::invalid_argument);
}
