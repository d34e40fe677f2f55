// Tests of server::endpoints: the one endpoint table read by route installation, the 404/405
// answers (errors.cpp) and the --help footer (config.cpp). For every row: its wrong methods get
// a 405 naming exactly the methods the table serves on that path (alias too), and --help lists
// it; unknown paths stay 404.
#include "server/config.h"
#include "server/http/endpoints.h"
#include "server/http/errors.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

namespace lineage::server {
namespace {

// A concrete request path for a table path (":id" -> one segment).
std::string concrete(std::string_view pattern) {
    std::string p(pattern);
    if (const auto at = p.find(":id"); at != std::string::npos) {
        p.replace(at, 3, "resp_1");
    }
    return p;
}

// The methods the table serves on each path and alias.
std::map<std::string, std::set<std::string>> methods_by_path() {
    std::map<std::string, std::set<std::string>> out;
    for (const auto & e : endpoint_table()) {
        out[std::string(e.path)].insert(std::string(e.method));
        if (!e.alias.empty()) {
            out[std::string(e.alias)].insert(std::string(e.method));
        }
    }
    return out;
}

TEST(EndpointTable, RowsAreCompleteAndUnique) {
    std::set<std::string> seen;
    for (const auto & e : endpoint_table()) {
        EXPECT_TRUE(e.method == "GET" || e.method == "POST" || e.method == "DELETE") << e.method << " " << e.path;
        // A handler of its own, or the generation handler with its dialect: exactly one.
        EXPECT_NE(e.handler == nullptr, e.generates == nullptr) << e.method << " " << e.path;
        EXPECT_TRUE(seen.insert(std::string(e.method) + " " + std::string(e.path)).second) << e.path;
        if (!e.alias.empty()) {
            EXPECT_TRUE(seen.insert(std::string(e.method) + " " + std::string(e.alias)).second) << e.alias;
        }
        EXPECT_EQ(find_endpoint(e.method, concrete(e.path)), &e);
        if (!e.alias.empty()) {
            EXPECT_EQ(find_endpoint(e.method, concrete(e.alias)), &e);
        }
    }
    // The aliases clients use, and what only the admin key or anyone may call.
    ASSERT_NE(find_endpoint("POST", "/chat/completions"), nullptr);
    EXPECT_EQ(find_endpoint("POST", "/chat/completions")->path, "/v1/chat/completions");
    EXPECT_EQ(find_endpoint("GET", "/models")->path, "/v1/models");
    EXPECT_EQ(find_path("/metrics")->access, endpoint_access::admin);
    // A server-wide setting: the admin key; reading the adapters: any key (without their paths).
    EXPECT_EQ(find_endpoint("POST", "/lora-adapters")->access, endpoint_access::admin);
    EXPECT_EQ(find_endpoint("GET", "/lora-adapters")->access, endpoint_access::tenant);
    for (const auto & e : endpoint_table()) {
        EXPECT_EQ(e.access == endpoint_access::admin, !e.admin_why.empty()) << "the 403 says why: " << e.path;
    }
    EXPECT_EQ(find_path("/health")->access, endpoint_access::open);
    EXPECT_EQ(find_path("/ready")->access, endpoint_access::open);  // a load balancer's probe has no key
    EXPECT_EQ(find_path("/")->access, endpoint_access::open);
    EXPECT_EQ(find_path("/v1/chat/completions")->access, endpoint_access::tenant);
    EXPECT_EQ(find_path("/v1/messages/count_tokens")->errors, error_shape::anthropic);
    EXPECT_EQ(find_path("/v1/chat/completions")->errors, error_shape::openai);
    EXPECT_TRUE(find_endpoint("POST", "/v1/responses/resp_9/cancel")->body_optional);
    EXPECT_FALSE(find_endpoint("POST", "/v1/responses")->body_optional);
    EXPECT_EQ(find_endpoint("GET", "/v1/nothing"), nullptr);
    EXPECT_EQ(find_path("/v1/responses/a/b"), nullptr);
}

TEST(EndpointTable, EveryWrongMethodIs405NamingTheServedOnes) {
    for (const auto & [path, served] : methods_by_path()) {
        const std::string takes = allowed_methods(concrete(path));
        std::set<std::string> listed;
        for (size_t at = 0; at < takes.size();) {
            const auto end = takes.find(" or ", at);
            listed.insert(takes.substr(at, end == std::string::npos ? std::string::npos : end - at));
            at = end == std::string::npos ? takes.size() : end + 4;
        }
        EXPECT_EQ(listed, served) << path;
        for (const char * wrong : {"GET", "POST", "DELETE", "PUT", "PATCH"}) {
            if (served.count(wrong)) {
                continue;
            }
            const api_error e = error_for_status(404, wrong, concrete(path), 1024);
            EXPECT_EQ(e.status, 405) << wrong << " " << path;
            EXPECT_EQ(e.code, "method_not_allowed");
            EXPECT_EQ(e.message, "method " + std::string(wrong) + " is not allowed on " + concrete(path) + "; it takes " +
                                     takes);
        }
    }
    // The aliases were served but missing from the 405 table: GET /chat/completions said 404.
    EXPECT_EQ(error_for_status(404, "GET", "/chat/completions", 1024).message,
              "method GET is not allowed on /chat/completions; it takes POST");
    EXPECT_EQ(error_for_status(404, "POST", "/models", 1024).status, 405);
    const api_error unknown = error_for_status(404, "GET", "/v1/nothing", 1024);
    EXPECT_EQ(unknown.status, 404);
    EXPECT_EQ(unknown.message, "unknown endpoint GET /v1/nothing; this server serves " + endpoint_list());
}

TEST(EndpointTable, HelpListsEveryEndpointAndAlias) {
    const std::string help = config_help("lineage-server");
    const auto footer = help.find("Endpoints: ");
    ASSERT_NE(footer, std::string::npos);
    const std::string listed = help.substr(footer);
    for (const auto & e : endpoint_table()) {
        EXPECT_NE(listed.find(std::string(e.method) + " " + std::string(e.path)), std::string::npos) << e.path;
        if (!e.alias.empty()) {
            EXPECT_NE(listed.find("alias " + std::string(e.alias)), std::string::npos) << e.alias;
        }
    }
}

}  // namespace
}  // namespace lineage::server
