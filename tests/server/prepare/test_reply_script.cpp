// Tests of server::reply_script (--test-reply-script, a test instrument): the script's parsing
// and its errors, the choice of a reply (first unused whose conditions hold; repeatable ones stay),
// what a chat request offers to match on, and, with the tiny qwen3 model's template (Qwen3.5's),
// that a structured reply is rendered as the template's own assistant turn after the generation
// prompt and parses back through the server's output parser into the same content, reasoning and
// tool calls; and the file read again when it changes.
#include "engine/chat_template.h"
#include "engine/model.h"
#include "server/request/chat_request.h"
#include "server/prepare/chat_prepare.h"
#include "server/prepare/reply_script.h"

#include "qwen3_template_fixture.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

using namespace lineage;
using server::scripted_reply;

namespace {

std::vector<scripted_reply> parse_ok(const std::string & text) {
    std::vector<scripted_reply> r;
    const auto err = server::parse_reply_script(text, r);
    EXPECT_FALSE(err.has_value()) << *err;
    return r;
}

std::string parse_error(const std::string & text) {
    std::vector<scripted_reply> r;
    const auto err = server::parse_reply_script(text, r);
    EXPECT_TRUE(err.has_value());
    EXPECT_TRUE(r.empty());
    return err.value_or("");
}

engine::chat_message msg(std::string role, std::string content) {
    engine::chat_message m;
    m.role = std::move(role);
    m.content = std::move(content);
    return m;
}

}  // namespace

TEST(ReplyScript, ParsesEveryFieldOfAReply) {
    const auto r = parse_ok(R"({"replies": [
        {"label": "read", "when": {"input": "TASK-1", "system": "sys", "tools": true, "tool": "read"},
         "reasoning": "think", "content": "Reading.", "tool_calls": [
            {"name": "read", "arguments": {"path": "a.txt"}}, {"name": "ls", "arguments": "{\"d\":1}"}, {"name": "x"}]},
        {"text": "<tool_call>raw", "repeat": true}]})");
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[0].label, "read");
    EXPECT_EQ(r[0].input, "TASK-1");
    EXPECT_EQ(r[0].system, "sys");
    EXPECT_EQ(r[0].tools, std::optional<bool>(true));
    EXPECT_EQ(r[0].tool, "read");
    EXPECT_FALSE(r[0].repeat);
    EXPECT_FALSE(r[0].text.has_value());
    EXPECT_EQ(r[0].reasoning, "think");
    EXPECT_EQ(r[0].content, "Reading.");
    ASSERT_EQ(r[0].tool_calls.size(), 3u);
    EXPECT_EQ(r[0].tool_calls[0].name, "read");
    EXPECT_EQ(r[0].tool_calls[0].arguments, R"({"path":"a.txt"})");
    EXPECT_EQ(r[0].tool_calls[1].arguments, R"({"d":1})");
    EXPECT_EQ(r[0].tool_calls[2].arguments, "{}");
    EXPECT_EQ(r[1].text, std::optional<std::string>("<tool_call>raw"));
    EXPECT_TRUE(r[1].repeat);
    // A bare array is a script too.
    EXPECT_EQ(parse_ok(R"([{"content": "hi"}])").size(), 1u);
}

TEST(ReplyScript, RefusesWhatItCannotUseNamingTheField) {
    EXPECT_NE(parse_error("{").find("not JSON"), std::string::npos);
    EXPECT_NE(parse_error(R"({"reply": []})").find("without \"replies\""), std::string::npos);
    EXPECT_NE(parse_error(R"([{"content": "a"}, {"contnet": "b"}])").find("replies[1].contnet"), std::string::npos);
    EXPECT_NE(parse_error(R"([{"when": {"last": "x"}}])").find("replies[0].when.last"), std::string::npos);
    EXPECT_NE(parse_error(R"([{"when": {"tools": "yes"}}])").find("replies[0].when.tools"), std::string::npos);
    EXPECT_NE(parse_error(R"([{"text": "a", "content": "b"}])").find("one or the other"), std::string::npos);
    EXPECT_NE(parse_error(R"([{"tool_calls": [{"arguments": {}}]}])").find("replies[0].tool_calls[0]"),
              std::string::npos);
    EXPECT_NE(parse_error(R"([{"tool_calls": [{"name": "a", "arguments": 3}]}])").find("arguments"), std::string::npos);
    EXPECT_NE(parse_error(R"([{"repeat": 1}])").find("replies[0].repeat"), std::string::npos);
}

TEST(ReplyScript, TakesTheFirstUnusedReplyWhoseConditionsAllHold) {
    const auto r = parse_ok(R"([
        {"label": "step1", "when": {"input": "TASK", "tools": true}},
        {"label": "title", "when": {"tools": false}, "repeat": true},
        {"label": "step2", "when": {"input": "RESULT-1", "tool": "read"}},
        {"label": "sub", "when": {"system": "helper"}}])");
    std::vector<bool> used(r.size(), false);
    const server::script_view task{"do TASK now", "main system", {"read", "bash"}};
    const server::script_view title{"do TASK now", "main system", {}};
    const server::script_view result{"RESULT-1 of read", "main system", {"read"}};
    const server::script_view sub{"RESULT-1", "a helper system", {"bash"}};
    EXPECT_EQ(server::match_reply(r, used, task), 0);
    used[0] = true;
    EXPECT_EQ(server::match_reply(r, used, task), -1);  // step1 used; the others' conditions fail
    EXPECT_EQ(server::match_reply(r, used, title), 1);
    used[1] = true;
    EXPECT_EQ(server::match_reply(r, used, title), 1);  // repeatable
    EXPECT_EQ(server::match_reply(r, used, result), 2);
    EXPECT_EQ(server::match_reply(r, used, sub), 3);  // step2 wants the tool "read"
}

TEST(ReplyScript, ARequestOffersItsInputAfterTheLastAssistantTurnItsSystemTextAndTools) {
    server::chat_request r;
    r.messages = {msg("system", "SYS-A"),         msg("developer", "DEV-B"), msg("user", "old question"),
                  msg("assistant", "old answer"), msg("tool", "RESULT-1"),   msg("user", "NEW-2")};
    r.tools.push_back({"read", "", "{}"});
    const server::script_view v = server::view_of(r);
    EXPECT_EQ(v.system, "SYS-A\nDEV-B\n");
    EXPECT_EQ(v.input, "RESULT-1\nNEW-2\n");
    EXPECT_EQ(v.tools, std::vector<std::string>{"read"});
    r.messages.resize(3);  // no assistant turn yet: every message is new input
    EXPECT_EQ(server::view_of(r).input, "SYS-A\nDEV-B\nold question\n");
}

class ReplyScriptTemplateTest : public Qwen3TemplateTest {
protected:
    static server::chat_preparer preparer() {
        return server::chat_preparer(
            *model_, *tmpl_,
            server::prepare_options{.model_id = "tiny-qwen3",
                                    .default_kwargs = server::default_template_kwargs(tmpl_->source(), true)});
    }
    static server::chat_request request(bool thinking) {
        server::chat_request r;
        r.messages = {msg("system", "You are a coding agent."), msg("user", "Read a.txt.")};
        r.tools.push_back({"read", "Reads a file", R"({"type":"object","properties":{"path":{"type":"string"}}})"});
        if (!thinking) {
            r.chat_template_kwargs["enable_thinking"] = "false";
        }
        return r;
    }
};

TEST_F(ReplyScriptTemplateTest, AToolCallIsTheTemplatesAssistantTurnAndParsesBackIntoTheSameCall) {
    const auto p = preparer();
    const auto r = request(true);
    const auto reply = parse_ok(R"([{"reasoning": "The file first.", "content": "",
        "tool_calls": [{"name": "read", "arguments": {"path": "a.txt"}}]}])")[0];
    std::string text;
    ASSERT_FALSE(server::reply_text(p, r, reply, text).has_value());
    // The generation prompt ends in "<think>\n": the model goes on with its reasoning.
    EXPECT_EQ(text,
              "The file first.\n</think>\n\n<tool_call>\n<function=read>\n<parameter=path>\na.txt\n"
              "</parameter>\n</function>\n</tool_call><|im_end|>\n");
    server::prepared_chat prep;
    ASSERT_FALSE(p.prepare(r, 1 << 20, prep).has_value());
    engine::chat_output_parser parser(prep.parser);
    parser.update(text.substr(0, text.find("<|im_end|>")), /*is_partial=*/false);
    // The library's parser keeps the newline before "</think>"; the template trims the reasoning
    // when the client echoes it, so the next turn renders the same text the model generated.
    EXPECT_EQ(parser.message().reasoning_content, "The file first.\n");
    EXPECT_EQ(parser.message().content, "");
    ASSERT_EQ(parser.message().tool_calls.size(), 1u);
    EXPECT_EQ(parser.message().tool_calls[0].name, "read");
    EXPECT_EQ(parser.message().tool_calls[0].arguments, R"({"path":"a.txt"})");
}

TEST_F(ReplyScriptTemplateTest, ReasoningAfterAGenerationPromptWithThinkingOffIsRefused) {
    const auto p = preparer();
    std::string text;
    const auto plain = parse_ok(R"([{"content": "Done."}])")[0];
    ASSERT_FALSE(server::reply_text(p, request(false), plain, text).has_value());
    EXPECT_EQ(text, "Done.<|im_end|>\n");
    const auto reasoned = parse_ok(R"([{"reasoning": "hm", "content": "Done."}])")[0];
    const auto err = server::reply_text(p, request(false), reasoned, text);
    ASSERT_TRUE(err.has_value());
    EXPECT_EQ(err->status, 400);
    EXPECT_EQ(err->code, "no_scripted_reply");
}

TEST_F(ReplyScriptTemplateTest, TheFileIsReadAgainWhenItChangesAndAnUnmatchedRequestIsRefused) {
    const auto p = preparer();
    const std::string path =
        (std::filesystem::temp_directory_path() / ("lineage-reply-script-" + std::to_string(::getpid()) + ".json"))
            .string();
    std::ofstream(path) << R"([{"label": "one", "content": "First."}])";
    server::reply_script script(path, *model_, p);
    server::script_pick pick;
    ASSERT_FALSE(script.pick(request(true), pick).has_value());
    EXPECT_EQ(pick.label, "one");
    // The reply's tokens end at the end of the turn: "<|im_end|>", an end-of-generation token.
    ASSERT_FALSE(pick.tokens.empty());
    EXPECT_TRUE(model_->is_eog(pick.tokens.back()));
    EXPECT_EQ(model_->detokenize(pick.tokens).value(), "\n</think>\n\nFirst.<|im_end|>");
    auto err = script.pick(request(true), pick);
    ASSERT_TRUE(err.has_value());
    EXPECT_EQ(err->code, "no_scripted_reply");
    EXPECT_NE(err->message.find("1 replies, 1 used"), std::string::npos) << err->message;
    // A raw text without an end of turn gets one.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::ofstream(path) << R"([{"label": "two", "text": "Second, as raw text."}])";
    ASSERT_FALSE(script.pick_raw(model_->tokenize("a raw prompt").value(), pick).has_value());
    EXPECT_EQ(pick.label, "two");
    EXPECT_EQ(pick.tokens.back(), model_->end_of_turn());
    EXPECT_EQ(model_->detokenize({pick.tokens.begin(), pick.tokens.end() - 1}).value(), "Second, as raw text.");
    // A file that no longer parses: a 500 naming it, until it is mended.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::ofstream(path) << "[{";
    err = script.pick(request(true), pick);
    ASSERT_TRUE(err.has_value());
    EXPECT_EQ(err->status, 500);
    EXPECT_NE(err->message.find("does not parse"), std::string::npos) << err->message;
    std::filesystem::remove(path);
}
