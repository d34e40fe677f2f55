// Unit tests of images in the prompt cache (cache/rule/media.h): pseudo-tokens derived from the
// image digest; the store restores up to an image's start when the image differs and past it
// when it is the same; captures never fall inside an image; a miss there names mm_digest.
#include "cache/rule/media.h"
#include "cache/store/store.h"

#include "fake_states.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace lineage::cache {
namespace {

using fakes::cat;
using fakes::seq;

tokens image(std::string_view digest, int32_t n) {
    tokens t;
    for (int32_t i = 0; i < n; ++i) {
        t.push_back(media_token(digest, i));
    }
    return t;
}

TEST(Media, PseudoTokensAreNegativeStableAndDifferPerImageAndIndex) {
    const tokens a = image("digest-a", 16);
    EXPECT_EQ(a, image("digest-a", 16));
    const tokens b = image("digest-b", 16);
    EXPECT_NE(a[0], b[0]);  // another image parts at its first position
    std::set<token> distinct(a.begin(), a.end());
    EXPECT_EQ(distinct.size(), 16u);
    for (const token t : cat(a, b)) {
        EXPECT_TRUE(is_media_token(t));
        EXPECT_LE(t, -2);
        EXPECT_GE(t, -(int64_t{1} << 30) - 1);
    }
    EXPECT_FALSE(is_media_token(0));
}

TEST(Media, ClampMovesAPointInsideAnImageToItsStart) {
    const std::vector<token_span> spans{{10, 26}, {40, 56}};
    EXPECT_EQ(clamp_to_spans(spans, 5), 5);
    EXPECT_EQ(clamp_to_spans(spans, 10), 10);  // at the start: outside
    EXPECT_EQ(clamp_to_spans(spans, 11), 10);
    EXPECT_EQ(clamp_to_spans(spans, 25), 10);
    EXPECT_EQ(clamp_to_spans(spans, 26), 26);  // right after it: outside
    EXPECT_EQ(clamp_to_spans(spans, 47), 40);
    EXPECT_EQ(clamp_to_spans(spans, 60), 60);
    EXPECT_EQ(span_starting_at(spans, 40), 1);
    EXPECT_EQ(span_starting_at(spans, 41), -1);
}

config small_config() {
    config c;
    c.ram_bytes = 1 << 20;
    c.min_prefix = 4;
    return c;
}

void commit(store & st, const key & k, const tokens & t, int32_t seq_id) {
    commit_input in;
    in.k = k;
    in.toks = t;
    in.seq = seq_id;
    in.device_bytes = 1000;
    ASSERT_TRUE(st.commit(std::move(in), 1.0));
    st.check_invariants();
}

TEST(Media, DenseRestoresUpToTheImageWhenItDiffersAndPastItWhenItIsTheSame) {
    store st(small_config(), false);
    const key k{"b", "s"};
    const tokens text = seq(100, 40);
    const tokens tail = seq(500, 8);
    const std::vector<token_span> spans{{40, 56}};
    commit(st, k, cat(cat(text, image("x", 16)), tail), 0);

    plan_hints h;
    h.media = spans;
    const tokens other = cat(cat(text, image("y", 16)), tail);
    restore_plan p = st.plan(k, other, h, 2.0);
    EXPECT_EQ(p.n_restore, 40);  // the text before the image, not one token of it
    ASSERT_TRUE(p.cause.has_value());
    EXPECT_EQ(*p.cause, miss_cause::key_differs);
    EXPECT_EQ(st.get_stats().key_differs.at("mm_digest"), 1);
    EXPECT_NE(p.reason.find("mm_digest differs"), std::string::npos) << p.reason;
    st.abandon(p, 0);

    const tokens same = cat(cat(text, image("x", 16)), seq(500, 9));
    p = st.plan(k, same, h, 3.0);
    EXPECT_EQ(p.n_restore, 64);  // the image and the tail: the whole stored entry
    EXPECT_FALSE(p.cause.has_value());
    st.abandon(p, 0);
}

TEST(Media, CapturesInsideAnImageMoveToItsStart) {
    store st(small_config(), true);  // hybrid: turn checkpoints are planned
    const key k{"b", "s"};
    const tokens prompt = cat(cat(seq(100, 40), image("x", 16)), seq(500, 8));
    const std::vector<token_span> spans{{40, 56}};
    plan_hints h;
    h.media = spans;
    h.history_tokens = 50;  // inside the image
    h.anchor_tokens = 46;   // inside the image too (minus the anchor slack: 44)
    h.last_user_tokens = 20;
    const restore_plan p = st.plan(k, prompt, h, 1.0);
    std::vector<int32_t> at;
    for (const auto & c : p.captures) {
        EXPECT_FALSE(c.n_tokens > 40 && c.n_tokens < 56) << c.n_tokens;
        at.push_back(c.n_tokens);
    }
    EXPECT_NE(std::find(at.begin(), at.end(), 40), at.end());  // the image's start (and the moved points)
    EXPECT_NE(std::find(at.begin(), at.end(), 63), at.end());  // the resend guard: after the image
    // The turn checkpoint at the image's start, and the anchor moved there.
    EXPECT_EQ(std::count_if(p.captures.begin(), p.captures.end(),
                            [](const capture_point & c) { return c.n_tokens == 40 && c.kind == point_kind::anchor; }),
              1);
    EXPECT_EQ(std::count_if(p.captures.begin(), p.captures.end(),
                            [](const capture_point & c) { return c.n_tokens == 40 && c.kind == point_kind::turn; }),
              1);
    const std::vector<capture_point> cold = st.cold_split_points(prompt, h);
    for (const auto & c : cold) {
        EXPECT_FALSE(c.n_tokens > 40 && c.n_tokens < 56) << c.n_tokens;
    }
}

}  // namespace
}  // namespace lineage::cache
