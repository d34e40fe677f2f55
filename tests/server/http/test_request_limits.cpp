// server::request_limits: each limit accepts its value and refuses one more with a 400 that
// names the count, the limit and the flag, in every dialect that takes messages or tools; and
// server::memory_trim trims only after a request ended.
#include "server/dialects/anthropic/anthropic_request.h"
#include "server/dialects/chat/chat_request.h"
#include "server/dialects/completions/completions_request.h"
#include "server/http/memory_trim.h"
#include "server/http/request_limits.h"
#include "server/dialects/responses/responses_request.h"
#include "server/dialects/anthropic/thinking_signature.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

namespace lineage::server {
namespace {

// Small limits for one test; the process-wide ones come back after it.
class RequestLimits : public ::testing::Test {
protected:
    void SetUp() override {
        saved_ = default_request_limits();
        request_limits & lim = default_request_limits();
        lim.max_tools = 3;
        lim.max_tools_bytes = 2000;
        lim.max_messages = 4;
        lim.max_content_parts = 6;
        lim.max_prompt_bytes = 1024;
        lim.max_logit_bias = 2;
        lim.max_grammar_ms = 50;
        lim.max_grammar_alternatives = 3;
    }
    void TearDown() override { default_request_limits() = saved_; }

private:
    request_limits saved_;
};

std::string tools_json(int n, size_t description_bytes = 1) {
    std::string s = "[";
    for (int i = 0; i < n; ++i) {
        s += std::string(i ? "," : "") + R"({"type":"function","function":{"name":"f)" + std::to_string(i) +
             R"(","description":")" + std::string(description_bytes, 'd') + R"(","parameters":{}}})";
    }
    return s + "]";
}

std::string messages_json(int n) {
    std::string s = "[";
    for (int i = 0; i < n; ++i) {
        s += std::string(i ? "," : "") + (i % 2 ? R"({"role":"assistant","content":"a"})" : R"({"role":"user","content":"u"})");
    }
    return s + "]";
}

std::optional<api_error> chat(const std::string & body) {
    chat_request r;
    return parse_chat_request(body, r);
}

TEST_F(RequestLimits, ToolsAtTheLimitAreAcceptedOneMoreIsRefused) {
    EXPECT_FALSE(chat(R"({"messages":[{"role":"user","content":"hi"}],"tools":)" + tools_json(3) + "}"));
    const auto e = chat(R"({"messages":[{"role":"user","content":"hi"}],"tools":)" + tools_json(4) + "}");
    ASSERT_TRUE(e);
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->type, "invalid_request_error");
    EXPECT_EQ(e->param, "tools");
    EXPECT_EQ(e->code, "too_many_tools");
    EXPECT_EQ(e->message, "this request has 4 tools; this server accepts at most 3 (--max-tools): send fewer, or start "
                          "the server with a larger --max-tools");
}

TEST_F(RequestLimits, ToolBytesCountNamesDescriptionsAndParameters) {
    // Each tool: name "f0" (2) + description + parameters "{}" (2).
    EXPECT_FALSE(chat(R"({"messages":[{"role":"user","content":"hi"}],"tools":)" + tools_json(2, 996) + "}"));
    const auto e = chat(R"({"messages":[{"role":"user","content":"hi"}],"tools":)" + tools_json(2, 997) + "}");
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code, "tools_too_large");
    EXPECT_EQ(e->param, "tools");
    EXPECT_EQ(e->message, "this request has 2002 bytes of tool definitions (names, descriptions, parameters); this "
                          "server accepts at most 2000 (--max-tools-bytes): send fewer, or start the server with a "
                          "larger --max-tools-bytes");
}

TEST_F(RequestLimits, MessagesAtTheLimitAreAcceptedOneMoreIsRefused) {
    EXPECT_FALSE(chat(R"({"messages":)" + messages_json(4) + "}"));
    const auto e = chat(R"({"messages":)" + messages_json(5) + "}");
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code, "too_many_messages");
    EXPECT_EQ(e->param, "messages");
    EXPECT_EQ(e->message, "this request has 5 messages; this server accepts at most 4 (--max-messages): send fewer, or "
                          "start the server with a larger --max-messages");
}

TEST_F(RequestLimits, ContentPartsCountTextPartsToolCallsAndPlainContent) {
    // 1 (plain) + 3 parts + 2 tool calls = 6: accepted; one more text part: 7.
    const std::string calls =
        R"("tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}},)"
        R"({"id":"b","type":"function","function":{"name":"f","arguments":"{}"}}])";
    const std::string parts3 = R"([{"type":"text","text":"x"},{"type":"text","text":"y"},{"type":"text","text":"z"}])";
    const std::string parts4 =
        R"([{"type":"text","text":"x"},{"type":"text","text":"y"},{"type":"text","text":"z"},{"type":"text","text":"w"}])";
    auto body = [&](const std::string & parts) {
        return R"({"messages":[{"role":"user","content":"u"},{"role":"assistant","content":null,)" + calls +
               R"(},{"role":"tool","tool_call_id":"a","content":)" + parts + "}]}";
    };
    // The tool message's parts, the user's plain content, and the assistant's 2 calls + its
    // empty content (1): 3 + 1 + 3 = 7 > 6.
    const auto e = chat(body(parts3));
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code, "too_many_content_parts");
    EXPECT_EQ(e->param, "messages");
    EXPECT_EQ(e->message, "this request has 7 content parts (text parts, images, tool calls); this server accepts at "
                          "most 6 (--max-content-parts): send fewer, or start the server with a larger "
                          "--max-content-parts");
    default_request_limits().max_content_parts = 7;
    EXPECT_FALSE(chat(body(parts3)));
    EXPECT_EQ(chat(body(parts4))->code, "too_many_content_parts");
}

TEST_F(RequestLimits, AnthropicMessagesAndToolsAreLimited) {
    const thinking_signer signer("tiny", "");
    anthropic_request r;
    const std::string tools = R"([{"name":"a","input_schema":{}},{"name":"b","input_schema":{}},)"
                              R"({"name":"c","input_schema":{}},{"name":"d","input_schema":{}}])";
    auto e = parse_anthropic_request(R"({"max_tokens":4,"messages":)" + messages_json(5) + "}", signer, false, r);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code, "too_many_messages");
    e = parse_anthropic_request(R"({"max_tokens":4,"messages":)" + messages_json(3) + R"(,"tools":)" + tools + "}",
                                signer, false, r);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code, "too_many_tools");
    EXPECT_FALSE(parse_anthropic_request(R"({"max_tokens":4,"messages":)" + messages_json(3) + "}", signer, false, r));
}

TEST_F(RequestLimits, ResponsesCountTheStoredConversationToo) {
    responses_request r;
    // 5 input items: refused before they are converted.
    auto e = parse_responses_request(R"({"input":)" + messages_json(5) + "}", r);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code, "too_many_messages");
    EXPECT_EQ(e->param, "input");
    // 3 items after 2 stored ones: 5 messages.
    ASSERT_FALSE(parse_responses_request(R"({"input":)" + messages_json(3) + "}", r));
    std::vector<response_item> prior(2);
    prior[0].role = "user";
    prior[0].text = "p";
    prior[1].role = "user";
    prior[1].text = "q";
    e = build_chat_messages(r, prior, nullptr);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code, "too_many_messages");
    EXPECT_EQ(e->param, "messages");
    responses_request r2;
    ASSERT_FALSE(parse_responses_request(R"({"input":)" + messages_json(3) + "}", r2));
    EXPECT_FALSE(build_chat_messages(r2, {prior[0]}, nullptr));
}

TEST_F(RequestLimits, PromptBytesAtTheLimitAreAcceptedOneMoreIsRefused) {
    EXPECT_FALSE(check_prompt_bytes(1024, "'content'", "content"));
    const auto e = check_prompt_bytes(1025, "'content'", "content");
    ASSERT_TRUE(e);
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->code, "prompt_too_large");
    EXPECT_EQ(e->param, "content");
    EXPECT_EQ(e->message, "'content' is 1025 bytes; this server tokenizes at most 1024 (--max-prompt-bytes): send a "
                          "shorter prompt, or start the server with a larger --max-prompt-bytes");
}

TEST_F(RequestLimits, MessagesTextOverThePromptBoundIsRefusedBeforeTheRender) {
    // Contents, text parts and tool call arguments count (1024 bytes at most here): 1000 + 24
    // is at the bound, one more byte over it, whichever field it is in.
    const std::string args = R"("{\"k\":\")" + std::string(8, 'a') + R"(\"}")";  // {"k":"aaaaaaaa"}: 16 bytes
    const auto body = [&](int content, int part) {
        return R"({"messages":[{"role":"user","content":")" + std::string(content, 'c') +
               R"("},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":)" +
               args + R"(}}]},{"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":")" +
               std::string(part, 'p') + R"("}]}]})";
    };
    EXPECT_FALSE(chat(body(1000, 8)));  // 1000 + 16 + 8 = 1024
    for (const auto & [content, part] : {std::pair{1001, 8}, std::pair{1000, 9}}) {
        const auto e = chat(body(content, part));
        ASSERT_TRUE(e);
        EXPECT_EQ(e->status, 400);
        EXPECT_EQ(e->code, "prompt_too_large");
        EXPECT_EQ(e->param, "messages");
        EXPECT_EQ(e->message, "the messages' text is 1025 bytes; this server tokenizes at most 1024 "
                              "(--max-prompt-bytes): send a shorter prompt, or start the server with a larger "
                              "--max-prompt-bytes");
    }
}

TEST_F(RequestLimits, ACompletionsTextPromptIsLimitedBeforeTokenizing) {
    completions_request r;
    EXPECT_FALSE(parse_completions_request(R"({"prompt":")" + std::string(1024, 'p') + R"("})", r));
    const auto e = parse_completions_request(R"({"prompt":")" + std::string(1025, 'p') + R"("})", r);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code, "prompt_too_large");
    EXPECT_EQ(e->param, "prompt");
}

TEST_F(RequestLimits, LogitBiasEntriesAtTheLimitAreAcceptedOneMoreIsRefused) {
    EXPECT_FALSE(chat(R"({"messages":[{"role":"user","content":"hi"}],"logit_bias":{"1":5,"2":-5}})"));
    const auto e = chat(R"({"messages":[{"role":"user","content":"hi"}],"logit_bias":{"1":5,"2":-5,"3":1}})");
    ASSERT_TRUE(e);
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->code, "too_many_logit_bias");
    EXPECT_EQ(e->param, "logit_bias");
    EXPECT_EQ(e->message, "this request has 3 logit_bias entries; this server accepts at most 2 (--max-logit-bias): "
                          "send fewer, or start the server with a larger --max-logit-bias");
}

TEST(GrammarAlternatives, CountsTheBarsOutsideLiteralsClassesAndComments) {
    EXPECT_EQ(count_grammar_alternatives(""), 0U);
    EXPECT_EQ(count_grammar_alternatives(R"(root ::= "a" | "b" | "c")"), 2U);
    EXPECT_EQ(count_grammar_alternatives(R"(root ::= "a|b" [|] "\"|" # a | comment
x ::= y | z)"), 1U);
    EXPECT_EQ(count_grammar_alternatives(R"(root ::= [\]|] | "q")"), 1U);
}

TEST(GrammarAlternatives, CountsEnumValuesPropertiesAndBranchesAtEveryDepth) {
    EXPECT_EQ(count_schema_alternatives(json::parse(R"({"type":"string"})")), 0U);
    EXPECT_EQ(count_schema_alternatives(json::parse(R"({"type":"string","enum":["a","b","c"]})")), 3U);
    EXPECT_EQ(count_schema_alternatives(json::parse(
                  R"({"type":"object","properties":{"a":{"enum":[1,2]},"b":{"anyOf":[{"type":"string"},)"
                  R"({"type":"array","items":{"oneOf":[{"const":1},{"const":2},{"const":3}]}}]}}})")),
              2U + 2U + 2U + 3U);
}

TEST_F(RequestLimits, AConstraintOfTooManyAlternativesIsRefusedBeforeItIsBuilt) {
    const std::string msgs = R"("messages":[{"role":"user","content":"hi"}])";
    EXPECT_FALSE(chat("{" + msgs + R"(,"grammar":"root ::= \"a\" | \"b\" | \"c\" | \"d\""})"));
    const auto g = chat("{" + msgs + R"(,"grammar":"root ::= \"a\" | \"b\" | \"c\" | \"d\" | \"e\""})");
    ASSERT_TRUE(g);
    EXPECT_EQ(g->status, 400);
    EXPECT_EQ(g->code, "grammar_too_large");
    EXPECT_EQ(g->param, "grammar");
    EXPECT_EQ(g->message, "this request has 4 alternatives in its grammar ('|'); this server accepts at most 3 "
                          "(--max-grammar-alternatives): send fewer, or start the server with a larger "
                          "--max-grammar-alternatives");
    const std::string rf = R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":)";
    EXPECT_FALSE(chat("{" + msgs + rf + R"({"type":"string","enum":["a","b","c"]}}}})"));
    const auto s = chat("{" + msgs + rf + R"({"type":"object","properties":{"a":{"enum":[1,2]},"b":{}}}}}})");
    ASSERT_TRUE(s);
    EXPECT_EQ(s->code, "grammar_too_large");
    EXPECT_EQ(s->param, "response_format");
    EXPECT_EQ(s->message, "this request has 4 alternatives in its JSON Schema (enum values, properties, anyOf/oneOf "
                          "branches); this server accepts at most 3 (--max-grammar-alternatives): send fewer, or "
                          "start the server with a larger --max-grammar-alternatives");
}

TEST_F(RequestLimits, AGrammarCostlierThanTheBoundIsRefusedNamingItsCost) {
    EXPECT_FALSE(check_grammar_cost(50.0, "grammar"));
    const auto e = check_grammar_cost(2919.1, "response_format");
    ASSERT_TRUE(e);
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->code, "grammar_too_costly");
    EXPECT_EQ(e->param, "response_format");
    EXPECT_EQ(e->message, "'response_format' costs 2919.1 ms a generated token to enforce (its grammar applied to the "
                          "vocabulary); this server allows at most 50 ms (--max-grammar-ms), as the other requests "
                          "wait while it runs: send a smaller constraint (fewer alternatives), or start the server "
                          "with a larger --max-grammar-ms");
}

TEST(RequestLimitsDefaults, AreWhatTheDocsSay) {
    const request_limits d;
    EXPECT_EQ(d.max_tools, 1024);
    EXPECT_EQ(d.max_tools_bytes, 2u << 20);
    EXPECT_EQ(d.max_messages, 4096);
    EXPECT_EQ(d.max_content_parts, 8192);
    EXPECT_EQ(d.max_prompt_bytes, 4u << 20);
    EXPECT_EQ(d.max_logit_bias, 1024);
    EXPECT_EQ(d.max_grammar_ms, 200.0);
    EXPECT_EQ(d.max_grammar_alternatives, 512);
}

bool wait_for_trims(const memory_trimmer & t, uint64_t n) {
    for (int i = 0; i < 200 && t.trims() < n; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return t.trims() >= n;
}

TEST(MemoryTrimmer, TrimsOnlyAfterARequestEnded) {
    memory_trimmer t(0.02);
    std::this_thread::sleep_for(std::chrono::milliseconds(150));  // ~7 intervals, nothing ended
    EXPECT_EQ(t.trims(), 0u);
    t.note_request_end();
    t.note_request_end();
    ASSERT_TRUE(wait_for_trims(t, 1));
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    EXPECT_EQ(t.trims(), 1u);  // two ends, one trim; then nothing new
    t.note_request_end();
    ASSERT_TRUE(wait_for_trims(t, 2));
}

TEST(MemoryTrimmer, ZeroIntervalNeverTrims) {
    memory_trimmer t(0);
    t.note_request_end();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(t.trims(), 0u);
}

}  // namespace
}  // namespace lineage::server
