// Tests of scheduler::memory_plan: the bytes of the plan, its one line, and
// the refusal that names --cache-device-bytes with the numbers; and of the settings resolved by
// where the model runs (with_device_settings). No model.
#include "scheduler/memory_plan.h"
#include "scheduler/settings.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

using namespace lineage::scheduler;

namespace {

memory_inputs tiny(uint64_t budget, bool from_flag) {
    memory_inputs in;
    in.device = "CPU";
    in.budget_bytes = budget;
    in.budget_from_flag = from_flag;
    in.model_bytes = 1000;
    in.type_k = "q8_0";
    in.type_v = "q8_0";
    in.kv_bytes_per_token = 10;
    in.seq_fixed_bytes = 4;
    in.n_parallel = 4;
    in.n_parked = 1;
    in.n_ctx_seq = 100;
    return in;
}

}  // namespace

TEST(MemoryPlan, BytesAddUp) {
    const memory_plan p = plan_memory(tiny(10000, true));
    EXPECT_EQ(p.seq_bytes, 1004u);       // 4 + 10 x 100
    EXPECT_EQ(p.active_bytes, 4016u);    // 4 x 1004
    EXPECT_EQ(p.parked_bytes, 1004u);
    EXPECT_EQ(p.need_bytes, 6020u);      // 1000 + 4016 + 1004
    EXPECT_EQ(p.headroom_bytes, 3980);
    EXPECT_TRUE(p.fits());
    EXPECT_TRUE(refusal(p).is_ok());
}

TEST(MemoryPlan, ExactFitFitsOneByteLessDoesNot) {
    EXPECT_TRUE(plan_memory(tiny(6020, true)).fits());
    const memory_plan p = plan_memory(tiny(6019, true));
    EXPECT_FALSE(p.fits());
    EXPECT_EQ(p.headroom_bytes, -1);
}

TEST(MemoryPlan, LineNamesEveryPart) {
    auto in = tiny(10000, true);
    in.ram_tier_bytes = 2048;
    EXPECT_EQ(describe(plan_memory(in)),
              "memory plan (CPU, host memory): model 1000 B (1000) + KV 10 B (10)/token (K q8_0, V q8_0) x 100 tokens "
              "+ 4 B (4) fixed = 1004 B (1004) per sequence; 4 --parallel = 3.9 KiB (4016), 1 parked "
              "(--cache-device-slots) = 1004 B (1004); needs 5.9 KiB (6020) of device budget 9.8 KiB (10000) "
              "(--cache-device-bytes), headroom 3.9 KiB (3980); RAM tier budget 2.0 KiB (2048) (a cap, in host "
              "memory)");
    EXPECT_NE(describe(plan_memory(tiny(10000, false))).find("(the device's memory; --cache-device-bytes 0 = auto)"),
              std::string::npos);
}

TEST(MemoryPlan, RefusalNamesTheFlagAndTheNumbers) {
    const memory_plan p = plan_memory(tiny(3000, true));
    EXPECT_EQ(refusal(p).message(),
              "the memory plan does not fit: --cache-device-bytes 2.9 KiB (3000), is less than model 1000 B (1000) + 4 "
              "--parallel sequences x 1004 B (1004) at --ctx-size 100 tokens (KV 10 B (10)/token, K q8_0, V q8_0) + "
              "1 parked (--cache-device-slots) = 5.9 KiB (6020); raise --cache-device-bytes, or lower --ctx-size or "
              "--parallel, or pick a smaller --cache-type-k/-v");
    EXPECT_EQ(describe(p).find("headroom -2.9 KiB (3020)") != std::string::npos, true) << describe(p);
}

TEST(MemoryPlan, ParkedSlotsAloneOverflowingSuggestsFewerSlots) {
    // model + 4 active = 5016 fits 5500, the parked one does not.
    const std::string why = refusal(plan_memory(tiny(5500, true))).message();
    EXPECT_NE(why.find("; lower --cache-device-slots, raise --cache-device-bytes"), std::string::npos) << why;
}

TEST(MemoryPlan, DeviceMemoryBudgetIsNamedAsSuch) {
    const std::string why = refusal(plan_memory(tiny(3000, false))).message();
    EXPECT_EQ(why.rfind("the memory plan does not fit: the device's memory, 2.9 KiB (3000) (CPU; --cache-device-bytes 0 "
                        "= auto), is less than",
                        0),
              0u)
        << why;
}

TEST(MemoryPlan, HugeInputsSaturateAndDoNotFit) {
    auto in = tiny(std::numeric_limits<uint64_t>::max(), true);
    in.kv_bytes_per_token = std::numeric_limits<uint64_t>::max() / 2;
    in.n_ctx_seq = 1 << 30;
    const memory_plan p = plan_memory(in);
    EXPECT_EQ(p.need_bytes, std::numeric_limits<uint64_t>::max());
    // budget and need both clamp to INT64_MAX: headroom 0, fits; a huge budget is a huge budget.
    EXPECT_EQ(p.headroom_bytes, 0);
    in.budget_bytes = 1ull << 40;
    EXPECT_FALSE(plan_memory(in).fits());
}

TEST(DeviceSettings, RamReleaseAutoIsFiveSecondsOnTheCpuAndThirtyOnAGpu) {
    params p;
    ASSERT_DOUBLE_EQ(p.cache.ram_release_s, -1);  // the default is auto
    EXPECT_DOUBLE_EQ(with_device_settings(p, /*gpu=*/false).cache.ram_release_s, 5);
    EXPECT_DOUBLE_EQ(with_device_settings(p, /*gpu=*/true).cache.ram_release_s, 30);
    // A value the operator gave is kept on either device, 0 (off) included.
    for (const double given : {0.0, 2.5, 60.0}) {
        p.cache.ram_release_s = given;
        EXPECT_DOUBLE_EQ(with_device_settings(p, false).cache.ram_release_s, given);
        EXPECT_DOUBLE_EQ(with_device_settings(p, true).cache.ram_release_s, given);
    }
}

// An anchor read back from disk is pinned in RAM again on a GPU, and on the CPU alone only with
// RAM release off (cache::config::repin_read_anchors_for).
TEST(DeviceSettings, ReadBackAnchorsArePinnedAgainOnAGpuOrWithoutRamRelease) {
    params p;
    ASSERT_TRUE(p.cache.repin_read_anchors);
    EXPECT_FALSE(with_device_settings(p, /*gpu=*/false).cache.repin_read_anchors);  // auto: 5 s
    EXPECT_TRUE(with_device_settings(p, /*gpu=*/true).cache.repin_read_anchors);
    p.cache.ram_release_s = 0;  // release off
    EXPECT_TRUE(with_device_settings(p, false).cache.repin_read_anchors);
    p.cache.ram_release_s = 60;
    EXPECT_FALSE(with_device_settings(p, false).cache.repin_read_anchors);
    EXPECT_TRUE(with_device_settings(p, true).cache.repin_read_anchors);
}

TEST(DeviceSettings, DeviceSlotsAutoIsOneOnTheCpuAndFourOnAGpu) {
    params p;
    ASSERT_EQ(p.cache.device_slots, -1);  // the default is auto
    EXPECT_EQ(with_device_settings(p, /*gpu=*/false).cache.device_slots, 1);
    EXPECT_EQ(with_device_settings(p, /*gpu=*/true).cache.device_slots, 4);
    for (const int32_t given : {0, 2, 7}) {
        p.cache.device_slots = given;
        EXPECT_EQ(with_device_settings(p, false).cache.device_slots, given);
        EXPECT_EQ(with_device_settings(p, true).cache.device_slots, given);
    }
}

// Auto's GPU value is lowered to what llama.cpp holds beside --parallel (256 sequences) and what
// a batch has rows for; the startup check passed with auto's CPU value (1), which always stays.
TEST(DeviceSettings, DeviceSlotsAutoOnAGpuIsLoweredToFitTheSequenceLimitAndTheBatch) {
    params p;
    p.n_parallel = 254;
    p.n_batch = 512;
    EXPECT_EQ(with_device_settings(p, /*gpu=*/true).cache.device_slots, 2);  // 254 + 2 = 256
    p.n_parallel = 255;
    EXPECT_EQ(with_device_settings(p, true).cache.device_slots, 1);
    EXPECT_EQ(with_device_settings(p, false).cache.device_slots, 1);
    p.n_parallel = 4;
    p.n_batch = 6;  // rows for 4 + 2
    EXPECT_EQ(with_device_settings(p, true).cache.device_slots, 2);
    p.n_batch = 512;
    EXPECT_EQ(with_device_settings(p, true).cache.device_slots, 4);  // nothing to lower
    p.n_parallel = 254;
    p.cache.device_slots = 2;  // a value the operator gave is the startup check's to refuse, not lowered
    EXPECT_EQ(with_device_settings(p, true).cache.device_slots, 2);
}
