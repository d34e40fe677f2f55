// Tests of server::anthropic_request (Messages API bodies -> chat_request) and
// server::thinking_signature: every conversion rule (system blocks, billing header, role
// "system" inside messages, tool_use / tool_result, thinking echo with its signature,
// cache_control marks, tool_choice, thinking, sampling, session) and the 400s naming the field.
#include "server/dialects/anthropic/anthropic_request.h"
#include "server/dialects/anthropic/thinking_signature.h"

#include <gtest/gtest.h>

using namespace lineage::server;

namespace {

const thinking_signer & signer() {
    static const thinking_signer s("tiny-qwen35", "");
    return s;
}

anthropic_request ok(const std::string & body, bool count_tokens = false) {
    anthropic_request r;
    const auto err = parse_anthropic_request(body, signer(), count_tokens, r);
    EXPECT_FALSE(err.has_value()) << (err ? err->message : "");
    return r;
}

api_error bad(const std::string & body) {
    anthropic_request r;
    const auto err = parse_anthropic_request(body, signer(), false, r);
    EXPECT_TRUE(err.has_value()) << body;
    return err.value_or(api_error{});
}

std::string with_messages(const std::string & messages, const std::string & extra = "") {
    return R"({"model":"claude-x","max_tokens":16,"messages":)" + messages + extra + "}";
}

}  // namespace

TEST(ThinkingSignature, RoundTripsAndRefusesEditsAndOtherKeys) {
    const std::string sig = signer().sign("I think, therefore \xe2\x9c\x93");
    EXPECT_EQ(signer().open(sig).value_or("<none>"), "I think, therefore \xe2\x9c\x93");
    EXPECT_EQ(signer().open(signer().sign("")).value_or("<none>"), "");
    std::string edited = sig;
    edited[edited.size() / 2] = edited[edited.size() / 2] == 'A' ? 'B' : 'A';
    EXPECT_FALSE(signer().open(edited).has_value());
    EXPECT_FALSE(thinking_signer("tiny-qwen35", "other-key").open(sig).has_value());
    EXPECT_FALSE(thinking_signer("tiny-qwen3", "").open(sig).has_value());
    EXPECT_FALSE(signer().open("not base64!").has_value());
    EXPECT_FALSE(signer().open("QUJD").has_value()) << "3 bytes: shorter than the MAC";
    EXPECT_EQ(thinking_signer("tiny-qwen35", "").sign("x"), signer().sign("x")) << "stable across restarts";
}

TEST(AnthropicRequest, StringsAndSampling) {
    const auto r = ok(R"({"model":"claude-sonnet-4-5","max_tokens":64,"system":"Be brief.","temperature":0.5,)"
                      R"("top_p":0.9,"top_k":40,"stop_sequences":["END","###"],"stream":true,)"
                      R"("metadata":{"user_id":"u-1"},"service_tier":"auto","unknown_field":{"x":1},)"
                      R"("messages":[{"role":"user","content":"Hi"}]})");
    ASSERT_EQ(r.chat.messages.size(), 2u);
    EXPECT_EQ(r.chat.messages[0].role, "system");
    EXPECT_EQ(r.chat.messages[0].content, "Be brief.");
    EXPECT_FALSE(r.chat.messages[0].content_is_parts);
    EXPECT_EQ(r.chat.messages[1].role, "user");
    EXPECT_EQ(r.chat.messages[1].content, "Hi");
    EXPECT_EQ(r.chat.sampling.max_tokens, 64);
    EXPECT_FLOAT_EQ(r.chat.sampling.temperature, 0.5f);
    EXPECT_FLOAT_EQ(r.chat.sampling.top_p, 0.9f);
    EXPECT_EQ(r.chat.sampling.top_k, 40);
    EXPECT_EQ(r.chat.stop, (std::vector<std::string>{"END", "###"}));
    EXPECT_EQ(r.stop_sequences, r.chat.stop);
    EXPECT_TRUE(r.chat.stream);
    EXPECT_EQ(r.chat.user, "u-1") << "metadata.user_id is the session key";
    EXPECT_EQ(r.chat.model, "claude-sonnet-4-5");
    EXPECT_TRUE(r.breakpoints.empty());
    EXPECT_FLOAT_EQ(ok(with_messages(R"([{"role":"user","content":"x"}])")).chat.sampling.temperature, 1.0f)
        << "Anthropic's default temperature";
}

TEST(AnthropicRequest, SystemBlocksDropTheBillingHeaderAndMarkBreakpoints) {
    const auto r = ok(with_messages(
        R"([{"role":"user","content":"Hi"}])",
        R"(,"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.1.abc; cc_entrypoint=cli;"},)"
        R"({"type":"text","text":"You are an agent.","cache_control":{"type":"ephemeral"}},)"
        R"({"type":"text","text":"Work carefully.","cache_control":{"type":"ephemeral","ttl":"1h"}}])"));
    ASSERT_EQ(r.chat.messages.size(), 2u);
    EXPECT_TRUE(r.chat.messages[0].content_is_parts);
    EXPECT_EQ(r.chat.messages[0].parts, (std::vector<std::string>{"You are an agent.", "Work carefully."}));
    ASSERT_EQ(r.breakpoints.size(), 2u);
    EXPECT_EQ(r.breakpoints[0].n_before, 0u);
    EXPECT_EQ(r.breakpoints[0].last.role, "system");
    EXPECT_EQ(r.breakpoints[0].last.content, "You are an agent.");
    EXPECT_EQ(r.breakpoints[1].last.parts, r.chat.messages[0].parts);
}

TEST(AnthropicRequest, SystemMessagesLeadingExtendTheSystemLaterBecomeMarkedUserMessages) {
    const auto r = ok(with_messages(R"([{"role":"system","content":"Lead."},{"role":"user","content":"Hi"},)"
                                    R"({"role":"system","content":[{"type":"text","text":"Env: linux"}]},)"
                                    R"({"role":"assistant","content":"Hello"}])",
                                    R"(,"system":"Top.")"));
    ASSERT_EQ(r.chat.messages.size(), 4u);
    EXPECT_EQ(r.chat.messages[0].role, "system");
    EXPECT_EQ(r.chat.messages[0].parts, (std::vector<std::string>{"Top.", "Lead."}));
    EXPECT_EQ(r.chat.messages[1].content, "Hi");
    EXPECT_EQ(r.chat.messages[2].role, "user");
    EXPECT_EQ(r.chat.messages[2].content, "<system>\nEnv: linux\n</system>");
    EXPECT_EQ(r.chat.messages[3].role, "assistant");
    EXPECT_EQ(r.chat.messages[3].content, "Hello");
    ASSERT_EQ(r.breakpoints.size(), 1u) << "an implicit restore point before the late system message";
    EXPECT_TRUE(r.breakpoints[0].implicit);
    EXPECT_EQ(r.breakpoints[0].n_before, 1u);
    EXPECT_EQ(r.breakpoints[0].last.content, "Hi");
}

TEST(AnthropicRequest, ToolUseAndToolResults) {
    const auto r = ok(with_messages(
        R"([{"role":"user","content":"Read it"},)"
        R"({"role":"assistant","content":[{"type":"text","text":"Reading."},)"
        R"({"type":"tool_use","id":"toolu_1","name":"read_file","input":{"path":"a.txt","n":2}},)"
        R"({"type":"tool_use","id":"toolu_2","name":"run","input":{}}]},)"
        R"({"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"line 1"},)"
        R"({"type":"tool_result","tool_use_id":"toolu_2","is_error":true,)"
        R"("content":[{"type":"text","text":"exit 1"},{"type":"text","text":"no such file"}]},)"
        R"({"type":"text","text":"Now fix it.","cache_control":{"type":"ephemeral"}}]}])",
        R"(,"tools":[{"name":"read_file","description":"Read.","input_schema":{"type":"object","properties":{"path":{"type":"string"}}}},)"
        R"({"name":"run","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}},)"
        R"({"type":"web_search_20250305","name":"web_search","max_uses":2}])"));
    ASSERT_EQ(r.chat.messages.size(), 5u);
    const auto & a = r.chat.messages[1];
    EXPECT_EQ(a.role, "assistant");
    EXPECT_EQ(a.content, "Reading.");
    ASSERT_EQ(a.tool_calls.size(), 2u);
    EXPECT_EQ(a.tool_calls[0], (lineage::engine::chat_tool_call{"toolu_1", "read_file", R"({"path":"a.txt","n":2})"}));
    EXPECT_EQ(a.tool_calls[1], (lineage::engine::chat_tool_call{"toolu_2", "run", "{}"}));
    EXPECT_EQ(r.chat.messages[2].role, "tool");
    EXPECT_EQ(r.chat.messages[2].tool_call_id, "toolu_1");
    EXPECT_EQ(r.chat.messages[2].content, "line 1");
    EXPECT_EQ(r.chat.messages[3].tool_call_id, "toolu_2");
    EXPECT_EQ(r.chat.messages[3].parts, (std::vector<std::string>{"Error: exit 1", "no such file"}));
    EXPECT_EQ(r.chat.messages[4].role, "user");
    EXPECT_EQ(r.chat.messages[4].content, "Now fix it.");
    ASSERT_EQ(r.chat.tools.size(), 2u);
    EXPECT_EQ(r.chat.tools[0].name, "read_file");
    EXPECT_EQ(r.chat.tools[0].parameters, R"({"type":"object","properties":{"path":{"type":"string"}}})");
    EXPECT_EQ(r.ignored_tools, (std::vector<std::string>{"web_search (web_search_20250305)"}));
    ASSERT_EQ(r.breakpoints.size(), 1u);
    EXPECT_EQ(r.breakpoints[0].n_before, 4u);
    EXPECT_EQ(r.breakpoints[0].last.content, "Now fix it.");
}

TEST(AnthropicRequest, BreakpointConversationEndsWithTheMarkedTextAndASentinel) {
    const auto r = ok(with_messages(
        R"([{"role":"user","content":[{"type":"text","text":"A","cache_control":{"type":"ephemeral"}},{"type":"text","text":"B"}]},)"
        R"({"role":"assistant","content":"ok"},{"role":"user","content":"C"}])",
        R"(,"system":[{"type":"text","text":"S1"},{"type":"text","text":"S2","cache_control":{"type":"ephemeral"}}],)"
        R"("tools":[{"name":"t","input_schema":{"type":"object"}}])"));
    ASSERT_EQ(r.breakpoints.size(), 2u);
    const chat_request sys = breakpoint_conversation(r, r.breakpoints[0]);
    ASSERT_EQ(sys.messages.size(), 1u);
    EXPECT_EQ(sys.messages[0].parts, (std::vector<std::string>{"S1", "S2\x01"}));
    EXPECT_EQ(sys.tools.size(), 1u) << "the same tools: they render with the system prompt";
    const chat_request user = breakpoint_conversation(r, r.breakpoints[1]);
    ASSERT_EQ(user.messages.size(), 2u);
    EXPECT_EQ(user.messages[1].role, "user");
    EXPECT_EQ(user.messages[1].content, "A\x01") << "cut after the marked block";
    EXPECT_EQ(r.chat.messages[1].parts, (std::vector<std::string>{"A", "B"})) << "the request itself is unchanged";
}

TEST(AnthropicRequest, ThinkingEchoRendersTheSignedText) {
    const std::string sig = signer().sign("Let me think.");
    const auto r = ok(with_messages(R"([{"role":"user","content":"Q"},{"role":"assistant","content":[)"
                                    R"({"type":"thinking","thinking":"Let me think.","signature":")" + sig + R"("},)"
                                    R"({"type":"text","text":"A"}]},{"role":"user","content":"Q2"}])"));
    EXPECT_EQ(r.chat.messages[1].reasoning_content, "Let me think.");
    EXPECT_EQ(r.chat.messages[1].content, "A");
    // display "omitted": the block comes back without its text; the signature carries it.
    const auto o = ok(with_messages(R"([{"role":"user","content":"Q"},{"role":"assistant","content":[)"
                                    R"({"type":"thinking","thinking":"","signature":")" + sig + R"("}]},)"
                                    R"({"role":"user","content":"Q2"}])"));
    EXPECT_EQ(o.chat.messages[1].reasoning_content, "Let me think.");
    const auto rd = ok(with_messages(R"([{"role":"user","content":"Q"},{"role":"assistant","content":[)"
                                     R"({"type":"redacted_thinking","data":")" + sig + R"("}]},{"role":"user","content":"Q2"}])"));
    EXPECT_EQ(rd.chat.messages[1].reasoning_content, "Let me think.");
}

TEST(AnthropicRequest, BadThinkingBlocksAre400sNamingTheField) {
    const std::string sig = signer().sign("Let me think.");
    auto e = bad(with_messages(R"([{"role":"user","content":"Q"},{"role":"assistant","content":[)"
                               R"({"type":"thinking","thinking":"Let me think.","signature":"c2lnbmF0dXJlIGZyb20gZWxzZXdoZXJl"}]}])"));
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "messages[1].content[0].signature");
    EXPECT_NE(e.message.find("not a signature this server issued"), std::string::npos) << e.message;
    e = bad(with_messages(R"([{"role":"user","content":"Q"},{"role":"assistant","content":[)"
                          R"({"type":"thinking","thinking":"Something else.","signature":")" + sig + R"("}]}])"));
    EXPECT_EQ(e.param, "messages[1].content[0].thinking");
    e = bad(with_messages(R"([{"role":"user","content":"Q"},{"role":"assistant","content":[{"type":"thinking","thinking":"x"}]}])"));
    EXPECT_EQ(e.param, "messages[1].content[0].signature");
}

TEST(AnthropicRequest, ToolChoiceThinkingAndCountTokens) {
    const std::string tools = R"(,"tools":[{"name":"a","input_schema":{"type":"object"}},{"name":"b","input_schema":{"type":"object"}}])";
    const std::string msgs = R"([{"role":"user","content":"x"}])";
    auto r = ok(with_messages(msgs, tools + R"(,"tool_choice":{"type":"any","disable_parallel_tool_use":true})"));
    EXPECT_EQ(r.chat.tool_choice, "required");
    EXPECT_EQ(r.chat.tool_choice_key, "required");
    EXPECT_EQ(r.chat.parallel_tool_calls, std::optional<bool>(false));
    r = ok(with_messages(msgs, tools + R"(,"tool_choice":{"type":"tool","name":"b"})"));
    EXPECT_EQ(r.chat.tool_choice, "required");
    EXPECT_EQ(r.chat.tool_choice_key, "function:b");
    ASSERT_EQ(r.chat.tools.size(), 1u);
    EXPECT_EQ(r.chat.tools[0].name, "b");
    r = ok(with_messages(msgs, tools + R"(,"tool_choice":{"type":"none"})"));
    EXPECT_EQ(r.chat.tool_choice, "none");
    EXPECT_EQ(bad(with_messages(msgs, tools + R"(,"tool_choice":{"type":"tool","name":"c"})")).param, "tool_choice.name");
    EXPECT_EQ(bad(with_messages(msgs, R"(,"tool_choice":{"type":"any"})")).param, "tool_choice");

    r = ok(with_messages(msgs, R"(,"thinking":{"type":"disabled"})"));
    EXPECT_EQ(r.chat.chat_template_kwargs.at("enable_thinking"), "false");
    r = ok(with_messages(msgs, R"(,"thinking":{"type":"adaptive","display":"omitted"})"));
    EXPECT_TRUE(r.chat.chat_template_kwargs.empty()) << "enabled/adaptive: the template's default (on)";
    EXPECT_TRUE(r.thinking_omitted);
    r = ok(with_messages(msgs, R"(,"thinking":{"type":"enabled","budget_tokens":1024})"));
    EXPECT_FALSE(r.thinking_omitted);
    EXPECT_EQ(bad(with_messages(msgs, R"(,"thinking":{"type":"on"})")).param, "thinking.type");

    r = ok(R"({"model":"m","messages":[{"role":"user","content":"x"}]})", /*count_tokens=*/true);
    EXPECT_EQ(r.chat.sampling.max_tokens, -1);
}

TEST(AnthropicRequest, InvalidBodiesAre400sNamingTheField) {
    EXPECT_EQ(bad("{").code, "invalid_json");
    EXPECT_EQ(bad(R"({"model":"m","messages":[{"role":"user","content":"x"}]})").param, "max_tokens");
    EXPECT_EQ(bad(with_messages("[]")).param, "messages");
    EXPECT_EQ(bad(R"({"max_tokens":0,"messages":[{"role":"user","content":"x"}]})").param, "max_tokens");
    EXPECT_EQ(bad(with_messages(R"([{"role":"tool","content":"x"}])")).param, "messages[0].role");
    EXPECT_EQ(bad(with_messages(R"([{"role":"user"}])")).param, "messages[0].content");
    const api_error img = bad(with_messages(
        R"([{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://x/cat.png"}}]}])"));
    EXPECT_EQ(img.param, "messages[0].content[0].source.type");
    EXPECT_NE(img.message.find("fetches nothing"), std::string::npos) << img.message;
    EXPECT_EQ(bad(with_messages(
                  R"([{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"A"}}]}])"))
                  .param,
              "messages[0].content[0].source.data");
    EXPECT_EQ(bad(with_messages(R"([{"role":"assistant","content":[{"type":"image"}]}])")).param, "messages[0].content[0].type");
    EXPECT_EQ(bad(with_messages(R"([{"role":"user","content":[{"type":"text"}]}])")).param, "messages[0].content[0].text");
    EXPECT_EQ(bad(with_messages(R"([{"role":"user","content":[{"type":"tool_result"}]}])")).param,
              "messages[0].content[0].tool_use_id");
    EXPECT_EQ(bad(with_messages(R"([{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"n","input":[]}]}])")).param,
              "messages[0].content[0].input");
    EXPECT_EQ(bad(with_messages(R"([{"role":"user","content":"x"}])", R"(,"temperature":1.5)")).param, "temperature");
    EXPECT_EQ(bad(with_messages(R"([{"role":"user","content":"x"}])", R"(,"top_k":-1)")).param, "top_k");
    EXPECT_EQ(bad(with_messages(R"([{"role":"user","content":"x"}])", R"(,"stop_sequences":[""])")).param, "stop_sequences[0]");
    EXPECT_EQ(bad(with_messages(R"([{"role":"user","content":"x"}])", R"(,"tools":[{"name":"a"}])")).param,
              "tools[0].input_schema");
    EXPECT_EQ(bad(with_messages(R"([{"role":"user","content":"x"}])", R"(,"system":[{"type":"image"}])")).param,
              "system[0].type");
    EXPECT_EQ(bad(with_messages(R"([{"role":"user","content":"x"}])", R"(,"metadata":"u")")).param, "metadata");
}
