// Unit tests of the ladder rules (cache/rule/ladder.h): rungs at line starts walking back from the
// anchor, at most the near step apart near it and the far step before, the far step stretched
// to the rung cap, nothing within one gap of the restore point; divergence slack; message rungs.
#include "cache/rule/ladder.h"

#include "cache/config.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace lineage::cache {
namespace {

config ladder_config() {
    config c;
    c.ladder_step = 256;
    c.ladder_near_step = 64;
    c.ladder_near_tokens = 512;
    c.ladder_max_rungs = 24;
    c.divergence_slack = 64;
    c.anchor_slack = 2;
    return c;
}

std::vector<int32_t> every(int32_t step, int32_t until) {
    std::vector<int32_t> v;
    for (int32_t i = step; i < until; i += step) {
        v.push_back(i);
    }
    return v;
}

TEST(Ladder, NearRungsAtTheEarliestLineStartOfEachGapFarPointsEveryStep) {
    const auto lines = every(10, 2000);
    const auto r = ladder_rungs(ladder_config(), 0, 1000, lines, 32);
    EXPECT_EQ(r.near, (std::vector<int32_t>{460, 520, 580, 640, 700, 760, 820, 880, 940}));
    // The far zone [0, 460): one point, 256 (taken at the pass end that reaches it).
    EXPECT_EQ(r.far, (std::vector<int32_t>{256}));
}

TEST(Ladder, WithoutLineStartsNearRungsFallAtTheGapEnds) {
    const auto r = ladder_rungs(ladder_config(), 0, 1000, {}, 32);
    EXPECT_EQ(r.near, (std::vector<int32_t>{488, 552, 616, 680, 744, 808, 872, 936}));
    EXPECT_EQ(r.far, (std::vector<int32_t>{256}));
}

TEST(Ladder, EveryNearGapIsWithinItsStepAndFarPointsAreOneStepApart) {
    const auto lines = every(37, 20000);
    config c = ladder_config();
    c.ladder_max_rungs = 100;  // room for every rung: the far step is not stretched
    for (int32_t from : {0, 100, 3000}) {
        const int32_t anchor = 9000;
        const auto r = ladder_rungs(c, from, anchor, lines, 32);
        ASSERT_FALSE(r.near.empty());
        int32_t next = anchor;
        for (auto it = r.near.rbegin(); it != r.near.rend(); ++it) {
            EXPECT_LE(next - *it, c.ladder_near_step);
            EXPECT_GT(*it, from);
            next = *it;
        }
        EXPECT_GE(anchor - r.near.front(), c.ladder_near_tokens - c.ladder_near_step);
        EXPECT_LT(anchor - r.near.front(), c.ladder_near_tokens + c.ladder_near_step);
        ASSERT_FALSE(r.far.empty());
        EXPECT_EQ(r.far.front(), from + c.ladder_step);
        for (size_t i = 1; i < r.far.size(); ++i) {
            EXPECT_EQ(r.far[i] - r.far[i - 1], c.ladder_step);
        }
        EXPECT_LT(r.far.back(), r.near.front());
        EXPECT_GE(r.near.front() - r.far.back(), 1);
        EXPECT_LE(static_cast<int32_t>(r.near.size() + r.far.size()), c.ladder_max_rungs);
    }
}

TEST(Ladder, TheFarStepStretchesToTheRungCap) {
    config c = ladder_config();
    c.ladder_max_rungs = 10;
    const auto r = ladder_rungs(c, 0, 10000, {}, 32);
    // The near zone takes its 8 rungs; the far zone [0, 9488) the other 2: the step stretches
    // to ceil(9488 / 3) = 3163.
    EXPECT_EQ(r.near, (std::vector<int32_t>{9488, 9552, 9616, 9680, 9744, 9808, 9872, 9936}));
    EXPECT_EQ(r.far, (std::vector<int32_t>{3163, 6326}));
}

TEST(Ladder, NothingWithinOneGapOfTheRestorePointAndNothingWhenOff) {
    const auto near_only = ladder_rungs(ladder_config(), 980, 1000, every(10, 2000), 32);
    EXPECT_TRUE(near_only.near.empty() && near_only.far.empty());
    config off = ladder_config();
    off.ladder_step = 0;
    const auto r0 = ladder_rungs(off, 0, 1000, every(10, 2000), 32);
    EXPECT_TRUE(r0.near.empty() && r0.far.empty());
    // Rungs shorter than the minimum prefix are left out.
    const auto r = ladder_rungs(ladder_config(), 0, 1300, {}, 400);
    for (int32_t x : r.near) {
        EXPECT_GE(x, 400);
    }
    for (int32_t x : r.far) {
        EXPECT_GE(x, 400);
    }
}

TEST(Ladder, DivergenceGoesBackToItsLineStartWithinTheSlack) {
    const config c = ladder_config();
    const auto lines = every(100, 2000);
    EXPECT_EQ(divergence_point(c, 1030, lines), 1000);  // 30 tokens into its line
    EXPECT_EQ(divergence_point(c, 1000, lines), 1000);  // parts at the line start itself
    EXPECT_EQ(divergence_point(c, 1090, lines), 1088);  // 90 > 64 into its line: BPE slack
    EXPECT_EQ(divergence_point(c, 50, {}), 48);
    EXPECT_EQ(divergence_point(c, 1, {}), 0);
}

TEST(MessageRungs, EveryStepInsideTheMessageAfterTheRestorePoint) {
    config c = ladder_config();
    c.message_rungs = 8;
    c.message_step = 16;
    EXPECT_EQ(message_rungs(c, 0, 100, 150, 4), (std::vector<int32_t>{116, 132, 148}));
    EXPECT_EQ(message_rungs(c, 130, 100, 150, 4), (std::vector<int32_t>{132, 148}));  // after the restore point
    EXPECT_TRUE(message_rungs(c, 0, 100, 116, 4).empty());                            // shorter than one step
    EXPECT_TRUE(message_rungs(c, 0, -1, 150, 4).empty());                             // no user message known
    EXPECT_EQ(message_rungs(c, 0, 10, 60, 30), (std::vector<int32_t>{42, 58}));       // min prefix
    // A long message: the step stretches so that 8 rungs cover it (ceil(399 / 8) = 50).
    EXPECT_EQ(message_rungs(c, 0, 0, 400, 4), (std::vector<int32_t>{50, 100, 150, 200, 250, 300, 350}));
    c.message_rungs = 0;
    EXPECT_TRUE(message_rungs(c, 0, 100, 150, 4).empty());
}

TEST(MessageRungs, PassEndRungsWalkBackFromTheMessageEnd) {
    config c = ladder_config();
    c.message_pass_rungs = 4;
    c.message_pass_step = 512;
    // [300, 2520): 2008, 1496, 984, 472, ascending.
    EXPECT_EQ(message_pass_rungs(c, 0, 300, 2520, 4), (std::vector<int32_t>{472, 984, 1496, 2008}));
    // After the restore point only; at most 4 even in a longer message (its last 2,048 tokens).
    EXPECT_EQ(message_pass_rungs(c, 1000, 300, 2520, 4), (std::vector<int32_t>{1496, 2008}));
    EXPECT_EQ(message_pass_rungs(c, 0, 0, 10000, 4), (std::vector<int32_t>{7952, 8464, 8976, 9488}));
    EXPECT_TRUE(message_pass_rungs(c, 0, 300, 812, 4).empty());  // one step long: nothing strictly inside
    EXPECT_TRUE(message_pass_rungs(c, 0, -1, 2520, 4).empty());  // no user message known
    EXPECT_EQ(message_pass_rungs(c, 0, 0, 1100, 100), (std::vector<int32_t>{588}));  // min prefix: 76 left out
    c.message_pass_rungs = 0;
    EXPECT_TRUE(message_pass_rungs(c, 0, 300, 2520, 4).empty());
}

TEST(MessageRungs, FlagsAtInt32MaxNeitherWrapNorLoop) {
    // --cache-message-rungs, --cache-message-step and their pass-end twins at 2147483647 (the
    // flags e2e test's huge value): the cap does not wrap negative (it emptied and then erased
    // past the end of an entry's checkpoints), the steps do not wrap into the message.
    config c = ladder_config();
    c.message_rungs = INT32_MAX;
    c.message_pass_rungs = INT32_MAX;
    EXPECT_EQ(c.message_rungs_max(), int64_t{INT32_MAX} * 2);
    c.message_step = 16;
    EXPECT_EQ(message_rungs(c, 0, 100, 150, 4), (std::vector<int32_t>{116, 132, 148}));
    c.message_pass_step = 512;
    EXPECT_EQ(message_pass_rungs(c, 0, 100, 1200, 4), (std::vector<int32_t>{176, 688}));
    c.message_step = INT32_MAX;
    c.message_pass_step = INT32_MAX;
    EXPECT_TRUE(message_rungs(c, 0, 100, INT32_MAX - 1, 4).empty());
    EXPECT_TRUE(message_pass_rungs(c, 0, 100, INT32_MAX - 1, 4).empty());
}

}  // namespace
}  // namespace lineage::cache
