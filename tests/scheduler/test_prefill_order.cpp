// Unit tests of scheduler::plan_prefill (prefill_order.h): fewest prompt tokens left first, a
// short prefill runs without the long ones' chunks for at most max_deferrals steps in a row,
// chunks stop at capture points and within the budget, warm-ups never make others wait.
#include "scheduler/prefill_order.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace lineage::scheduler {
namespace {

/** A slot in prefill: `n_prompt` prompt tokens, `n_past` of them in. */
void add_prefill(std::vector<slot> & slots, int32_t n_prompt, int32_t n_past, bool warmup = false) {
    slot & s = slots.emplace_back();
    s.req = std::make_shared<generation_request>();
    s.req->prompt.assign(static_cast<size_t>(n_prompt), 7);
    s.req->warmup = warmup;
    s.ph = slot::phase::prefill;
    s.n_past = n_past;
}

std::vector<std::pair<size_t, int32_t>> chunks(std::vector<slot> & slots, int32_t budget) {
    std::vector<std::pair<size_t, int32_t>> out;
    for (const auto & c : plan_prefill(slots, {}, budget, 128, 4)) {
        out.emplace_back(static_cast<size_t>(c.s - slots.data()), c.n);
    }
    return out;
}

using v = std::vector<std::pair<size_t, int32_t>>;

TEST(PrefillOrder, LongPrefillsShareTheBudgetFewestLeftFirst) {
    std::vector<slot> slots;
    slots.reserve(4);
    add_prefill(slots, 3000, 0);    // 3000 left
    add_prefill(slots, 1000, 600);  // 400 left
    EXPECT_EQ(chunks(slots, 512), (v{{1, 400}, {0, 112}}));
    EXPECT_EQ(slots[0].deferred_steps, 0);
}

TEST(PrefillOrder, AShortPrefillRunsAloneForAtMostFourStepsInARow) {
    std::vector<slot> slots;
    slots.reserve(4);
    add_prefill(slots, 3000, 1024);  // a cold prompt, half way
    add_prefill(slots, 3100, 3000);  // a next turn: 100 left
    for (int32_t step = 1; step <= 4; ++step) {
        EXPECT_EQ(chunks(slots, 512), (v{{1, 100}})) << "step " << step;
        EXPECT_EQ(slots[0].deferred_steps, step);
    }
    // The fifth step in a row: the long one joins again, after the short one.
    EXPECT_EQ(chunks(slots, 512), (v{{1, 100}, {0, 412}}));
    EXPECT_EQ(slots[0].deferred_steps, 0);
    // Without a short prefill waiting, nothing sits out.
    slots[1].ph = slot::phase::decode;
    EXPECT_EQ(chunks(slots, 511), (v{{0, 511}}));
}

TEST(PrefillOrder, WhileAShortReadIsInFlightTheLongPrefillsSitOutUncounted) {
    std::vector<slot> slots;
    slots.reserve(4);
    add_prefill(slots, 3000, 1024);  // a long prefill, half way
    add_prefill(slots, 900, 800);    // a short one: 100 left
    // The hold: every prefill with more than 128 left sits out, for as many steps as the caller
    // holds, and none of them counts as a deferral.
    for (int32_t step = 1; step <= 6; ++step) {
        EXPECT_EQ(plan_prefill(slots, {}, 512, 128, 4, /*hold_long=*/true).size(), 1u) << "step " << step;
        EXPECT_EQ(slots[0].deferred_steps, 0) << "step " << step;
    }
    const auto held = plan_prefill(slots, {}, 512, 128, 4, /*hold_long=*/true);
    ASSERT_EQ(held.size(), 1u);
    EXPECT_EQ(held[0].s, &slots[1]);
    EXPECT_EQ(held[0].n, 100);
    // Only long ones sit out: with nothing short, the step is empty while held...
    slots[1].ph = slot::phase::decode;
    EXPECT_TRUE(plan_prefill(slots, {}, 512, 128, 4, /*hold_long=*/true).empty());
    // ...and the long prefill runs its full chunk once the hold ends.
    EXPECT_EQ(chunks(slots, 512), (v{{0, 512}}));
}

TEST(PrefillOrder, ChunksStopAtCapturePointsAndTheBudget) {
    std::vector<slot> slots;
    slots.reserve(4);
    add_prefill(slots, 3000, 0);
    slots[0].plan.captures.push_back({300, cache::point_kind::turn});
    EXPECT_EQ(chunks(slots, 512), (v{{0, 300}}));
    add_prefill(slots, 120, 20);  // 100 left: the long one (3000 left) sits out
    EXPECT_EQ(chunks(slots, 50), (v{{1, 50}}));
    EXPECT_EQ(chunks(slots, 0), v{});
}

TEST(PrefillOrder, AWarmUpNeverMakesOthersWait) {
    std::vector<slot> slots;
    slots.reserve(4);
    add_prefill(slots, 3000, 0);
    add_prefill(slots, 40, 0, /*warmup=*/true);
    EXPECT_EQ(chunks(slots, 512), (v{{1, 40}, {0, 472}}));
    EXPECT_EQ(slots[0].deferred_steps, 0);
}

TEST(PrefillOrder, OnlyTheStepsAdapterSetJoins) {
    std::vector<slot> slots;
    slots.reserve(4);
    add_prefill(slots, 300, 0);
    add_prefill(slots, 300, 0);
    slots[1].req->lora = {1.0f};
    EXPECT_EQ(chunks(slots, 512), (v{{0, 300}}));
}

}  // namespace
}  // namespace lineage::scheduler

namespace lineage::scheduler {
namespace {

// llama.cpp computes a step in one micro-batch only when the sequence ids come in increasing
// consecutive order: the batch is sorted by id, each sequence's tokens keep their order, and
// the returned positions say where each token (and so each logits row) went.
TEST(OrderBySequence, SortsBySequenceKeepingEachSequencesOrder) {
    std::vector<engine::batch_token> batch = {
        {10, 5, 2, true}, {20, 0, 1, false}, {21, 1, 1, false}, {22, 2, 1, true}, {30, 7, 0, true}};
    const auto where = order_by_sequence(batch);
    std::vector<std::pair<int32_t, int32_t>> got;  // (seq, token)
    for (const auto & t : batch) {
        got.emplace_back(t.seq, t.tok);
    }
    EXPECT_EQ(got, (std::vector<std::pair<int32_t, int32_t>>{{0, 30}, {1, 20}, {1, 21}, {1, 22}, {2, 10}}));
    EXPECT_EQ(where, (std::vector<int32_t>{4, 1, 2, 3, 0}));
    // A logits row moves with its token: the row of old position 3 (token 22) is now 3, of 0 is 4.
    EXPECT_EQ(batch[static_cast<size_t>(where[0])].tok, 10);
    EXPECT_TRUE(batch[static_cast<size_t>(where[3])].logits);
    // Already in order: the identity.
    EXPECT_EQ(order_by_sequence(batch), (std::vector<int32_t>{0, 1, 2, 3, 4}));
}

}  // namespace
}  // namespace lineage::scheduler
