// Unit tests of the warm-up's cache side over fake engine states (no model): a warm-up of the
// next turn's prefix continues the entry the reply committed, is stored marked warmed, and the
// next request restores all of it (a counted warm-up hit) while the warm-up's own lookup stays
// out of the request counters; a preempted warm-up parks what it did; a warmed entry that leaves
// unused, or is continued short, is counted wasted; store::covers() tells a warm-up with nothing
// to add. Dense and hybrid. The store's check_invariants() after each request.
#include "scheduler/lifecycle.h"
#include "scheduler/sequence_pool.h"

#include "fake_engine_states.h"
#include "lifecycle_fixture.h"

#include <gtest/gtest.h>

#include <memory>

namespace lineage::scheduler {
namespace {

using fakes::cat;
using fakes::fake_engine_states;
using fakes::seq_of;

// A conversation as a Qwen3.5-like template renders it: the history, the generation prompt
// (4 tokens) the reply was generated after, and the reply re-rendered as a past turn (its
// header shared with the generation prompt's first 2 tokens, then other tokens).
const cache::tokens history = seq_of(0, 200);
const cache::tokens gen_prompt = {7001, 7002, 7003, 7004};
const cache::tokens past_turn = cat({7001, 7002}, seq_of(8000, 40));  // + next message header
const cache::tokens user_msg = seq_of(9000, 12);

class Warmup : public ::testing::TestWithParam<bool> {
protected:
    void SetUp() override {
        hybrid_ = GetParam();
        cache::config c = fakes::lifecycle_config();
        c.max_entries = 3;
        st_ = std::make_unique<fake_engine_states>(hybrid_);
        store_ = std::make_unique<cache::store>(c, hybrid_);
        pool_ = std::make_unique<sequence_pool>(*st_, *store_, 6);
        life_ = std::make_unique<lifecycle>(*st_, *store_, *pool_, hybrid_);
    }

    /** Admits `prompt` as the scheduler does (admit / admit_warmup): plan, a sequence, restore. */
    std::unique_ptr<slot> admit(const cache::tokens & prompt, int32_t history_len, bool warmup,
                                const std::string & session = "s") {
        auto s = fakes::new_slot(++next_id_, prompt, history_len, session);
        s->req->warmup = warmup;
        cache::plan_hints h;
        h.history_tokens = history_len;
        s->plan = warmup ? store_->plan_warmup(s->key, prompt, h, now_) : store_->plan(s->key, prompt, h, now_);
        fakes::place_and_restore(*s, *pool_, *life_, now_);
        return s;
    }

    /** Prefills in chunks that stop at the capture points, up to `upto` (-1: the prompt end),
     *  then decodes `n_gen` tokens when the prompt is in, then commits. */
    void run(slot & s, int32_t n_gen, int32_t upto = -1) {
        const int32_t end = upto < 0 ? s.prompt_size() : upto;
        bool done = s.n_past >= s.prompt_size() && life_->after_chunk(s, now_);
        while (!done && s.n_past < end) {
            const int32_t n = std::min({64, s.next_stop() - s.n_past, end - s.n_past});
            st_->decode(s.seq, n);
            s.n_past += n;
            done = life_->after_chunk(s, now_);
        }
        for (int32_t i = 0; done && i < n_gen; ++i) {
            st_->decode(s.seq, 1);
            s.n_past++;
            s.generated.push_back(900000 + i);
        }
        life_->commit(s, now_);
        store_->check_invariants();
        now_ += 1;
    }

    /** The first turn: history + generation prompt, a reply of 30 tokens. */
    void first_turn() {
        auto t1 = admit(cat(history, gen_prompt), 200, false);
        run(*t1, 30);
    }

    cache::tokens warm_prefix() const { return cat(history, past_turn); }

    /** The next user turn: the warmed entry is still there, and it continues it whole. */
    void next_turn_continues_the_warmup() {
        const cache::tokens w = warm_prefix();
        const cache::tokens p2 = cat(cat(w, user_msg), gen_prompt);
        auto t2 = admit(p2, static_cast<int32_t>(p2.size() - gen_prompt.size()), false);
        EXPECT_EQ(t2->n_past, static_cast<int32_t>(w.size()));
        run(*t2, 5);
    }

    bool hybrid_ = true;
    double now_ = 1;
    uint64_t next_id_ = 0;
    std::unique_ptr<fake_engine_states> st_;
    std::unique_ptr<cache::store> store_;
    std::unique_ptr<sequence_pool> pool_;
    std::unique_ptr<lifecycle> life_;
};

TEST_P(Warmup, TheNextTurnRestoresTheWarmedPrefixWhole) {
    first_turn();
    const cache::stats before = store_->get_stats();
    const cache::tokens w = warm_prefix();
    ASSERT_FALSE(store_->covers({"b", "s"}, w));
    const uint64_t reply_entry = store_->entries().front().id;
    auto warm = admit(w, -1, true);
    // It continues the reply's entry from the history boundary (or, dense, the shared prefix),
    // by a copy: the reply's entry stays as the resend twin.
    EXPECT_FALSE(warm->plan.absorbs);
    EXPECT_EQ(warm->plan.twin, reply_entry);
    EXPECT_EQ(warm->plan.op, cache::restore_op::share_device);
    EXPECT_EQ(warm->n_past, hybrid_ ? 200 : 202);
    run(*warm, 0);
    const cache::stats after_warm = store_->get_stats();
    // The warm-up's lookup is no request's.
    EXPECT_EQ(after_warm.lookups, before.lookups);
    EXPECT_EQ(after_warm.hits, before.hits);
    EXPECT_EQ(after_warm.tokens_prefilled, before.tokens_prefilled);
    auto es = store_->entries();
    ASSERT_EQ(es.size(), 2u);  // the warmed entry and the reply's, kept as the resend twin
    EXPECT_EQ(es[0].n_tokens, static_cast<int32_t>(w.size()));
    EXPECT_EQ(es[0].warmed, static_cast<int32_t>(w.size()));
    EXPECT_EQ(es[1].id, reply_entry);
    if (hybrid_) {
        // The warmed entry holds the conversation's restore points up to where it parted.
        EXPECT_FALSE(es[0].checkpoints.empty());
        for (const auto & [n, kind] : es[0].checkpoints) {
            EXPECT_TRUE(n <= 200 || n > static_cast<int32_t>(history.size() + 2)) << n;
        }
    }
    EXPECT_TRUE(store_->covers({"b", "s"}, w));
    EXPECT_FALSE(store_->covers({"another bucket", "s"}, w));

    // The next user turn: only its own tokens (the user message + generation prompt) to prefill.
    const cache::tokens p2 = cat(cat(w, user_msg), gen_prompt);
    auto t2 = admit(p2, static_cast<int32_t>(p2.size() - gen_prompt.size()), false);
    EXPECT_EQ(t2->n_past, static_cast<int32_t>(w.size()));
    EXPECT_EQ(t2->stats.hit_kind, "full");
    EXPECT_EQ(t2->plan.op, cache::restore_op::take_device);
    EXPECT_EQ(store_->get_stats().warmup.hits, 1);
    EXPECT_EQ(store_->get_stats().warmup.wasted, 0);
    // The next turn retired the twin: one entry per lineage again.
    for (const auto & e : store_->entries()) {
        EXPECT_NE(e.id, reply_entry);
    }
    EXPECT_EQ(store_->get_stats().evictions.at("superseded"), 1);
    run(*t2, 5);
    EXPECT_EQ(store_->entries().size(), 1u);
    EXPECT_EQ(store_->entries().front().warmed, 0);  // the new entry is the request's, not warmed
}

TEST_P(Warmup, ARegenerateAfterTheWarmupRestoresAllButOneToken) {
    first_turn();
    auto warm = admit(warm_prefix(), -1, true);
    run(*warm, 0);
    // The turn just answered, sent again (a regenerate, or a retry of a lost reply).
    const cache::tokens p1 = cat(history, gen_prompt);
    auto again = admit(p1, 200, false);
    EXPECT_EQ(again->n_past, static_cast<int32_t>(p1.size()) - 1);
    EXPECT_EQ(again->stats.hit_kind, hybrid_ ? "guard" : "prefix");
    EXPECT_TRUE(again->plan.absorbs);  // it takes the twin
    run(*again, 30);
    next_turn_continues_the_warmup();
}

TEST_P(Warmup, WithTheGuardMergedARegenerateTakesTheTwinAndTheWarmupStays) {
    if (!hybrid_) {
        GTEST_SKIP() << "a dense model takes no resend guard";
    }
    // --cache-guard-merge at its default: the guard (203) merges into the history boundary (200),
    // which the warmed entry inherits too; at that tie the twin serves the regenerate.
    cache::config c = fakes::lifecycle_config();
    c.max_entries = 3;
    c.guard_merge = 16;
    life_.reset();
    pool_.reset();
    store_ = std::make_unique<cache::store>(c, hybrid_);
    pool_ = std::make_unique<sequence_pool>(*st_, *store_, 6);
    life_ = std::make_unique<lifecycle>(*st_, *store_, *pool_, hybrid_);
    first_turn();
    auto warm = admit(warm_prefix(), -1, true);
    run(*warm, 0);
    const cache::tokens p1 = cat(history, gen_prompt);
    auto again = admit(p1, 200, false);
    EXPECT_EQ(again->n_past, 200);
    EXPECT_EQ(again->stats.hit_kind, "turn");
    EXPECT_TRUE(again->plan.absorbs);  // it takes the twin
    EXPECT_EQ(again->plan.twin, 0u);
    run(*again, 30);
    next_turn_continues_the_warmup();
}

TEST_P(Warmup, WithoutAWarmupTheNextTurnAbsorbsAndNoTwinIsKept) {
    // Control: a request (not a warm-up) that continues the reply's entry absorbs it.
    first_turn();
    const cache::tokens p2 = cat(cat(warm_prefix(), user_msg), gen_prompt);
    auto t2 = admit(p2, static_cast<int32_t>(p2.size() - gen_prompt.size()), false);
    EXPECT_TRUE(t2->plan.absorbs);
    EXPECT_EQ(t2->plan.twin, 0u);
    run(*t2, 5);
    EXPECT_EQ(store_->entries().size(), 1u);
}

TEST_P(Warmup, APreemptedWarmupParksWhatItDidAndTheNextRequestContinuesIt) {
    first_turn();
    const cache::tokens w = warm_prefix();
    auto warm = admit(w, -1, true);
    run(*warm, 0, 220);  // preempted after 220 tokens
    auto es = store_->entries();
    ASSERT_EQ(es.size(), 2u);  // and the resend twin
    EXPECT_EQ(es[0].n_tokens, 220);
    EXPECT_EQ(es[0].warmed, 220);
    // Resumed, the warm-up continues what it parked and keeps the twin linked.
    auto resumed = admit(w, -1, true);
    EXPECT_EQ(resumed->n_past, 220);
    EXPECT_TRUE(resumed->plan.absorbs);
    EXPECT_EQ(resumed->plan.twin, es[1].id);
    run(*resumed, 0, 230);
    ASSERT_EQ(store_->entries().size(), 2u);
    const cache::tokens p2 = cat(cat(w, user_msg), gen_prompt);
    auto t2 = admit(p2, static_cast<int32_t>(p2.size() - gen_prompt.size()), false);
    EXPECT_EQ(t2->n_past, 230);
    EXPECT_TRUE(t2->plan.absorbs);
    EXPECT_EQ(store_->get_stats().warmup.hits, 1);
    run(*t2, 5);
    EXPECT_EQ(store_->entries().size(), 1u);  // the twin retired
}

TEST_P(Warmup, ANextPromptThatLeavesTheWarmedPrefixEarlyWastesIt) {
    first_turn();
    const cache::tokens w = warm_prefix();
    auto warm = admit(w, -1, true);
    run(*warm, 0);
    // The client sent the reply back edited: the prompt leaves the warmed prefix at 210.
    const cache::tokens p2 = cat(cat(cat(history, {7001, 7002}), seq_of(8000, 8)), cat(seq_of(60000, 30), gen_prompt));
    auto t2 = admit(p2, static_cast<int32_t>(p2.size() - gen_prompt.size()), false);
    EXPECT_LT(t2->n_past, static_cast<int32_t>(w.size()));
    EXPECT_TRUE(t2->plan.absorbs);
    EXPECT_EQ(store_->get_stats().warmup.hits, 0);
    EXPECT_EQ(store_->get_stats().warmup.wasted, 1);
    run(*t2, 5);
}

TEST_P(Warmup, AWarmedEntryEvictedUnusedIsWasted) {
    first_turn();
    auto warm = admit(warm_prefix(), -1, true);
    run(*warm, 0);
    // Three other conversations push it out (max_entries 3, least recently used first).
    for (int i = 0; i < 3; ++i) {
        auto o = admit(seq_of(100000 * (i + 1), 50), 46, false, "other");
        run(*o, 2);
    }
    for (const auto & e : store_->entries()) {
        EXPECT_EQ(e.warmed, 0);
    }
    EXPECT_EQ(store_->get_stats().warmup.wasted, 1);
    EXPECT_EQ(store_->get_stats().warmup.hits, 0);
}

TEST_P(Warmup, CoversIgnoresAnchorsAndShorterEntries) {
    first_turn();
    const cache::tokens w = warm_prefix();
    EXPECT_FALSE(store_->covers({"b", "s"}, w));
    // The committed entry holds the history: a prefix of it is covered, one past it is not.
    EXPECT_TRUE(store_->covers({"b", "s"}, history));
    EXPECT_FALSE(store_->covers({"b", "s"}, cat(history, {12345})));
    store_->commit_anchor({"b", "s"}, w, cache::make_blob(cache::blob(16, 'F')), 0, now_);
    EXPECT_FALSE(store_->covers({"b", "s"}, w));  // an anchor is no conversation to continue
    store_->check_invariants();
}

INSTANTIATE_TEST_SUITE_P(Families, Warmup, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool> & i) { return i.param ? "hybrid" : "dense"; });

}  // namespace
}  // namespace lineage::scheduler
