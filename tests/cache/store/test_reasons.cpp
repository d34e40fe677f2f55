// Unit tests of the cache's typed reasons (reasons.h): the names they render to at the edges
// (stats keys, /metrics labels, the decision trace) are the documented ones, exactly.
#include "cache/store/reasons.h"

#include <gtest/gtest.h>

namespace lineage::cache {
namespace {

TEST(Reasons, EvictionNames) {
    EXPECT_EQ(to_string(eviction_reason::lru), "lru");
    EXPECT_EQ(to_string(eviction_reason::ttl), "ttl");
    EXPECT_EQ(to_string(eviction_reason::capacity), "capacity");
    EXPECT_EQ(to_string(eviction_reason::superseded), "superseded");
    EXPECT_EQ(to_string(eviction_reason::anchor_cap), "anchor_cap");
}

TEST(Reasons, RejectionNames) {
    EXPECT_EQ(to_string(rejection_reason::too_large), "too_large");
    EXPECT_EQ(to_string(rejection_reason::budget), "budget");
    EXPECT_EQ(to_string(rejection_reason::min_prefix), "min_prefix");
    EXPECT_EQ(to_string(rejection_reason::disabled), "disabled");
    EXPECT_EQ(to_string(rejection_reason::anchor_too_large), "anchor_too_large");
    EXPECT_EQ(to_string(rejection_reason::abandoned), "abandoned");
}

}  // namespace
}  // namespace lineage::cache
