// server::http_guard: exact answers for keys, content types and Host headers.
#include "server/http/http_guard.h"

#include <gtest/gtest.h>

namespace lineage::server {
namespace {

TEST(HttpGuard, ApiKeyMatchesOnlyTheExactKey) {
    EXPECT_TRUE(api_key_matches("sk-secret", "sk-secret"));
    EXPECT_FALSE(api_key_matches("sk-secreT", "sk-secret"));
    EXPECT_FALSE(api_key_matches("sk-secret ", "sk-secret"));
    EXPECT_FALSE(api_key_matches("sk-secre", "sk-secret"));
    EXPECT_FALSE(api_key_matches("", "sk-secret"));
    EXPECT_TRUE(api_key_matches("", ""));
}

TEST(HttpGuard, JsonContentTypes) {
    EXPECT_TRUE(is_json_content_type("application/json"));
    EXPECT_TRUE(is_json_content_type("Application/JSON; charset=utf-8"));
    EXPECT_TRUE(is_json_content_type("application/vnd.api+json"));
    EXPECT_FALSE(is_json_content_type(""));
    EXPECT_FALSE(is_json_content_type("text/plain"));
    EXPECT_FALSE(is_json_content_type("text/plain; charset=application/json"));
    EXPECT_FALSE(is_json_content_type("application/x-www-form-urlencoded"));
    EXPECT_FALSE(is_json_content_type("multipart/form-data; boundary=x"));
    EXPECT_FALSE(is_json_content_type("application/+json"));
}

TEST(HttpGuard, HostsWithoutAnAllowList) {
    const std::vector<std::string> none;
    EXPECT_TRUE(host_allowed("", none));
    EXPECT_TRUE(host_allowed("127.0.0.1:8080", none));
    EXPECT_TRUE(host_allowed("10.1.2.3", none));
    EXPECT_TRUE(host_allowed("[::1]:8080", none));
    EXPECT_TRUE(host_allowed("localhost:8080", none));
    EXPECT_TRUE(host_allowed("LOCALHOST.", none));
    EXPECT_TRUE(host_allowed("app.localhost:1", none));
    EXPECT_FALSE(host_allowed("attacker.example:8080", none));
    EXPECT_FALSE(host_allowed("localhost.attacker.example", none));
    EXPECT_FALSE(host_allowed("[::1", none));
}

TEST(HttpGuard, HostsWithAnAllowList) {
    EXPECT_TRUE(host_allowed("gpu-box.lan:8080", {"gpu-box.lan"}));
    EXPECT_TRUE(host_allowed("GPU-BOX.lan", {"gpu-box.LAN"}));
    EXPECT_FALSE(host_allowed("other.lan", {"gpu-box.lan"}));
    EXPECT_TRUE(host_allowed("anything.example", {"*"}));
}

}  // namespace
}  // namespace lineage::server
