// Unit tests of cache::capacity_default: the model-aware budget (docs/prompt-cache.md
// "Model-aware capacity default"), exact values.
#include "cache/store/capacity.h"

#include <gtest/gtest.h>

namespace lineage::cache {
namespace {

constexpr uint64_t MiB = 1ull << 20;
constexpr uint64_t GiB = 1ull << 30;

TEST(CapacityDefault, SixEntriesBetweenTheFloorAndAQuarterOfWhatIsLeft) {
    // Llama 3.1 8B at 8192 tokens: 1 GiB an entry; 64 GiB left: 6 entries (6 GiB).
    EXPECT_EQ(capacity_default(1 * GiB, 64 * GiB, false), 6 * GiB);
    // A quarter of what is left is the ceiling.
    EXPECT_EQ(capacity_default(1 * GiB, 16 * GiB, false), 4 * GiB);
    // Small entries: the floor (2 GiB dense, 512 MiB hybrid).
    EXPECT_EQ(capacity_default(4 * MiB, 24 * GiB, false), 2 * GiB);
    EXPECT_EQ(capacity_default(4 * MiB, 24 * GiB, true), 512 * MiB);
    EXPECT_EQ(capacity_default(100 * MiB, 24 * GiB, true), 600 * MiB);
}

TEST(CapacityDefault, RaisedToOneEntryWhenItFitsInHalfOfWhatIsLeft) {
    // 10 GiB entry, 24 GiB left: the ceiling (6 GiB) cannot hold it, half of left can.
    EXPECT_EQ(capacity_default(10 * GiB, 24 * GiB, false), 10 * GiB);
    // 13 GiB entry, 24 GiB left: it does not fit in half: the ceiling, and the server WARNs.
    EXPECT_EQ(capacity_default(13 * GiB, 24 * GiB, false), 6 * GiB);
    // Nothing left: the floor.
    EXPECT_EQ(capacity_default(1 * GiB, 0, false), 2 * GiB);
    EXPECT_EQ(capacity_default(1 * GiB, 0, true), 512 * MiB);
}

TEST(CapacityDefault, RepresentativeLength) {
    EXPECT_EQ(representative_tokens(4096), 4096);
    EXPECT_EQ(representative_tokens(16384), 8192);
    EXPECT_EQ(representative_tokens(0), 8192);
}

}  // namespace
}  // namespace lineage::cache
