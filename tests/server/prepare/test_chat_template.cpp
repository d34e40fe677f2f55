// Tests of engine::chat_template and server::chat_preparer with a real template: the tiny
// generated qwen3 model (build/models/tiny-qwen3.gguf, made by lineage-mkmodel; skipped when
// absent). Rendering with tools, tool-call parsing (final and streamed deltas), and the cache
// hints (anchor, history) of a prepared request.
#include "engine/chat_template.h"
#include "engine/model.h"
#include "server/prepare/cache_key.h"
#include "server/prepare/chat_prepare.h"
#include "server/dialects/chat/chat_request.h"

#include "qwen3_template_fixture.h"

#include <gtest/gtest.h>

using namespace lineage;

namespace {

engine::chat_message message(std::string role, std::string content) {
    engine::chat_message m;
    m.role = std::move(role);
    m.content = std::move(content);
    return m;
}

class ChatTemplateTest : public Qwen3TemplateTest {
protected:
    static engine::chat_render_inputs weather_inputs() {
        engine::chat_render_inputs in;
        in.messages.push_back(message("system", "You are a weather bot."));
        in.messages.push_back(message("user", "Weather in Paris?"));
        in.tools.push_back({"get_weather", "Get the weather",
                            R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})"});
        return in;
    }
};

// The tiny models carry the Qwen3.5 template: the generation prompt opens a <think> block, and
// tool calls are XML (<function=...><parameter=...>).
const std::string tool_call_text =
    "Need the weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "</function>\n</tool_call>";

}  // namespace

TEST_F(ChatTemplateTest, RendersToolsAndTheGenerationPrompt) {
    const auto r = tmpl_->render(weather_inputs()).value();
    EXPECT_NE(r.prompt.find("get_weather"), std::string::npos) << r.prompt;
    EXPECT_NE(r.prompt.find("You are a weather bot."), std::string::npos);
    EXPECT_FALSE(r.generation_prompt.empty());
    EXPECT_EQ(r.prompt.compare(r.prompt.size() - r.generation_prompt.size(), std::string::npos, r.generation_prompt), 0)
        << "the prompt ends with its generation prompt";
    EXPECT_FALSE(tmpl_->source().empty());
}

TEST_F(ChatTemplateTest, ParsesAFinalToolCall) {
    const auto r = tmpl_->render(weather_inputs()).value();
    engine::chat_output_parser p(r.parser);
    (void) p.update(tool_call_text, /*is_partial=*/false);
    const auto & m = p.message();
    ASSERT_EQ(m.tool_calls.size(), 1u) << "content: " << m.content;
    EXPECT_EQ(m.tool_calls[0].name, "get_weather");
    EXPECT_EQ(m.tool_calls[0].arguments, R"({"city":"Paris"})");
    EXPECT_EQ(m.tool_calls[0].id.rfind("call_", 0), 0u) << m.tool_calls[0].id;
    EXPECT_EQ(m.content, "");
    EXPECT_EQ(m.reasoning_content.rfind("Need the weather.", 0), 0u) << m.reasoning_content;
}

TEST_F(ChatTemplateTest, StreamedToolCallDeltasAddUpToTheFinalCall) {
    const auto r = tmpl_->render(weather_inputs()).value();
    engine::chat_output_parser p(r.parser);
    std::string id, name, args, content, reasoning;
    auto take = [&](const std::vector<engine::chat_delta> & ds) {
        for (const auto & d : ds) {
            content += d.content;
            reasoning += d.reasoning_content;
            if (d.tool_call_index != std::string::npos) {
                EXPECT_EQ(d.tool_call_index, 0u);
                if (!d.tool_call_id.empty()) {
                    EXPECT_TRUE(id.empty() || id == d.tool_call_id);
                    id = d.tool_call_id;
                }
                if (!d.tool_call_name.empty()) {
                    name = d.tool_call_name;  // the name may grow while it is parsed
                }
                args += d.tool_call_arguments;
            }
        }
    };
    for (size_t n = 1; n <= tool_call_text.size(); ++n) {
        take(p.update(tool_call_text.substr(0, n), /*is_partial=*/true));
    }
    take(p.update(tool_call_text, /*is_partial=*/false));
    ASSERT_EQ(p.message().tool_calls.size(), 1u);
    EXPECT_EQ(content, "") << "no piece of the tool-call markup leaks into content";
    EXPECT_EQ(name, "get_weather");
    EXPECT_EQ(args, p.message().tool_calls[0].arguments);
    EXPECT_EQ(id, p.message().tool_calls[0].id);
    EXPECT_EQ(reasoning, p.message().reasoning_content);
}

TEST_F(ChatTemplateTest, PlainTextIsContent) {
    const auto r = tmpl_->render(weather_inputs()).value();
    engine::chat_output_parser p(r.parser);
    (void) p.update("Easy.\n</think>\n\nIt is sunny.", false);
    EXPECT_EQ(p.message().content, "It is sunny.");
    EXPECT_TRUE(p.message().tool_calls.empty());
}

TEST_F(ChatTemplateTest, PreparedRequestCarriesAnchorAndHistory) {
    server::chat_request req;
    ASSERT_FALSE(server::parse_chat_request(
        R"({"messages":[{"role":"system","content":"You are a weather bot."},{"role":"user","content":"Weather in Paris?"}],
            "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}],
            "user":"alice"})",
        req));
    server::chat_preparer prep(*model_, *tmpl_, server::prepare_options{.model_id = "tiny-qwen3"});
    server::prepared_chat out;
    ASSERT_FALSE(prep.prepare(req, 4096, out));
    const auto n = static_cast<int32_t>(out.prompt.size());
    EXPECT_EQ(out.cache.session_key, "alice");
    EXPECT_TRUE(out.cache.cache_prompt);
    EXPECT_EQ(out.cache.bucket.size(), 64u);
    // The anchor ends inside the prompt, after the system block with the tools.
    EXPECT_GT(out.cache.anchor_tokens, 0);
    EXPECT_LT(out.cache.anchor_tokens, n);
    const std::string head =
        model_->detokenize(std::vector<int32_t>(out.prompt.begin(), out.prompt.begin() + out.cache.anchor_tokens))
            .value();
    EXPECT_NE(head.find("get_weather"), std::string::npos) << head;
    EXPECT_EQ(head.find("Weather in Paris?"), std::string::npos) << head;
    // History: the prompt without its generation prompt.
    ASSERT_GT(out.cache.history_tokens, 0);
    EXPECT_LT(out.cache.history_tokens, n);
    const std::string tail =
        model_->detokenize(std::vector<int32_t>(out.prompt.begin() + out.cache.history_tokens, out.prompt.end()))
            .value();
    EXPECT_NE(tail.find("assistant"), std::string::npos) << tail;

    // Same system prompt + tools, another user turn: same anchor and bucket.
    server::chat_request req2 = req;
    req2.messages[1].content = "And in Rome?";
    server::prepared_chat out2;
    ASSERT_FALSE(prep.prepare(req2, 4096, out2));
    EXPECT_EQ(out2.cache.anchor_tokens, out.cache.anchor_tokens);
    EXPECT_EQ(out2.cache.bucket, out.cache.bucket);

    // Context limit: the prompt must be shorter than max_sequence_tokens.
    server::prepared_chat out3;
    auto err = prep.prepare(req, n, out3);
    ASSERT_TRUE(err);
    EXPECT_EQ(err->code, "context_length_exceeded");
    EXPECT_EQ(err->message, "This model's maximum context length is " + std::to_string(n) +
                                " tokens. However, your messages resulted in " + std::to_string(n) +
                                " tokens. Please reduce the length of the messages (or start the server with a "
                                "larger --ctx-size).");
    // cache_prompt false: the same split hints (a hybrid prefill that bypasses the cache is
    // split where a cached one captures: docs/prompt-cache.md "What a hit guarantees"), nothing
    // read or written.
    req.cache_prompt = false;
    server::prepared_chat out4;
    ASSERT_FALSE(prep.prepare(req, 4096, out4));
    EXPECT_FALSE(out4.cache.cache_prompt);
    EXPECT_EQ(out4.cache.anchor_tokens, out.cache.anchor_tokens);
    EXPECT_EQ(out4.cache.history_tokens, out.cache.history_tokens);
}

TEST_F(ChatTemplateTest, AReasoningBlockCutShortStaysReasoning) {
    // max_tokens ended the reply inside <think>: final parse = what streaming showed.
    const auto r = tmpl_->render(weather_inputs()).value();
    engine::chat_output_parser streamed(r.parser);
    (void) streamed.update("Still thinking about", true);
    engine::chat_output_parser final_only(r.parser);
    (void) final_only.update("Still thinking about", false);
    EXPECT_EQ(final_only.message().reasoning_content, streamed.message().reasoning_content);
    EXPECT_EQ(final_only.message().content, streamed.message().content);
    EXPECT_EQ(final_only.message().reasoning_content, "Still thinking about");
}

TEST_F(ChatTemplateTest, DisablingThinkingMovesTheOutputToContent) {
    engine::chat_render_inputs in = weather_inputs();
    in.kwargs["enable_thinking"] = "false";
    const auto r = tmpl_->render(in).value();
    engine::chat_output_parser p(r.parser);
    (void) p.update("It is sunny.", false);
    EXPECT_EQ(p.message().content, "It is sunny.");
    EXPECT_EQ(p.message().reasoning_content, "");
}

TEST_F(ChatTemplateTest, ABadEnableThinkingKwargIsRejected) {
    engine::chat_render_inputs in = weather_inputs();
    in.kwargs["enable_thinking"] = "\"yes\"";
    const auto r = tmpl_->render(in);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().why, engine::render_error::kind::refused);
    EXPECT_EQ(r.error().message, "chat_template_kwargs.enable_thinking must be a boolean");
}

namespace {

// The tiny hybrid model (tiny-qwen35.gguf, the same template): the last user message's start is a
// restore-point hint on hybrid families only.
class HybridPrepareTest : public ::testing::Test {
protected:
    static inline const std::string model_file = std::string(LINEAGE_TEST_MODELS_DIR) + "/tiny-qwen35.gguf";
    static void SetUpTestSuite() {
        if (std::filesystem::exists(model_file)) {
            model_ = std::make_unique<engine::model>(engine::model_params{model_file, 0});
            tmpl_ = std::make_unique<engine::chat_template>(*model_, "");
        }
    }
    static void TearDownTestSuite() {
        tmpl_.reset();
        model_.reset();
    }
    void SetUp() override {
        if (!model_) {
            GTEST_SKIP() << model_file << " missing (make it with lineage-mkmodel --arch qwen35 --preset tiny)";
        }
    }
    /** The start of the last user message as the placeholder render finds it: the conversation
     *  rendered with "\x01" in its place, its common token prefix with the prompt. */
    static int32_t by_placeholder_render(const server::chat_request & r, const std::vector<int32_t> & prompt) {
        engine::chat_render_inputs in;
        in.messages = r.messages;
        in.tools = r.tools;
        in.kwargs = server::default_template_kwargs(tmpl_->source(), true);
        in.messages.back() = engine::chat_message{};
        in.messages.back().role = "user";
        in.messages.back().content = "\x01";
        in.add_generation_prompt = false;
        return server::anchor_tokens(prompt, model_->tokenize(tmpl_->render(in).value().prompt, true).value());
    }
    static inline std::unique_ptr<engine::model> model_;
    static inline std::unique_ptr<engine::chat_template> tmpl_;
};

TEST_F(HybridPrepareTest, TokensBeforeByteCountsWholeTokens) {
    const std::string text = "<|im_start|>user\nHello there<|im_end|>\n";
    const auto toks = model_->tokenize(text, true).value();
    const size_t at = text.find("Hello");
    const int32_t n = model_->tokens_before_byte(toks, at, text.size());
    ASSERT_GT(n, 0);
    EXPECT_EQ(model_->detokenize(std::vector<int32_t>(toks.begin(), toks.begin() + n)).value(), text.substr(0, at));
    EXPECT_EQ(model_->tokens_before_byte(toks, 0, text.size()), 0);
    EXPECT_EQ(model_->tokens_before_byte(toks, text.size(), text.size()), static_cast<int32_t>(toks.size()));
    EXPECT_EQ(model_->tokens_before_byte(toks, at, text.size() + 1), -1);  // not the text they spell
}

// A conversation's next turns tokenize from the last special token they share with the turn
// before (chat_preparer::tokenize_prompt): the prompt tokens equal a whole tokenization of the
// render, whether the next request extends, edits or starts over.
TEST_F(HybridPrepareTest, PromptTokensEqualAWholeTokenizationTurnAfterTurn) {
    server::chat_preparer prep(
        *model_, *tmpl_,
        server::prepare_options{.model_id = "tiny-qwen35",
                                .default_kwargs = server::default_template_kwargs(tmpl_->source(), true)});
    const std::vector<std::string> bodies{
        R"({"messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"Read the trie."}]})",
        R"({"messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"Read the trie."},
            {"role":"assistant","content":"Done: it has 3 nodes."},{"role":"user","content":"Now  the\tstore."}]})",
        R"({"messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"Read the trie."},
            {"role":"assistant","content":"Done: it has 3 nodes."},{"role":"user","content":"Now the index."}]})",
        R"({"messages":[{"role":"system","content":"You are a careful agent."},{"role":"user","content":"Hi"}]})",
    };
    for (const auto & body : bodies) {
        server::chat_request req;
        ASSERT_FALSE(server::parse_chat_request(body, req)) << body;
        server::prepared_chat out;
        ASSERT_FALSE(prep.prepare(req, 4096, out)) << body;
        std::string text;
        ASSERT_FALSE(prep.render_prompt(req, text)) << body;
        EXPECT_EQ(out.prompt, model_->tokenize(text, true).value()) << body;
    }
}

// tokenize_prompt's memo of recent prompts: a tenant reuses its own prompts' tokens only (a faster
// tokenization must not tell one tenant what another sent), a resend is kept once, and a prompt
// refused as too long is not kept.
TEST_F(HybridPrepareTest, RecentPromptsAreReusedWithinATenantOnly) {
    server::chat_preparer prep(*model_, *tmpl_, server::prepare_options{.model_id = "tiny-qwen35"});
    const std::string turn1 = "<|im_start|>system\nYou are a coding agent.<|im_end|>\n<|im_start|>user\nRead it.<|im_end|>\n";
    const std::string turn2 = turn1 + "<|im_start|>assistant\nDone.<|im_end|>\n<|im_start|>user\nNow fix it.<|im_end|>\n";
    size_t reused = 99;
    EXPECT_EQ(prep.tokenize_prompt(turn1, "alice", 4096, &reused).value(), model_->tokenize(turn1, true).value());
    EXPECT_EQ(reused, 0u) << "nothing remembered yet";
    EXPECT_EQ(prep.tokenize_prompt(turn2, "bob", 4096, &reused).value(), model_->tokenize(turn2, true).value());
    EXPECT_EQ(reused, 0u) << "another tenant's prompt is not reused";
    EXPECT_EQ(prep.tokenize_prompt(turn2, "alice", 4096, &reused).value(), model_->tokenize(turn2, true).value());
    EXPECT_GT(reused, 0u) << "the tenant's own earlier prompt is";
    EXPECT_EQ(prep.tokenize_prompt(turn2, "alice", 4096, &reused).value(), model_->tokenize(turn2, true).value());
    EXPECT_EQ(reused, model_->tokenize(turn2, true).value().size()) << "a resend: all of it";
    // Refused as too long (at least max_tokens): not remembered, so not reused.
    const std::string long_turn = turn1 + "<|im_start|>user\nA long one.<|im_end|>\n";
    EXPECT_EQ(prep.tokenize_prompt(long_turn, "carol", 4, &reused).value(), model_->tokenize(long_turn, true).value());
    EXPECT_EQ(prep.tokenize_prompt(long_turn + "x", "carol", 4096, &reused).value(),
              model_->tokenize(long_turn + "x", true).value());
    EXPECT_EQ(reused, 0u);
}

// The last user message's start, found in the render without a second render, equals what the
// placeholder render gives, for texts found once at the end and for those that fall back.
TEST_F(HybridPrepareTest, LastUserStartWithoutASecondRenderEqualsThePlaceholderRender) {
    server::chat_preparer prep(*model_, *tmpl_,
                               server::prepare_options{.model_id = "tiny-qwen35",
                                                       .default_kwargs = server::default_template_kwargs(tmpl_->source(), true)});
    for (const std::string last : {"Now fix the failing test in src/cache/trie.cpp, please.", "hi", "\n", "  padded  ",
                                   "im_end", "ok <|im_end|> ok"}) {
        server::chat_request req;
        ASSERT_FALSE(server::parse_chat_request(
            R"({"messages":[{"role":"system","content":"You are a coding agent."},
                            {"role":"user","content":"Read the trie."},
                            {"role":"assistant","content":"Done: it has 3 nodes."},
                            {"role":"user","content":"x"}]})",
            req));
        req.messages.back().content = last;
        server::prepared_chat out;
        ASSERT_FALSE(prep.prepare(req, 4096, out)) << last;
        const int32_t want = by_placeholder_render(req, out.prompt);
        ASSERT_GT(want, 0) << last;
        EXPECT_EQ(out.cache.last_user_tokens, want) << "last user message " << testing::PrintToString(last);
    }
    // Content as text parts (Responses input_text, several Anthropic text blocks): the same start,
    // found in the one render (the anchors are in the memo by now).
    for (const std::vector<std::string> & parts :
         {std::vector<std::string>{"Now fix the failing test."},
          std::vector<std::string>{"<system-reminder>\nThe date is 2026-12-01.\n</system-reminder>", "Now fix it."},
          std::vector<std::string>{"first line", "\n", "third"}, std::vector<std::string>{"hi", "hi"}}) {
        server::chat_request req;
        ASSERT_FALSE(server::parse_chat_request(
            R"({"messages":[{"role":"system","content":"You are a coding agent."},
                            {"role":"user","content":"Read the trie."},
                            {"role":"assistant","content":"Done: it has 3 nodes."},
                            {"role":"user","content":[{"type":"text","text":"x"}]}]})",
            req));
        req.messages.back().parts = parts;
        server::prepared_chat out;
        ASSERT_FALSE(prep.prepare(req, 4096, out)) << testing::PrintToString(parts);
        const int32_t want = by_placeholder_render(req, out.prompt);
        ASSERT_GT(want, 0) << testing::PrintToString(parts);
        EXPECT_EQ(out.cache.last_user_tokens, want) << "last user message parts " << testing::PrintToString(parts);
        EXPECT_EQ(out.work.renders, 1) << "found in the render: " << testing::PrintToString(parts);
    }
}

// Per-session content the cache puts ladder rungs before: absolute paths and ISO dates, not
// relative paths, URLs, a slash inside a word or a longer run of digits.
TEST(VolatileTextStarts, FindsAbsolutePathsAndDatesOnly) {
    const std::string text = "Working directory: /home/dev/src/alpha\n"      // 19: after ": "
                             "Memory: ~/.qwen/QWEN.md and \"/tmp/x/y\"\n"     // ~/ at 47, /tmp at 69
                             "Today's date: 2026-12-01.\n"                      // the date at 92
                             "Relative src/cache/trie.cpp, a URL https://example.com/a/b, and/or 1/2, "
                             "a root / alone, /single, 12026-12-01 and 2026-12-011.";
    const std::vector<size_t> got = server::volatile_text_starts(text, 16);
    EXPECT_EQ(got, (std::vector<size_t>{text.find("/home"), text.find("~/"), text.find("\"/tmp") + 1,
                                         text.find("2026-12-01.")}));
    EXPECT_EQ(server::volatile_text_starts(text, 2).size(), 2u);
    EXPECT_TRUE(server::volatile_text_starts("", 4).empty());
    EXPECT_EQ(server::volatile_text_starts("/a/b", 4), (std::vector<size_t>{0}));
    EXPECT_EQ(server::volatile_text_starts("2026-01-02", 4), (std::vector<size_t>{0}));
}

// On the hybrid model the prepared request carries the token position of each such start inside
// the system region (before the anchor), and none past it.
TEST_F(HybridPrepareTest, VolatileStartsAreThePathAndDateTokensInsideTheSystemRegion) {
    server::chat_preparer prep(*model_, *tmpl_,
                               server::prepare_options{.model_id = "tiny-qwen35",
                                                       .default_kwargs = server::default_template_kwargs(tmpl_->source(), true)});
    server::chat_request req;
    ASSERT_FALSE(server::parse_chat_request(
        R"({"messages":[{"role":"system","content":"You are a coding agent.\nWorking directory: /home/dev/src/alpha\nToday: 2026-12-01\nBe brief."},
                        {"role":"user","content":"Look at /etc/hosts/x please."}]})",
        req));
    server::prepared_chat out;
    ASSERT_FALSE(prep.prepare(req, 4096, out));
    ASSERT_GT(out.cache.anchor_tokens, 0);
    ASSERT_EQ(out.cache.volatile_starts.size(), 2u);  // the path and the date; not the user message's path
    const std::string text = model_->detokenize(out.prompt).value();
    for (const auto & [i, what] : std::vector<std::pair<size_t, std::string>>{{0, "/home/dev"}, {1, "2026-12-01"}}) {
        const int32_t n = out.cache.volatile_starts[i];
        ASSERT_LT(n, out.cache.anchor_tokens);
        const std::string before =
            model_->detokenize(std::vector<int32_t>(out.prompt.begin(), out.prompt.begin() + n)).value();
        const std::string after =
            model_->detokenize(std::vector<int32_t>(out.prompt.begin(), out.prompt.begin() + n + 1)).value();
        EXPECT_LE(before.size(), text.find(what)) << what;  // the token before starts at or before it
        EXPECT_GT(after.size(), text.find(what)) << what;   // the next token reaches into it
    }
}

}  // namespace
