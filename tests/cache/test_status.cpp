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

// An error that names a reason the caller branches on, beside the message.
struct parse_error {
    enum class kind { empty, not_a_number };
    kind why = kind::empty;
    std::string message;
};

expected<int, parse_error> parse_digit(const std::string & s) {
    if (s.empty()) {
        return parse_error{parse_error::kind::empty, "nothing to parse"};
    }
    if (s.size() != 1 || s[0] < '0' || s[0] > '9') {
        return parse_error{parse_error::kind::not_a_number, "'" + s + "' is not a digit"};
    }
    return s[0] - '0';
}

TEST(Expected, AnErrorTypeWithAReason) {
    auto a = parse_digit("7");
    ASSERT_TRUE(a);
    EXPECT_EQ(*a, 7);
    auto b = parse_digit("x");
    ASSERT_FALSE(b);
    EXPECT_EQ(b.error().why, parse_error::kind::not_a_number);
    EXPECT_EQ(b.error().message, "'x' is not a digit");
    EXPECT_EQ(parse_digit("").error().why, parse_error::kind::empty);
}

}  // namespace
}  // namespace lineage::util
