// Unit tests of util::status / util::expected (the one result type inside the process).
#include "util/status.h"

#include <gtest/gtest.h>

#include <string>

namespace lineage::util {
namespace {

expected<int> half(int v) {
    if (v % 2 != 0) {
        return status::error(std::to_string(v) + " is odd");
    }
    return v / 2;
}

TEST(Status, OkAndError) {
    EXPECT_TRUE(status::ok().is_ok());
    EXPECT_TRUE(static_cast<bool>(status()));
    const status e = status::error("the file is gone");
    EXPECT_FALSE(e.is_ok());
    EXPECT_EQ(e.message(), "the file is gone");
    EXPECT_EQ(status::error("").message(), "unknown error");  // a failure always says something
}

TEST(Expected, ValueOrWhyNot) {
    auto a = half(8);
    ASSERT_TRUE(a);
    EXPECT_EQ(*a, 4);
    EXPECT_TRUE(a.error().is_ok());
    auto b = half(7);
    EXPECT_FALSE(b.has_value());
    EXPECT_EQ(b.error().message(), "7 is odd");
}

}  // namespace
}  // namespace lineage::util
