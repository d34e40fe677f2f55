// The eviction value (store_value.cpp, value.h, tier_cost::prefill_seconds): the reuse model's
// estimates, the prefill cost fit, which copy leaves RAM under --cache-eviction value and under
// recency, admission of a parked entry, and the miss cause of a short hit an eviction caused.
#include "cache/rule/tier_cost.h"
#include "cache/store/store.h"
#include "cache/store/value.h"

#include "fake_states.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

namespace lineage::cache {
namespace {

using fakes::cat;
using fakes::fake;
using fakes::seq;

TEST(ReuseModel, LaplaceEstimatesPerUseClassFromOutcomesOnly) {
    reuse_model m;
    EXPECT_DOUBLE_EQ(m.probability(0), 0.5) << "no outcome yet: the prior";
    m.left_unused(0);
    m.left_unused(0);
    m.left_unused(0);
    m.reused(0);
    EXPECT_DOUBLE_EQ(m.probability(0), 2.0 / 6.0);  // (1 + 1) / (1 + 3 + 2)
    m.reused(1);
    m.reused(5);  // 2 or more: one class
    m.reused(2);
    EXPECT_DOUBLE_EQ(m.probability(1), 2.0 / 3.0);
    EXPECT_DOUBLE_EQ(m.probability(2), 3.0 / 4.0);
    EXPECT_DOUBLE_EQ(m.probability(9), 3.0 / 4.0);
    // A ghost found again: the failure becomes a success.
    m.ghost_reused(0);
    EXPECT_EQ(m.reused_count(0), 2);
    EXPECT_EQ(m.left_count(0), 2);
    EXPECT_DOUBLE_EQ(m.probability(0), 3.0 / 6.0);
}

TEST(ReuseModel, EachFamilyLearnsItsOwnChanceShrunkTowardTheGlobalOne) {
    // A conversation family whose first entries all come back, and a title family whose never do.
    reuse_model m;
    const uint64_t conv = reuse_family("b", seq(0, 100));
    const uint64_t title = reuse_family("b", seq(5000, 100));
    EXPECT_NE(conv, title);
    EXPECT_EQ(reuse_family("b", cat(seq(0, 64), seq(9000, 50))), conv) << "the first 64 tokens name it";
    EXPECT_NE(reuse_family("other", seq(0, 100)), conv) << "and the bucket";
    for (int i = 0; i < 4; ++i) {
        m.reused(0, conv);
    }
    for (int i = 0; i < 12; ++i) {
        m.left_unused(0, title);
    }
    const double global = m.probability(0);
    EXPECT_DOUBLE_EQ(global, 5.0 / 18.0);  // (4 + 1) / (4 + 12 + 2)
    EXPECT_DOUBLE_EQ(m.probability(0, conv), (4 + 2 * global) / (4 + 2.0));
    EXPECT_DOUBLE_EQ(m.probability(0, title), (2 * global) / (12 + 2.0));
    EXPECT_GT(m.probability(0, conv), 0.75);
    EXPECT_LT(m.probability(0, title), 0.05);
    EXPECT_DOUBLE_EQ(m.probability(0, reuse_family("b", seq(7000, 80))), global) << "a new family: the global chance";
}

TEST(ReuseModel, LikelihoodFallsWithAgeInUnitsOfTheReuseGap) {
    reuse_model m;
    EXPECT_DOUBLE_EQ(m.gap_s(), reuse_model::prior_gap_s);
    m.observe_gap(10);
    EXPECT_DOUBLE_EQ(m.gap_s(), 10) << "the first gap replaces the prior";
    m.observe_gap(20);
    EXPECT_DOUBLE_EQ(m.gap_s(), 0.9 * 10 + 0.1 * 20);
    const double g = m.gap_s();
    EXPECT_DOUBLE_EQ(m.likelihood(0, 0), 0.5);
    EXPECT_DOUBLE_EQ(m.likelihood(0, g), 0.25);
    EXPECT_DOUBLE_EQ(m.likelihood(0, 3 * g), 0.125);
}

TEST(ReuseModel, APriorTakenAsASampleAveragesTheFirstGapIn) {
    // The entries' model takes its first measured gap as it is; the ladder rungs' (few restores,
    // two new sessions may come a second apart) averages it with the 30 s prior.
    reuse_model entries;
    entries.observe_gap(1.0);
    EXPECT_DOUBLE_EQ(entries.gap_s(), 1.0);
    reuse_model rungs(/*prior_is_a_sample=*/true);
    rungs.observe_gap(1.0);
    const double w = reuse_model::gap_weight;
    EXPECT_DOUBLE_EQ(rungs.gap_s(), (1 - w) * reuse_model::prior_gap_s + w * 1.0);
}

TEST(TierCostPrefill, TheFitRecoversACostPerTokenThatGrowsWithTheContext) {
    tier_cost c;
    EXPECT_FALSE(c.prefill_seconds(0, 100));
    // Passes of 512 tokens starting at 0, 2048, 4096, ...: seconds = a n + b (sum of positions).
    const double a = 2e-3;
    const double b = 1e-7;
    for (int i = 0; i < 40; ++i) {
        const int32_t from = (i % 8) * 2048;
        const int32_t n = 512;
        const double positions = n * (2.0 * from + n - 1) / 2;
        c.observe_prefill(n, a * n + b * positions, positions);
    }
    const auto fit = c.prefill_fit();
    ASSERT_TRUE(fit);
    EXPECT_NEAR(fit->first, a, a * 1e-6);
    EXPECT_NEAR(fit->second, b, b * 1e-6);
    // 1,000 tokens at the start cost less than 1,000 tokens after 10,000.
    const double early = *c.prefill_seconds(0, 1000);
    const double late = *c.prefill_seconds(10000, 11000);
    EXPECT_NEAR(early, a * 1000 + b * 1000 * 999 / 2, 1e-9);
    EXPECT_NEAR(late, a * 1000 + b * 1000 * (10000 + 10999) / 2.0, 1e-9);
    EXPECT_NEAR(late - early, b * 1000 * 10000, 1e-9) << "attention: 10,000 positions more per token";
    EXPECT_DOUBLE_EQ(*c.prefill_seconds(5, 5), 0);
}

TEST(TierCostPrefill, PassesAtOneLengthFallBackToTheRate) {
    tier_cost c;
    for (int i = 0; i < 10; ++i) {
        c.observe_prefill(1000, 1.0, 1000 * 999 / 2.0);  // every pass [0, 1000): a and b not separable
    }
    EXPECT_FALSE(c.prefill_fit());
    EXPECT_DOUBLE_EQ(*c.prefill_seconds(0, 500), 0.5);  // 1,000 tokens/s
    tier_cost no_positions;
    no_positions.observe_prefill(1000, 2.0);
    EXPECT_FALSE(no_positions.prefill_fit());
    EXPECT_DOUBLE_EQ(*no_positions.prefill_seconds(100, 600), 1.0);
}

// A hybrid store with fake states: two conversations taking turns (each turn continues the
// entry before it) and one-off side calls, each on a short system text of its own, pushing
// on a RAM budget that holds only some of them.
class ValueEvictionTest : public ::testing::Test {
protected:
    static config tight(eviction_policy policy, double protect = 0.0) {
        config c = fakes::small_config();
        c.ladder_step = 0;
        c.message_rungs = 0;
        c.max_anchors = 0;      // no anchors: the entries alone hold the RAM
        c.max_checkpoints = 0;  // an entry is its final state alone: 500 bytes
        c.ram_bytes = 3000;
        c.eviction = policy;
        c.ram_protect_share = protect;
        return c;
    }
    // One request: plan, no captures kept (the final state alone, `bytes`), commit.
    // `multi_turn`: the prompt sends an earlier reply back (prompt_hints::multi_turn).
    restore_plan run(store & st, const key & k, const tokens & prompt, double now, size_t bytes,
                     bool multi_turn = false) {
        restore_plan p = st.plan(k, prompt, {}, now);
        st.check_invariants();
        commit_input in;
        in.k = k;
        in.toks = prompt;
        in.hints.multi_turn = multi_turn;
        in.seq = p.op == restore_op::take_device ? p.device_seq : next_seq_++;
        in.device_bytes = 1000;
        EXPECT_TRUE(st.reserve(bytes));
        in.reserved_bytes = bytes;
        in.final_recurrent = fake(bytes);
        in.evicted_uses = p.evicted_uses;
        if (p.absorbs) {
            in.absorbed = p;
        }
        st.commit(std::move(in), now);
        st.check_invariants();
        (void)st.take_released_seqs();
        return p;
    }
    // Conversation c's prompt at turn t (1-based): its system text and first message, then
    // 40 tokens a turn.
    static tokens conversation(int c, int t) {
        tokens p = seq(10000 * (c + 1), 200);
        for (int i = 1; i < t; ++i) {
            p = cat(p, seq(10000 * (c + 1) + 1000 + 40 * i, 40));
        }
        return p;
    }
    // Side call n: a 60-token system text of its kind (4 kinds), then `own` tokens of its own.
    static tokens side_call(int n, int32_t own = 40) {
        return cat(seq(90000 + 1000 * (n % 4), 60), seq(200000 + 1000 * n, own));
    }
    // The value policy with room for pinned anchors and their ladders, 3,000 bytes.
    static config with_anchors() {
        config c = tight(eviction_policy::value);
        c.max_anchors = 4;
        c.ladder_max_rungs = 8;
        c.ram_bytes = 3000;
        return c;
    }
    // Teaches `st`'s rung kind that rungs seldom come back: an anchor of 90 tokens (`toks`) with 8
    // rungs of 100 bytes, 10 tokens apart, all evicted never restored (the room asked is every
    // byte left and their 800; they go, the least value per byte first).
    static void evict_rungs_never_restored(store & st, const tokens & toks, double now) {
        std::vector<checkpoint> rungs;
        for (int32_t n = 10; n <= 80; n += 10) {
            rungs.push_back({n, point_kind::ladder, fake(100)});
        }
        const int64_t before = st.get_stats().ladder_rungs_evicted;
        EXPECT_TRUE(st.reserve(900));
        st.commit_anchor(key{"b", "rungs"}, toks, fake(100), 900, now, 0, std::move(rungs));
        const uint64_t room = st.budget() - st.ram_bytes() + 800;
        EXPECT_TRUE(st.reserve(room));
        st.unreserve(room);
        EXPECT_EQ(st.get_stats().ladder_rungs_evicted - before, 8);
    }

    // Runs turns `first`..`turns` of two conversations, each followed by four side calls;
    // returns how many conversation turns after `first` restored the whole previous turn. A
    // turn past the first sends its earlier replies back where `hint` says so (multi_turn).
    int session(store & st, int turns, int32_t side_own = 40, int first = 1, bool hint = false) {
        int restored = 0;
        double now = 1;
        int n_side = 0;
        for (int t = first; t <= turns; ++t) {
            for (int c = 0; c < 2; ++c) {
                const tokens prompt = conversation(c, t);
                const auto p = run(st, key{"b", "conv" + std::to_string(c)}, prompt, now, 500, hint && t > 1);
                now += 1;
                if (t > first && p.n_restore >= static_cast<int32_t>(conversation(c, t - 1).size())) {
                    ++restored;
                }
                for (int i = 0; i < 4; ++i) {
                    run(st, key{"b", "side" + std::to_string(n_side)}, side_call(n_side, side_own), now, 500);
                    ++n_side;
                    now += 1;
                }
            }
        }
        return restored;
    }
    int32_t next_seq_ = 0;
};

TEST_F(ValueEvictionTest, TheConversationsStayWhileTheSideCallsGo) {
    // Six 500-byte states fit; each turn of a conversation is followed by four side calls.
    // By recency the side calls push the conversations out before their next turn; by value
    // the side calls, never restored, go first once the model has seen them go unused.
    store by_value(tight(eviction_policy::value), true);
    store by_recency(tight(eviction_policy::recency), true);
    const int turns = 8;
    const int v = session(by_value, turns);
    const int r = session(by_recency, turns);
    const int next_turns = 2 * (turns - 1);
    EXPECT_EQ(r, 0) << "recency: every next turn found its conversation evicted";
    EXPECT_EQ(v, next_turns) << "value: every next turn restored its conversation";
    const auto s = by_value.get_stats();
    EXPECT_GT(s.evictions_by_uses.at("unused"), 0);
    EXPECT_EQ(s.eviction.policy, "value");
    EXPECT_LT(s.eviction.reuse_probability_unused, 0.2) << "side calls are seldom restored";
    EXPECT_GT(s.eviction.reuse_probability_more, 0.7) << "conversations are";
    std::vector<int32_t> uses;
    for (const auto & e : by_value.entries()) {
        uses.push_back(e.uses);
    }
    EXPECT_GE(*std::max_element(uses.begin(), uses.end()), turns - 2) << "a conversation's entry counts its turns";
}

TEST_F(ValueEvictionTest, SideCallsThatSaveMorePerByteGoOnceTheyProveUnused) {
    // Side calls of 460 tokens save more per byte than a conversation's 200-480 at first; the
    // reuse model learns that they never come back (and that the conversations do, from their
    // ghosts), and from then on they go first. The protected share keeps the live
    // conversations while the model learns.
    const int turns = 8;
    const int next_turns = 2 * (turns - 1);
    store learning(tight(eviction_policy::value, 0.0), true);
    store protecting(tight(eviction_policy::value, 0.5), true);
    store by_recency(tight(eviction_policy::recency), true);
    const int l = session(learning, turns, 400);
    const int p = session(protecting, turns, 400);
    const int r = session(by_recency, turns, 400);
    EXPECT_EQ(r, 0) << "recency: every next turn found its conversation evicted";
    // Unprotected, the second and third turns of both conversations miss while the model
    // learns (the first turns' entries are as unused as a side call's); then every turn hits.
    EXPECT_EQ(l, next_turns - 4);
    // Protected, only the second turns miss: a conversation is live once it has been restored
    // (or has come back after its eviction: its new entry keeps the evicted one's uses).
    EXPECT_EQ(p, next_turns - 2);
}

TEST_F(ValueEvictionTest, AConversationBackAfterARestartIsLiveFromItsFirstPrompt) {
    // An empty store (a restart with the disk tier off) while two conversations are at their
    // fourth turn, beside side calls that save more per byte. Their prompts send the earlier
    // replies back (prompt_hints::multi_turn): their entries start as restored once, so the
    // protected share keeps them from their first prompt here and every next turn restores.
    // Without the hint they are as unused as a side call's until the reuse model learns.
    const int first = 4;
    const int turns = 9;
    const int next_turns = 2 * (turns - first);
    store hinted(tight(eviction_policy::value, 0.5), true);
    store unhinted(tight(eviction_policy::value, 0.5), true);
    const int h = session(hinted, turns, 400, first, /*hint=*/true);
    const int u = session(unhinted, turns, 400, first, /*hint=*/false);
    EXPECT_EQ(h, next_turns) << "every next turn restored its conversation";
    EXPECT_EQ(u, next_turns - 2)
        << "the first next turn of each conversation missed: not live before its first restore";
}

TEST_F(ValueEvictionTest, AFirstTurnIsLiveOnceItsSystemTextsConversationsHaveComeBack) {
    // Conversations on one system text (one reuse family), one after another, each a first turn
    // and then its second; between them, side calls that save ten times more per byte than a
    // first turn (by value alone they stay and the first turn goes), each on a system text of its
    // own. Once that family's first turns have come back, the next conversation's first turn is
    // protected (reuse_model::probability(0, family) > 1/2) and its second turn restores it; a
    // conversation on a system text never seen before gets no such protection, and its first
    // turn is pushed out.
    store st(tight(eviction_policy::value, 0.5), true);
    auto first_turn = [](int c, int system) {
        return cat(seq(60000 + 1000 * system, 100), seq(100000 + 1000 * c, 100));
    };
    double now = 1;
    int n_side = 0;
    // Returns whether the conversation's second turn restored its whole first turn.
    auto conversation_at = [&](int c, int system) {
        const tokens t1 = first_turn(c, system);
        run(st, key{"b", "c" + std::to_string(c)}, t1, now++, 500);
        for (int i = 0; i < 6; ++i) {
            run(st, key{"b", "side" + std::to_string(n_side)}, side_call(n_side, 2000), now++, 500);
            ++n_side;
        }
        const auto p =
            run(st, key{"b", "c" + std::to_string(c)}, cat(t1, seq(300000 + 1000 * c, 40)), now++, 500, true);
        return p.n_restore >= static_cast<int32_t>(t1.size());
    };
    std::vector<bool> same_system;
    for (int c = 0; c < 6; ++c) {
        same_system.push_back(conversation_at(c, 0));
    }
    EXPECT_FALSE(same_system.front()) << "the family's first conversation: no evidence yet, pushed out";
    EXPECT_TRUE(same_system.back()) << "once the family's first turns have come back, protected";
    EXPECT_FALSE(conversation_at(100, 1)) << "a system text never seen: no evidence, pushed out";
    EXPECT_TRUE(conversation_at(101, 0)) << "the known family again: protected";
}

TEST_F(ValueEvictionTest, AnAnchorsLadderRungsGoBeforeTheConversations) {
    // A pinned anchor (a system text of 200 tokens) with four ladder rungs of 500 bytes each, 40
    // tokens apart, never restored; then the two conversations and their side calls, on a budget
    // that leaves two states beside the anchor and its rungs. By value the rungs (each saving the
    // 40 tokens since the one before) go first, the anchor stays, and the conversations keep their
    // turns (with the rungs pinned, as before, every next turn missed: 0 of 14); by recency the
    // rungs stay and the conversations are evicted.
    auto with_anchor = [](eviction_policy policy) {
        config c = tight(policy);
        c.max_anchors = 4;
        c.ladder_max_rungs = 8;
        c.ram_bytes = 1000 + 2500;  // two states beside the anchor and its rungs
        auto st = std::make_unique<store>(c, true);
        std::vector<checkpoint> rungs;
        for (int32_t n : {40, 80, 120, 160}) {
            rungs.push_back({n, point_kind::ladder, fake(500)});
        }
        EXPECT_TRUE(st->reserve(2500));
        st->commit_anchor(key{"b", "a"}, seq(50000, 200), fake(500), 2500, 0.5, 0, std::move(rungs));
        st->check_invariants();
        return st;
    };
    auto rungs_of = [](const store & st) {
        int64_t n = 0;
        for (const auto & e : st.entries()) {
            n += e.anchor ? static_cast<int64_t>(e.checkpoints.size()) : 0;
        }
        return n;
    };
    const int turns = 8;
    const int next_turns = 2 * (turns - 1);
    auto by_value = with_anchor(eviction_policy::value);
    auto by_recency = with_anchor(eviction_policy::recency);
    EXPECT_EQ(rungs_of(*by_value), 4);
    const int v = session(*by_value, turns);
    const int r = session(*by_recency, turns);
    EXPECT_EQ(v, next_turns) << "value: every next turn restored its conversation";
    EXPECT_EQ(r, 0) << "recency: every next turn found its conversation evicted";
    const auto sv = by_value->get_stats();
    EXPECT_EQ(sv.ladder_rungs_evicted, 4);
    EXPECT_EQ(rungs_of(*by_value), 0);
    EXPECT_EQ(sv.anchors, 1) << "the anchor itself stays pinned";
    EXPECT_EQ(by_recency->get_stats().ladder_rungs_evicted, 0);
    EXPECT_EQ(rungs_of(*by_recency), 4);
    // The positive case of the anchor: its tokens still restore whole.
    const auto p = by_value->plan(key{"b", "new"}, cat(seq(50000, 200), seq(70000, 20)), {}, 1000);
    EXPECT_EQ(p.n_restore, 200);
}

TEST_F(ValueEvictionTest, AParkedEntryWorthLessThanWhatItWouldPushOutIsNotAdmitted) {
    config c = tight(eviction_policy::value);
    c.ram_bytes = 2000;
    store st(c, true);
    // A conversation restored three times: valuable.
    for (int t = 1; t <= 4; ++t) {
        run(st, key{"b", "conv"}, conversation(0, t), t, 900);
    }
    // A one-off call, long ago (its age weighs on its likelihood), that would need the
    // conversation's bytes to leave the device.
    run(st, key{"b", "side"}, side_call(0), 5, 900);
    const auto es = st.entries();
    const auto side = std::find_if(es.begin(), es.end(), [](const entry_view & e) { return e.n_tokens == 100; });
    ASSERT_NE(side, es.end());
    const uint64_t side_id = side->id;
    st.expire(500);
    EXPECT_FALSE(st.reserve(900, side_id)) << "its whole state is worth less than the conversation's";
    EXPECT_EQ(st.get_stats().rejections.at("not_admitted"), 1);
    EXPECT_EQ(st.get_stats().entries, 2) << "nothing was evicted for it";
    // By recency the same demotion evicts the conversation.
    store lru(tight(eviction_policy::recency), true);
    for (int t = 1; t <= 4; ++t) {
        run(lru, key{"b", "conv"}, conversation(0, t), t, 900);
    }
    run(lru, key{"b", "side"}, side_call(0), 5, 900);
    uint64_t lru_side = 0;
    for (const auto & e : lru.entries()) {
        lru_side = e.n_tokens == 100 ? e.id : lru_side;
    }
    EXPECT_TRUE(lru.reserve(2000 - 900, lru_side));
}

TEST_F(ValueEvictionTest, ALiveConversationLeavingTheDeviceIsAdmittedOverASideCallWorthMorePerByte) {
    // A conversation restored once (live: protected) parks its whole state in RAM while the
    // budget is full of side calls' entries, each saving many times more tokens per byte. Its own
    // value per byte is the lower, yet the protected share orders the copies before values do:
    // side calls leave for it, as choose_victim would evict them before it. (On the bench's
    // pressure trace a conversation's turn was refused for a title call's entry this way.) The
    // positive case of admission stays: a side call leaving the device is refused
    // (AParkedEntryWorthLessThanWhatItWouldPushOutIsNotAdmitted).
    store st(tight(eviction_policy::value, 0.5), true);
    double now = 1;
    // First the side calls' kinds show that they never come back (evicted unused).
    int n_side = 0;
    for (; n_side < 12; ++n_side) {
        run(st, key{"b", "side" + std::to_string(n_side)}, side_call(n_side, 2000), now++, 500);
    }
    run(st, key{"b", "conv"}, conversation(0, 1), now++, 500);
    run(st, key{"b", "conv"}, conversation(0, 2), now++, 500);
    for (int i = 0; i < 4; ++i, ++n_side) {
        run(st, key{"b", "side" + std::to_string(n_side)}, side_call(n_side, 2000), now++, 500);
    }
    uint64_t conv = 0;
    for (const auto & e : st.entries()) {
        conv = e.n_tokens == 240 ? e.id : conv;
    }
    ASSERT_NE(conv, 0u);
    ASSERT_EQ(st.ram_bytes(), 3000u) << "the budget is full";
    const int64_t unused_before = st.get_stats().evictions_by_uses.at("unused");
    // Its whole state: 600 bytes more, within the protected share (0.5 of 3,000) with its 500.
    EXPECT_TRUE(st.reserve(600, conv)) << "the live conversation is admitted";
    const auto stats = st.get_stats();
    EXPECT_EQ(stats.rejections.count("not_admitted"), 0u);
    EXPECT_EQ(stats.evictions_by_uses.at("unused") - unused_before, 2) << "two side calls left for it";
    EXPECT_EQ(stats.evictions_by_uses.count("reused"), 0u);
    bool held = false;
    for (const auto & e : st.entries()) {
        held = held || e.id == conv;
    }
    EXPECT_TRUE(held);
}

TEST_F(ValueEvictionTest, RungsLearnedSeldomRestoredArePricedByThatNotAsAFreshAnchor) {
    // Anchor A's rung (150 tokens in 100 bytes) against a side call's entry (~460 tokens in 500),
    // the budget full. Before any rung has an outcome a rung is priced as a copy never restored
    // at its anchor's age, and the side call leaves; once the rungs of another anchor (B's, 8 of
    // them, 10 tokens each) have been evicted without a restore, the rung kind's chance falls to
    // (restored + 2 p0) / (restored + evicted + 2) = p0 / 5, and A's rung leaves before the side call.
    auto contest = [&](bool learn) {
        auto st = std::make_unique<store>(with_anchors(), true);
        std::vector<checkpoint> a_rungs;
        a_rungs.push_back({150, point_kind::ladder, fake(100)});
        EXPECT_TRUE(st->reserve(600));
        st->commit_anchor(key{"b", "a"}, seq(50000, 200), fake(500), 600, 1.0, 0, std::move(a_rungs));
        if (learn) {
            evict_rungs_never_restored(*st, seq(70000, 90), 1.0);  // B's
        }
        run(*st, key{"b", "side"}, side_call(0, 400), 1.0, 500);
        // Fill the budget, then ask for the room of one rung.
        const uint64_t fill = st->budget() - st->ram_bytes();
        EXPECT_TRUE(st->reserve(fill));
        const int64_t rungs_before = st->get_stats().ladder_rungs_evicted;
        EXPECT_TRUE(st->reserve(100));
        const auto stats = st->get_stats();
        const int64_t unused = stats.evictions_by_uses.count("unused") ? stats.evictions_by_uses.at("unused") : 0;
        return std::pair{stats.ladder_rungs_evicted - rungs_before, unused};
    };
    const auto fresh = contest(false);
    EXPECT_EQ(fresh.first, 0) << "no rung outcome yet: A's rung is worth more than the side call";
    EXPECT_EQ(fresh.second, 1) << "the side call left";
    const auto learned = contest(true);
    EXPECT_EQ(learned.first, 1) << "8 rungs evicted unused: A's rung is worth less now";
    EXPECT_EQ(learned.second, 0) << "the side call stays";
}

TEST_F(ValueEvictionTest, ARungRestoredBeforeStaysWhenItsAnchorsOtherRungsGo) {
    // An anchor of 200 tokens with four rungs 40 tokens apart, each saving as much, once the rung
    // kind has learned that rungs seldom come back (8 evicted never restored). A new session
    // parts at 100 (a timestamp line after 80): it restores the rung at 80. Then the budget
    // needs the room of three rungs: the three never restored go, the one at 80 stays, priced as
    // an entry restored once (entry::rung_uses). Without the restore (the same store) the rung at
    // 80 is priced as its kind, and it is not the one left.
    auto with_anchor = [](bool restore) {
        auto st = std::make_unique<store>(with_anchors(), true);
        // First the rung kind learns that rungs seldom come back: another anchor's 8 rungs are
        // evicted never restored.
        evict_rungs_never_restored(*st, seq(90000, 90), 0.5);
        std::vector<checkpoint> rungs;
        for (int32_t n : {40, 80, 120, 160}) {
            rungs.push_back({n, point_kind::ladder, fake(500)});
        }
        EXPECT_TRUE(st->reserve(2500));
        const tokens system = seq(50000, 200);
        st->commit_anchor(key{"b", "a"}, system, fake(500), 2500, 0.5, 0, std::move(rungs));
        if (restore) {
            const auto p = st->plan(key{"b", "new"}, cat(tokens(system.begin(), system.begin() + 100), seq(70000, 20)), {}, 1.0);
            EXPECT_EQ(p.kind, point_kind::ladder);
            EXPECT_EQ(p.n_restore, 80);
            st->abandon(p, 0);
        }
        EXPECT_TRUE(st->reserve(st->budget() - st->ram_bytes() + 1500));  // the room left and three rungs'
        std::vector<int32_t> left;
        for (const auto & e : st->entries()) {
            if (e.anchor) {
                for (const auto & cp : e.checkpoints) {
                    left.push_back(cp.first);
                }
            }
        }
        return left;
    };
    EXPECT_EQ(with_anchor(true), (std::vector<int32_t>{80})) << "the rung a session came back to stays";
    const auto by_kind = with_anchor(false);
    EXPECT_EQ(by_kind.size(), 1u);
    EXPECT_NE(by_kind, (std::vector<int32_t>{80})) << "never restored, the rung at 80 is priced as its kind";
}

TEST_F(ValueEvictionTest, ARungAgesOnItsOwnKindsReuseGapNotTheConversations) {
    // A conversation's next turn comes back within a second here (the entries' reuse gap falls
    // toward 1 s over 40 turns), while a new session on a known system text comes back after
    // minutes. Anchor A's rung (150 tokens in 50 bytes), 40 s past the anchor's last use,
    // against a fresh side call's entry (~460 tokens in 500 bytes), the budget full: aged on the
    // rung kind's own gap (reuse_model::prior_gap_s, 30 s, before a rung restore measured one),
    // p0 / (1 + 40 / 30) per byte is worth more than the side call's and the side call leaves;
    // aged on the conversations' gap (p0 / 29) the rung went first, as on the pressure bench,
    // where a persona's rungs were all dropped before its first new session came (1,568 tokens
    // restored instead of 2,177).
    auto st = std::make_unique<store>(with_anchors(), true);
    std::vector<checkpoint> rungs;
    rungs.push_back({150, point_kind::ladder, fake(50)});
    ASSERT_TRUE(st->reserve(550));
    st->commit_anchor(key{"b", "a"}, seq(50000, 200), fake(500), 550, 1.0, 0, std::move(rungs));
    double now = 1;
    for (int t = 1; t <= 40; ++t) {
        run(*st, key{"b", "conv"}, conversation(0, t), now, 500);
        now += 1;
    }
    run(*st, key{"b", "side"}, side_call(0, 400), now, 500);
    const uint64_t fill = st->budget() - st->ram_bytes();
    ASSERT_TRUE(st->reserve(fill));
    const int64_t rungs_before = st->get_stats().ladder_rungs_evicted;
    ASSERT_TRUE(st->reserve(50));
    const auto stats = st->get_stats();
    EXPECT_EQ(stats.ladder_rungs_evicted - rungs_before, 0) << "the rung stays";
    EXPECT_EQ(stats.evictions_by_uses.count("unused") ? stats.evictions_by_uses.at("unused") : 0, 1)
        << "the side call left";
    // The positive case: a new session parting after the rung restores it.
    const auto p = st->plan(key{"b", "new"}, cat(seq(50000, 160), seq(70000, 20)), {}, now);
    EXPECT_EQ(p.kind, point_kind::ladder);
    EXPECT_EQ(p.n_restore, 150);
    st->abandon(p, 0);
}

TEST_F(ValueEvictionTest, AnAnchorsLadderRungsDoNotShrinkTheLiveConversationsProtectedShare) {
    // An anchor of 200 tokens (500 bytes) with two rungs of 1,000 bytes, and a live conversation
    // on it (its second turn: 1,200 bytes, saving 40 tokens beyond the anchor), the budget (3,900)
    // then full. The rungs can be evicted, so the share --cache-ram-protect 0.5 holds is of what
    // the anchor's own state leaves (1,700 bytes), not of what anchor and rungs leave (700, where
    // the conversation did not fit and, worth less per byte than a rung, was evicted: on the
    // pressure bench a conversation's 3,145-token entry went so, 2.3 s after its turn, and its
    // next turn computed 864 tokens more than the oracle). Now a rung leaves and the
    // conversation stays; with the share off (0) the conversation goes (the positive case).
    auto contest = [&](double protect) {
        config c = with_anchors();
        c.ram_bytes = 3900;
        c.ram_protect_share = protect;
        auto st = std::make_unique<store>(c, true);
        std::vector<checkpoint> rungs;
        for (int32_t n : {80, 160}) {
            rungs.push_back({n, point_kind::ladder, fake(1000)});
        }
        const tokens system = seq(50000, 200);
        EXPECT_TRUE(st->reserve(2500));
        st->commit_anchor(key{"b", "a"}, system, fake(500), 2500, 0.5, 0, std::move(rungs));
        const tokens turn1 = cat(system, seq(60000, 20));
        run(*st, key{"b", "conv"}, turn1, 1.0, 200);
        run(*st, key{"b", "conv"}, cat(turn1, seq(61000, 20)), 2.0, 1200);
        EXPECT_EQ(st->get_stats().ladder_rungs_evicted, 0) << "both rungs held until now";
        EXPECT_TRUE(st->reserve(st->budget() - st->ram_bytes()));
        const auto before = st->get_stats();
        EXPECT_TRUE(st->reserve(500));
        const auto after = st->get_stats();
        auto reused = [](const stats & x) {
            return x.evictions_by_uses.count("reused") ? x.evictions_by_uses.at("reused") : 0;
        };
        return std::pair{after.ladder_rungs_evicted - before.ladder_rungs_evicted, reused(after) - reused(before)};
    };
    const auto shared = contest(0.5);
    EXPECT_EQ(shared.first, 1) << "a rung left";
    EXPECT_EQ(shared.second, 0) << "the live conversation stays";
    const auto off = contest(0.0);
    EXPECT_EQ(off.first, 0);
    EXPECT_EQ(off.second, 1) << "no share: the conversation, worth less per byte than a rung, left";
}

TEST_F(ValueEvictionTest, AShortHitOfAFewTokensCausedByAnEvictionSaysEvicted) {
    // An anchor-like prefix entry and a conversation 40 tokens past it; the conversation is
    // evicted; its next turn restores the prefix: 40 tokens short, under short_hit_tokens, and
    // the cause is still named.
    config c = fakes::small_config();
    c.max_entries = 1;  // each new entry evicts the one before
    store st(c, false);
    const tokens prefix = seq(0, 100);
    run(st, key{"b", "s"}, prefix, 1, 0);
    const tokens conv = cat(prefix, seq(5000, 40));
    run(st, key{"b", "s2"}, conv, 2, 0);   // a new lineage (other session): the prefix entry goes
    run(st, key{"b", "s3"}, prefix, 3, 0); // the prefix again: the conversation goes
    const auto p = st.plan(key{"b", "s2"}, cat(conv, seq(7000, 10)), {}, 4);
    EXPECT_EQ(p.n_restore, 100);
    ASSERT_TRUE(p.cause);
    EXPECT_EQ(*p.cause, miss_cause::evicted) << p.reason;
    EXPECT_GT(p.evicted_uses, 0) << "the lineage keeps its reuse class";
    // The positive case: with the conversation stored, the same turn restores it and names no cause.
    store kept(fakes::small_config(), false);
    run(kept, key{"b", "s"}, prefix, 1, 0);
    run(kept, key{"b", "s2"}, conv, 2, 0);
    const auto q = kept.plan(key{"b", "s2"}, cat(conv, seq(7000, 10)), {}, 4);
    EXPECT_EQ(q.n_restore, static_cast<int32_t>(conv.size()));
    EXPECT_FALSE(q.cause);
}

}  // namespace
}  // namespace lineage::cache
