// Unit tests of the admission decisions (admission.h), no engine: the retry hold asks a running
// request that a queued one repeats whether its client is there, holds the queued one until the
// answer (or the running one is cancelled, or the hold times out), and leaves other requests
// alone; the admission order puts the request with the fewest tokens left to compute first and
// bounds how often one is passed over; the warm-up queue keeps one job per conversation, newest first, and stays bounded.
#include "scheduler/admission.h"

#include "lifecycle_fixture.h"

#include <gtest/gtest.h>

namespace lineage::scheduler {
namespace {

using fakes::cat;
using fakes::seq_of;

std::shared_ptr<generation_request> request(std::vector<token> prompt, const std::string & bucket = "b") {
    auto r = std::make_shared<generation_request>();
    r->prompt = std::move(prompt);
    r->cache.bucket = bucket;
    r->answers_probe = true;
    return r;
}

class RetryHold : public ::testing::Test {
protected:
    void SetUp() override {
        slots_.resize(2);
        slot & s = slots_[0];
        s.req = request(seq_of(0, 100));
        s.ph = slot::phase::decode;
        s.use_cache = true;
    }
    probe_state probe() const { return slots_[0].req->probe->load(); }

    std::vector<slot> slots_;
    std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

TEST_F(RetryHold, ARepeatIsHeldUntilTheRunningRequestAnswersAlive) {
    auto r = request(seq_of(0, 100));
    EXPECT_EQ(repeated_by(slots_, *r), &slots_[0]);
    EXPECT_TRUE(retry_hold(slots_, *r, t0_));
    EXPECT_EQ(probe(), probe_state::asked);
    EXPECT_TRUE(retry_hold(slots_, *r, t0_ + std::chrono::milliseconds(10)));
    slots_[0].req->probe->store(probe_state::alive);  // its HTTP thread saw the client there
    EXPECT_FALSE(retry_hold(slots_, *r, t0_ + std::chrono::milliseconds(20)));
}

TEST_F(RetryHold, ACancelledPredecessorEndsTheHold) {
    auto r = request(seq_of(0, 100));
    EXPECT_TRUE(retry_hold(slots_, *r, t0_));
    slots_[0].req->cancelled->store(true);  // its client was gone: the loop commits it first
    EXPECT_EQ(repeated_by(slots_, *r), nullptr);
    EXPECT_FALSE(retry_hold(slots_, *r, t0_ + std::chrono::milliseconds(1)));
}

TEST_F(RetryHold, TheHoldEndsAfterItsLimitWithoutAnAnswer) {
    auto r = request(seq_of(0, 100));
    EXPECT_TRUE(retry_hold(slots_, *r, t0_));
    EXPECT_TRUE(retry_hold(slots_, *r, t0_ + retry_hold_limit - std::chrono::milliseconds(1)));
    EXPECT_FALSE(retry_hold(slots_, *r, t0_ + retry_hold_limit));
}

TEST_F(RetryHold, ANewRepeatAsksAgainAfterAnAliveAnswer) {
    auto r1 = request(seq_of(0, 100));
    EXPECT_TRUE(retry_hold(slots_, *r1, t0_));
    slots_[0].req->probe->store(probe_state::alive);
    EXPECT_FALSE(retry_hold(slots_, *r1, t0_));
    auto r2 = request(seq_of(0, 100));
    EXPECT_TRUE(retry_hold(slots_, *r2, t0_));
    EXPECT_EQ(probe(), probe_state::asked);
}

TEST_F(RetryHold, OnlyRepeatsOfTheWholePromptInTheSameBucketAreHeld) {
    // An extension (the prompt and more) and a regenerate that drops the last token are held.
    EXPECT_NE(repeated_by(slots_, *request(seq_of(0, 120))), nullptr);
    EXPECT_NE(repeated_by(slots_, *request(seq_of(0, 99))), nullptr);
    // A prompt that leaves it earlier, another bucket, a bypassed cache: admitted at once.
    EXPECT_EQ(repeated_by(slots_, *request(seq_of(0, 98))), nullptr);
    auto edited = request(seq_of(0, 100));
    edited->prompt[50] = 7;
    EXPECT_EQ(repeated_by(slots_, *edited), nullptr);
    EXPECT_EQ(repeated_by(slots_, *request(seq_of(0, 100), "other")), nullptr);
    auto bypass = request(seq_of(0, 100));
    bypass->cache.cache_prompt = false;
    EXPECT_EQ(repeated_by(slots_, *bypass), nullptr);
    EXPECT_FALSE(retry_hold(slots_, *bypass, t0_));
    EXPECT_EQ(probe(), probe_state::none);
}

TEST_F(RetryHold, RequestsThatCannotAnswerAreNeverWaitedFor) {
    auto r = request(seq_of(0, 100));
    slots_[0].req->answers_probe = false;
    EXPECT_EQ(repeated_by(slots_, *r), nullptr);
    slots_[0].req->answers_probe = true;
    slots_[0].req->warmup = true;
    EXPECT_EQ(repeated_by(slots_, *r), nullptr);
    slots_[0].req->warmup = false;
    slots_[0].ph = slot::phase::loading;  // not computing yet: nothing to race
    EXPECT_EQ(repeated_by(slots_, *r), nullptr);
}

// The prefix hold: a running request prefilling a prompt; queued requests that share its prefix.
class PrefixHold : public ::testing::Test {
protected:
    void SetUp() override {
        slots_.resize(2);
        slot & s = slots_[0];
        s.req = request(seq_of(0, 400));
        s.ph = slot::phase::prefill;
        s.use_cache = true;
        s.n_past = 100;
        s.plan.captures = {{150, cache::point_kind::turn}, {399, cache::point_kind::guard}};
    }
    std::vector<slot> slots_;
};

TEST_F(PrefixHold, DenseWaitsUntilTheSharedPrefixIsComputed) {
    auto same = request(seq_of(0, 400));
    EXPECT_EQ(prefix_hold(slots_, *same, false, 0, 32), &slots_[0]);
    auto sibling = request(cat(seq_of(0, 300), seq_of(5000, 50)));
    EXPECT_EQ(prefix_hold(slots_, *sibling, false, 0, 32), &slots_[0]);
    slots_[0].n_past = 300;  // it computed the 300 tokens they share
    EXPECT_EQ(prefix_hold(slots_, *sibling, false, 0, 32), nullptr);
    EXPECT_EQ(prefix_hold(slots_, *same, false, 0, 32), &slots_[0]);  // 399 not yet
    slots_[0].n_past = 399;
    EXPECT_EQ(prefix_hold(slots_, *same, false, 0, 32), nullptr);
}

TEST_F(PrefixHold, HybridWaitsForTheFurthestRestorePointItsPrefillTakes) {
    // A sibling parting at 300: the running prefill captures at 150 within it.
    auto sibling = request(cat(seq_of(0, 300), seq_of(5000, 50)));
    EXPECT_EQ(prefix_hold(slots_, *sibling, true, 0, 32), &slots_[0]);
    slots_[0].n_past = 150;
    EXPECT_EQ(prefix_hold(slots_, *sibling, true, 0, 32), nullptr);
    // The same prompt: the guard at 399.
    auto same = request(seq_of(0, 400));
    EXPECT_EQ(prefix_hold(slots_, *same, true, 0, 32), &slots_[0]);
    // A prompt that extends the running one: its prompt end.
    auto longer = request(cat(seq_of(0, 400), seq_of(7000, 20)));
    slots_[0].n_past = 399;
    EXPECT_EQ(prefix_hold(slots_, *longer, true, 0, 32), &slots_[0]);
    slots_[0].n_past = 400;
    EXPECT_EQ(prefix_hold(slots_, *longer, true, 0, 32), nullptr);
}

TEST_F(PrefixHold, NoHoldWhenNothingLongerThanTheStoredStateOrTheMinimumComes) {
    auto same = request(seq_of(0, 400));
    EXPECT_EQ(prefix_hold(slots_, *same, false, 399, 32), nullptr);  // a stored state shares as much
    EXPECT_EQ(prefix_hold(slots_, *same, false, 0, 500), nullptr);   // below --prompt-cache-min-prefix
    auto other = request(seq_of(0, 400), "another bucket");
    EXPECT_EQ(prefix_hold(slots_, *other, false, 0, 32), nullptr);
    auto unrelated = request(seq_of(9000, 400));
    EXPECT_EQ(prefix_hold(slots_, *unrelated, false, 0, 32), nullptr);
    auto bypass = request(seq_of(0, 400));
    bypass->cache.cache_prompt = false;
    EXPECT_EQ(prefix_hold(slots_, *bypass, false, 0, 32), nullptr);
    auto warm = request(seq_of(0, 400));
    warm->warmup = true;
    EXPECT_EQ(prefix_hold(slots_, *warm, false, 0, 32), nullptr);
    // A running request that decodes already has its prompt in: the plan restores from it now.
    slots_[0].ph = slot::phase::decode;
    EXPECT_EQ(prefix_hold(slots_, *same, false, 0, 32), nullptr);
    slots_[0].ph = slot::phase::prefill;
    slots_[0].req->warmup = true;  // a warm-up is never waited for
    EXPECT_EQ(prefix_hold(slots_, *same, false, 0, 32), nullptr);
}

TEST(AdmissionOrder, FewestTokensToComputeFirstTiesInArrivalOrder) {
    std::deque<std::shared_ptr<generation_request>> q;
    for (int i = 0; i < 4; ++i) {
        q.push_back(request(seq_of(i * 1000, 10)));
    }
    // A cold 20k-token prompt, two warm turns (100 new tokens each), a 2k-token one.
    EXPECT_EQ(admission_order(q, {20000, 100, 2000, 100}), (std::vector<size_t>{1, 3, 2, 0}));
    // One queued request: the order is the queue's.
    std::deque<std::shared_ptr<generation_request>> one{request(seq_of(0, 10))};
    EXPECT_EQ(admission_order(one, {5}), (std::vector<size_t>{0}));
}

TEST(AdmissionOrder, ARequestPassedOverTooOftenGoesFirst) {
    std::deque<std::shared_ptr<generation_request>> q;
    for (int i = 0; i < 3; ++i) {
        q.push_back(request(seq_of(i * 1000, 10)));
    }
    const std::vector<int64_t> cost{20000, 100, 50};
    // Admitting the shorter later ones counts a pass-over for each earlier request left queued.
    for (int32_t round = 0; round < max_passed_over; ++round) {
        const auto order = admission_order(q, cost);
        ASSERT_EQ(order.front(), 2u) << "round " << round;
        std::vector<bool> taken(q.size(), false);
        taken[order.front()] = true;  // one slot: the first in order is admitted
        count_passed_over(q, taken);
        q.back() = request(seq_of(9000 + round, 10));  // another short one arrives in its place
    }
    EXPECT_EQ(q[0]->passed_over, max_passed_over);
    EXPECT_EQ(q[1]->passed_over, max_passed_over);
    // Both have waited long enough: arrival order among them, before the short newcomer.
    EXPECT_EQ(admission_order(q, cost), (std::vector<size_t>{0, 1, 2}));
    // The newest request, admitted first, counts nothing; one admitted ahead of nothing neither.
    std::deque<std::shared_ptr<generation_request>> q2{request(seq_of(0, 10)), request(seq_of(100, 10))};
    count_passed_over(q2, {true, false});
    EXPECT_EQ(q2[1]->passed_over, 0);
    EXPECT_EQ(q2[0]->passed_over, 0);
}

TEST(AdmissionOrder, ALongPrefillLeavesOneSlotToTheOthers) {
    const int32_t long_tokens = long_prefill_batches * 512;
    // Two slots, one running a long prefill: another long one waits, a warm turn does not.
    EXPECT_TRUE(admission_blocked(20000, long_tokens, 1, 2));
    EXPECT_FALSE(admission_blocked(100, long_tokens, 1, 2));
    EXPECT_FALSE(admission_blocked(long_tokens, long_tokens, 1, 2));  // at the bound: not long
    // None running: the long one goes. Four slots: three long prefills at once, not four.
    EXPECT_FALSE(admission_blocked(20000, long_tokens, 0, 2));
    EXPECT_FALSE(admission_blocked(20000, long_tokens, 2, 4));
    EXPECT_TRUE(admission_blocked(20000, long_tokens, 3, 4));
    // One slot: nothing to keep free, a long prefill goes when the slot is idle.
    EXPECT_FALSE(admission_blocked(20000, long_tokens, 0, 1));
}

TEST(WarmupQueue, ANewerPrefixOfTheSameConversationReplacesTheQueuedOne) {
    warmup_queue q(4);
    auto a1 = request(seq_of(0, 50));
    auto b = request(seq_of(1000, 50));
    auto a2 = request(seq_of(0, 80));  // a's next turn
    for (auto * j : {&a1, &b, &a2}) {
        (*j)->prepared = {2, 2};  // next_turn_prefix: two placeholder renders
    }
    q.push(a1);
    q.push(b);
    q.push(a2);
    EXPECT_EQ(q.size(), 2u);
    EXPECT_EQ(q.replaced, 1);
    EXPECT_EQ(q.received, 3);
    EXPECT_EQ(q.renders, 6) << "a replaced job's renders were spent all the same";
    EXPECT_EQ(q.tokenizations, 6);
    EXPECT_EQ(q.pop(), b);
    EXPECT_EQ(q.pop(), a2);
    EXPECT_EQ(q.pop(), nullptr);
}

TEST(WarmupQueue, ItDropsTheOldestWhenFullAndAPreemptedJobGoesFirst) {
    warmup_queue q(2);
    auto j1 = request(seq_of(0, 10));
    auto j2 = request(seq_of(100, 10));
    auto j3 = request(seq_of(200, 10));
    q.push(j1);
    q.push(j2);
    q.push(j3);
    EXPECT_EQ(q.dropped, 1);
    EXPECT_EQ(q.size(), 2u);
    auto first = q.pop();
    EXPECT_EQ(first, j2);
    q.push_front(first);
    EXPECT_EQ(q.pop(), j2);
    EXPECT_EQ(q.pop(), j3);
    EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace lineage::scheduler
