// engine::shared_state_ranges on the tiny generated models: a conversation's whole state,
// restored from its anchor's and prefilled on, repeats exactly the anchor's KV rows; a state of
// other tokens repeats nothing (docs/prompt-cache.md "Prefix sharing in RAM").
#include "engine/context.h"
#include "engine/model.h"
#include "engine/state_blob.h"
#include "tiny_models.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace lineage::engine {
namespace {

using tiny::model_path;
using tiny::prefill;
using tiny::prompt_tokens;

class StateBlobTest : public ::testing::TestWithParam<std::string> {
protected:
    StateBlobTest() : m_(model_params{model_path(GetParam()), 0}) {
        context_params cp;
        cp.n_ctx = 1024;
        cp.n_seq = 3;
        cp.n_batch = 512;
        cp.n_threads = 2;
        ctx_ = std::make_unique<context>(m_, cp);
    }
    model m_;
    std::unique_ptr<context> ctx_;
};

TEST_P(StateBlobTest, AConversationRepeatsExactlyItsAnchorsKvRows) {
    context & ctx = *ctx_;
    const auto t = prompt_tokens(m_, 300, "Refactor the parser so that every error names the file and line. ");
    const int32_t a = 200;
    prefill(ctx, t, 0, 0, a);
    const bytes anchor = ctx.get_state(0, false);
    ASSERT_TRUE(ctx.set_state(1, anchor, false));
    prefill(ctx, t, 1, a, 300);
    const bytes whole = ctx.get_state(1, false);

    const auto ranges = shared_state_ranges(anchor, whole);
    ASSERT_FALSE(ranges.empty());
    uint64_t shared = 0;
    uint64_t end = 0;
    for (const auto & r : ranges) {
        ASSERT_GE(r.at, end) << "ascending, not overlapping";
        ASSERT_LE(r.at + r.len, whole.size());
        ASSERT_LE(r.base_off + r.len, anchor.size());
        EXPECT_EQ(0, std::memcmp(whole.data() + r.at, anchor.data() + r.base_off, r.len));
        shared += r.len;
        end = r.at + r.len;
    }
    // Exactly the anchor's cells' K and V rows: a cell adds its rows and 12 bytes of metadata
    // (24 with the M-RoPE cell ext) to a state.
    ctx.seq_rm(2, -1, -1);
    prefill(ctx, t, 2, 0, 1);
    const uint64_t one = ctx.state_size(2, false);
    prefill(ctx, t, 2, 1, 2);
    const uint64_t per_cell = ctx.state_size(2, false) - one;
    EXPECT_TRUE(shared == uint64_t{a} * (per_cell - 12) || shared == uint64_t{a} * (per_cell - 24))
        << shared << " bytes shared; a cell is " << per_cell << " bytes";
}

TEST_P(StateBlobTest, AStateOfOtherTokensOrAShorterOneRepeatsNothing) {
    context & ctx = *ctx_;
    const auto t = prompt_tokens(m_, 300, "Refactor the parser so that every error names the file and line. ");
    const auto u = prompt_tokens(m_, 300, "Write the tests first, then the code that makes them pass. ");
    prefill(ctx, t, 0, 0, 200);
    const bytes anchor = ctx.get_state(0, false);
    prefill(ctx, u, 1, 0, 100);
    prefill(ctx, u, 1, 100, 300);
    const bytes other = ctx.get_state(1, false);
    EXPECT_TRUE(shared_state_ranges(anchor, other).empty()) << "another system text";
    prefill(ctx, t, 2, 0, 150);
    const bytes shorter = ctx.get_state(2, false);
    EXPECT_TRUE(shared_state_ranges(anchor, shorter).empty()) << "the base is longer than the state";
    EXPECT_TRUE(shared_state_ranges(bytes(64, 0), anchor).empty()) << "no state";
}

INSTANTIATE_TEST_SUITE_P(Archs, StateBlobTest, tiny::archs(), tiny::arch_name());

}  // namespace
}  // namespace lineage::engine
