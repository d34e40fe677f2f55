// server::json_body: limits are checked before a tree is built; every parse failure is a 400.
#include "server/http/json_body.h"

#include <gtest/gtest.h>

#include <string>

namespace lineage::server {
namespace {

std::string nested(size_t depth) {
    return "{\"a\":" + std::string(depth - 1, '[') + std::string(depth - 1, ']') + ",\"b\":1}";
}

TEST(JsonBody, ParsesAnObject) {
    json j;
    ASSERT_FALSE(parse_json_body(R"({"a":[1,2,{"b":null}]})", j));
    EXPECT_EQ(j["a"][2]["b"], nullptr);
    EXPECT_EQ(j["a"].size(), 3u);
}

TEST(JsonBody, DepthAtTheLimitIsAcceptedOneMoreIsRefused) {
    json_limits lim;
    lim.max_depth = 10;
    json j;
    EXPECT_FALSE(parse_json_body(nested(10), j, true, lim));
    const auto e = parse_json_body(nested(11), j, true, lim);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->code, "json_too_deep");
    EXPECT_NE(e->message.find("deeper than 10 levels"), std::string::npos) << e->message;
}

TEST(JsonBody, HostileNestingNeverBuildsATree) {
    // 58,634 levels (a body that used to crash the server): refused by the SAX pass with the
    // default limit.
    json j = json::object({{"kept", true}});
    const auto e = parse_json_body(nested(58'634), j);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code, "json_too_deep");
    EXPECT_EQ(j["kept"], true);  // untouched on error
}

TEST(JsonBody, NumberOverflowIsA400) {
    json j;
    const auto e = parse_json_body(R"({"a":1e400})", j);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->type, "invalid_request_error");
    EXPECT_EQ(e->code, "invalid_json");
    EXPECT_NE(e->message.find("1e400"), std::string::npos) << e->message;
}

TEST(JsonBody, ValueCountLimit) {
    json_limits lim;
    lim.max_values = 5;
    json j;
    EXPECT_FALSE(parse_json_body(R"({"a":[1,2,3]})", j, true, lim));  // object, array, 3 numbers
    const auto e = parse_json_body(R"({"a":[1,2,3,4]})", j, true, lim);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code, "json_too_large");
}

TEST(JsonBody, KeysPerObjectAtTheLimitAreAcceptedOneMoreIsRefused) {
    json_limits lim;
    lim.max_object_keys = 3;
    json j;
    // Each object counts its own keys: 3 at the top (one holding an object of 3).
    EXPECT_FALSE(parse_json_body(R"({"a":1,"b":{"x":1,"y":2,"z":3},"c":[{"p":1}]})", j, true, lim));
    for (const char * body : {R"({"a":1,"b":2,"c":3,"d":4})", R"({"a":{"w":1,"x":1,"y":2,"z":3}})"}) {
        const auto e = parse_json_body(body, j, true, lim);
        ASSERT_TRUE(e) << body;
        EXPECT_EQ(e->code, "json_too_large");
        EXPECT_EQ(e->message, "an object in the request body has more than 3 keys; send a smaller request");
    }
    EXPECT_EQ(json_limits{}.max_object_keys, 8192u);
}

TEST(JsonBody, MalformedAndNonObject) {
    json j;
    auto e = parse_json_body(R"({"a":)", j);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code, "invalid_json");
    EXPECT_EQ(e->message.rfind("the request body is not valid JSON (", 0), 0u) << e->message;
    e = parse_json_body("[1]", j);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->message, "the request body must be a JSON object");
    EXPECT_FALSE(parse_json_body("[1]", j, /*require_object=*/false));
    EXPECT_TRUE(j.is_array());
}

}  // namespace
}  // namespace lineage::server
