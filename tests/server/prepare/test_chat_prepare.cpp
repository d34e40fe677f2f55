// Tests of server::chat_preparer's work per request (prepared_chat::work): the exact number of
// chat-template renders and tokenizer passes a first request on a new system prompt takes (the
// anchor memo misses), and that the next user turn of the same conversation takes one of each,
// on the tiny dense (qwen3) and hybrid (qwen35) models, which carry the Qwen3.5 template (it
// refuses a render without a user query, so an anchor render on a memo miss is two renders: the
// refused one and its retry with a placeholder user turn). Skipped when a model is absent.
#include "engine/chat_template.h"
#include "engine/model.h"
#include "server/dialects/chat/chat_request.h"
#include "server/prepare/chat_prepare.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

using namespace lineage;

namespace {

struct counts {
    int32_t renders;
    int32_t tokenizations;
    bool operator==(const counts &) const = default;
};

void PrintTo(const counts & c, std::ostream * os) {
    *os << "{renders " << c.renders << ", tokenizations " << c.tokenizations << "}";
}

counts of(const scheduler::prepare_work & w) {
    return {w.renders, w.tokenizations};
}

// One fixture per model file: the model and its template, loaded once per suite.
template <const char * File>
class PrepareWorkTest : public ::testing::Test {
protected:
    static std::string path() { return std::string(LINEAGE_TEST_MODELS_DIR) + "/" + File; }
    static void SetUpTestSuite() {
        if (std::filesystem::exists(path())) {
            model_ = std::make_unique<engine::model>(engine::model_params{path(), 0});
            tmpl_ = std::make_unique<engine::chat_template>(*model_, "");
        }
    }
    static void TearDownTestSuite() {
        tmpl_.reset();
        model_.reset();
    }
    void SetUp() override {
        if (!model_) {
            GTEST_SKIP() << path() << " missing (make it with lineage-mkmodel --preset tiny)";
        }
    }
    static server::chat_preparer preparer() {
        return server::chat_preparer(*model_, *tmpl_,
                                     server::prepare_options{
                                         .model_id = File,
                                         .default_kwargs = server::default_template_kwargs(tmpl_->source(), true)});
    }
    static server::chat_request request(const std::string & body) {
        server::chat_request r;
        if (auto err = server::parse_chat_request(body, r)) {
            ADD_FAILURE() << err->message;
        }
        return r;
    }
    static inline std::unique_ptr<engine::model> model_;
    static inline std::unique_ptr<engine::chat_template> tmpl_;
};

constexpr char dense_file[] = "tiny-qwen3.gguf";
constexpr char hybrid_file[] = "tiny-qwen35.gguf";
using DensePrepareWorkTest = PrepareWorkTest<dense_file>;
using HybridPrepareWorkTest = PrepareWorkTest<hybrid_file>;

const std::string tools_json =
    R"("tools":[{"type":"function","function":{"name":"read_file","description":"Read a file.",
                 "parameters":{"type":"object","properties":{"path":{"type":"string"}}}}}])";

// Turn 1: a system prompt and tools seen for the first time, one user message.
std::string turn1_body() {
    return R"({"messages":[{"role":"system","content":"You are a coding agent in /home/dev/alpha."},
                           {"role":"user","content":"Read the trie."}],)" +
           tools_json + "}";
}

// Turn 2 of the same conversation: the reply and a new user message.
std::string turn2_body() {
    return R"({"messages":[{"role":"system","content":"You are a coding agent in /home/dev/alpha."},
                           {"role":"user","content":"Read the trie."},
                           {"role":"assistant","content":"Done: it has 3 nodes."},
                           {"role":"user","content":"Now fix the failing test."}],)" +
           tools_json + "}";
}

}  // namespace

// Dense: the first request renders the prompt (1 + 1), the anchor (system + tools: refused, then
// with a placeholder user turn: 2 renders, 1 tokenization) and the tools anchor (tools alone:
// the same, 2 + 1): 5 renders, 3 tokenizations. The next user turn finds both anchors in the
// memo: 1 and 1.
TEST_F(DensePrepareWorkTest, AWarmUserTurnRendersAndTokenizesOnce) {
    const auto prep = preparer();
    server::prepared_chat first;
    ASSERT_FALSE(prep.prepare(request(turn1_body()), 4096, first));
    EXPECT_EQ(of(first.work), (counts{5, 3}));
    server::prepared_chat warm;
    ASSERT_FALSE(prep.prepare(request(turn2_body()), 4096, warm));
    EXPECT_EQ(of(warm.work), (counts{1, 1}));
    EXPECT_EQ(warm.cache.anchor_tokens, first.cache.anchor_tokens);
    EXPECT_EQ(warm.cache.tools_anchor_tokens, first.cache.tools_anchor_tokens);
    // The second turn sends the reply back: its conversation has come back (the reuse class).
    EXPECT_FALSE(first.cache.multi_turn);
    EXPECT_TRUE(warm.cache.multi_turn);
    // A new session on the same system prompt and tools: its first request is warm too.
    server::chat_request other = request(turn1_body());
    other.messages.back().content = "List the files.";
    server::prepared_chat session2;
    ASSERT_FALSE(prep.prepare(other, 4096, session2));
    EXPECT_EQ(of(session2.work), (counts{1, 1}));
    EXPECT_FALSE(session2.cache.multi_turn);
}

// Without a system prompt or tools there is no anchor to render: 1 and 1 from the first request.
TEST_F(DensePrepareWorkTest, NoSystemPromptNoAnchorRender) {
    const auto prep = preparer();
    server::prepared_chat out;
    ASSERT_FALSE(prep.prepare(request(R"({"messages":[{"role":"user","content":"hello"}]})"), 4096, out));
    EXPECT_EQ(of(out.work), (counts{1, 1}));
}

// Hybrid: the same first-request anchors (5 and 3); the last user message's start (a hint on
// hybrid families only) is found in the main render, so the next user turn is 1 and 1 as well.
TEST_F(HybridPrepareWorkTest, AWarmUserTurnRendersAndTokenizesOnce) {
    const auto prep = preparer();
    server::prepared_chat first;
    ASSERT_FALSE(prep.prepare(request(turn1_body()), 4096, first));
    EXPECT_EQ(of(first.work), (counts{5, 3}));
    EXPECT_GT(first.cache.last_user_tokens, 0);
    server::prepared_chat warm;
    ASSERT_FALSE(prep.prepare(request(turn2_body()), 4096, warm));
    EXPECT_EQ(of(warm.work), (counts{1, 1}));
    EXPECT_GT(warm.cache.last_user_tokens, first.cache.last_user_tokens);
    EXPECT_FALSE(warm.cache.volatile_starts.empty()) << "the system prompt's path, found in the one render";
}

// A last user message whose text is not found once at the end of the render ("\n" renders as
// the template's own line break) takes the placeholder render: one more render and tokenization.
TEST_F(HybridPrepareWorkTest, ALastUserMessageNotFoundInTheRenderCostsOneMoreRender) {
    const auto prep = preparer();
    server::prepared_chat first;
    ASSERT_FALSE(prep.prepare(request(turn1_body()), 4096, first));
    server::chat_request r = request(turn2_body());
    r.messages.back().content = "\n";
    server::prepared_chat out;
    ASSERT_FALSE(prep.prepare(r, 4096, out));
    EXPECT_EQ(of(out.work), (counts{2, 2}));
}

// A last user message sent as text parts (the Responses API's input_text, several Anthropic text
// blocks) is found in the render as well: 1 and 1.
TEST_F(HybridPrepareWorkTest, AWarmUserTurnInTextPartsRendersOnce) {
    const auto prep = preparer();
    server::prepared_chat first;
    ASSERT_FALSE(prep.prepare(request(turn1_body()), 4096, first));
    server::chat_request r = request(turn2_body());
    r.messages.back().content.clear();
    r.messages.back().content_is_parts = true;
    r.messages.back().parts = {"<system-reminder>\nThe date is 2026-12-01.\n</system-reminder>", "Now fix it."};
    server::prepared_chat out;
    ASSERT_FALSE(prep.prepare(r, 4096, out));
    EXPECT_EQ(of(out.work), (counts{1, 1}));
    EXPECT_GT(out.cache.last_user_tokens, 0);
}

// The warm-up's next-turn prefix: the conversation + reply rendered and tokenized with two
// placeholder texts.
TEST_F(HybridPrepareWorkTest, TheNextTurnPrefixRendersTwice) {
    const auto prep = preparer();
    engine::chat_parsed reply;
    reply.content = "Done.";
    std::vector<scheduler::media_span> media;
    scheduler::prepare_work work;
    const auto prefix = prep.next_turn_prefix(request(turn1_body()), reply, media, work);
    ASSERT_FALSE(prefix.empty());
    EXPECT_EQ(of(work), (counts{2, 2}));
}

// A cache breakpoint (Anthropic cache_control) renders and tokenizes its cut of the conversation
// once: the same cut marked again on a later turn (a system prompt, an earlier message) comes
// from the memo, with the same length.
TEST_F(HybridPrepareWorkTest, ACacheBreakpointRendersItsCutOnce) {
    const auto prep = preparer();
    server::prepared_chat out;
    ASSERT_FALSE(prep.prepare(request(turn2_body()), 4096, out));
    const scheduler::prepare_work before = out.work;
    const server::chat_request cut = request(turn1_body());
    const int32_t n = prep.prefix_tokens(cut, out.prompt, out.work);
    ASSERT_GT(n, 0);
    EXPECT_EQ(of(out.work), (counts{before.renders + 1, before.tokenizations + 1}));
    // The system prompt alone: the template refuses it, then renders it with a placeholder.
    server::chat_request system_only = cut;
    system_only.messages.resize(1);
    const int32_t n_system = prep.prefix_tokens(system_only, out.prompt, out.work);
    ASSERT_GT(n_system, 0);
    EXPECT_LT(n_system, n);
    EXPECT_EQ(of(out.work), (counts{before.renders + 3, before.tokenizations + 2}));
    // The next turn marks both again.
    server::prepared_chat next;
    ASSERT_FALSE(prep.prepare(request(turn2_body()), 4096, next));
    EXPECT_EQ(prep.prefix_tokens(cut, next.prompt, next.work), n);
    EXPECT_EQ(prep.prefix_tokens(system_only, next.prompt, next.work), n_system);
    EXPECT_EQ(of(next.work), (counts{1, 1}));
    // Another cut (other tools: other template inputs) is rendered.
    server::chat_request other = cut;
    other.tools.clear();
    (void) prep.prefix_tokens(other, next.prompt, next.work);
    EXPECT_EQ(of(next.work), (counts{2, 2}));
}
