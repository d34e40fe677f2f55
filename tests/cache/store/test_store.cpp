// Unit tests of cache::store with fake states (no model): lookup choice, absorption,
// thinning order, anchors, budgets, eviction order. check_invariants() after every mutation.
#include "cache/store/store.h"

#include "cache/blob_patch.h"
#include "fake_states.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>

namespace lineage::cache {
namespace {

using fakes::seq;
using fakes::cat;
using fakes::fake;

// fakes::small_config (the guard at prompt - guard_distance; ResendCheckpoint tests the other)
// without the anchor ladder and message rungs.
config small_config() {
    config c = fakes::small_config();
    c.ladder_step = 0;    // no anchor ladder; the Ladder tests turn it on
    c.message_rungs = 0;  // no message rungs; the MessageRungs tests turn them on
    return c;
}

class StoreTest : public ::testing::Test {
protected:
    // Simulates one request: plan, captures (fake blobs), commit on a fresh sequence id.
    restore_plan run(store & st, const key & k, const tokens & prompt, plan_hints h = {}, double now = 1.0,
                     size_t ckpt_bytes = 100) {
        restore_plan p = st.plan(k, prompt, h, now);
        st.check_invariants();
        commit_input in;
        in.k = k;
        in.toks = prompt;
        in.seq = p.op == restore_op::take_device ? p.device_seq : next_seq_++;
        in.device_bytes = 1000;
        in.hints.history_tokens = h.history_tokens;
        in.hints.last_user_tokens = h.last_user_tokens;
        for (const auto & c : p.captures) {
            if (c.deferrable) {
                continue;  // passed over, as a prefill with the engine to itself does (a ladder job's)
            }
            if (c.kind == point_kind::anchor) {
                // As lifecycle::capture: the rungs captured before it go with the anchor.
                std::vector<checkpoint> rungs;
                uint64_t rung_bytes = 0;
                std::erase_if(in.captured, [&](checkpoint & cp) {
                    if (cp.kind != point_kind::ladder || cp.n_tokens >= c.n_tokens) {
                        return false;
                    }
                    rung_bytes += cp.recurrent->size();
                    rungs.push_back(std::move(cp));
                    return true;
                });
                in.reserved_bytes -= rung_bytes;
                EXPECT_TRUE(st.reserve(500));
                st.commit_anchor(k, tokens(prompt.begin(), prompt.begin() + c.n_tokens), fake(500), 500 + rung_bytes,
                                 now, 0, std::move(rungs));
            } else {
                EXPECT_TRUE(st.reserve(ckpt_bytes));
                in.reserved_bytes += ckpt_bytes;
                in.captured.push_back({c.n_tokens, c.kind, fake(ckpt_bytes)});
            }
            st.check_invariants();
        }
        if (st.hybrid()) {
            EXPECT_TRUE(st.reserve(ckpt_bytes));
            in.reserved_bytes += ckpt_bytes;
            in.final_recurrent = fake(ckpt_bytes);
        }
        if (p.absorbs) {
            in.absorbed = p;
        }
        st.commit(std::move(in), now);
        st.check_invariants();
        for (int32_t s : st.take_released_seqs()) {
            released_.push_back(s);
        }
        return p;
    }
    int32_t next_seq_ = 0;
    std::vector<int32_t> released_;
};

TEST_F(StoreTest, MissOnEmptyAndHitAfterCommit) {
    store st(small_config(), /*hybrid=*/false);
    const key k{"b", "s"};
    auto p1 = run(st, k, seq(0, 100));
    EXPECT_EQ(p1.n_restore, 0);
    EXPECT_EQ(p1.kind, point_kind::none);
    auto p2 = run(st, k, cat(seq(0, 100), seq(1000, 10)));
    EXPECT_EQ(p2.n_restore, 100);
    EXPECT_EQ(p2.kind, point_kind::full);
    EXPECT_TRUE(p2.absorbs);
    EXPECT_EQ(p2.op, restore_op::take_device);
    EXPECT_EQ(st.entries().size(), 1u) << "the extending request absorbed the first entry";
}

TEST_F(StoreTest, AlwaysLeavesOneTokenToPrefill) {
    store st(small_config(), false);
    const key k{"b", "s"};
    run(st, k, seq(0, 50));
    auto p = st.plan(k, seq(0, 50), {}, 2.0);
    EXPECT_EQ(p.n_restore, 49);
    EXPECT_EQ(p.kind, point_kind::prefix);
}

TEST_F(StoreTest, DenseUsesAnyPrefix) {
    store st(small_config(), false);
    const key k{"b", "s"};
    run(st, k, seq(0, 100));
    auto p = st.plan(k, cat(seq(0, 60), seq(5000, 20)), {}, 2.0);
    EXPECT_EQ(p.n_restore, 60);
    EXPECT_EQ(p.kind, point_kind::prefix);
    EXPECT_EQ(p.op, restore_op::share_device);
    EXPECT_FALSE(p.absorbs);
}

TEST_F(StoreTest, HybridOnlyRestoresAtCheckpoints) {
    store st(small_config(), true);
    const key k{"b", "s"};
    // 200-token prompt from cold: guard at 184 (suffix >= 64), history boundary at 195.
    auto p1 = run(st, k, seq(0, 200), {-1, 195});
    ASSERT_EQ(p1.captures.size(), 2u);
    EXPECT_EQ(p1.captures[0].n_tokens, 184);
    EXPECT_EQ(p1.captures[0].kind, point_kind::guard);
    EXPECT_EQ(p1.captures[1].n_tokens, 195);
    EXPECT_EQ(p1.captures[1].kind, point_kind::turn);
    // Diverges at 190: the guard at 184 is the longest restore point at or before it.
    auto p = st.plan(k, cat(seq(0, 190), seq(7000, 30)), {}, 2.0);
    EXPECT_EQ(p.n_restore, 184);
    EXPECT_EQ(p.kind, point_kind::guard);
    ASSERT_TRUE(p.recurrent);
    // Diverges at 100: nothing covers it.
    auto miss = st.plan(k, cat(seq(0, 100), seq(7000, 30)), {}, 3.0);
    EXPECT_EQ(miss.n_restore, 0);
}

TEST_F(StoreTest, NextTurnThroughHistoryBoundaryAbsorbs) {
    store st(small_config(), true);
    const key k{"b", "s"};
    run(st, k, seq(0, 200), {-1, 195});
    // Turn 2 shares the history (195) plus 2 tokens, then the re-rendered reply.
    const tokens t2 = cat(seq(0, 197), seq(9000, 40));
    auto p2 = run(st, k, t2, {-1, 230}, 2.0);
    EXPECT_EQ(p2.n_restore, 195);
    EXPECT_EQ(p2.kind, point_kind::turn);
    EXPECT_TRUE(p2.absorbs);
    EXPECT_EQ(p2.op, restore_op::take_device);
    auto es = st.entries();
    ASSERT_EQ(es.size(), 1u) << "one entry per lineage";
    // Carried over: guard 184 and turn 195 (both <= 195); captured: turn 230.
    std::vector<int32_t> at;
    for (auto & c : es[0].checkpoints) {
        at.push_back(c.first);
    }
    EXPECT_EQ(at, (std::vector<int32_t>{184, 195, 230}));
}

TEST_F(StoreTest, EditedLastMessageLandsOnTurnBoundaryWithoutAbsorbing) {
    store st(small_config(), true);
    const key k{"b", "s"};
    run(st, k, seq(0, 200), {-1, 195});
    run(st, k, cat(seq(0, 197), seq(9000, 40)), {-1, 230}, 2.0);
    // Edit of the last user message: shares up to 210 (inside turn 2's new part).
    const tokens edit = cat(cat(seq(0, 197), seq(9000, 13)), seq(4000, 30));
    auto p = st.plan(k, edit, {-1, 235}, 3.0);
    EXPECT_EQ(p.n_restore, 195);
    EXPECT_EQ(p.kind, point_kind::turn);
    EXPECT_FALSE(p.absorbs);
    EXPECT_EQ(p.op, restore_op::share_device);
}

TEST_F(StoreTest, RegenerateLandsOnGuard) {
    store st(small_config(), true);
    const key k{"b", "s"};
    run(st, k, seq(0, 300), {-1, 295});
    auto p = st.plan(k, seq(0, 300), {-1, 295}, 2.0);
    EXPECT_EQ(p.n_restore, 295) << "history boundary 295 beats guard 284";
    EXPECT_EQ(p.kind, point_kind::turn);
    EXPECT_LT(p.n_restore, 300);
}

TEST_F(StoreTest, ShortTurnHasNoGuard) {
    store st(small_config(), true);
    const key k{"b", "s"};
    run(st, k, seq(0, 200), {-1, 195});
    // 20 new tokens after the restore point: below guard_min_suffix (64), no split.
    auto p = st.plan(k, cat(seq(0, 197), seq(9000, 20)), {}, 2.0);
    EXPECT_EQ(p.n_restore, 195);
    EXPECT_TRUE(p.captures.empty());
}

TEST_F(StoreTest, AnchorIsPinnedSeparateAndServesNewSession) {
    store st(small_config(), true);
    const key k{"b", "s1"};
    // System prompt + tools = 120 tokens; anchor at 120 - 2.
    auto p1 = run(st, k, seq(0, 300), {120, 295});
    ASSERT_FALSE(p1.captures.empty());
    EXPECT_EQ(p1.captures[0].n_tokens, 118);
    EXPECT_EQ(p1.captures[0].kind, point_kind::anchor);
    EXPECT_EQ(st.get_stats().anchors, 1);
    // A new session: same system prompt, other conversation.
    const key k2{"b", "s2"};
    auto p2 = st.plan(k2, cat(seq(0, 120), seq(50000, 100)), {120, 215}, 2.0);
    EXPECT_EQ(p2.n_restore, 118);
    EXPECT_EQ(p2.kind, point_kind::anchor);
    EXPECT_EQ(p2.op, restore_op::load_ram);
    EXPECT_FALSE(p2.absorbs) << "anchors are exempt from absorption";
    EXPECT_EQ(st.get_stats().anchors, 1);
}

TEST_F(StoreTest, AnchorPinnedEvenAfterGuardPoint) {
    store st(small_config(), true);
    const key k{"b", "s"};
    // A long system block followed by a 7-token question: the anchor falls after the guard.
    auto p = run(st, k, seq(0, 300), {297, 299});
    bool anchor = false;
    for (auto & c : p.captures) {
        anchor = anchor || (c.kind == point_kind::anchor && c.n_tokens == 295);
    }
    EXPECT_TRUE(anchor);
}

TEST_F(StoreTest, DivergenceCapturedForSibling) {
    store st(small_config(), true);
    const key k{"b", "s1"};
    run(st, k, seq(0, 300), {-1, 295});
    // A sibling prompt shares 250 tokens; nothing covers 250 (guard 284, turn 295 are later).
    // No line starts known: the checkpoint goes back by the BPE slack (2), to 248.
    const tokens sib = cat(seq(0, 250), seq(60000, 60));
    auto p = st.plan(key{"b", "s2"}, sib, {-1, 305}, 2.0);
    EXPECT_EQ(p.n_restore, 0);
    bool div = false;
    for (auto & c : p.captures) {
        div = div || (c.kind == point_kind::divergence && c.n_tokens == 248);
    }
    EXPECT_TRUE(div);
}

// A system text whose last line changes per session (a timestamp) after a tool block that the
// template renders first (Qwen3.5): tools [0, 300), system text [300, 500) whose tokens from
// `stamp_at` on are per session, then a user message. The anchor (500 - 2) differs per session;
// the tools anchor (300 - 2) is what they all share (a new session restores never 0).
tokens stamped_prompt(int32_t stamp_at, int32_t session, int32_t user) {
    return cat(cat(seq(0, stamp_at), seq(10000 * (session + 1), 500 - stamp_at)), seq(90000 + 100 * user, 40));
}

TEST_F(StoreTest, ToolsAnchorServesNewSessionsOfASystemTextThatChangesPerSession) {
    store st(small_config(), true);
    const plan_hints h{500, 534, 300};
    auto p1 = run(st, key{"b", "s1"}, stamped_prompt(490, 0, 0), h);
    EXPECT_EQ(p1.n_restore, 0);
    std::vector<std::pair<int32_t, point_kind>> got;
    for (const auto & c : p1.captures) {
        got.emplace_back(c.n_tokens, c.kind);
    }
    const std::vector<std::pair<int32_t, point_kind>> want1 = {{298, point_kind::anchor}, {498, point_kind::anchor},
                                                               {524, point_kind::guard}, {534, point_kind::turn}};
    EXPECT_EQ(got, want1) << "both anchors pinned by the first session";
    EXPECT_EQ(st.get_stats().anchors, 2);

    // Session 2: its stamp differs from token 490 on. Before the tools anchor: a miss.
    auto p2 = run(st, key{"b", "s2"}, stamped_prompt(490, 1, 1), h, 2.0);
    EXPECT_EQ(p2.n_restore, 298);
    EXPECT_EQ(p2.kind, point_kind::anchor);
    EXPECT_FALSE(p2.absorbs);
    got.clear();
    for (const auto & c : p2.captures) {
        got.emplace_back(c.n_tokens, c.kind);
    }
    // Session 1 diverges from session 0 inside the stamp: a divergence checkpoint at 490 - 2
    // (the BPE slack; no line starts known; gain 190 >= 32) and its own anchor at 498; the tools
    // anchor is already pinned.
    const std::vector<std::pair<int32_t, point_kind>> want2 = {{488, point_kind::divergence},
                                                               {498, point_kind::anchor},
                                                               {524, point_kind::guard},
                                                               {534, point_kind::turn}};
    EXPECT_EQ(got, want2);
    EXPECT_EQ(st.get_stats().anchors, 3);

    // Session 3 diverges two tokens earlier in the stamp (the hour changed, not the minute): the
    // slack put the divergence checkpoint at 488, so it still serves.
    auto p3 = run(st, key{"b", "s3"}, cat(seq(0, 488), seq(777000, 52)), h, 3.0);
    EXPECT_EQ(p3.n_restore, 488);
    EXPECT_EQ(p3.kind, point_kind::divergence);
    // Earlier still (486): before every checkpoint but the tools anchor's.
    auto p3b = st.plan(key{"b", "s3b"}, cat(seq(0, 486), seq(778000, 54)), h, 3.5);
    EXPECT_EQ(p3b.n_restore, 298);
    EXPECT_EQ(p3b.kind, point_kind::anchor);
    // Session 4 diverges where session 2 did from session 1: that divergence checkpoint.
    auto p4 = st.plan(key{"b", "s4"}, stamped_prompt(490, 7, 2), h, 4.0);
    EXPECT_EQ(p4.n_restore, 488);
    EXPECT_EQ(p4.kind, point_kind::divergence);
}

TEST_F(StoreTest, ToolsAnchorOnlyBeforeTheAnchorAndOnlyOnHybrids) {
    // Tools not before the system text (the tools-only render ends at or after the anchor): one
    // anchor. A dense model restores any prefix anyway: no tools anchor either.
    for (const bool hybrid : {true, false}) {
        store st(small_config(), hybrid);
        const plan_hints h = hybrid ? plan_hints{500, 534, 500} : plan_hints{500, 534, 300};
        auto p = st.plan(key{"b", "s"}, stamped_prompt(490, 0, 0), h, 1.0);
        int32_t anchors = 0;
        for (const auto & c : p.captures) {
            anchors += c.kind == point_kind::anchor ? 1 : 0;
            EXPECT_TRUE(c.kind != point_kind::anchor || c.n_tokens == 498) << c.n_tokens;
        }
        EXPECT_EQ(anchors, 1) << (hybrid ? "hybrid" : "dense");
    }
}

TEST_F(StoreTest, ThinningDropsOldGuardsThenOldestTurns) {
    config c = small_config();
    c.max_checkpoints = 3;
    store st(c, true);
    const key k{"b", "s"};
    commit_input in;
    in.k = k;
    in.toks = seq(0, 1000);
    in.seq = 0;
    in.captured = {{100, point_kind::turn, fake(10)},  {200, point_kind::guard, fake(10)},
                   {300, point_kind::turn, fake(10)},  {400, point_kind::divergence, fake(10)},
                   {500, point_kind::guard, fake(10)}, {600, point_kind::turn, fake(10)}};
    st.commit(std::move(in), 1.0);
    st.check_invariants();
    std::vector<std::pair<int32_t, point_kind>> want = {
        {400, point_kind::divergence}, {500, point_kind::guard}, {600, point_kind::turn}};
    EXPECT_EQ(st.entries()[0].checkpoints, want);
}

TEST_F(StoreTest, ThinningKeepsTheUserTurnsBoundaryThroughAToolLoop) {
    // An agent loop: the user turn's boundary at 100 (the entry's history), then a turn
    // checkpoint per tool step. Over the cap, the later steps' oldest turns go, not the user
    // turn's: the next user message re-renders the loop's assistant turns without their reasoning
    // (Qwen3.5) and parts a few tokens after 100 (tests/e2e/agent-claude.test.mjs, a6).
    config c = small_config();
    c.max_checkpoints = 3;
    store st(c, true);
    commit_input in;
    in.k = key{"b", "s"};
    in.toks = seq(0, 1000);
    in.seq = 0;
    in.hints.history_tokens = 100;
    in.captured = {{100, point_kind::turn, fake(10)}, {300, point_kind::turn, fake(10)},
                   {500, point_kind::turn, fake(10)}, {700, point_kind::turn, fake(10)},
                   {900, point_kind::turn, fake(10)}};
    st.commit(std::move(in), 1.0);
    st.check_invariants();
    std::vector<std::pair<int32_t, point_kind>> want = {
        {100, point_kind::turn}, {700, point_kind::turn}, {900, point_kind::turn}};
    EXPECT_EQ(st.entries()[0].checkpoints, want);
    // Divergence points and the newest guard go before it; with a cap of one, it is what stays.
    config one = small_config();
    one.max_checkpoints = 1;
    store st1(one, true);
    commit_input in1;
    in1.k = key{"b", "s"};
    in1.toks = seq(0, 1000);
    in1.seq = 0;
    in1.hints.history_tokens = 100;
    in1.captured = {{100, point_kind::turn, fake(10)}, {300, point_kind::turn, fake(10)},
                    {400, point_kind::divergence, fake(10)}, {990, point_kind::guard, fake(10)}};
    st1.commit(std::move(in1), 1.0);
    st1.check_invariants();
    want = {{100, point_kind::turn}};
    EXPECT_EQ(st1.entries()[0].checkpoints, want);
}

TEST_F(StoreTest, ThinningKeepsTheFirstTurnsBoundaryForTheNextSession) {
    // The conversation's first prompt (history boundary 290), then a long second turn whose
    // captures go over the cap: the first turn's boundary stays beside the new user turn's (650),
    // so a new session that sends the same first message (it parts a few tokens after 290, where
    // the user's own words begin: tests/e2e/agent-claude.test.mjs, the second session) restores
    // it, not the anchor.
    config c = small_config();
    c.max_checkpoints = 3;
    store st(c, true);
    const key k{"b", "s1"};
    commit_input in;
    in.k = k;
    in.toks = seq(0, 300);
    in.seq = 0;
    in.hints.history_tokens = 290;
    in.captured = {{290, point_kind::turn, fake(10)}};
    st.commit(std::move(in), 1.0);
    st.check_invariants();
    plan_hints h;
    h.history_tokens = 650;
    const tokens second = seq(0, 800);
    restore_plan p = st.plan(k, second, h, 2.0);
    ASSERT_TRUE(p.absorbs);
    ASSERT_EQ(p.n_restore, 300);
    commit_input in2;
    in2.k = k;
    in2.toks = second;
    in2.seq = p.device_seq;
    in2.hints.history_tokens = 650;
    for (int32_t n : {400, 500, 600, 650, 700}) {
        in2.captured.push_back({n, point_kind::turn, fake(10)});
    }
    in2.absorbed = p;
    st.commit(std::move(in2), 2.0);
    st.check_invariants();
    std::vector<std::pair<int32_t, point_kind>> want = {
        {290, point_kind::turn}, {650, point_kind::turn}, {700, point_kind::turn}};
    ASSERT_EQ(st.entries().size(), 1u);
    EXPECT_EQ(st.entries()[0].checkpoints, want);
    // The next session: the same first message but its last tokens.
    const tokens other = cat(seq(0, 293), seq(5000, 5100));
    h.history_tokens = 380;
    restore_plan q = st.plan(key{"b", "s2"}, other, h, 3.0);
    EXPECT_EQ(q.n_restore, 290);
    EXPECT_EQ(q.kind, point_kind::turn);
}

TEST_F(StoreTest, SessionFirstCrossSessionOnlyWhenStrictlyLonger) {
    store st(small_config(), false);
    run(st, key{"b", "alice"}, seq(0, 100));
    run(st, key{"b", "bob"}, cat(seq(0, 80), seq(3000, 20)));
    // Alice's prompt shares 100 with her entry, 80 with Bob's: her own wins.
    auto p = run(st, key{"b", "alice"}, cat(seq(0, 100), seq(1, 5)), {}, 2.0);
    EXPECT_EQ(p.n_restore, 100);
    EXPECT_EQ(p.reason.find("cross-session"), std::string::npos);
    // Bob shares 80 with his entry and 100 with Alice's: strictly longer, so cross-session.
    auto q = st.plan(key{"b", "bob"}, cat(seq(0, 100), seq(2, 5)), {}, 3.0);
    EXPECT_EQ(q.n_restore, 100);
    EXPECT_NE(q.reason.find("cross-session"), std::string::npos);
}

TEST_F(StoreTest, OtherBucketNeverHits) {
    store st(small_config(), false);
    run(st, key{"template-a", "s"}, seq(0, 100));
    auto p = st.plan(key{"template-b", "s"}, cat(seq(0, 100), seq(1, 5)), {}, 2.0);
    EXPECT_EQ(p.n_restore, 0);
}

TEST_F(StoreTest, MinPrefixRejectsShortMatches) {
    config c = small_config();
    c.min_prefix = 32;
    store st(c, false);
    run(st, key{"b", "s"}, seq(0, 100));
    auto p = st.plan(key{"b", "s"}, cat(seq(0, 20), seq(800, 50)), {}, 2.0);
    EXPECT_EQ(p.n_restore, 0);
    EXPECT_NE(p.reason.find("min prefix"), std::string::npos);
}

TEST_F(StoreTest, BudgetEvictsLeastRecentlyUsedFirst) {
    config c = small_config();
    c.ram_bytes = 1000;
    store st(c, true);
    // Three lineages holding 300 bytes each (their prompt-end recurrent state; prompts
    // shorter than guard_min_suffix, so no guard checkpoints).
    run(st, key{"b", "1"}, seq(0, 50), {}, 1.0, 300);
    run(st, key{"b", "2"}, seq(100, 55), {}, 2.0, 300);
    run(st, key{"b", "3"}, seq(200, 60), {}, 3.0, 300);
    EXPECT_EQ(st.ram_bytes(), 900u);
    // Lineage 1 takes a turn: it now holds 600 bytes (old final state as a turn checkpoint +
    // new final state), so the least recently used lineage (2) must go.
    run(st, key{"b", "1"}, cat(seq(0, 50), seq(7, 1)), {}, 4.0, 300);
    std::vector<int32_t> left;
    for (auto & e : st.entries()) {
        left.push_back(e.n_tokens);
    }
    EXPECT_EQ(left, (std::vector<int32_t>{51, 60})) << "lineage 2 was the least recently used";
    EXPECT_EQ(st.get_stats().evictions.at("capacity"), 1);
    EXPECT_LE(st.ram_bytes(), 1000u);
}

TEST_F(StoreTest, StateLargerThanBudgetIsRejected) {
    config c = small_config();
    c.ram_bytes = 1000;
    store st(c, true);
    EXPECT_FALSE(st.reserve(1500));
    EXPECT_EQ(st.get_stats().rejections.at("too_large"), 1);
    st.check_invariants();
}

TEST_F(StoreTest, AnchorCapEvictsLeastRecentlyUsedAnchor) {
    config c = small_config();
    c.max_anchors = 2;
    store st(c, false);
    for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(st.reserve(100));
        st.commit_anchor(key{"b", "s"}, seq(i * 1000, 40), fake(100), 100, 1.0 + i);
        st.check_invariants();
    }
    EXPECT_EQ(st.get_stats().anchors, 2);
    EXPECT_EQ(st.get_stats().evictions.at("anchor_cap"), 1);
    auto p = st.plan(key{"b", "s"}, cat(seq(0, 40), seq(5, 5)), {}, 9.0);
    EXPECT_EQ(p.n_restore, 0) << "the oldest anchor was evicted";
}

TEST_F(StoreTest, ZeroMaxAnchorsPlansAndPinsNoAnchor) {
    // --cache-max-anchors 0 (it used to abort the server at the first system prompt).
    config c = small_config();
    c.max_anchors = 0;
    for (const bool hybrid : {true, false}) {
        store st(c, hybrid);
        auto p1 = run(st, key{"b", "s1"}, seq(0, 300), {120, 295, 100});
        for (const auto & cap : p1.captures) {
            EXPECT_NE(cap.kind, point_kind::anchor) << cap.n_tokens;
        }
        ASSERT_TRUE(st.reserve(100));
        st.commit_anchor(key{"b", "s1"}, seq(0, 118), fake(100), 100, 1.0);  // refused, not a crash
        st.check_invariants();
        EXPECT_EQ(st.get_stats().anchors, 0);
        // The conversation itself is still cached: a resend restores it.
        auto p2 = st.plan(key{"b", "s1"}, seq(0, 300), {120, 295, 100}, 2.0);
        EXPECT_GT(p2.n_restore, 0) << (hybrid ? "hybrid" : "dense");
    }
}

TEST_F(StoreTest, ColdSplitPointsAreTheCapturesOfAFirstRequest) {
    // A prefill that bypasses the cache splits where a first cached request captures
    // (Mamba2's chunked scan depends on the split: docs/prompt-cache.md "What a hit guarantees").
    config c = small_config();
    c.resend_checkpoint = true;
    for (const bool hybrid : {true, false}) {
        store st(c, hybrid);
        const plan_hints h{120, 290, 60};
        const tokens prompt = seq(0, 300);
        const auto split = st.cold_split_points(prompt, h);
        EXPECT_EQ(st.get_stats().lookups, 0) << "no side effects";
        const auto p = st.plan(key{"b", "s"}, prompt, h, 1.0);
        ASSERT_EQ(split.size(), p.captures.size()) << (hybrid ? "hybrid" : "dense");
        for (size_t i = 0; i < split.size(); ++i) {
            EXPECT_EQ(split[i].n_tokens, p.captures[i].n_tokens);
            EXPECT_EQ(split[i].kind, p.captures[i].kind);
        }
        if (hybrid) {
            // anchor 118, tools anchor 58, turn 290; the guard (299) merges into the turn 9
            // tokens before it (--cache-guard-merge 16)
            std::vector<int32_t> at;
            for (const auto & cp : split) {
                at.push_back(cp.n_tokens);
            }
            EXPECT_EQ(at, (std::vector<int32_t>{58, 118, 290}));
        }
    }
}

TEST_F(StoreTest, MaxEntriesEvictsOldest) {
    config c = small_config();
    c.max_entries = 2;
    store st(c, false);
    run(st, key{"b", "s"}, seq(0, 50), {}, 1.0);
    run(st, key{"b", "s"}, seq(100, 50), {}, 2.0);
    run(st, key{"b", "s"}, seq(200, 50), {}, 3.0);
    auto es = st.entries();
    ASSERT_EQ(es.size(), 2u);
    EXPECT_EQ(st.get_stats().evictions.at("lru"), 1);
    EXPECT_EQ(released_, (std::vector<int32_t>{0})) << "the oldest entry's sequence is released";
}

TEST_F(StoreTest, TtlExpiresIdleEntries) {
    config c = small_config();
    c.ttl_s = 10;
    store st(c, false);
    run(st, key{"b", "s"}, seq(0, 50), {}, 1.0);
    auto p = st.plan(key{"b", "s"}, cat(seq(0, 50), seq(9, 3)), {}, 20.0);
    EXPECT_EQ(p.n_restore, 0);
    EXPECT_EQ(st.get_stats().evictions.at("ttl"), 1);
}

TEST_F(StoreTest, ExactModeHasNoCheckpointsAndNoAbsorption) {
    config c = small_config();
    c.lineage = false;
    store st(c, true);
    const key k{"b", "s"};
    auto p1 = run(st, k, seq(0, 300), {120, 295});
    EXPECT_TRUE(p1.captures.empty());
    auto p2 = run(st, k, cat(seq(0, 300), seq(5000, 10)), {120, 305}, 2.0);
    EXPECT_EQ(p2.n_restore, 300);
    EXPECT_FALSE(p2.absorbs);
    EXPECT_EQ(p2.op, restore_op::share_device);
    EXPECT_EQ(st.entries().size(), 2u);
}

TEST_F(StoreTest, DemoteMovesDeviceEntryToRam) {
    store st(small_config(), false);
    run(st, key{"b", "s"}, seq(0, 50));
    auto v = st.device_lru();
    ASSERT_TRUE(v);
    ASSERT_TRUE(st.reserve(400, v->id));
    st.demote(v->id, fake(400), 400);
    st.check_invariants();
    EXPECT_EQ(st.take_released_seqs(), (std::vector<int32_t>{v->seq}));
    auto p = st.plan(key{"b", "s"}, cat(seq(0, 50), seq(1, 2)), {}, 2.0);
    EXPECT_EQ(p.op, restore_op::load_ram);
    EXPECT_EQ(p.n_restore, 50);
}

TEST_F(StoreTest, AnEntryHeldAsAPatchOverItsAnchorRestoresItsWholeStateAndOutlivesTheAnchor) {
    // Prefix sharing in RAM (docs/prompt-cache.md): the demoted entry holds only what its
    // anchor's state lacks; a restore gets the whole state back; the anchor's state stays held
    // (counted once) while the patch reads it, and goes with the last patch.
    config c = small_config();
    c.max_anchors = 1;
    store st(c, false);
    const key k{"b", "s"};
    blob anchor_state(300);
    std::iota(anchor_state.begin(), anchor_state.end(), uint8_t{1});
    ASSERT_TRUE(st.reserve(300));
    st.commit_anchor(k, seq(0, 40), make_blob(anchor_state), 300, 1.0);
    const tokens conv = cat(seq(0, 40), seq(500, 30));
    run(st, k, conv, {}, 2.0);
    const auto v = st.device_lru();
    ASSERT_TRUE(v);
    auto base = st.patch_base_for(v->id);
    ASSERT_TRUE(base);
    EXPECT_EQ(base->n_tokens, 40);
    // The whole state: 100 bytes of its own, the anchor's bytes [50, 250), 60 of its own.
    blob whole(360, 0x22);
    std::fill(whole.begin(), whole.begin() + 100, uint8_t{0x11});
    std::copy(anchor_state.begin() + 50, anchor_state.begin() + 250, whole.begin() + 100);
    const auto patch = make_patch(whole, {{100, 50, 200}});
    ASSERT_TRUE(patch);
    const uint64_t patch_bytes = patch->size();
    ASSERT_TRUE(st.reserve(patch_bytes, v->id));
    st.demote(v->id, make_blob(*patch), patch_bytes, std::move(base));
    st.check_invariants();
    auto s = st.get_stats();
    EXPECT_EQ(s.shared_prefix_entries, 1);
    EXPECT_EQ(s.shared_prefix_bytes, whole.size() - patch_bytes) << "what the patch saves";
    EXPECT_EQ(s.bytes.at("ram"), 300 + patch_bytes);
    const tokens edit = cat(cat(seq(0, 40), seq(500, 20)), seq(9000, 5));
    auto p = st.plan(k, edit, {}, 3.0);
    EXPECT_EQ(p.op, restore_op::load_ram);
    EXPECT_EQ(p.n_restore, 60);
    EXPECT_EQ(p.source_tokens, 70);
    ASSERT_TRUE(p.full);
    EXPECT_EQ(*p.full, whole) << "the patch applied over the anchor's state";
    p.full.reset();
    // A second anchor pushes the first out (cap 1): its state stays, counted once, while the
    // patch reads it.
    ASSERT_TRUE(st.reserve(100));
    st.commit_anchor(k, seq(7000, 40), fake(100), 100, 4.0);
    st.check_invariants();
    EXPECT_EQ(st.get_stats().anchors, 1);
    EXPECT_EQ(st.get_stats().evictions.at("anchor_cap"), 1);
    EXPECT_EQ(st.ram_bytes(), 300 + patch_bytes + 100);
    EXPECT_EQ(st.patch_base_for(v->id), std::nullopt) << "no longer on the device";
    auto p2 = st.plan(k, edit, {}, 5.0);
    ASSERT_TRUE(p2.full);
    EXPECT_EQ(*p2.full, whole);
    p2.full.reset();
    // The conversation's next turn takes the entry: the anchor's state goes with it.
    auto p3 = st.plan(k, cat(conv, seq(1, 3)), {}, 6.0);
    EXPECT_TRUE(p3.absorbs);
    EXPECT_EQ(p3.n_restore, 70);
    ASSERT_TRUE(p3.full);
    EXPECT_EQ(*p3.full, whole);
    st.check_invariants();
    st.abandon(p3, 0);
    st.check_invariants();
    EXPECT_EQ(st.ram_bytes(), 100u) << "the new anchor alone";
}

TEST_F(StoreTest, AResetFreesAnAnchorsStateThatPatchesStillRead) {
    config c = small_config();
    c.max_anchors = 1;
    store st(c, false);
    const key k{"b", "s"};
    const blob anchor_state(300, 0x33);
    ASSERT_TRUE(st.reserve(300));
    st.commit_anchor(k, seq(0, 40), make_blob(anchor_state), 300, 1.0);
    run(st, k, cat(seq(0, 40), seq(500, 30)), {}, 2.0);
    const auto v = st.device_lru();
    ASSERT_TRUE(v);
    auto base = st.patch_base_for(v->id);
    ASSERT_TRUE(base);
    blob whole(360, 0x33);
    std::fill(whole.begin(), whole.begin() + 100, uint8_t{0x11});
    const auto patch = make_patch(whole, {{100, 0, 260}});
    ASSERT_TRUE(patch);
    ASSERT_TRUE(st.reserve(patch->size(), v->id));
    st.demote(v->id, make_blob(*patch), patch->size(), std::move(base));
    ASSERT_TRUE(st.reserve(100));
    st.commit_anchor(k, seq(7000, 40), fake(100), 100, 3.0);  // the first anchor leaves: orphan base
    st.check_invariants();
    EXPECT_EQ(st.ram_bytes(), 300 + patch->size() + 100);
    const auto r = st.reset();
    st.check_invariants();
    EXPECT_EQ(st.ram_bytes(), 0u);
    EXPECT_EQ(r.bytes_freed, 300 + patch->size() + 100) << "the orphan base, the patch, the new anchor";
}

TEST_F(StoreTest, PrefixSharingOffOrNoAnchorUnderTheEntryGivesNoBase) {
    config c = small_config();
    store st(c, false);
    const key k{"b", "s"};
    ASSERT_TRUE(st.reserve(300));
    st.commit_anchor(k, seq(0, 40), fake(300), 300, 1.0);
    run(st, k, cat(seq(1000, 40), seq(500, 30)), {}, 2.0);  // other tokens: no anchor below it
    const auto v = st.device_lru();
    ASSERT_TRUE(v);
    EXPECT_EQ(st.patch_base_for(v->id), std::nullopt);
    run(st, k, cat(seq(0, 40), seq(600, 30)), {}, 3.0);
    const auto w = st.device_lru();  // still the first: the LRU
    ASSERT_TRUE(w);
    bool found = false;
    for (const auto & e : st.entries()) {
        if (e.where == tier::device && e.id != v->id) {
            found = st.patch_base_for(e.id).has_value();
        }
    }
    EXPECT_TRUE(found) << "the entry on the anchor's tokens has one";
    c.ram_share_prefix = false;
    store off(c, false);
    ASSERT_TRUE(off.reserve(300));
    off.commit_anchor(k, seq(0, 40), fake(300), 300, 1.0);
    run(off, k, cat(seq(0, 40), seq(600, 30)), {}, 2.0);
    ASSERT_TRUE(off.device_lru());
    EXPECT_EQ(off.patch_base_for(off.device_lru()->id), std::nullopt) << "--cache-ram-share-prefix false";
}

TEST_F(StoreTest, VerbatimResendSupersedesItsTwin) {
    store st(small_config(), true);
    const key k{"b", "s"};
    run(st, k, seq(0, 300), {-1, 295});
    auto p = run(st, k, seq(0, 300), {-1, 295}, 2.0);
    EXPECT_EQ(p.n_restore, 295);
    EXPECT_TRUE(p.absorbs) << "the history boundary is reached: the resend continues the lineage";
    auto es = st.entries();
    ASSERT_EQ(es.size(), 1u);
    std::vector<int32_t> at;
    for (auto & c : es[0].checkpoints) {
        at.push_back(c.first);
    }
    EXPECT_EQ(at, (std::vector<int32_t>{284, 295}));
}

TEST_F(StoreTest, ResendThatDoesNotAbsorbSupersedesItsTwin) {
    store st(small_config(), false);
    const key k{"b", "s"};
    run(st, k, seq(0, 50));
    auto p = run(st, k, seq(0, 50), {}, 2.0);
    EXPECT_EQ(p.n_restore, 49);
    EXPECT_FALSE(p.absorbs);
    EXPECT_EQ(st.entries().size(), 1u);
    EXPECT_EQ(st.get_stats().evictions.at("superseded"), 1);
}

TEST_F(StoreTest, ResendCheckpointServesAllButOneToken) {
    config c = small_config();
    c.resend_checkpoint = true;
    c.guard_merge = 0;  // the history boundary 5 tokens before the guard would take its place
    store st(c, true);
    const key k{"b", "s"};
    auto p1 = run(st, k, seq(0, 300), {-1, 295});
    ASSERT_EQ(p1.captures.size(), 2u);
    EXPECT_EQ(p1.captures[1].n_tokens, 299) << "prompt - 1 replaces the prompt - 16 guard";
    EXPECT_EQ(p1.captures[1].kind, point_kind::guard);
    auto p2 = st.plan(k, seq(0, 300), {-1, 295}, 2.0);
    EXPECT_EQ(p2.n_restore, 299);
    EXPECT_EQ(p2.kind, point_kind::guard);
}

TEST_F(StoreTest, GuardMergesIntoARestorePointAFewTokensBeforeIt) {
    config c = small_config();
    c.resend_checkpoint = true;
    ASSERT_EQ(c.guard_merge, 16);
    store st(c, true);
    const key k{"b", "s"};
    // A user turn whose history boundary is the generation prompt's 6 tokens back: no guard.
    auto p1 = run(st, k, seq(0, 300), {-1, 294});
    ASSERT_EQ(p1.captures.size(), 1u);
    EXPECT_EQ(p1.captures[0].n_tokens, 294);
    EXPECT_EQ(p1.captures[0].kind, point_kind::turn);
    // A resend restores the boundary and computes the 6 tokens in one pass: no split either,
    // as the first request's last pass (the same tokens in the same passes).
    auto p2 = run(st, k, seq(0, 300), {-1, 294}, 2.0);
    EXPECT_EQ(p2.n_restore, 294);
    EXPECT_EQ(p2.kind, point_kind::turn);
    EXPECT_TRUE(p2.captures.empty());
    // 17 tokens back is past the merge distance: the guard is taken.
    store st2(c, true);
    auto p3 = run(st2, k, seq(0, 300), {-1, 282});
    ASSERT_EQ(p3.captures.size(), 2u);
    EXPECT_EQ(p3.captures[1].n_tokens, 299);
    EXPECT_EQ(p3.captures[1].kind, point_kind::guard);
    auto p4 = st2.plan(k, seq(0, 300), {-1, 282}, 2.0);
    EXPECT_EQ(p4.n_restore, 299);
    EXPECT_EQ(p4.kind, point_kind::guard);
    // Off (0): the guard beside the boundary, as before.
    c.guard_merge = 0;
    store st3(c, true);
    auto p5 = run(st3, k, seq(0, 300), {-1, 294});
    ASSERT_EQ(p5.captures.size(), 2u);
    EXPECT_EQ(p5.captures[1].n_tokens, 299);
}

TEST_F(StoreTest, UserTurnAfterAgentLoopAbsorbsTheLoop) {
    store st(small_config(), true);
    const key k{"b", "s"};
    // A user turn (history boundary 195), then two loop steps ending with tool results (no
    // history boundary), then a user turn that diverges right after 197 (re-rendered loop).
    run(st, k, seq(0, 200), {-1, 195});
    const tokens loop1 = cat(seq(0, 200), seq(10000, 40));
    auto p1 = run(st, k, loop1, {-1, -1}, 2.0);
    EXPECT_TRUE(p1.absorbs);
    const tokens loop2 = cat(loop1, seq(20000, 40));
    auto p2 = run(st, k, loop2, {-1, -1}, 3.0);
    EXPECT_TRUE(p2.absorbs);
    auto p3 = run(st, k, cat(seq(0, 197), seq(30000, 60)), {-1, 250}, 4.0);
    EXPECT_EQ(p3.n_restore, 195);
    EXPECT_EQ(p3.kind, point_kind::turn);
    EXPECT_TRUE(p3.absorbs) << "the loop entry kept the user turn's boundary as its threshold";
    EXPECT_EQ(st.entries().size(), 1u);
}

TEST_F(StoreTest, ResetFreesEverything) {
    store st(small_config(), true);
    run(st, key{"b", "s"}, seq(0, 300), {120, 295});
    auto r = st.reset();
    EXPECT_EQ(r.entries_freed, 2);  // the conversation and its anchor
    EXPECT_GT(r.bytes_freed, 0u);
    EXPECT_TRUE(st.entries().empty());
    st.check_invariants();
}

// --- the anchor ladder (ladder.h; docs/architecture.md "The anchor ladder") ---

// A system region of 1,000 tokens after a 100-token tool block, lines every 10 tokens; a new
// session whose system text parts from it in its last lines (a date, a folder).
struct ladder_case {
    std::vector<int32_t> lines;
    plan_hints hints;
    tokens system = seq(0, 1000);
    ladder_case() {
        for (int32_t i = 10; i < 2000; i += 10) {
            lines.push_back(i);
        }
        hints.tools_anchor_tokens = 100;
        hints.anchor_tokens = 1000;
        hints.line_starts = lines;
    }
    /** The system region with its tokens from `from` on replaced (another folder/date). */
    tokens varied(int32_t from, int32_t salt) const {
        tokens t = system;
        for (size_t i = static_cast<size_t>(from); i < t.size(); ++i) {
            t[i] = 50000 + salt * 1000 + static_cast<int32_t>(i);
        }
        return t;
    }
};

TEST_F(StoreTest, LadderRungsGoWithTheAnchorAndServeASystemTextThatPartsLate) {
    config c = small_config();
    c.ladder_step = 256;
    c.ladder_near_step = 64;
    c.ladder_near_tokens = 512;
    c.ladder_defer = false;  // split the request's prefill at the near rungs (LadderJobs: deferred)
    store st(c, /*hybrid=*/true);
    ladder_case lc;
    const tokens user = seq(9000, 40);
    // Session 1: cold; the anchor at 998 carries its rungs (line starts walking back from it).
    auto p1 = run(st, key{"b", "s1"}, cat(lc.system, user), lc.hints);
    EXPECT_EQ(p1.n_restore, 0);
    std::vector<int32_t> planned;
    std::vector<int32_t> at_pass_end;
    for (const auto & cp : p1.captures) {
        if (cp.kind == point_kind::ladder) {
            planned.push_back(cp.n_tokens);
        }
        if (cp.at_pass_end) {
            at_pass_end.push_back(cp.n_tokens);
        }
    }
    // Near rungs from 460 on (the last 512 tokens before the anchor), and one far point 256
    // after the tools anchor's 98, taken at a pass end (here, the test captures it there).
    EXPECT_EQ(planned, (std::vector<int32_t>{354, 460, 520, 580, 640, 700, 760, 820, 880, 940}));
    EXPECT_EQ(at_pass_end, (std::vector<int32_t>{354}));
    bool found = false;
    for (const auto & e : st.entries()) {
        if (e.anchor && e.n_tokens == 998) {
            found = true;
            ASSERT_EQ(e.checkpoints.size(), planned.size());
            for (size_t i = 0; i < planned.size(); ++i) {
                EXPECT_EQ(e.checkpoints[i].first, planned[i]);
                EXPECT_EQ(e.checkpoints[i].second, point_kind::ladder);
            }
        } else if (!e.anchor) {
            for (const auto & cp : e.checkpoints) {
                EXPECT_NE(cp.second, point_kind::ladder) << "a rung stayed with the conversation entry";
            }
        }
    }
    EXPECT_TRUE(found);
    // Session 2, another folder: the system text parts at 955 (inside the line from 950).
    auto p2 = run(st, key{"b", "s2"}, cat(lc.varied(955, 1), user), lc.hints);
    EXPECT_EQ(p2.n_restore, 940);
    EXPECT_EQ(p2.kind, point_kind::ladder);
    EXPECT_FALSE(p2.absorbs);
    // It pins its own anchor, with rungs only after what it restored.
    for (const auto & cp : p2.captures) {
        EXPECT_TRUE(cp.kind != point_kind::ladder || cp.n_tokens > 940) << cp.n_tokens;
    }
    // Session 3 parts in the middle (at 735): the rung at 700 of the first anchor.
    auto p3 = run(st, key{"b", "s3"}, cat(lc.varied(735, 2), user), lc.hints);
    EXPECT_EQ(p3.n_restore, 700);
    EXPECT_EQ(p3.kind, point_kind::ladder);
}

TEST_F(StoreTest, VolatileStartsGetSplitRungsBeforeTheNearZoneToolsIncluded) {
    // Per-session content (an absolute path, a date) at 40 (inside the tool block, before the
    // tools anchor at 98), at 50 (within a quarter near step of 40: skipped), at 200 and at 300 (the far
    // zone), and at 900 (the near zone, which has its own rungs): split rungs at 40, 200, 300. With
    // fewer rungs than those, the first half and the last half of them (40 and 300 for 2: an
    // agent writes its folder early and its memory paths late; 40 alone for 1).
    config c = small_config();
    c.ladder_step = 256;
    c.ladder_near_step = 64;
    c.ladder_near_tokens = 512;
    c.ladder_defer = false;  // split the request's prefill at them (LadderJobs: deferred)
    const std::vector<int32_t> volatile_at = {40, 50, 200, 300, 900};
    const std::map<int32_t, std::vector<int32_t>> want = {{8, {40, 200, 300}}, {2, {40, 300}}, {1, {40}}, {0, {}}};
    for (const int32_t cap : {8, 2, 1, 0}) {
        SCOPED_TRACE(cap);
        c.ladder_volatile_rungs = cap;
        store st(c, /*hybrid=*/true);
        ladder_case lc;
        lc.hints.volatile_starts = volatile_at;
        const tokens user = seq(9000, 40);
        auto p1 = run(st, key{"b", "s1"}, cat(lc.system, user), lc.hints);
        std::vector<int32_t> split_rungs;
        for (const auto & cp : p1.captures) {
            if (cp.kind == point_kind::ladder && !cp.at_pass_end && cp.n_tokens < 460) {
                split_rungs.push_back(cp.n_tokens);
            }
        }
        EXPECT_EQ(split_rungs, want.at(cap));
        // A new session whose tools differ at 45 (another folder in a tool's description) restores
        // the rung at 40 with the rungs on, the start of nothing without them.
        auto p2 = run(st, key{"b", "s2"}, cat(lc.varied(45, 1), user), lc.hints);
        EXPECT_EQ(p2.n_restore, cap > 0 ? 40 : 0);
        // One parting at 310 restores the rung at 300 (with one rung, or none: the far point at
        // 354 is past it, so the tools anchor at 98).
        auto p3 = run(st, key{"b", "s3"}, cat(lc.varied(310, 2), user), lc.hints);
        EXPECT_EQ(p3.n_restore, cap >= 2 ? 300 : 98);
    }
    // A system region already pinned plans none (the rungs came with its anchor).
    c.ladder_volatile_rungs = 8;
    store st2(c, /*hybrid=*/true);
    ladder_case lc;
    lc.hints.volatile_starts = volatile_at;
    run(st2, key{"b", "s1"}, cat(lc.system, seq(9000, 40)), lc.hints);
    auto again = st2.plan(key{"b", "s4"}, cat(lc.system, seq(9500, 40)), lc.hints, 5.0);
    EXPECT_EQ(again.n_restore, 998);
    EXPECT_TRUE(std::none_of(again.captures.begin(), again.captures.end(),
                             [](const capture_point & cp) { return cp.kind == point_kind::ladder; }));
}

// --- ladder jobs (config::ladder_defer; docs/architecture.md "Ladder jobs") ---

namespace {

/** The ladder rungs of the anchor entry of `n` tokens in `st` (empty when there is none). */
std::vector<int32_t> anchor_rungs(const store & st, int32_t n) {
    std::vector<int32_t> out;
    for (const auto & e : st.entries()) {
        if (e.anchor && e.n_tokens == n) {
            for (const auto & [at, kind] : e.checkpoints) {
                EXPECT_EQ(kind, point_kind::ladder);
                out.push_back(at);
            }
        }
    }
    return out;
}

/** What the scheduler does with a ladder job's plan: a fake state captured at each rung, then
 *  store::add_rungs. Returns the rungs added. */
int32_t make_rungs(store & st, const key & k, const tokens & anchor, const restore_plan & job, double now) {
    std::vector<checkpoint> made;
    uint64_t reserved = 0;
    for (const auto & c : job.captures) {
        EXPECT_EQ(c.kind, point_kind::ladder);
        EXPECT_FALSE(c.at_pass_end);
        EXPECT_TRUE(st.reserve(100));
        reserved += 100;
        made.push_back({c.n_tokens, point_kind::ladder, fake(100)});
    }
    const int32_t added = st.add_rungs(k, anchor, std::move(made), reserved, now);
    st.check_invariants();
    return added;
}

}  // namespace

TEST_F(StoreTest, LadderJobsMakeTheDeferredRungsOffTheRequestsPathAndTheyServeALaterSession) {
    config c = small_config();
    c.ladder_step = 256;
    c.ladder_near_step = 64;
    c.ladder_near_tokens = 512;
    ASSERT_TRUE(c.ladder_defer);  // the default
    store st(c, /*hybrid=*/true);
    ladder_case lc;
    lc.hints.volatile_starts = {40, 200};
    const tokens user = seq(9000, 40);
    const key k{"b", "s1"};
    // Session 1: its prefill splits at one rung, the volatile one at 40 inside the tool block
    // (before the tools anchor at 98 no state is stored that a job could start from). The far
    // point (354, at a pass end) stays on its path; the near rungs and the volatile one at 200
    // are deferred.
    auto p1 = run(st, k, cat(lc.system, user), lc.hints);
    std::vector<int32_t> split_rungs;
    std::vector<int32_t> deferrable;
    for (const auto & cp : p1.captures) {
        if (cp.kind == point_kind::ladder && !cp.at_pass_end) {
            (cp.deferrable ? deferrable : split_rungs).push_back(cp.n_tokens);
        }
        EXPECT_TRUE(!cp.deferrable || cp.kind == point_kind::ladder) << cp.n_tokens;
    }
    EXPECT_EQ(split_rungs, (std::vector<int32_t>{40}));
    EXPECT_EQ(deferrable, (std::vector<int32_t>{200, 460, 520, 580, 640, 700, 760, 820, 880, 940}));
    // With the engine to itself its prefill passes over them (lifecycle::after_chunk; the test's
    // run() captures none of them), and the anchor hands them to a ladder job.
    p1.deferred_rungs = deferrable;
    EXPECT_EQ(anchor_rungs(st, 98), (std::vector<int32_t>{40}));
    EXPECT_EQ(anchor_rungs(st, 998), (std::vector<int32_t>{354}));
    // The cold split points (a bypass, or a miss's twin) leave them out too.
    for (const auto & cp : st.cold_split_points(cat(lc.system, user), lc.hints)) {
        EXPECT_TRUE(cp.kind != point_kind::ladder || cp.at_pass_end || cp.deferrable || cp.n_tokens == 40)
            << cp.n_tokens;
    }
    const tokens anchor(lc.system.begin(), lc.system.begin() + 998);
    ASSERT_TRUE(st.holds_anchor(k, anchor));
    EXPECT_FALSE(st.holds_anchor(k, tokens(lc.system.begin(), lc.system.begin() + 997)));
    // Before the job, a session parting at 955 restores only the far rung.
    EXPECT_EQ(st.plan(key{"b", "probe"}, cat(lc.varied(955, 1), user), lc.hints, 2.0).n_restore, 354);
    // The job's first stretch: from the tools anchor (98, the latest state before 200) up to the
    // rung at 200 only: the far rung at 354 is held, and the next stretch restores it.
    std::vector<int32_t> left = p1.deferred_rungs;
    const restore_plan j1 = st.plan_ladder_job(k, anchor, left);
    EXPECT_EQ(j1.n_restore, 98);
    EXPECT_EQ(j1.op, restore_op::load_ram);
    EXPECT_EQ(j1.kind, point_kind::anchor);
    EXPECT_EQ(j1.recurrent, nullptr);
    ASSERT_EQ(j1.captures.size(), 1u);
    EXPECT_EQ(j1.captures[0].n_tokens, 200);
    EXPECT_EQ(make_rungs(st, k, anchor, j1, 3.0), 1);
    std::erase_if(left, [](int32_t r) { return r <= 200; });
    // The second: from the far rung (a checkpoint of the anchor entry) through every near rung.
    const restore_plan j2 = st.plan_ladder_job(k, anchor, left);
    EXPECT_EQ(j2.n_restore, 354);
    EXPECT_EQ(j2.kind, point_kind::ladder);
    EXPECT_NE(j2.recurrent, nullptr);
    EXPECT_EQ(j2.source_tokens, 998);
    ASSERT_EQ(j2.captures.size(), left.size());
    EXPECT_EQ(j2.captures.back().n_tokens, 940);
    EXPECT_EQ(make_rungs(st, k, anchor, j2, 4.0), 9);
    EXPECT_EQ(anchor_rungs(st, 998), (std::vector<int32_t>{200, 354, 460, 520, 580, 640, 700, 760, 820, 880, 940}));
    const auto s = st.get_stats();
    EXPECT_EQ(s.ladder_deferred_rungs.at("made"), 10);
    EXPECT_EQ(s.ladder_deferred_rungs.count("dropped") ? s.ladder_deferred_rungs.at("dropped") : 0, 0);
    // Session 2, another folder parting at 955: the near rung at 940; session 3 at 205: the
    // volatile rung at 200.
    auto p2 = run(st, key{"b", "s2"}, cat(lc.varied(955, 1), user), lc.hints, 5.0);
    EXPECT_EQ(p2.n_restore, 940);
    EXPECT_EQ(p2.kind, point_kind::ladder);
    auto p3 = run(st, key{"b", "s3"}, cat(lc.varied(205, 2), user), lc.hints, 6.0);
    EXPECT_EQ(p3.n_restore, 200);
    EXPECT_EQ(p3.kind, point_kind::ladder);
}

TEST_F(StoreTest, UnderAFullBudgetALadderRungWorthLessThanWhatItWouldPushOutIsNotPlanned) {
    // A system text's first sight plans its ladder (ladder_case: a far rung at a pass end and
    // the near rungs, each a split or a ladder job). Beside it, a long conversation on another
    // system text: 3,000 tokens that its entry's 300 bytes save, worth far more per byte than a
    // rung of 100 bytes that saves the 60-254 tokens since the point below it. With room for two
    // rungs left in the budget, the two worth the most (the far rung, 254 tokens; the first near
    // one, 106) are planned and the others not: each would push out the conversation, or be
    // dropped again by the eviction soon after (store_value.cpp cheapest_rung), its split paid
    // for nothing. Recency, or a budget with room, plans them all (the positive case).
    const tokens user = seq(9000, 40);
    ladder_case lc;
    auto first_sight = [&](eviction_policy policy, uint64_t room) {
        config c = small_config();
        c.ladder_step = 256;
        c.ladder_near_step = 64;
        c.ladder_near_tokens = 512;
        c.eviction = policy;
        // What the conversation holds in RAM (its checkpoints), measured on a store of its own.
        store probe(c, /*hybrid=*/true);
        run(probe, key{"b", "conv"}, seq(100000, 3000), {}, 1.0);
        c.ram_bytes = probe.ram_bytes() + room;
        auto st = std::make_unique<store>(c, /*hybrid=*/true);
        run(*st, key{"b", "conv"}, seq(100000, 3000), {}, 1.0);
        EXPECT_EQ(st->ram_bytes() + room, c.ram_bytes);
        return st;
    };
    auto ladder_of = [](const std::vector<capture_point> & cps) {
        std::vector<int32_t> out;
        for (const auto & cp : cps) {
            if (cp.kind == point_kind::ladder) {
                out.push_back(cp.n_tokens);
            }
        }
        return out;
    };
    auto with_room = first_sight(eviction_policy::value, 1 << 20);
    const auto all = with_room->plan(key{"b", "s1"}, cat(lc.system, user), lc.hints, 2.0);
    const std::vector<int32_t> every{354, 460, 520, 580, 640, 700, 760, 820, 880, 940};
    EXPECT_EQ(ladder_of(all.captures), every);
    EXPECT_EQ(all.rungs_not_planned, 0);

    auto tight = first_sight(eviction_policy::value, 250);
    const auto p = tight->plan(key{"b", "s1"}, cat(lc.system, user), lc.hints, 2.0);
    EXPECT_EQ(ladder_of(p.captures), (std::vector<int32_t>{354, 460}));
    EXPECT_EQ(p.rungs_not_planned, static_cast<int32_t>(every.size()) - 2);
    EXPECT_TRUE(std::any_of(p.captures.begin(), p.captures.end(),
                            [](const capture_point & cp) { return cp.kind == point_kind::anchor && cp.n_tokens == 998; }))
        << "the anchor itself is planned";
    EXPECT_EQ(tight->get_stats().ladder_rungs_not_planned, static_cast<int64_t>(every.size()) - 2);
    // A bypass of the same prompt splits where that miss splits.
    EXPECT_EQ(ladder_of(tight->cold_split_points(cat(lc.system, user), lc.hints)), (std::vector<int32_t>{354, 460}));

    auto recency = first_sight(eviction_policy::recency, 250);
    const auto r = recency->plan(key{"b", "s1"}, cat(lc.system, user), lc.hints, 2.0);
    EXPECT_EQ(ladder_of(r.captures), every) << "recency keeps no value: every rung is planned";
    EXPECT_EQ(r.rungs_not_planned, 0);
}

TEST_F(StoreTest, ALadderJobWhoseAnchorIsGoneDropsItsRungsAndACapKeepsTheNearest) {
    config c = small_config();
    c.ladder_step = 256;
    c.ladder_near_step = 64;
    c.ladder_near_tokens = 512;
    c.ladder_max_rungs = 4;
    store st(c, /*hybrid=*/true);
    ladder_case lc;
    const key k{"b", "s1"};
    auto p1 = run(st, k, cat(lc.system, seq(9000, 40)), lc.hints);
    std::vector<int32_t> deferred;
    for (const auto & cp : p1.captures) {
        if (cp.deferrable) {
            deferred.push_back(cp.n_tokens);
        }
    }
    ASSERT_FALSE(deferred.empty());
    const tokens anchor(lc.system.begin(), lc.system.begin() + 998);
    const auto held = anchor_rungs(st, 998);
    // At most ladder_max_rungs in all: the far end of the region goes first.
    const restore_plan j = st.plan_ladder_job(k, anchor, deferred);
    make_rungs(st, k, anchor, j, 2.0);
    const auto rungs = anchor_rungs(st, 998);
    ASSERT_EQ(rungs.size(), 4u);
    EXPECT_EQ(rungs.back(), deferred.back());
    EXPECT_GE(rungs.front(), held.empty() ? 0 : held.front());
    // A job for an anchor no longer held adds nothing and counts its rungs dropped.
    st.reset();
    const auto before = st.get_stats().ladder_deferred_rungs;
    const restore_plan cold = st.plan_ladder_job(k, anchor, {700, 940});
    EXPECT_EQ(cold.n_restore, 0);
    EXPECT_EQ(cold.op, restore_op::none);
    EXPECT_EQ(make_rungs(st, k, anchor, cold, 3.0), 0);
    const auto after = st.get_stats().ladder_deferred_rungs;
    EXPECT_EQ(after.at("dropped") - (before.count("dropped") ? before.at("dropped") : 0), 2);
    EXPECT_EQ(st.ram_bytes(), 0u);  // the job's reservations are released
}

TEST_F(StoreTest, WithoutTheLadderASystemTextThatPartsLateRestoresOnlyTheToolsAnchor) {
    store st(small_config(), /*hybrid=*/true);  // ladder_step 0
    ladder_case lc;
    const tokens user = seq(9000, 40);
    run(st, key{"b", "s1"}, cat(lc.system, user), lc.hints);
    auto p2 = run(st, key{"b", "s2"}, cat(lc.varied(955, 1), user), lc.hints);
    EXPECT_EQ(p2.n_restore, 98);  // the tools anchor, minus its BPE slack
    EXPECT_EQ(p2.kind, point_kind::anchor);
}

TEST_F(StoreTest, DenseFamiliesPlanNoRungs) {
    config c = small_config();
    c.ladder_step = 256;
    store st(c, /*hybrid=*/false);
    ladder_case lc;
    auto p1 = st.plan(key{"b", "s"}, cat(lc.system, seq(9000, 40)), lc.hints, 1.0);
    for (const auto & cp : p1.captures) {
        EXPECT_NE(cp.kind, point_kind::ladder);
    }
}

TEST_F(StoreTest, DivergenceCheckpointMovesBackToItsLineStart) {
    config c = small_config();
    c.divergence_min_gain = 32;
    c.divergence_slack = 64;
    store st(c, /*hybrid=*/true);
    std::vector<int32_t> lines;
    for (int32_t i = 10; i < 1000; i += 10) {
        lines.push_back(i);
    }
    plan_hints h;
    h.line_starts = lines;
    run(st, key{"b", "s"}, seq(0, 300), h);
    // Parts from the stored prompt at 205 (inside the line from 200): the divergence
    // checkpoint goes to 200, not 205.
    tokens p = cat(seq(0, 205), seq(7000, 100));
    auto p2 = run(st, key{"b", "s"}, p, h);
    bool at_line = false;
    for (const auto & cp : p2.captures) {
        EXPECT_FALSE(cp.kind == point_kind::divergence && cp.n_tokens != 200) << cp.n_tokens;
        at_line = at_line || (cp.kind == point_kind::divergence && cp.n_tokens == 200);
    }
    EXPECT_TRUE(at_line);
    // A third prompt parting at 202 (earlier than 205, same line) still restores 200.
    auto p3 = run(st, key{"b", "s"}, cat(seq(0, 202), seq(8000, 100)), h);
    EXPECT_EQ(p3.n_restore, 200);
    EXPECT_EQ(p3.kind, point_kind::divergence);
}

// --- misses classified by cause (reasons.h; docs/prompt-cache.md "Why a lookup missed") ---

TEST_F(StoreTest, MissesAndShortHitsAreClassifiedByCause) {
    config c = small_config();
    c.max_entries = 1;
    store st(c, /*hybrid=*/true);
    auto causes = [&] { return st.get_stats().misses_by_cause; };
    // A new prompt.
    auto p1 = run(st, key{"b", "s"}, seq(0, 300));
    EXPECT_EQ(p1.cause, miss_cause::no_shared_prefix);
    // Shares 200 tokens with entry 1, whose only checkpoint (the guard at 284) is past that.
    auto p2 = st.plan(key{"b", "s"}, cat(seq(0, 200), seq(5000, 100)), {}, 2.0);
    EXPECT_EQ(p2.n_restore, 0);
    EXPECT_EQ(p2.cause, miss_cause::before_first_restore_point);
    EXPECT_NE(p2.reason.find("miss cause: before_first_restore_point"), std::string::npos) << p2.reason;
    // Another bucket: an entry under another key shares more. Its dimensions are recorded.
    key_dims da;
    da.model_id = "m";
    da.template_sig = "t1";
    da.tools = "x";
    key_dims db = da;
    db.template_sig = "t2";
    db.tools = "y";
    auto p3 = st.plan(key{"other", "s", db}, seq(0, 300), {}, 3.0);
    EXPECT_EQ(p3.cause, miss_cause::key_differs);
    EXPECT_EQ(st.get_stats().key_differs.at("unrecorded"), 1);  // entry 1 has no dimensions
    // Entry 1 evicted by the entry cap (max_entries 1): a ghost; the same prompt again is a
    // miss "evicted", not "no_shared_prefix".
    run(st, key{"b", "s"}, seq(7000, 300), {}, 4.0);
    EXPECT_EQ(st.get_stats().ghosts, 1);
    auto p4 = st.plan(key{"b", "s"}, seq(0, 300), {}, 5.0);
    EXPECT_EQ(p4.n_restore, 0);
    EXPECT_EQ(p4.cause, miss_cause::evicted);
    // A short prompt (5 tokens) sharing 3 (< min prefix 4) with the live entry: below the
    // minimum; a long one sharing the same 3 (a template header at most): nothing reusable.
    auto p5 = st.plan(key{"b", "s"}, cat(seq(7000, 3), seq(9000, 2)), {}, 6.0);
    EXPECT_EQ(p5.cause, miss_cause::below_min_prefix);
    auto p6 = st.plan(key{"b", "s"}, cat(seq(7000, 3), seq(9000, 50)), {}, 6.5);
    EXPECT_EQ(p6.cause, miss_cause::no_shared_prefix);
    st.count_bypassed();
    const auto m = causes();
    EXPECT_EQ(m.at("no_shared_prefix"), 3);  // p1, the 7000.. prompt and p6
    EXPECT_EQ(m.at("before_first_restore_point"), 1);
    EXPECT_EQ(m.at("key_differs"), 1);
    EXPECT_EQ(m.at("evicted"), 1);
    EXPECT_EQ(m.at("below_min_prefix"), 1);
    EXPECT_EQ(m.at("bypassed"), 1);
    // The causes name every miss (bypassed is not a lookup).
    int64_t sum = 0;
    for (const auto & [cause, n] : m) {
        sum += cause == "bypassed" ? 0 : n;
    }
    EXPECT_EQ(sum, st.get_stats().misses);
    // A reset forgets the ghosts.
    st.reset();
    EXPECT_EQ(st.get_stats().ghosts, 0);
}

TEST_F(StoreTest, AHitThatRestoresWhatIsSharedIsNotShortAndOneFarShortOfItIs) {
    for (const bool far : {false, true}) {
        store st(small_config(), /*hybrid=*/true);
        // Checkpoints: turn at 100 (the history boundary), guard at 284.
        run(st, key{"b", "s"}, seq(0, 300), {-1, 100});
        // Shares 290 tokens: the guard at 284 is within 64 of it, a full hit. Shares 250: only
        // the turn at 100 is in reach, 150 short of what is shared.
        const int32_t shared = far ? 250 : 290;
        auto p = st.plan(key{"b", "s"}, cat(seq(0, shared), seq(5000, 100)), {}, 2.0);
        EXPECT_EQ(p.n_restore, far ? 100 : 284);
        if (far) {
            EXPECT_EQ(p.cause, miss_cause::before_first_restore_point);
            EXPECT_EQ(st.get_stats().short_hits_by_cause.at("before_first_restore_point"), 1);
        } else {
            EXPECT_FALSE(p.cause.has_value());
            EXPECT_TRUE(st.get_stats().short_hits_by_cause.empty());
        }
        EXPECT_TRUE(st.get_stats().misses_by_cause.count("before_first_restore_point") == 0);
    }
}

TEST_F(StoreTest, AnEditOfTheLastUserMessageRestoresUpToItsStart) {
    store st(small_config(), /*hybrid=*/true);
    const key k{"b", "s"};
    // Turn 1, then turn 2: the reply and a long tool result (200 tokens) before the next user
    // message, which starts at 500.
    run(st, k, seq(0, 200), {-1, 195});
    const tokens head = cat(seq(0, 200), seq(3000, 300));
    auto p2 = run(st, k, cat(head, seq(8000, 60)), plan_hints{-1, 555, -1, {}, 500}, 2.0);
    EXPECT_TRUE(std::any_of(p2.captures.begin(), p2.captures.end(), [](const capture_point & c) {
        return c.n_tokens == 500 && c.kind == point_kind::turn;
    }));
    // The user edits that message from its 20th token on: restored up to its start.
    auto p3 = st.plan(k, cat(cat(head, seq(8000, 20)), seq(9500, 40)), plan_hints{-1, 555, -1, {}, 500}, 3.0);
    EXPECT_EQ(p3.n_restore, 500);
    EXPECT_EQ(p3.kind, point_kind::turn);
    // A request with client cache breakpoints keeps those instead (no last-user turn).
    store fresh(small_config(), /*hybrid=*/true);
    plan_hints marked{-1, 555, -1, {}, 500};
    marked.breakpoint_tokens = {300};
    auto p4 = fresh.plan(key{"b", "s"}, cat(head, seq(8000, 60)), marked, 4.0);
    EXPECT_TRUE(std::none_of(p4.captures.begin(), p4.captures.end(),
                             [](const capture_point & c) { return c.n_tokens == 500; }));
    EXPECT_TRUE(std::any_of(p4.captures.begin(), p4.captures.end(),
                            [](const capture_point & c) { return c.n_tokens == 298 && c.kind == point_kind::turn; }));
}

TEST_F(StoreTest, ALastUserStartAFewTokensAfterTheRestorePointIsNotASplit) {
    // A warm user turn: turn 1's history boundary at 195 is restored, and the new user message
    // starts 5 tokens later (the end-of-turn markup). With --cache-last-user-min-gain 32 no
    // checkpoint is planned there (a split costs more than 5 tokens); an edit of the message
    // then restores the boundary at 195. At 0 the old rule holds: a checkpoint at 200.
    for (const int32_t min_gain : {32, 0}) {
        SCOPED_TRACE(min_gain);
        config c = small_config();
        c.last_user_min_gain = min_gain;
        store st(c, /*hybrid=*/true);
        const key k{"b", "s"};
        run(st, k, seq(0, 200), {-1, 195});
        const tokens head = cat(seq(0, 195), seq(3000, 5));
        auto p2 = run(st, k, cat(head, seq(8000, 60)), plan_hints{-1, 255, -1, {}, 200}, 2.0);
        EXPECT_EQ(p2.n_restore, 195);
        const bool at_user_start = std::any_of(p2.captures.begin(), p2.captures.end(), [](const capture_point & cp) {
            return cp.n_tokens == 200 && cp.kind == point_kind::turn;
        });
        EXPECT_EQ(at_user_start, min_gain == 0);
        // The history boundary is planned either way.
        EXPECT_TRUE(std::any_of(p2.captures.begin(), p2.captures.end(), [](const capture_point & cp) {
            return cp.n_tokens == 255 && cp.kind == point_kind::turn;
        }));
        // An edit of the message from its 20th token: its start (200), or the boundary 5 tokens
        // before it that the turn restored from and kept.
        auto p3 = st.plan(k, cat(cat(head, seq(8000, 20)), seq(9500, 40)), plan_hints{-1, 255, -1, {}, 200}, 3.0);
        EXPECT_EQ(p3.n_restore, min_gain == 0 ? 200 : 195);
        EXPECT_EQ(p3.kind, point_kind::turn);
        st.abandon(p3, 0);
        // A cold request plans it wherever it lies past the gain (here 200 tokens in).
        store fresh(c, /*hybrid=*/true);
        auto p4 = fresh.plan(k, cat(head, seq(8000, 60)), plan_hints{-1, 255, -1, {}, 200}, 4.0);
        EXPECT_TRUE(std::any_of(p4.captures.begin(), p4.captures.end(), [](const capture_point & cp) {
            return cp.n_tokens == 200 && cp.kind == point_kind::turn;
        }));
    }
}

TEST_F(StoreTest, PassEndMessageRungsLetANewSessionRestoreALongFirstMessage) {
    // An agent's first request: a system prompt (300 tokens), then one user message of a
    // 2,200-token context block (the folder, the environment) and a 20-token question, then
    // the generation prompt. Its pass-end rungs lie every 512 tokens back from the message's end
    // (2520), at most 4: 2008, 1496, 984 and 472 (still after the message start at 300).
    const tokens context = cat(seq(0, 300), seq(5000, 2200));
    const plan_hints first{-1, 2520, -1, {}, 300};
    for (const int32_t rungs_on : {4, 0}) {
        SCOPED_TRACE(rungs_on);
        config c = small_config();
        c.message_pass_rungs = rungs_on;
        store st(c, /*hybrid=*/true);
        auto p1 = run(st, key{"b", "s1"}, cat(cat(context, seq(9000, 20)), seq(100, 5)), first, 1.0);
        std::vector<int32_t> pass_end;
        for (const auto & cp : p1.captures) {
            if (cp.kind == point_kind::message) {
                EXPECT_TRUE(cp.at_pass_end) << cp.n_tokens;  // no split of their own
                pass_end.push_back(cp.n_tokens);
            }
        }
        EXPECT_EQ(pass_end, rungs_on ? (std::vector<int32_t>{472, 984, 1496, 2008}) : std::vector<int32_t>{});
        // A new session on the same system prompt and context with another question: it restores
        // the last rung before the question (2008), not the message start (300).
        auto p2 = st.plan(key{"b", "s2"}, cat(cat(context, seq(9500, 25)), seq(100, 5)),
                          plan_hints{-1, 2525, -1, {}, 300}, 2.0);
        EXPECT_EQ(p2.n_restore, rungs_on ? 2008 : 300);
        EXPECT_EQ(p2.kind, rungs_on ? point_kind::message : point_kind::turn);
        st.abandon(p2, 0);
        // A short message (under one step) takes none.
        store fresh(c, /*hybrid=*/true);
        auto p3 = fresh.plan(key{"b", "s3"}, cat(cat(seq(0, 300), seq(9000, 400)), seq(100, 5)),
                             plan_hints{-1, 700, -1, {}, 300}, 3.0);
        EXPECT_TRUE(std::none_of(p3.captures.begin(), p3.captures.end(),
                                 [](const capture_point & cp) { return cp.kind == point_kind::message; }));
    }
}

TEST_F(StoreTest, MessageRungsLetAnEditRestoreUpToTheRungBeforeIt) {
    config c = small_config();
    c.message_rungs = 8;
    c.message_step = 16;
    store st(c, /*hybrid=*/true);
    const key k{"b", "s"};
    run(st, k, seq(0, 200), {-1, 195});
    const tokens head = cat(seq(0, 200), seq(3000, 300));
    // The user message spans [500, 555): rungs at 516, 532, 548 besides the last-user turn at 500.
    auto p2 = run(st, k, cat(head, seq(8000, 60)), plan_hints{-1, 555, -1, {}, 500}, 2.0);
    std::vector<int32_t> rungs;
    for (const auto & cp : p2.captures) {
        if (cp.kind == point_kind::message) {
            rungs.push_back(cp.n_tokens);
        }
    }
    EXPECT_EQ(rungs, (std::vector<int32_t>{516, 532, 548}));
    // An edit from the message's 40th token restores the rung at 532 (not the message start).
    const tokens edited = cat(cat(head, seq(8000, 40)), seq(9500, 30));
    auto p3 = st.plan(k, edited, plan_hints{-1, 565, -1, {}, 500}, 3.0);
    EXPECT_EQ(p3.n_restore, 532);
    EXPECT_EQ(p3.kind, point_kind::message);
    st.abandon(p3, 0);
    // An edit inside the first step still restores the message start.
    auto p4 = st.plan(k, cat(cat(head, seq(8000, 10)), seq(9600, 30)), plan_hints{-1, 535, -1, {}, 500}, 3.5);
    EXPECT_EQ(p4.n_restore, 500);
    EXPECT_EQ(p4.kind, point_kind::turn);
    st.abandon(p4, 0);
    // The next user turn (its message at [620, 700)) takes its own rungs; the old message's go.
    const tokens turn3 = cat(cat(cat(head, seq(8000, 60)), seq(4000, 60)), seq(8500, 80));
    run(st, k, turn3, plan_hints{-1, 700, -1, {}, 620}, 4.0);
    const auto after_turn3 = st.entries();
    ASSERT_EQ(after_turn3.size(), 1u);
    std::vector<int32_t> kept;
    for (const auto & cp : after_turn3.front().checkpoints) {
        if (cp.second == point_kind::message) {
            kept.push_back(cp.first);
        }
    }
    EXPECT_EQ(kept, (std::vector<int32_t>{636, 652, 668, 684}));
    const stats s3 = st.get_stats();
    EXPECT_EQ(s3.largest_lineage.message_rungs, 4);
    EXPECT_EQ(s3.largest_lineage.checkpoints, static_cast<int64_t>(after_turn3.front().checkpoints.size()) - 4);
    EXPECT_LE(s3.largest_lineage.checkpoints, 4);
    EXPECT_EQ(s3.largest_lineage.bytes, after_turn3.front().bytes);
    // Off: only the message start.
    config off = small_config();
    store st2(off, true);
    run(st2, k, seq(0, 200), {-1, 195});
    auto q = st2.plan(k, cat(head, seq(8000, 60)), plan_hints{-1, 555, -1, {}, 500}, 2.0);
    EXPECT_TRUE(std::none_of(q.captures.begin(), q.captures.end(),
                             [](const capture_point & cp) { return cp.kind == point_kind::message; }));
}

TEST_F(StoreTest, MessageRungsHaveTheirOwnCapBesideMaxCheckpoints) {
    config c = small_config();
    c.message_rungs = 3;
    c.message_step = 16;
    c.max_checkpoints = 2;
    store st(c, /*hybrid=*/true);
    const key k{"b", "s"};
    // A 400-token message from cold: the step stretches to ceil(399 / 3) = 133.
    auto p = run(st, k, cat(seq(0, 100), seq(5000, 410)), plan_hints{-1, 500, -1, {}, 100});
    std::vector<int32_t> rungs;
    for (const auto & cp : p.captures) {
        if (cp.kind == point_kind::message) {
            rungs.push_back(cp.n_tokens);
        }
    }
    EXPECT_EQ(rungs, (std::vector<int32_t>{233, 366, 499}));
    const auto entries = st.entries();
    ASSERT_EQ(entries.size(), 1u);
    int32_t n_message = 0;
    int32_t n_other = 0;
    for (const auto & cp : entries.front().checkpoints) {
        (cp.second == point_kind::message ? n_message : n_other)++;
    }
    EXPECT_EQ(n_message, 3);
    EXPECT_EQ(n_other, 2) << "max_checkpoints counts the other checkpoints only";
}

}  // namespace
}  // namespace lineage::cache
