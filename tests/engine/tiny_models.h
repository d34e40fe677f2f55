// Helpers of the engine tests on the tiny generated models (scripts/test makes them with
// lineage-mkmodel): where a model lies, a prompt of n tokens, a prefill, and the test name of an
// architecture. Header-only.
#pragma once

#include "engine/context.h"
#include "engine/model.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace lineage::engine::tiny {

/** The tiny model of `arch` (qwen35, qwen3, kimi-linear, granite-hybrid). */
inline std::string model_path(const std::string & arch) {
    return std::string(LINEAGE_TEST_MODELS_DIR) + "/tiny-" + arch + ".gguf";
}

/** `n` tokens of a system prompt followed by `line` repeated. */
inline std::vector<token> prompt_tokens(
    const model & m, int32_t n,
    const std::string & line = "Refactor the parser so that every error names the file, line and column. ") {
    std::string text = "<|im_start|>system\nYou are a careful coding assistant.<|im_end|>\n";
    while (static_cast<int32_t>(m.tokenize(text).value().size()) < n) {
        text += line;
    }
    auto t = m.tokenize(text).value();
    t.resize(static_cast<size_t>(n));
    return t;
}

/** Decodes tokens [p0, p1) of `t` on `s` in one batch; returns the last logits. */
inline std::vector<float> prefill(context & ctx, const std::vector<token> & t, seq_id s, int32_t p0, int32_t p1) {
    std::vector<batch_token> b;
    for (int32_t p = p0; p < p1; ++p) {
        b.push_back({t[static_cast<size_t>(p)], p, s, p + 1 == p1});
    }
    EXPECT_EQ(ctx.decode(b), decode_result::ok);
    const float * l = ctx.logits(static_cast<int32_t>(b.size()) - 1);
    return std::vector<float>(l, l + ctx.get_model().n_vocab());
}

/** The four tiny architectures, as test parameters. */
inline auto archs() {
    return ::testing::Values("qwen35", "qwen3", "kimi-linear", "granite-hybrid");
}

/** A test name for an architecture parameter ('-' is not allowed in one). */
struct arch_name {
    template <typename Info> std::string operator()(const Info & info) const {
        std::string n = info.param;
        for (auto & c : n) {
            c = c == '-' ? '_' : c;
        }
        return n;
    }
};

}  // namespace lineage::engine::tiny
