// Tests of the handlers' own request and response (server/http/http_message.h): header names
// compared case-insensitively, query and path parameters, the JSON body helper.
#include "server/http/http_message.h"

#include <gtest/gtest.h>

namespace lineage::server {
namespace {

TEST(HttpMessage, HeaderNamesAreCaseInsensitiveAndTheFirstValueWins) {
    http_request r;
    r.headers = {{"Authorization", "Bearer a"}, {"x-api-key", "k1"}, {"X-API-Key", "k2"}};
    EXPECT_TRUE(r.has_header("authorization"));
    EXPECT_TRUE(r.has_header("AUTHORIZATION"));
    EXPECT_EQ(r.header("authorization"), "Bearer a");
    EXPECT_EQ(r.header("X-Api-Key"), "k1");
    EXPECT_FALSE(r.has_header("content-type"));
    EXPECT_EQ(r.header("content-type"), "");
    // A name that only shares a prefix is another header.
    EXPECT_FALSE(r.has_header("x-api"));
    EXPECT_FALSE(r.has_header("x-api-key-2"));
}

TEST(HttpMessage, QueryAndPathParameters) {
    http_request r;
    r.query = {{"limit", "5"}, {"order", "asc"}, {"limit", "7"}};
    r.path_params = {{"id", "resp_1"}};
    EXPECT_TRUE(r.has_param("limit"));
    EXPECT_EQ(r.param("limit"), "5");
    EXPECT_EQ(r.param("order"), "asc");
    EXPECT_FALSE(r.has_param("Limit"));  // query names are case-sensitive
    EXPECT_EQ(r.param("after"), "");
    EXPECT_EQ(r.path_param("id"), "resp_1");
    EXPECT_EQ(r.path_param("other"), "");
}

TEST(HttpMessage, ClosedIsFalseWithoutAProbeAndAsksTheProbeOtherwise) {
    http_request r;
    EXPECT_FALSE(r.closed());
    bool gone = false;
    r.connection_closed = [&gone] { return gone; };
    EXPECT_FALSE(r.closed());
    gone = true;
    EXPECT_TRUE(r.closed());
}

TEST(HttpMessage, JsonBodyAndHeaders) {
    http_response res;
    json j = json::object();
    j["a"] = 1;
    send_json_body(res, j, 201);
    EXPECT_EQ(res.status, 201);
    EXPECT_EQ(res.content_type, "application/json");
    EXPECT_EQ(res.body, R"({"a":1})");
    EXPECT_FALSE(res.next);
    res.set_header("Cache-Control", "no-store");
    EXPECT_EQ(res.header("cache-control"), "no-store");
    EXPECT_EQ(res.header("Allow"), "");
}

}  // namespace
}  // namespace lineage::server
