// Tests of scheduler::next_lora_set (no model): the adapter set a step serves is that of the
// next computing slot from the turn, idle and loading slots are skipped, and the turn advances
// so that two sets in flight alternate.
#include "scheduler/lora_turns.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace lineage::scheduler {
namespace {

slot make_slot(slot::phase ph, std::vector<float> lora) {
    slot s;
    s.ph = ph;
    s.req = std::make_shared<generation_request>();
    s.req->lora = std::move(lora);
    return s;
}

TEST(LoraTurns, AlternatesBetweenTheSetsInFlight) {
    std::vector<slot> slots;
    slots.push_back(make_slot(slot::phase::decode, {1.0f, 0.0f}));
    slots.push_back(make_slot(slot::phase::prefill, {0.0f, 1.0f}));
    size_t turn = 0;
    EXPECT_EQ(next_lora_set(slots, turn), (std::vector<float>{1.0f, 0.0f}));
    EXPECT_EQ(turn, 1u);
    EXPECT_EQ(next_lora_set(slots, turn), (std::vector<float>{0.0f, 1.0f}));
    EXPECT_EQ(turn, 0u);
    EXPECT_EQ(next_lora_set(slots, turn), (std::vector<float>{1.0f, 0.0f}));
}

TEST(LoraTurns, SkipsSlotsThatDoNotCompute) {
    std::vector<slot> slots;
    slots.push_back(make_slot(slot::phase::loading, {1.0f}));
    slots.push_back(slot{});  // idle, no request
    slots.push_back(make_slot(slot::phase::decode, {}));
    size_t turn = 0;
    EXPECT_EQ(next_lora_set(slots, turn), std::vector<float>{});  // the base model's set
    turn = 1;
    slots[2].req->lora = {0.5f};
    EXPECT_EQ(next_lora_set(slots, turn), std::vector<float>{0.5f});
    EXPECT_EQ(turn, 2u);
}

TEST(LoraTurns, NothingComputingIsTheBaseModel) {
    std::vector<slot> slots(2);
    size_t turn = 1;
    EXPECT_TRUE(next_lora_set(slots, turn).empty());
    EXPECT_EQ(turn, 0u);
    std::vector<slot> none;
    EXPECT_TRUE(next_lora_set(none, turn).empty());
}

}  // namespace
}  // namespace lineage::scheduler
