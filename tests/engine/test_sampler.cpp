// Engine tests of engine::sampler on the tiny generated qwen3 model: the log-probabilities it
// reports are the model's (log-softmax of the raw logits) and agree with what it samples, a
// logit bias and a grammar steer the draw, and a grammar or schema the engine cannot use is an
// std::invalid_argument / an error text, never an abort.
#include "engine/context.h"
#include "engine/model.h"
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace lineage::engine {
namespace {

class SamplerTest : public ::testing::Test {
protected:
    SamplerTest() : m_(model_params{std::string(LINEAGE_TEST_MODELS_DIR) + "/tiny-qwen3.gguf", 0}) {
        context_params cp;
        cp.n_ctx = 512;
        cp.n_seq = 1;
        cp.n_threads = 2;
        ctx_ = std::make_unique<context>(m_, cp);
        prompt_ = m_.tokenize("<|im_start|>user\nName three colours.<|im_end|>\n<|im_start|>assistant\n").value();
        std::vector<batch_token> b;
        for (size_t i = 0; i < prompt_.size(); ++i) {
            b.push_back({prompt_[i], static_cast<int32_t>(i), 0, i + 1 == prompt_.size()});
        }
        EXPECT_EQ(ctx_->decode(b), decode_result::ok);
        last_ = static_cast<int32_t>(b.size()) - 1;
    }

    model m_;
    std::unique_ptr<context> ctx_;
    std::vector<token> prompt_;
    int32_t last_ = 0;
};

TEST_F(SamplerTest, GreedyLogprobsAreTheModelsAndTopOneIsTheSampledToken) {
    sampler_params p;
    p.temperature = 0.0f;
    p.n_probs = 5;
    sampler s(m_, p);
    const sampled_token t = s.sample(*ctx_, last_, /*with_probs=*/true);
    const float * l = ctx_->logits(last_);
    const int32_t n = m_.n_vocab();
    const int32_t argmax = static_cast<int32_t>(std::max_element(l, l + n) - l);
    EXPECT_EQ(t.tok, argmax);
    double sum = 0;
    for (int32_t i = 0; i < n; ++i) {
        sum += std::exp(static_cast<double>(l[i] - l[argmax]));
    }
    EXPECT_NEAR(t.logprob, -std::log(sum), 1e-4);
    ASSERT_EQ(t.top.size(), 5u);
    EXPECT_EQ(t.top[0].tok, t.tok);
    EXPECT_EQ(t.top[0].logprob, t.logprob);
    for (size_t i = 1; i < t.top.size(); ++i) {
        EXPECT_GE(t.top[i - 1].logprob, t.top[i].logprob);
        EXPECT_NEAR(t.top[i].logprob - t.top[0].logprob, l[t.top[i].tok] - l[argmax], 1e-4);
    }
    sampler quiet(m_, p);
    const sampled_token q = quiet.sample(*ctx_, last_);  // without probabilities: none computed
    EXPECT_EQ(q.tok, t.tok);
    EXPECT_TRUE(q.top.empty());
}

TEST_F(SamplerTest, LogitBiasForcesAToken) {
    const token forced = m_.tokenize(" purple").value()[0];
    sampler_params p;
    p.temperature = 0.0f;
    p.logit_bias = {{forced, 100.0f}};
    sampler s(m_, p);
    EXPECT_EQ(s.sample(*ctx_, last_).tok, forced);
}

// Greedy keeps one candidate early (sampler.cpp to_common: top_k 1) but after the penalties:
// the second draw at the same logits is the argmax of the logits with the first token penalized
// (llama.cpp's repeat penalty: a positive logit divided by it, a negative one multiplied).
TEST_F(SamplerTest, GreedyIsTheArgmaxAfterThePenalties) {
    sampler_params p;
    p.temperature = 0.0f;
    p.repeat_penalty = 10.0f;
    sampler s(m_, p);
    const float * l = ctx_->logits(last_);
    const int32_t n = m_.n_vocab();
    std::vector<float> adj(l, l + n);
    const token first = s.sample(*ctx_, last_).tok;
    EXPECT_EQ(first, static_cast<int32_t>(std::max_element(adj.begin(), adj.end()) - adj.begin()));
    adj[static_cast<size_t>(first)] = adj[static_cast<size_t>(first)] > 0 ? adj[static_cast<size_t>(first)] / 10.0f
                                                                           : adj[static_cast<size_t>(first)] * 10.0f;
    const token second = s.sample(*ctx_, last_).tok;
    EXPECT_NE(second, first);
    EXPECT_EQ(second, static_cast<int32_t>(std::max_element(adj.begin(), adj.end()) - adj.begin()));
}

TEST_F(SamplerTest, UserGrammarConstrainsTheFirstToken) {
    sampler_params p;
    p.temperature = 0.0f;
    p.grammar.type = grammar_spec::kind::user;
    p.grammar.gbnf = "root ::= \"yes\" | \"no\"";
    sampler s(m_, p);
    const std::string piece = m_.token_to_piece(s.sample(*ctx_, last_).tok);
    EXPECT_TRUE(std::string("yes").rfind(piece, 0) == 0 || std::string("no").rfind(piece, 0) == 0) << piece;
}

TEST_F(SamplerTest, UnusableGrammarsAndSchemasAreErrorsNotAborts) {
    grammar_spec bad;
    bad.type = grammar_spec::kind::user;
    bad.gbnf = "root ::= (";
    EXPECT_FALSE(check_grammar(m_, bad).is_ok());
    sampler_params p;
    p.grammar = bad;
    EXPECT_THROW(sampler(m_, p), std::invalid_argument);
    grammar_spec llg = bad;
    llg.gbnf = "%llguidance {}\nstart: \"x\"";  // GGML_ABORT inside common_sampler_init
    EXPECT_FALSE(check_grammar(m_, llg).is_ok());
    grammar_spec ok = bad;
    ok.gbnf = "root ::= [a-z]+";
    EXPECT_TRUE(check_grammar(m_, ok).is_ok());
    EXPECT_TRUE(check_json_schema(R"({"type":"object","properties":{"a":{"type":"integer"}}})").is_ok());
    EXPECT_FALSE(check_json_schema(R"({"$ref":"#/definitions/missing"})").is_ok());
}

}  // namespace
}  // namespace lineage::engine
