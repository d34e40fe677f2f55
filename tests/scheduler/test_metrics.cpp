// Tests of scheduler::metrics (no model): histogram bucket placement (le inclusive, +Inf),
// the default phase buckets, and which phases a finished request is observed in.
#include "scheduler/metrics.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace lineage::scheduler {
namespace {

TEST(Histogram, CountsAValueInTheFirstBucketWhoseBoundIsAtLeastIt) {
    histogram h({0.1, 1, 10});
    for (double v : {0.0, 0.1, 0.10001, 1.0, 9.0, 10.0, 11.0, 1e9}) {
        h.observe(v);
    }
    EXPECT_EQ(h.cumulative(), (std::vector<uint64_t>{2, 4, 6, 8}));
    EXPECT_EQ(h.count(), 8u);
    EXPECT_DOUBLE_EQ(h.sum(), 0.0 + 0.1 + 0.10001 + 1 + 9 + 10 + 11 + 1e9);
}

TEST(Histogram, RejectsBoundsThatDoNotAscend) {
    EXPECT_THROW(histogram({1, 1}), std::invalid_argument);
    EXPECT_THROW(histogram({2, 1}), std::invalid_argument);
    EXPECT_NO_THROW(histogram({}));
}

TEST(Histogram, PhaseBucketsSpanMillisecondsToAMinute) {
    const auto & b = phase_seconds_buckets();
    ASSERT_EQ(b.size(), 15u);
    EXPECT_DOUBLE_EQ(b.front(), 0.001);
    EXPECT_DOUBLE_EQ(b.back(), 60);
}

TEST(Metrics, ObservesEachPhaseOnlyForRequestsThatWentThroughIt) {
    metrics m;
    request_stats hit;
    hit.prompt_tokens = 100;
    hit.cached_tokens = 90;
    hit.prefilled_tokens = 10;
    hit.completion_tokens = 5;
    hit.ttft_s = 0.02;
    hit.restore_s = 0.003;
    hit.prefill_s = 0.01;
    hit.prepared = {1, 1};  // a warm user turn
    hit.moved_tokens = 90;  // its sequence was moved next to a running one
    m.record(hit, finish_reason::stop, /*used_cache=*/true);
    request_stats bypass;  // cache_prompt:false, cancelled before its first token
    bypass.prompt_tokens = 50;
    bypass.prefilled_tokens = 20;
    bypass.prepared = {5, 3};  // a new system prompt and tools: the anchors rendered
    m.record(bypass, finish_reason::cancelled, /*used_cache=*/false);
    request_stats rejected;  // failed at admission
    rejected.prompt_tokens = 9000;
    m.record(rejected, finish_reason::error, false);

    const metrics_snapshot s = m.snapshot();
    EXPECT_EQ(s.requests,
              (std::map<std::string, uint64_t>{{"stop", 1}, {"length", 0}, {"cancelled", 1}, {"error", 1}}));
    EXPECT_EQ(s.prompt_tokens, 9150u);
    EXPECT_EQ(s.prompt_tokens_prefilled, 30u);
    EXPECT_EQ(s.completion_tokens, 5u);
    EXPECT_EQ(s.prepare_renders, 6u);
    EXPECT_EQ(s.prepare_tokenizations, 4u);
    EXPECT_EQ(s.sequence_moves, 1u);  // the others stayed (moved_tokens -1)
    EXPECT_EQ(s.sequence_moved_tokens, 90u);
    EXPECT_EQ(s.of(phase::ttft).count(), 1u);
    EXPECT_EQ(s.of(phase::queue).count(), 3u);
    EXPECT_EQ(s.of(phase::lookup).count(), 1u);
    EXPECT_EQ(s.of(phase::capture).count(), 1u);
    EXPECT_EQ(s.of(phase::commit).count(), 1u);
    EXPECT_EQ(s.of(phase::restore).count(), 1u);
    EXPECT_DOUBLE_EQ(s.of(phase::restore).sum(), 0.003);
    EXPECT_EQ(s.of(phase::prefill).count(), 2u);
}

}  // namespace
}  // namespace lineage::scheduler
