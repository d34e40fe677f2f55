// cache::tier_cost: the decisions at exact rates (tier_cost.h's formulas).
#include "cache/rule/tier_cost.h"

#include <gtest/gtest.h>

namespace lineage::cache {
namespace {

constexpr uint64_t MiB = 1 << 20;

TEST(TierCost, EveryCopyIsWorthItUntilAPrefillIsMeasured) {
    tier_cost c;
    EXPECT_FALSE(c.prefill_tokens_per_s());
    EXPECT_TRUE(c.worth_read(0, 1ull << 40, 1));
    EXPECT_TRUE(c.worth_write(1ull << 40, 1, false));
    EXPECT_TRUE(c.worth_write(1ull << 40, 1, true));
    EXPECT_DOUBLE_EQ(c.read_bytes_per_s(0), tier_cost::prior_bytes_per_s);
    EXPECT_DOUBLE_EQ(c.write_bytes_per_s(), tier_cost::prior_bytes_per_s);
}

TEST(TierCost, ShortPassesAreNotSamples) {
    tier_cost c;
    c.observe_prefill(tier_cost::min_pass_tokens - 1, 0.001);
    c.observe_prefill(1000, 0);
    EXPECT_FALSE(c.prefill_tokens_per_s());
    c.observe_prefill(tier_cost::min_pass_tokens, 0.01);
    EXPECT_DOUBLE_EQ(*c.prefill_tokens_per_s(), 6400);
}

TEST(TierCost, SmallCopiesAreNotRateSamples) {
    tier_cost c;
    c.observe_read(0, tier_cost::min_sample_bytes - 1, 1.0);  // an fsync or a hand-off, not a transfer
    c.observe_write(tier_cost::min_sample_bytes - 1, 1.0);
    EXPECT_DOUBLE_EQ(c.read_bytes_per_s(0), tier_cost::prior_bytes_per_s);
    EXPECT_DOUBLE_EQ(c.write_bytes_per_s(), tier_cost::prior_bytes_per_s);
    c.observe_read(0, tier_cost::min_sample_bytes, 2.0);
    EXPECT_DOUBLE_EQ(c.read_bytes_per_s(0), static_cast<double>(tier_cost::min_sample_bytes) / 2);
}

TEST(TierCost, RatesAreMovingAverages) {
    tier_cost c;
    c.observe_prefill(1000, 1.0);  // 1,000 tokens/s: the first sample is the average
    c.observe_prefill(2000, 1.0);  // 0.75 * 1000 + 0.25 * 2000
    EXPECT_DOUBLE_EQ(*c.prefill_tokens_per_s(), 1250);
    c.observe_read(1, 100 * MiB, 1.0);
    EXPECT_DOUBLE_EQ(c.read_bytes_per_s(1), 100.0 * MiB);
    EXPECT_DOUBLE_EQ(c.read_bytes_per_s(0), tier_cost::prior_bytes_per_s);  // tier 0 unmeasured
    c.observe_write(50 * MiB, 1.0);
    EXPECT_DOUBLE_EQ(c.write_bytes_per_s(), 50.0 * MiB);
}

TEST(TierCost, TheWriteRateFollowsTheFirstTiersReadRateUntilMeasured) {
    tier_cost c;
    c.observe_read(0, 200 * MiB, 1.0);
    EXPECT_DOUBLE_EQ(c.write_bytes_per_s(), 200.0 * MiB);
}

TEST(TierCost, TheFirstTiersReadRateFollowsItsWriteRateUntilMeasured) {
    tier_cost c;
    c.observe_write(900 * MiB, 1.0);  // e.g. the overdue writes of a busy GPU server
    EXPECT_DOUBLE_EQ(c.read_bytes_per_s(0), 900.0 * MiB);
    EXPECT_DOUBLE_EQ(c.read_bytes_per_s(1), tier_cost::prior_bytes_per_s);  // another tier's own
    c.observe_read(0, 300 * MiB, 1.0);
    EXPECT_DOUBLE_EQ(c.read_bytes_per_s(0), 300.0 * MiB);
    EXPECT_DOUBLE_EQ(c.write_bytes_per_s(), 900.0 * MiB);
}

// The H200 case (docs/benchmarks/README.md "First figures on a GPU"): a 2 B model prefilling at
// 30k tokens/s, entries of ~246 MiB for ~10k tokens, restores at ~0.5 GB/s: recompute 0.33 s,
// read 0.49 s.
TEST(TierCost, AFastEngineRecomputesWhatASlowReadWouldRestore) {
    tier_cost c;
    c.observe_prefill(30000, 1.0);
    c.observe_read(0, 500 * MiB, 1.0);
    EXPECT_FALSE(c.worth_read(0, 246 * MiB, 10000));
    EXPECT_FALSE(c.worth_write(246 * MiB, 10000, false));
    EXPECT_FALSE(c.worth_write(246 * MiB, 10000, true));
    // A longer conversation on the same machine: 20k tokens recompute in 0.67 s.
    EXPECT_TRUE(c.worth_read(0, 246 * MiB, 20000));
    EXPECT_TRUE(c.worth_write(246 * MiB, 20000, false));
}

// The CPU case (bench-qwen35 on 2 cores): ~700 tokens/s, a 3k-token entry of ~47 MiB restored at
// ~300 MiB/s: recompute 4.3 s, read 0.16 s.
TEST(TierCost, ASlowEngineReadsEveryLongCopy) {
    tier_cost c;
    c.observe_prefill(700, 1.0);
    c.observe_read(0, 300 * MiB, 1.0);
    c.observe_write(300 * MiB, 1.0);
    EXPECT_TRUE(c.worth_read(0, 47 * MiB, 3000));
    EXPECT_TRUE(c.worth_write(47 * MiB, 3000, false));
    EXPECT_TRUE(c.worth_write(47 * MiB, 3000, true));
    // A copy 100 tokens longer than RAM's best: 0.14 s of recompute against 0.16 s of read.
    EXPECT_FALSE(c.worth_read(0, 47 * MiB, 100));
    EXPECT_TRUE(c.worth_read(0, 47 * MiB, 120));
}

TEST(TierCost, AShutdownWriteMustSaveMoreThanItCosts) {
    tier_cost c;
    c.observe_prefill(1000, 1.0);     // 1 ms a token
    c.observe_read(0, 100 * MiB, 1.0);
    c.observe_write(100 * MiB, 1.0);  // 10 ms a MiB either way
    // 50 MiB: read 0.5 s, write 0.5 s. 800 tokens: recompute 0.8 s, saves 0.3 s < 0.5 s.
    EXPECT_TRUE(c.worth_write(50 * MiB, 800, false));
    EXPECT_FALSE(c.worth_write(50 * MiB, 800, true));
    // 1,200 tokens: saves 0.7 s > 0.5 s.
    EXPECT_TRUE(c.worth_write(50 * MiB, 1200, true));
}

TEST(TierCost, OffReadsAndWritesEverything) {
    tier_cost c(false);
    c.observe_prefill(30000, 1.0);
    c.observe_read(0, 1, 1.0);
    EXPECT_TRUE(c.worth_read(0, 246 * MiB, 1));
    EXPECT_TRUE(c.worth_write(246 * MiB, 1, true));
    EXPECT_DOUBLE_EQ(*c.prefill_tokens_per_s(), 30000);  // still measured, for the stats
}

TEST(TierCost, AFixedBandwidthIsNotMeasured) {
    tier_cost c(true, 100.0 * MiB);
    c.observe_prefill(1000, 1.0);
    c.observe_read(0, 1000 * MiB, 1.0);
    c.observe_write(1000 * MiB, 1.0);
    EXPECT_DOUBLE_EQ(c.read_bytes_per_s(0), 100.0 * MiB);
    EXPECT_DOUBLE_EQ(c.write_bytes_per_s(), 100.0 * MiB);
    EXPECT_FALSE(c.worth_read(0, 100 * MiB, 999));  // 1 s of read against 0.999 s of recompute
    EXPECT_TRUE(c.worth_read(0, 100 * MiB, 1001));
}

}  // namespace
}  // namespace lineage::cache
