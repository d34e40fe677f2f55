// Unit tests of the dialects' shared checks of a conversation's messages (message_checks.h): each
// failure names its field and says it in the words the dialect passes in.
#include "server/request/message_checks.h"

#include "server/http/json_fields.h"
#include "server/http/request_limits.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

namespace lineage::server {
namespace {

/** The error `check` fails with (a test failure when it passes). */
api_error failure_of(const std::function<void()> & check) {
    try {
        check();
    } catch (const fields::bad_field & b) {
        return b.err;
    }
    ADD_FAILURE() << "the check passed";
    return {};
}

TEST(MessageChecks, TheMessagesArray) {
    const std::string what = "a non-empty array of messages";
    auto e = failure_of([&] { (void) messages_array(json::parse("{}"), what); });
    EXPECT_EQ(e.param, "messages");
    EXPECT_EQ(e.message, "'messages' is required: a non-empty array of messages");
    e = failure_of([&] { (void) messages_array(json::parse(R"({"messages": null})"), what); });
    EXPECT_EQ(e.message, "'messages' is required: a non-empty array of messages");
    e = failure_of([&] { (void) messages_array(json::parse(R"({"messages": {}})"), what); });
    EXPECT_EQ(e.message, "'messages' must be an array, got an object");
    e = failure_of([&] { (void) messages_array(json::parse(R"({"messages": []})"), what); });
    EXPECT_EQ(e.message, "'messages' must contain at least one message");
    json many = json::object();
    many["messages"] = json::array();
    for (int64_t i = 0; i <= default_request_limits().max_messages; ++i) {
        many["messages"].push_back(json::object());
    }
    e = failure_of([&] { (void) messages_array(many, what); });
    EXPECT_EQ(e.param, "messages");
    EXPECT_EQ(e.code, "too_many_messages");
    const json ok = json::parse(R"({"messages": [{"role": "user"}]})");
    EXPECT_EQ(messages_array(ok, what).size(), 1u);
}

TEST(MessageChecks, AMessagesRoleInTheDialectsWords) {
    const auto role_of = [](const char * msg) {
        return message_role(json::parse(msg), "messages[2]", {"user", "assistant", "system"},
                            "\"user\" or \"assistant\"");
    };
    EXPECT_EQ(role_of(R"({"role": "system"})"), "system");  // accepted, though not named
    auto e = failure_of([&] { (void) role_of("[1]"); });
    EXPECT_EQ(e.param, "messages[2]");
    EXPECT_EQ(e.message, "'messages[2]' must be an object with 'role' and 'content', got an array");
    e = failure_of([&] { (void) role_of("{}"); });
    EXPECT_EQ(e.param, "messages[2].role");
    EXPECT_EQ(e.message, "'messages[2].role' is required: \"user\" or \"assistant\"");
    e = failure_of([&] { (void) role_of(R"({"role": 1})"); });
    EXPECT_EQ(e.message, "'messages[2].role' must be a string, got an integer");
    e = failure_of([&] { (void) role_of(R"({"role": "tool"})"); });
    EXPECT_EQ(e.param, "messages[2].role");
    EXPECT_EQ(e.message, "'messages[2].role' is 'tool'; expected \"user\" or \"assistant\"");
}

TEST(MessageChecks, AContentPartsType) {
    const std::string shape = "an object like {\"type\": \"text\"}";
    EXPECT_EQ(content_part_type(json::parse(R"({"type": "text"})"), "messages[0].content[1]", shape, ""), "text");
    auto e = failure_of([&] { (void) content_part_type(json::parse("\"hi\""), "messages[0].content[1]", shape, ""); });
    EXPECT_EQ(e.param, "messages[0].content[1]");
    EXPECT_EQ(e.message, "'messages[0].content[1]' must be an object like {\"type\": \"text\"}, got a string");
    e = failure_of([&] { (void) content_part_type(json::parse("{}"), "messages[0].content[1]", shape, ""); });
    EXPECT_EQ(e.param, "messages[0].content[1].type");
    EXPECT_EQ(e.message, "'messages[0].content[1].type' is required");
    e = failure_of([&] { (void) content_part_type(json::parse("{}"), "c[0]", shape, "; send text parts"); });
    EXPECT_EQ(e.message, "'c[0].type' is required; send text parts");
}

TEST(MessageChecks, ToolCallArgumentsNestNoDeeperThanABody) {
    check_arguments_nesting("{\"a\": [1, 2]}", "messages[1].tool_calls[0].function.arguments");
    check_arguments_nesting("not JSON at all", "messages[1].tool_calls[0].function.arguments");
    const size_t n = default_json_limits().max_depth + 10;
    const std::string deep = std::string(n, '[') + std::string(n, ']');
    const auto e = failure_of([&] { check_arguments_nesting(deep, "input[0].arguments"); });
    EXPECT_EQ(e.param, "input[0].arguments");
    EXPECT_EQ(e.message.rfind("'input[0].arguments' nests", 0), 0u) << e.message;
}

}  // namespace
}  // namespace lineage::server
