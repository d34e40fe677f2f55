// Unit tests of the cache's decision trace (--cache-trace) with fake states (no model): the
// exact lines a miss / continuation / divergence / other-bucket / TTL / thinning sequence
// produces, and silence when the trace is off.
#include "cache/store/store.h"

#include "fake_states.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace lineage::cache {
namespace {

using fakes::seq;
using fakes::cat;
using fakes::fake;
using fakes::small_config;

key_dims dims(std::string tools) {
    key_dims d;
    d.model_id = "tiny";
    d.template_source = "src";
    d.kwargs = "kw";
    d.tool_choice = "auto";
    d.tools = tools;
    d.template_sig = "sig-" + tools;
    d.mm = "mm";
    return d;
}

class TraceTest : public ::testing::Test {
protected:
    void SetUp() override {}

    /** A store whose trace lines go to lines_. */
    store make(bool hybrid, config c = small_config()) {
        store st(c, hybrid);
        st.trace().set_sink([this](std::string_view l) { lines_.emplace_back(l); });
        return st;
    }

    // One request: plan, captures (fake blobs of 100 bytes), commit on a fresh sequence id.
    restore_plan run(store & st, const key & k, const tokens & prompt, plan_hints h = {}, double now = 1.0) {
        restore_plan p = st.plan(k, prompt, h, now);
        commit_input in;
        in.k = k;
        in.toks = prompt;
        in.seq = p.op == restore_op::take_device ? p.device_seq : next_seq_++;
        in.device_bytes = 1000;
        in.hints.history_tokens = h.history_tokens;
        for (const auto & c : p.captures) {
            EXPECT_TRUE(st.reserve(100));
            in.reserved_bytes += 100;
            in.captured.push_back({c.n_tokens, c.kind, fake(100)});
        }
        if (p.absorbs) {
            in.absorbed = p;
        }
        st.commit(std::move(in), now);
        st.check_invariants();
        st.take_released_seqs();
        return p;
    }

    /** The lines emitted since the last call. */
    std::vector<std::string> take() {
        std::vector<std::string> out;
        out.swap(lines_);
        return out;
    }

    int32_t next_seq_ = 0;
    std::vector<std::string> lines_;
};

TEST_F(TraceTest, MissThenContinuation) {
    store st = make(true);
    const key k{"bucket-a", "s", dims("t1")};
    run(st, k, seq(0, 200), {-1, 195});
    EXPECT_EQ(take(), (std::vector<std::string>{
                          "lookup of 200 tokens (session \"s\", bucket bucket-a): miss; miss cause: no_shared_prefix",
                          "captures planned: [guard@184 turn@195]; not planned: anchor: the request has no leading "
                          "system message or tools",
                          "stored entry 1: 200 tokens on device sequence 0 (1.2 KiB), checkpoints [guard@184 turn@195]",
                      }));
    // The next turn reaches the history boundary: it takes the entry and carries its points over.
    run(st, k, cat(seq(0, 197), seq(9000, 20)), {-1, 215}, 2.0);
    EXPECT_EQ(take(), (std::vector<std::string>{
                          "lookup of 217 tokens (session \"s\", bucket bucket-a): restore turn at 195/217 from entry 1 "
                          "(device, 200 tokens), absorbing it",
                          "captures planned: [turn@215]; not planned: anchor: the request has no leading system "
                          "message or tools; guard: uncached suffix 22 < 64 (--cache-guard-min-suffix)",
                          "stored entry 2: 217 tokens on device sequence 0 (1.3 KiB), checkpoints [guard@184 turn@195 "
                          "turn@215]; absorbed entry 1 and carried over 2 of its restore points",
                      }));
}

TEST_F(TraceTest, ALastUserPointSkippedForItsGainSaysSo) {
    // A warm user turn whose new message starts 5 tokens after the restored boundary (195): no
    // checkpoint at 200 under --cache-last-user-min-gain 32, and the trace names it and the flag.
    // At 0 the point is planned and no such line is written.
    for (const int32_t min_gain : {32, 0}) {
        SCOPED_TRACE(min_gain);
        config c = small_config();
        c.last_user_min_gain = min_gain;
        store st = make(true, c);
        const key k{"bucket-a", "s", dims("t1")};
        run(st, k, seq(0, 200), {-1, 195});
        take();
        run(st, k, cat(cat(seq(0, 195), seq(3000, 5)), seq(8000, 60)), plan_hints{-1, 255, -1, {}, 200}, 2.0);
        const std::vector<std::string> lines = take();
        ASSERT_GE(lines.size(), 2u);
        const std::string & captures = lines[1];
        const bool named = captures.find("last user message at 200: gain 5 < 32 (--cache-last-user-min-gain)") !=
                           std::string::npos;
        EXPECT_EQ(named, min_gain == 32) << captures;
        EXPECT_EQ(captures.find("turn@200") != std::string::npos, min_gain == 0) << captures;
    }
}

TEST_F(TraceTest, RejectedCandidatesSayWhy) {
    store st = make(true);
    const key k{"bucket-a", "s", dims("t1")};
    run(st, k, seq(0, 200), {-1, 195});
    // Same tokens under a LoRA adapter: another bucket.
    key_dims with_lora = dims("t1");
    with_lora.lora_id = "adapter";
    const key other{"bucket-b", "s", with_lora};
    run(st, other, seq(0, 150), {}, 2.0);
    take();
    // Diverges from entry 1 at 100: before its first checkpoint (guard at 184).
    st.plan(k, cat(seq(0, 100), seq(7000, 30)), {}, 3.0);
    EXPECT_EQ(take(), (std::vector<std::string>{
                          "lookup of 130 tokens (session \"s\", bucket bucket-a): miss; miss cause: "
                          "before_first_restore_point: a live entry shares 100 tokens; no restore point between 0 and 100",
                          "  entry 1 (device, 200 tokens, session \"s\") not taken: the prompt diverges from it at "
                          "token 100; no restore point at or before 100 (nearest: guard at 184)",
                          "  entry 2 (150 tokens, session \"s\") shares 100 tokens with the prompt but is in another "
                          "bucket: lora_id differs",
                          "  1 entry in other buckets (lora_id differs: 1)",
                          "captures planned: [divergence@98 guard@114]; not planned: anchor: the request has no "
                          "leading system message or tools",
                      }));
}

TEST_F(TraceTest, ShorterAndMinPrefixCandidates) {
    config c = small_config();
    c.min_prefix = 50;
    store st = make(false, c);
    const key k{"b", "s"};
    run(st, k, seq(0, 100));
    run(st, k, cat(seq(0, 60), seq(5000, 40)), {}, 2.0);
    run(st, k, cat(seq(0, 30), seq(6000, 40)), {}, 3.0);
    take();
    // Shares 100 with entry 1, 60 with entry 2, 30 with entry 3 (< min prefix 50).
    st.plan(k, cat(seq(0, 100), seq(8000, 5)), {}, 4.0);
    EXPECT_EQ(take(), (std::vector<std::string>{
                          "lookup of 105 tokens (session \"s\", bucket b): restore full at 100/105 from entry 1 "
                          "(device, 100 tokens), absorbing it",
                          "  entry 2 (device, 100 tokens, session \"s\") not taken: its prefix restore point at 60 is "
                          "shorter than the chosen one at 100",
                          "  entry 3 (device, 70 tokens, session \"s\") not taken: its prefix restore point at 30 is "
                          "shorter than min prefix 50",
                          "captures planned: []; not planned: anchor: the request has no leading system message or "
                          "tools",
                      }));
}

TEST_F(TraceTest, EvictionsAndThinningHaveReasons) {
    config c = small_config();
    c.ttl_s = 10;
    c.max_checkpoints = 2;
    store st = make(true, c);
    const key k{"b", "s"};
    run(st, k, seq(0, 200), {-1, 195}, 1.0);
    // The next turn brings a third checkpoint: at most 2 per lineage; the conversation's first
    // turn boundary (195: a new session that sends the same first message restores it) and the
    // new user turn's (215) stay, the guard goes.
    run(st, k, cat(seq(0, 197), seq(9000, 20)), {-1, 215}, 2.0);
    const auto thin = take();
    EXPECT_NE(std::find(thin.begin(), thin.end(), "thinned: dropped the guard checkpoint at 184 (over 2 per lineage)"),
              thin.end());
    // 30 s later the entry has expired (TTL 10 s).
    st.expire(32.0);
    EXPECT_EQ(take(), (std::vector<std::string>{
                          "evicted entry 2 (device, 217 tokens, 2 checkpoints, 1.2 KiB): ttl (unused for 30 s > "
                          "--prompt-cache-ttl 10 s)",
                      }));
    // Too short to store.
    c.min_prefix = 50;
    store st2 = make(false, c);
    run(st2, k, seq(0, 20));
    EXPECT_EQ(take().back(), "not stored: 20 tokens < min prefix 50 (--prompt-cache-min-prefix)");
}

TEST_F(TraceTest, ContextPrefixesLines) {
    store st = make(false);
    {
        trace_scope scope(st.trace(), 42);
        st.plan(key{"b", "s"}, seq(0, 10), {}, 1.0);
    }
    st.plan(key{"b", "s"}, seq(0, 10), {}, 1.0);
    const auto lines = take();
    ASSERT_EQ(lines.size(), 4u);
    EXPECT_EQ(lines[0], "request 42: lookup of 10 tokens (session \"s\", bucket b): miss; miss cause: no_shared_prefix");
    EXPECT_EQ(lines[2], "lookup of 10 tokens (session \"s\", bucket b): miss; miss cause: no_shared_prefix");
}

// A warm-up job's lines say "warm-up N", as the INFO log names it.
TEST_F(TraceTest, WarmupContextNamesTheWarmup) {
    store st = make(false);
    {
        trace_scope scope(st.trace(), 7, /*warmup=*/true);
        st.plan(key{"b", "s"}, seq(0, 10), {}, 1.0);
    }
    {
        trace_scope scope(st.trace(), 8);
        st.plan(key{"b", "s"}, seq(0, 10), {}, 1.0);
    }
    const auto lines = take();
    ASSERT_EQ(lines.size(), 4u);
    EXPECT_EQ(lines[0], "warm-up 7: lookup of 10 tokens (session \"s\", bucket b): miss; miss cause: no_shared_prefix");
    EXPECT_EQ(lines[2], "request 8: lookup of 10 tokens (session \"s\", bucket b): miss; miss cause: no_shared_prefix");
}

TEST_F(TraceTest, OffByDefault) {
    store st(small_config(), true);
    EXPECT_FALSE(st.trace().on());
    run(st, key{"b", "s"}, seq(0, 200), {-1, 195});
    EXPECT_TRUE(lines_.empty());
}

TEST(KeyDifference, NamesTheDimension) {
    EXPECT_EQ(key_difference(dims("t1"), dims("t1")), "");
    // Other tools: not a bucket dimension; template_difference names it for the trace.
    EXPECT_EQ(key_difference(dims("t1"), dims("t2")), "");
    EXPECT_EQ(template_difference(dims("t1"), dims("t2")), "template_sig differs (tools)");
    key_dims a = dims("t1");
    key_dims b = dims("t1");
    b.model_id = "other";
    b.kwargs = "kw2";
    b.template_sig = "sig2";
    EXPECT_EQ(key_difference(a, b), "model_id differs");
    EXPECT_EQ(template_difference(a, b), "template_sig differs (kwargs)");
    EXPECT_EQ(key_difference(a, key_dims{}), "") << "not recorded: nothing to say";
    EXPECT_EQ(template_difference(a, key_dims{}), "");
}

// The same tokens rendered under other tools share their state: a hit across template_sig,
// named in the trace and counted.
TEST_F(TraceTest, AHitAcrossTemplateSigSaysWhatChanged) {
    store st = make(true);
    run(st, key{"bucket-a", "s", dims("t1")}, seq(0, 200), {-1, 195});
    take();
    const auto p = st.plan(key{"bucket-a", "s", dims("t2")}, cat(seq(0, 195), seq(8000, 20)), {}, 3.0);
    EXPECT_EQ(p.n_restore, 195);
    EXPECT_EQ(st.get_stats().cross_template_hits, 1);
    const auto lines = take();
    ASSERT_FALSE(lines.empty());
    EXPECT_NE(lines[0].find("rendered under another template: template_sig differs (tools))"), std::string::npos)
        << lines[0];
}

TEST(TraceFormat, QuotedAndBytes) {
    EXPECT_EQ(quote_for_log(""), "(anonymous)");
    EXPECT_EQ(quote_for_log("a\"b\n"), "\"a\\\"b\\x0a\"");
    EXPECT_EQ(quote_for_log(std::string(50, 'x')), "\"" + std::string(40, 'x') + "\"...");
    EXPECT_EQ(human_bytes(812), "812 B");
    EXPECT_EQ(human_bytes(5017), "4.9 KiB");
    EXPECT_EQ(human_bytes(23ull << 20), "23.0 MiB");
    EXPECT_EQ(human_bytes(3ull << 29), "1.50 GiB");
}

}  // namespace
}  // namespace lineage::cache
