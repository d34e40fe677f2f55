// engine::model::tokenize_reusing on the tiny generated models (the Qwen3.5 vocabulary and the
// others lineage-mkmodel writes): the tokens of a text that extends or edits an earlier one,
// reusing the earlier tokens up to a shared special token, equal a whole tokenization exactly.
#include "engine/model.h"
#include "tiny_models.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace lineage::engine {
namespace {

using tiny::model_path;

std::string turn(const std::string & role, const std::string & text) {
    return "<|im_start|>" + role + "\n" + text + "<|im_end|>\n";
}

class TokenizeReusing : public ::testing::TestWithParam<std::string> {
protected:
    TokenizeReusing() : m_(model_params{model_path(GetParam()), 0}) {}
    model m_;
};

TEST_P(TokenizeReusing, EqualsAWholeTokenizationAndReusesUpToASharedSpecialToken) {
    const std::string sys = turn("system", "You are a coding agent. Work in /src/lineage; run the tests.");
    const std::string u1 = turn("user", "Read src/cache/store.cpp and explain add_captures.");
    const std::string a1 = turn("assistant", "It plans the checkpoints:  turn, guard,\n\tdivergence.");
    const std::string gen = "<|im_start|>assistant\n<think>\n";
    const std::string prev = sys + u1 + gen;
    const std::vector<token> prev_tokens = m_.tokenize(prev).value();
    struct variant {
        std::string what;
        std::string text;
        bool reuses;  // a special token both share, with the texts agreeing well past it
    };
    const std::vector<variant> variants{
        {"the next turn", sys + u1 + a1 + turn("user", "Now the guard merge.") + gen, true},
        {"a tool result", sys + u1 + a1 + turn("tool", "{\"ok\": true}") + gen, true},
        {"an edit of the last user message", sys + turn("user", "Read src/cache/store.h instead.") + gen, true},
        // Parts inside the first turn: before it only the first token, which is kept whole.
        {"an edit inside the system text", turn("system", "You are a coding agent. Work in /tmp.") + u1 + gen, false},
        {"a whitespace change right after a special token", sys + "<|im_start|>user\n Read it." + gen, true},
        {"the same text", prev, true},
        {"a text that parts in its first bytes", "<|im_start|>sys" + prev.substr(14), false},
        {"no special token at all", "plain text, no markup at all", false},
        {"a special token spelled across the point where the texts part", sys + "<|im_start|>user\n<|im_e" + "nd|>",
         true},
    };
    for (const auto & v : variants) {
        size_t reused = 12345;
        const auto got = m_.tokenize_reusing(v.text, prev, prev_tokens, &reused).value();
        EXPECT_EQ(got, m_.tokenize(v.text).value()) << GetParam() << ": " << v.what;
        if (v.reuses) {
            EXPECT_GT(reused, 0u) << GetParam() << ": " << v.what;
        } else {
            EXPECT_EQ(reused, 0u) << GetParam() << ": " << v.what;
        }
    }
    // Nothing earlier: the whole text.
    size_t reused = 1;
    EXPECT_EQ(m_.tokenize_reusing(prev, "", {}, &reused).value(), prev_tokens);
    EXPECT_EQ(reused, 0u);
    // Earlier tokens that do not spell the earlier text: not reused.
    EXPECT_EQ(m_.tokenize_reusing(prev, prev + "x", prev_tokens, &reused).value(), prev_tokens);
    EXPECT_EQ(reused, 0u);
}

// tokenize() of a text over its window cuts it into windows at special tokens: the tokens equal
// one llama_tokenize call over the whole text (tokenize_whole), for a long chat (multi-byte
// UTF-8 where windows end), special tokens back to back, a special token spelled across a window's
// end, plain text with no special token (the window grows), and with parse_special off.
TEST_P(TokenizeReusing, AWindowedTokenizationEqualsAWholeOne) {
    std::string chat;
    for (int i = 0; chat.size() < 5 * model::tokenize_window_bytes; ++i) {
        chat += turn(i % 2 == 0 ? "user" : "assistant",
                     "Step " + std::to_string(i) + ": read src/cache/store.cpp — naïve café 中文 🙂, then run\n\t"
                     "ctest -R Store." + std::string(static_cast<size_t>(i % 7) * 37, i % 3 == 0 ? ' ' : 'x'));
    }
    std::string specials;
    for (int i = 0; i < 10000; ++i) {
        specials += "<|im_start|>";
    }
    // A special token that starts 5 bytes before the first window ends.
    std::string across(model::tokenize_window_bytes - 5, 'a');
    across += "<|im_end|>" + chat.substr(0, 3 * model::tokenize_window_bytes);
    std::string plain;
    while (plain.size() < 3 * model::tokenize_window_bytes) {
        plain += "plain words and more words, no markup at all; ";
    }
    const std::vector<std::pair<std::string, std::string>> texts{
        {"a long chat", chat}, {"10,000 special tokens back to back", specials},
        {"a special token across a window's end", across}, {"no special token", plain}};
    for (const auto & [what, text] : texts) {
        ASSERT_GT(text.size(), model::tokenize_window_bytes) << what;
        for (const bool parse_special : {true, false}) {
            EXPECT_EQ(m_.tokenize(text, parse_special, false).value(),
                      m_.tokenize_whole(text, parse_special, false).value())
                << GetParam() << ": " << what << (parse_special ? "" : ", parse_special off");
        }
    }
    EXPECT_EQ(m_.tokenize(specials).value().size(), 10000u);
}

// A tokenize_stop_scope whose probe says stop ends a long text's tokenization between windows
// (an error, not tokens); the probe is asked, a text of one window is not cut, and after the scope
// (or with a probe that says go on) the same text tokenizes whole.
TEST_P(TokenizeReusing, AStopScopeEndsALongTokenizationBetweenWindows) {
    std::string specials;
    while (specials.size() < 4 * model::tokenize_window_bytes) {
        specials += "<|im_start|>user\nhi<|im_end|>\n";
    }
    const std::vector<token> whole = m_.tokenize_whole(specials, true, false).value();
    int asked = 0;
    {
        const tokenize_stop_scope stop([&asked] { return ++asked >= 2; });  // stop at the second window
        const auto stopped = m_.tokenize(specials);
        ASSERT_FALSE(stopped.has_value());
        EXPECT_EQ(stopped.error().message(), "tokenization stopped: the client closed the connection");
        EXPECT_EQ(asked, 2);
        EXPECT_EQ(m_.tokenize("<|im_start|>user\nhi<|im_end|>").value(),
                  m_.tokenize_whole("<|im_start|>user\nhi<|im_end|>", true, false).value());
    }
    {
        const tokenize_stop_scope go_on([] { return false; });
        EXPECT_EQ(m_.tokenize(specials).value(), whole);
    }
    EXPECT_EQ(m_.tokenize(specials).value(), whole);  // no scope
}

INSTANTIATE_TEST_SUITE_P(Archs, TokenizeReusing, tiny::archs(), tiny::arch_name());

}  // namespace
}  // namespace lineage::engine
