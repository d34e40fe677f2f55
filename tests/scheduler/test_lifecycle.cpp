// Unit tests of the scheduler's cache lifecycle (lifecycle.h, sequence_pool.h) over fake engine
// states (no model): a request's restore, captures, prompt-end state and commit, a next turn
// continuing the parked sequence without a copy, an edit restoring a checkpoint through
// seq_cp, demotion when the sequence ids run out, the cold fallback when the engine refuses a
// restore, abandoning a failed request, and a hybrid entry keeping its reply (--cache-keep-reply). The store's check_invariants() after each request.
#include "scheduler/lifecycle.h"
#include "scheduler/sequence_pool.h"

#include "fake_engine_states.h"
#include "lifecycle_fixture.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

namespace lineage::scheduler {
namespace {

using fakes::cat;
using fakes::fake_engine_states;
using fakes::seq_of;

cache::config test_config() {
    cache::config c = fakes::lifecycle_config();
    c.keep_reply = false;  // the entry ends at the prompt end; KeepReply tests the other
    return c;
}

class Lifecycle : public ::testing::Test {
protected:
    void make(bool hybrid, int32_t n_seq = 6, cache::config cfg = test_config()) {
        hybrid_ = hybrid;
        n_seq_ = n_seq;
        st_ = std::make_unique<fake_engine_states>(hybrid);
        store_ = std::make_unique<cache::store>(cfg, hybrid);
        pool_ = std::make_unique<sequence_pool>(*st_, *store_, n_seq);
        life_ = std::make_unique<lifecycle>(*st_, *store_, *pool_, hybrid, [this](const cache::tokens & generated) {
            return round_trip_ < 0 ? static_cast<int32_t>(generated.size()) : round_trip_;
        });
    }

    /** Admits `prompt` like the scheduler: plan, a sequence, restore. */
    std::unique_ptr<slot> admit(const cache::tokens & prompt, int32_t history = -1, const std::string & session = "s") {
        auto s = fakes::new_slot(++next_id_, prompt, history, session);
        s->plan = store_->plan(s->key, prompt, {-1, history, -1}, now_);
        fakes::place_and_restore(*s, *pool_, *life_, now_);
        if (s->n_past < s->prompt_size()) {
            check_invariants(*s, 0, n_seq_);
        }
        return s;
    }

    /** A hybrid conversation of two turns (200 tokens, then 300 with its history boundary at
     *  290), its entry parked on the device; returns the parked sequence. */
    int32_t two_turns_parked() {
        make(true);
        auto t1 = admit(seq_of(0, 200), 190);
        finish(*t1);
        auto t2 = admit(cat(seq_of(0, 200), seq_of(5000, 100)), 290);
        const int32_t parked = t2->seq;
        finish(*t2);
        return parked;
    }

    /** Prefills the rest of the prompt in chunks that stop at the capture points, then
     *  decodes `n_gen` tokens, then commits. */
    void finish(slot & s, int32_t n_gen = 3) {
        bool done = s.n_past >= s.prompt_size() && life_->after_chunk(s, now_);
        while (!done) {
            const int32_t n = std::min(64, s.next_stop() - s.n_past);
            st_->decode(s.seq, n);
            s.n_past += n;
            done = life_->after_chunk(s, now_);
            if (!done) {
                check_invariants(s, 0, n_seq_);
            }
        }
        for (int32_t i = 0; i < n_gen; ++i) {
            st_->decode(s.seq, 1 + s.replay);  // a guard rollback's replay goes with the first step
            s.n_past += 1 + s.replay;
            s.replay = 0;
            s.generated.push_back(900000 + i);
            life_->after_decode(s);
        }
        life_->commit(s, now_);
        store_->check_invariants();
        now_ += 1;
    }

    /** A hybrid lifecycle whose engine rolls back `depth` tokens, and `prompt` admitted on it
     *  with the resend guard taken by rollback (as the scheduler admits it with
     *  --cache-guard-rollback). */
    std::unique_ptr<slot> admit_rolling_back(int32_t depth, const cache::tokens & prompt, int32_t history) {
        make(true);
        st_->rollback_depth = depth;
        auto s = admit(prompt, history);
        s->guard_rollback = true;
        return s;
    }

    std::vector<std::pair<int32_t, cache::point_kind>> checkpoints_of_front() const {
        return store_->entries().front().checkpoints;
    }

    bool hybrid_ = true;
    int32_t round_trip_ = -1;  ///< what the round trip of a reply gives back; -1: all of it
    int32_t n_seq_ = 0;
    double now_ = 1;
    uint64_t next_id_ = 0;
    std::unique_ptr<fake_engine_states> st_;
    std::unique_ptr<cache::store> store_;
    std::unique_ptr<sequence_pool> pool_;
    std::unique_ptr<lifecycle> life_;
};

TEST_F(Lifecycle, ColdRequestCapturesAndParksItsPromptEndState) {
    make(true);
    auto s = admit(seq_of(0, 300), 290);
    EXPECT_EQ(s->n_past, 0);
    EXPECT_EQ(s->stats.hit_kind, "miss");
    const int32_t seq = s->seq;
    finish(*s);
    EXPECT_EQ(s->seq, -1);
    // Generation moved the sequence on; the entry is the prompt end: KV trimmed, recurrent put back.
    EXPECT_EQ(st_->at(seq).n_kv, 300);
    EXPECT_EQ(st_->at(seq).rec, 300);
    const auto es = store_->entries();
    ASSERT_EQ(es.size(), 1u);
    EXPECT_EQ(es[0].where, cache::tier::device);
    EXPECT_EQ(es[0].seq, seq);
    EXPECT_EQ(es[0].n_tokens, 300);
    using cp = std::pair<int32_t, cache::point_kind>;
    EXPECT_EQ(es[0].checkpoints, (std::vector<cp>{{290, cache::point_kind::turn}, {299, cache::point_kind::guard}}));
}

TEST_F(Lifecycle, NextTurnContinuesTheParkedSequenceWithoutACopy) {
    make(true);
    auto t1 = admit(seq_of(0, 300), 290);
    const int32_t seq = t1->seq;
    finish(*t1);
    auto t2 = admit(cat(seq_of(0, 300), seq_of(5000, 60)), 350);
    EXPECT_EQ(t2->plan.op, cache::restore_op::take_device);
    EXPECT_EQ(t2->seq, seq);
    EXPECT_EQ(t2->n_past, 300);
    EXPECT_EQ(t2->stats.cached_tokens, 300);
    EXPECT_EQ(t2->stats.hit_kind, "full");
    EXPECT_EQ(st_->n_seq_cp, 0);
    EXPECT_EQ(st_->n_set_state, 1);  // commit of turn 1 put the prompt-end state back; nothing since
    finish(*t2);
    const auto es = store_->entries();
    ASSERT_EQ(es.size(), 1u);  // absorbed: one entry per lineage
    EXPECT_EQ(es[0].n_tokens, 360);
    using cp = std::pair<int32_t, cache::point_kind>;
    // The old entry's checkpoints, its final state as a turn boundary (300), the new captures;
    // thinned to 4: the old guard (299) goes first.
    EXPECT_EQ(es[0].checkpoints, (std::vector<cp>{{290, cache::point_kind::turn},
                                                  {300, cache::point_kind::turn},
                                                  {350, cache::point_kind::turn},
                                                  {359, cache::point_kind::guard}}));
}

TEST_F(Lifecycle, EditOfAnEarlierTurnRestoresACheckpointThroughSeqCp) {
    const int32_t parked = two_turns_parked();
    // The second turn's user message edited: the prompt leaves the entry at 250, before its
    // history boundary (290); the turn boundary at 200 serves, from the parked sequence.
    auto t3 = admit(cat(cat(seq_of(0, 200), seq_of(5000, 50)), seq_of(7000, 40)), 280);
    EXPECT_EQ(t3->plan.op, cache::restore_op::share_device);
    EXPECT_NE(t3->seq, parked);
    EXPECT_EQ(st_->n_seq_cp, 1);
    EXPECT_EQ(t3->n_past, 200);
    EXPECT_EQ(t3->stats.hit_kind, "turn");
    EXPECT_EQ(st_->at(t3->seq).n_kv, 200);
    EXPECT_EQ(st_->at(t3->seq).rec, 200);
    EXPECT_EQ(st_->at(parked).n_kv, 300);  // the parked entry is untouched
    finish(*t3);
    EXPECT_EQ(store_->entries().size(), 2u);
}

TEST_F(Lifecycle, RefusedSeqCpFallsBackToAColdPrefillAndLeavesTheParkedEntry) {
    const int32_t parked = two_turns_parked();
    // As the edit above, but the engine's copy of the parked sequence fails (a state copy
    // llama.cpp refuses, engine::context::seq_cp with share_by_state_copy).
    st_->refuse_seq_cp = true;
    auto t3 = admit(cat(cat(seq_of(0, 200), seq_of(5000, 50)), seq_of(7000, 40)), 280);
    st_->refuse_seq_cp = false;
    EXPECT_EQ(st_->n_seq_cp, 1);
    EXPECT_EQ(t3->n_past, 0);
    EXPECT_EQ(t3->stats.hit_kind, "miss");
    EXPECT_EQ(st_->at(t3->seq).n_kv, 0);
    EXPECT_EQ(st_->at(parked).n_kv, 300);  // the parked entry is untouched, and still indexed
    const auto es = store_->entries();
    EXPECT_EQ(std::count_if(es.begin(), es.end(),
                            [](const cache::entry_view & e) { return e.n_tokens == 300 && e.where == cache::tier::device; }),
              1);
    finish(*t3);
}

TEST_F(Lifecycle, DemotionFreesASequenceAndTheDemotedEntryRestoresFromRam) {
    make(true, 2);
    auto a = admit(seq_of(0, 100), 90, "a");
    finish(*a);
    auto b = admit(seq_of(10000, 100), 90, "b");
    finish(*b);
    // Both ids are parked: the third request demotes the least recently used (a) to RAM.
    auto c = admit(seq_of(20000, 100), 90, "c");
    EXPECT_EQ(c->n_past, 0);
    const auto es = store_->entries();
    const auto it = std::find_if(es.begin(), es.end(),
                                 [](const cache::entry_view & e) { return e.n_tokens == 100 && e.k.session == "a"; });
    ASSERT_NE(it, es.end());
    EXPECT_EQ(it->where, cache::tier::ram);
    finish(*c);
    // a's next turn loads its whole state from RAM (demoting another entry for an id).
    auto a2 = admit(cat(seq_of(0, 100), seq_of(30000, 20)), 110, "a");
    EXPECT_EQ(a2->plan.op, cache::restore_op::load_ram);
    EXPECT_EQ(a2->n_past, 100);
    EXPECT_EQ(st_->at(a2->seq).n_kv, 100);
    EXPECT_EQ(st_->at(a2->seq).rec, 100);
    finish(*a2);
}

TEST_F(Lifecycle, EngineRefusalFallsBackToAColdPrefillWithTheSameCaptures) {
    make(true, 2);
    auto a = admit(seq_of(0, 100), 90);
    finish(*a);
    ASSERT_TRUE(pool_->demote_one(0));  // a's entry to RAM
    st_->refuse_set_state = true;
    auto b = admit(cat(seq_of(0, 100), seq_of(40000, 30)), 120);
    EXPECT_EQ(b->n_past, 0);
    EXPECT_EQ(b->stats.hit_kind, "miss");
    EXPECT_EQ(b->plan.op, cache::restore_op::none);
    EXPECT_EQ(st_->at(b->seq).n_kv, 0);
    ASSERT_EQ(b->plan.captures.size(), 2u);  // still taken from token 0: turn 120, guard 129
    EXPECT_EQ(b->plan.captures[0].n_tokens, 120);
    st_->refuse_set_state = false;
    finish(*b);
    EXPECT_EQ(store_->get_stats().rejections.at("abandoned"), 1);  // the taken entry was abandoned
}

TEST_F(Lifecycle, DenseCommitKeepsEverythingDecoded) {
    make(false);
    auto s = admit(seq_of(0, 100), 95);
    finish(*s, 5);
    EXPECT_EQ(store_->entries().front().n_tokens, 105);
    EXPECT_TRUE(store_->entries().front().checkpoints.empty());
    // A prompt that shares the prompt and 3 of the 5 generated tokens: any prefix of a dense KV.
    auto t = admit(cat(cat(seq_of(0, 100), {900000, 900001, 900002}), seq_of(50000, 10)));
    EXPECT_EQ(t->plan.op, cache::restore_op::take_device);
    EXPECT_EQ(t->n_past, 103);
    EXPECT_EQ(st_->at(t->seq).n_kv, 103);
    EXPECT_EQ(t->stats.hit_kind, "prefix");
}

TEST_F(Lifecycle, KeepReplyLetsAnAgentStepRestoreTheReplyAndAReRenderRestoreTheGuard) {
    cache::config cfg = test_config();
    cfg.keep_reply = true;
    make(true, 6, cfg);
    const cache::tokens reply{900000, 900001, 900002};
    auto t1 = admit(seq_of(0, 300), 290);
    const int32_t seq = t1->seq;
    finish(*t1);
    // The entry is the prompt and the reply decoded after it; the resend guard (299) restores a
    // prompt that parts inside the reply.
    EXPECT_EQ(st_->at(seq).n_kv, 303);
    EXPECT_EQ(st_->at(seq).rec, 303);
    EXPECT_EQ(st_->n_set_state, 0) << "nothing put back";
    using cp = std::pair<int32_t, cache::point_kind>;
    auto es = store_->entries();
    ASSERT_EQ(es.size(), 1u);
    EXPECT_EQ(es[0].n_tokens, 303);
    EXPECT_EQ(es[0].checkpoints, (std::vector<cp>{{290, cache::point_kind::turn}, {299, cache::point_kind::guard}}));
    // An agent-loop step: the prompt, the reply verbatim, a tool result. Continues the sequence.
    auto t2 = admit(cat(cat(seq_of(0, 300), reply), seq_of(7000, 40)), 343);
    EXPECT_EQ(t2->plan.op, cache::restore_op::take_device);
    EXPECT_EQ(t2->seq, seq);
    EXPECT_EQ(t2->n_past, 303);
    EXPECT_EQ(t2->stats.hit_kind, "full");
    finish(*t2);
    es = store_->entries();
    ASSERT_EQ(es.size(), 1u);
    EXPECT_EQ(es[0].n_tokens, 346);
    // A next turn that re-renders the reply differently parts inside it: the guard at 342.
    const cache::tokens p2 = cat(cat(seq_of(0, 300), reply), seq_of(7000, 40));
    auto t3 = admit(cat(cat(p2, {900000}), seq_of(8000, 30)), 370);
    EXPECT_EQ(t3->n_past, 342);
    EXPECT_EQ(t3->stats.hit_kind, "guard");
    EXPECT_EQ(st_->at(t3->seq).n_kv, 342);
    EXPECT_EQ(st_->at(t3->seq).rec, 342);
    finish(*t3);
    // Without the resend guard the prompt end is kept as a turn checkpoint instead.
    cfg.resend_checkpoint = false;
    make(true, 6, cfg);
    auto g1 = admit(seq_of(0, 300), 290);
    finish(*g1);
    EXPECT_EQ(store_->entries().front().n_tokens, 303);
    EXPECT_EQ(store_->entries().front().checkpoints,
              (std::vector<cp>{{284, cache::point_kind::guard}, {290, cache::point_kind::turn}, {300, cache::point_kind::turn}}));
    auto g2 = admit(cat(cat(seq_of(0, 300), {900000}), seq_of(8000, 30)), 325);
    EXPECT_EQ(g2->n_past, 300);
    EXPECT_EQ(g2->stats.hit_kind, "turn");
    finish(*g2);
    // With the guard merged into the history boundary (--cache-guard-merge; 294 is 5 tokens before
    // prompt - 1): no guard, the prompt end kept as a turn checkpoint in its place. A resend
    // restores the boundary; a step that sends the reply back parting inside it, the prompt end.
    cfg.resend_checkpoint = true;
    cfg.guard_merge = 16;
    make(true, 6, cfg);
    auto m1 = admit(seq_of(0, 300), 294);
    EXPECT_EQ(m1->plan.captures.size(), 1u);
    finish(*m1);
    EXPECT_EQ(store_->entries().front().checkpoints,
              (std::vector<cp>{{294, cache::point_kind::turn}, {300, cache::point_kind::turn}}));
    auto m2 = admit(cat(cat(seq_of(0, 300), {900000}), seq_of(8000, 30)), 325);
    EXPECT_EQ(m2->n_past, 300);
    EXPECT_EQ(m2->stats.hit_kind, "turn");
    finish(*m2);
    auto m3 = admit(seq_of(0, 300), 294);
    EXPECT_EQ(m3->n_past, 294) << "a resend: the boundary, 6 tokens left in one pass";
    EXPECT_EQ(m3->stats.hit_kind, "turn");
    EXPECT_TRUE(m3->plan.captures.empty());
    finish(*m3);
    // Off: the same first request keeps the prompt end only.
    make(true);
    auto o1 = admit(seq_of(0, 300), 290);
    finish(*o1);
    EXPECT_EQ(store_->entries().front().n_tokens, 300);
    auto o2 = admit(cat(cat(seq_of(0, 300), reply), seq_of(7000, 40)), 343);
    EXPECT_EQ(o2->n_past, 300);
    finish(*o2);
}

// Reply checkpoints (--cache-reply-step): taken between decode steps every reply_step decoded
// tokens; commit keeps those at or before where the reply stops coming back from its text, and
// an agent step whose prompt parts inside the reply restores the last one before the parting
// point instead of the resend guard.
TEST_F(Lifecycle, ReplyCheckpointKeptBeforeWhereTheReplyStopsComingBackFromItsText) {
    cache::config cfg = test_config();
    cfg.keep_reply = true;
    cfg.reply_step = 4;
    make(true, 6, cfg);
    using cp = std::pair<int32_t, cache::point_kind>;
    cache::tokens reply;
    for (int32_t i = 0; i < 10; ++i) {
        reply.push_back(900000 + i);
    }
    round_trip_ = 7;  // the text of the 10 decoded tokens tokenizes back to the first 7 only
    auto t1 = admit(seq_of(0, 300), 290);
    finish(*t1, 10);
    // Candidates at 304 and 308; only 304 lies at or before 300 + 7.
    EXPECT_EQ(store_->entries().front().n_tokens, 310);
    EXPECT_EQ(store_->entries().front().checkpoints,
              (std::vector<cp>{{290, cache::point_kind::turn}, {299, cache::point_kind::guard}, {304, cache::point_kind::reply}}));
    EXPECT_EQ(store_->ram_bytes(), 3 * st_->state_size(0, true)) << "the dropped candidate's reservation is released";
    // The step sends back the text, which parts from the entry after 7 reply tokens.
    const cache::tokens back(reply.begin(), reply.begin() + 7);
    auto t2 = admit(cat(cat(cat(seq_of(0, 300), back), {555}), seq_of(7000, 40)), 348);
    EXPECT_EQ(t2->n_past, 304);
    EXPECT_EQ(t2->stats.hit_kind, "reply");
    EXPECT_EQ(st_->at(t2->seq).rec, 304);
    finish(*t2, 3);
    // The absorbed entry's reply checkpoint (inside the history now) is not carried over.
    const auto after_step = store_->entries();
    for (const auto & [n, kind] : after_step.front().checkpoints) {
        EXPECT_NE(kind, cache::point_kind::reply) << n;
    }
    store_->check_invariants();

    // A reply that comes back whole keeps both (a template may still render it differently);
    // a verbatim echo restores the entry's end, a re-render parting at 9 the one at 308.
    make(true, 6, cfg);
    round_trip_ = -1;
    auto w1 = admit(seq_of(0, 300), 290);
    finish(*w1, 10);
    EXPECT_EQ(store_->entries().front().checkpoints,
              (std::vector<cp>{{290, cache::point_kind::turn},
                               {299, cache::point_kind::guard},
                               {304, cache::point_kind::reply},
                               {308, cache::point_kind::reply}}));
    EXPECT_EQ(store_->ram_bytes(), 4 * st_->state_size(0, true));
    const cache::tokens nine(reply.begin(), reply.begin() + 9);
    auto w2 = admit(cat(cat(seq_of(0, 300), nine), seq_of(8000, 40)), 349);
    EXPECT_EQ(w2->n_past, 308);
    EXPECT_EQ(w2->stats.hit_kind, "reply");
    finish(*w2, 3);
    make(true, 6, cfg);
    auto v1 = admit(seq_of(0, 300), 290);
    finish(*v1, 10);
    auto v2 = admit(cat(cat(seq_of(0, 300), reply), seq_of(7000, 40)), 350);
    EXPECT_EQ(v2->n_past, 310);
    EXPECT_EQ(v2->stats.hit_kind, "full");
    finish(*v2, 3);

    // Parting before the first candidate keeps none: the guard serves.
    make(true, 6, cfg);
    round_trip_ = 3;
    auto e1 = admit(seq_of(0, 300), 290);
    finish(*e1, 10);
    EXPECT_EQ(store_->entries().front().checkpoints.size(), 2u);

    // Off (--cache-reply-step 0): no candidate is taken.
    cfg.reply_step = 0;
    make(true, 6, cfg);
    round_trip_ = 7;
    auto f1 = admit(seq_of(0, 300), 290);
    finish(*f1, 10);
    EXPECT_EQ(store_->entries().front().checkpoints.size(), 2u);
}

// A long reply holds at most max_reply_candidates at once: the spacing doubles and the states
// off it are released at once.
TEST_F(Lifecycle, ReplyCandidatesStretchTheirSpacingWhenFull) {
    cache::config cfg = test_config();
    cfg.keep_reply = true;
    cfg.reply_step = 2;
    make(true, 6, cfg);
    const uint64_t one = st_->state_size(0, true);
    auto s = admit(seq_of(0, 300), 290);
    bool done = false;
    while (!done) {
        const int32_t n = s->next_stop() - s->n_past;
        st_->decode(s->seq, n);
        s->n_past += n;
        done = life_->after_chunk(*s, now_);
    }
    auto decode_to = [&](int32_t decoded) {
        while (s->n_past < 300 + decoded) {
            st_->decode(s->seq, 1);
            s->n_past++;
            s->generated.push_back(900000 + static_cast<int32_t>(s->generated.size()));
            life_->after_decode(*s);
        }
    };
    auto at = [&] {
        std::vector<int32_t> v;
        for (const auto & c : s->reply_candidates) {
            v.push_back(c.n_tokens);
        }
        return v;
    };
    decode_to(8);
    EXPECT_EQ(at(), (std::vector<int32_t>{302, 304, 306, 308}));
    decode_to(10);  // full: spacing 4, 302 and 306 go, 310 is off it
    EXPECT_EQ(at(), (std::vector<int32_t>{304, 308}));
    EXPECT_EQ(s->reply_stride, 4);
    decode_to(16);
    EXPECT_EQ(at(), (std::vector<int32_t>{304, 308, 312, 316}));
    decode_to(20);  // full again: spacing 8
    EXPECT_EQ(at(), (std::vector<int32_t>{308, 316}));
    // Captured so far: the turn (290), the guard (299), the prompt end, 2 candidates.
    EXPECT_EQ(store_->ram_bytes(), 5 * one);
    round_trip_ = 15;
    life_->commit(*s, now_);
    using cp = std::pair<int32_t, cache::point_kind>;
    EXPECT_EQ(store_->entries().front().checkpoints,
              (std::vector<cp>{{290, cache::point_kind::turn}, {299, cache::point_kind::guard}, {308, cache::point_kind::reply}}));
    EXPECT_EQ(store_->ram_bytes(), 3 * one);
    store_->check_invariants();
}

// The resend guard by rollback (--cache-guard-rollback): the prefill is not split at
// prompt - 1; the engine takes the recurrent state back one token after it, the sequence stands
// at prompt - 1 and the first decode step computes the last prompt token again.
TEST_F(Lifecycle, GuardByRollbackTakesPromptMinusOneWithoutSplittingThePrefill) {
    using cp = std::pair<int32_t, cache::point_kind>;
    auto s = admit_rolling_back(1, seq_of(0, 300), 290);
    EXPECT_EQ(s->next_stop(), 290);  // the turn checkpoint still splits
    const int32_t seq = s->seq;
    bool done = false;
    while (!done) {
        const int32_t n = std::min(64, s->next_stop() - s->n_past);
        st_->decode(seq, n);
        s->n_past += n;
        done = life_->after_chunk(*s, now_);
    }
    EXPECT_EQ(st_->n_decodes, 6) << "5 chunks to 290, one to the prompt end; none stops at 299";
    EXPECT_EQ(s->n_past, 299);
    EXPECT_EQ(s->replay, 1);
    EXPECT_EQ(st_->at(seq).n_kv, 299);
    EXPECT_EQ(st_->at(seq).rec, 299);
    ASSERT_EQ(s->captured.size(), 2u);
    EXPECT_EQ(s->captured.back().n_tokens, 299);
    EXPECT_EQ(s->captured.back().kind, cache::point_kind::guard);
    EXPECT_EQ(s->next_capture, s->plan.captures.size());
    finish(*s);  // the first decode step computes 299 again, then 3 tokens
    EXPECT_EQ(st_->at(seq).n_kv, 300);
    EXPECT_EQ(st_->at(seq).rec, 300);
    EXPECT_EQ(store_->entries().front().n_tokens, 300);
    EXPECT_EQ(checkpoints_of_front(), (std::vector<cp>{{290, cache::point_kind::turn}, {299, cache::point_kind::guard}}));
    // A resend restores the guard's state (299 tokens seen), as with a split prefill.
    auto r = admit(seq_of(0, 300), 290);
    EXPECT_EQ(r->n_past, 299);
    EXPECT_EQ(r->stats.hit_kind, "guard");
    EXPECT_EQ(st_->at(r->seq).rec, 299);
    finish(*r);
}

// The far rungs of the anchor ladder are taken at the ends of the passes that reach them
// (capture_point::at_pass_end): they never end a pass, and each lands where a pass ends.
TEST_F(Lifecycle, FarLadderRungsAreTakenAtPassEndsWithoutSplittingThePrefill) {
    using cp = std::pair<int32_t, cache::point_kind>;
    cache::config c = test_config();
    c.ladder_step = 128;
    c.ladder_near_step = 64;
    c.ladder_near_tokens = 128;
    c.ladder_max_rungs = 8;
    c.ladder_defer = false;  // the near rungs split this prefill (LadderJob...: deferred)
    make(true, 6, c);
    auto s = fakes::new_slot(++next_id_, seq_of(0, 700), 690, "s");
    cache::plan_hints hints{602, 690, 102};  // system + tools end at 602; the tool block at 102
    s->plan = store_->plan(s->key, s->req->prompt, hints, now_);
    std::vector<int32_t> far;
    std::vector<int32_t> near;
    for (const auto & p : s->plan.captures) {
        if (p.kind == cache::point_kind::ladder) {
            (p.at_pass_end ? far : near).push_back(p.n_tokens);
        }
    }
    // Near rungs every 64 before the anchor at 600; far points every 128 after the tools
    // anchor at 100.
    EXPECT_EQ(near, (std::vector<int32_t>{472, 536}));
    EXPECT_EQ(far, (std::vector<int32_t>{228, 356}));
    fakes::place_and_restore(*s, *pool_, *life_, now_);
    std::vector<int32_t> pass_ends;
    bool done = false;
    while (!done) {
        EXPECT_NE(s->next_stop(), 228);
        EXPECT_NE(s->next_stop(), 356);
        const int32_t n = std::min(100, s->next_stop() - s->n_past);  // passes of at most 100 tokens
        st_->decode(s->seq, n);
        s->n_past += n;
        pass_ends.push_back(s->n_past);
        done = life_->after_chunk(*s, now_);
        if (!done) {
            check_invariants(*s, 0, n_seq_);
        }
    }
    // Stops at the tools anchor (100), the near rungs, the anchor, the turn and the guard; the
    // far points add none.
    EXPECT_EQ(pass_ends, (std::vector<int32_t>{100, 200, 300, 400, 472, 536, 600, 690, 699, 700}));
    life_->commit(*s, now_);
    store_->check_invariants();
    bool found = false;
    for (const auto & e : store_->entries()) {
        if (e.anchor && e.n_tokens == 600) {
            found = true;
            // 228 is taken at the pass end 300, 356 at 400.
            EXPECT_EQ(e.checkpoints, (std::vector<cp>{{300, cache::point_kind::ladder},
                                                      {400, cache::point_kind::ladder},
                                                      {472, cache::point_kind::ladder},
                                                      {536, cache::point_kind::ladder}}));
        }
    }
    EXPECT_TRUE(found);
    // What the restore points cost (stats::captures, capture_splits, capture_bytes): the far
    // rungs came with pass ends; the near rungs, both anchors, the turn and the guard each cut a
    // pass short.
    using counts = std::map<std::string, int64_t>;
    const auto with_kinds = [](counts m) {
        std::erase_if(m, [](const auto & kv) { return kv.second == 0; });
        return m;
    };
    const cache::stats st = store_->get_stats();
    EXPECT_EQ(with_kinds(st.captures), (counts{{"anchor", 2}, {"guard", 1}, {"ladder", 4}, {"turn", 1}}));
    EXPECT_EQ(with_kinds(st.capture_splits), (counts{{"anchor", 2}, {"guard", 1}, {"ladder", 2}, {"turn", 1}}));
    EXPECT_GT(st.capture_bytes.at("ladder"), 0);
    EXPECT_EQ(st.capture_bytes.at("guard") * 4, st.capture_bytes.at("ladder"));  // one recurrent state each
    EXPECT_TRUE(with_kinds(st.tokens_restored).empty());
    // A session whose system text parts at 420 restores the rung at 400.
    auto r = fakes::new_slot(++next_id_, cat(seq_of(0, 420), seq_of(50000, 280)), 690, "s2");
    r->plan = store_->plan(r->key, r->req->prompt, hints, now_);
    EXPECT_EQ(r->plan.n_restore, 400);
    EXPECT_EQ(r->plan.kind, cache::point_kind::ladder);
    const cache::stats after = store_->get_stats();
    EXPECT_EQ(with_kinds(after.hits), (counts{{"ladder", 1}}));
    EXPECT_EQ(with_kinds(after.tokens_restored), (counts{{"ladder", 400}}));
    EXPECT_EQ(after.tokens_reused, 400);
}

// --cache-ladder-defer (the default): the request that pins the anchor splits its prefill at no
// rung; the anchor's capture hands its near rungs to the scheduler (on_rungs_owed), and a ladder
// job, a prefill of the anchor's tokens from the far rung before them, makes them (commit_rungs).
TEST_F(Lifecycle, LadderJobMakesTheRungsTheRequestThatPinnedTheAnchorDeferred) {
    using cp = std::pair<int32_t, cache::point_kind>;
    cache::config c = test_config();
    c.ladder_step = 128;
    c.ladder_near_step = 64;
    c.ladder_near_tokens = 128;
    c.ladder_max_rungs = 8;
    ASSERT_TRUE(c.ladder_defer);
    make(true, 6, c);
    cache::tokens owed_anchor;
    std::vector<int32_t> owed;
    life_->on_rungs_owed([&](const slot &, cache::tokens anchor, std::vector<int32_t> rungs) {
        owed_anchor = std::move(anchor);
        owed = std::move(rungs);
    });
    const cache::tokens prompt = seq_of(0, 700);
    auto s = fakes::new_slot(++next_id_, prompt, 690, "s");
    const cache::plan_hints hints{602, 690, 102};  // system + tools end at 602; the tool block at 102
    s->plan = store_->plan(s->key, s->req->prompt, hints, now_);
    std::vector<int32_t> deferrable;
    for (const auto & p : s->plan.captures) {
        if (p.deferrable) {
            deferrable.push_back(p.n_tokens);
        }
    }
    EXPECT_EQ(deferrable, (std::vector<int32_t>{472, 536}));
    s->defer_rungs = true;  // the scheduler: no other request runs or waits
    fakes::place_and_restore(*s, *pool_, *life_, now_);
    std::vector<int32_t> pass_ends;
    for (bool done = false; !done;) {
        const int32_t n = std::min(100, s->next_stop() - s->n_past);
        st_->decode(s->seq, n);
        s->n_past += n;
        pass_ends.push_back(s->n_past);
        done = life_->after_chunk(*s, now_);
    }
    // No stop at 472 or 536: the tools anchor, the anchor, the turn and the guard only.
    EXPECT_EQ(pass_ends, (std::vector<int32_t>{100, 200, 300, 400, 500, 600, 690, 699, 700}));
    EXPECT_EQ(owed_anchor, cache::tokens(prompt.begin(), prompt.begin() + 600));
    EXPECT_EQ(owed, (std::vector<int32_t>{472, 536}));
    life_->commit(*s, now_);
    store_->check_invariants();
    const auto rungs_of_anchor = [&] {
        for (const auto & e : store_->entries()) {
            if (e.anchor && e.n_tokens == 600) {
                return e.checkpoints;
            }
        }
        return std::vector<cp>{};
    };
    // The far rungs came with pass ends (228 at 300, 356 at 400).
    EXPECT_EQ(rungs_of_anchor(), (std::vector<cp>{{300, cache::point_kind::ladder}, {400, cache::point_kind::ladder}}));
    // The ladder job: restores the far rung at 400 (the latest state before 472) and prefills
    // the anchor's tokens to its last rung, split at the other.
    auto j = fakes::new_slot(++next_id_, owed_anchor, -1, "s");
    j->req->warmup = true;
    j->req->ladder_anchor = std::make_shared<const cache::tokens>(owed_anchor);
    j->req->ladder_rungs = owed;
    j->plan = store_->plan_ladder_job(j->key, owed_anchor, owed);
    ASSERT_EQ(j->plan.captures.size(), 2u);
    j->req->prompt.resize(536);
    fakes::place_and_restore(*j, *pool_, *life_, now_);
    EXPECT_EQ(j->n_past, 400);
    EXPECT_EQ(j->stats.hit_kind, "ladder");
    std::vector<int32_t> job_passes;
    for (bool done = false; !done;) {
        const int32_t n = std::min(100, j->next_stop() - j->n_past);
        st_->decode(j->seq, n);
        j->n_past += n;
        job_passes.push_back(j->n_past);
        done = life_->after_chunk(*j, now_);
    }
    EXPECT_EQ(job_passes, (std::vector<int32_t>{472, 536}));
    EXPECT_EQ(j->prompt_end_recurrent, nullptr);  // a ladder job stores no entry
    const size_t entries_before = store_->entries().size();
    life_->commit_rungs(*j, now_);
    EXPECT_EQ(j->seq, -1);
    store_->check_invariants();
    EXPECT_EQ(store_->entries().size(), entries_before);
    EXPECT_EQ(rungs_of_anchor(), (std::vector<cp>{{300, cache::point_kind::ladder},
                                                  {400, cache::point_kind::ladder},
                                                  {472, cache::point_kind::ladder},
                                                  {536, cache::point_kind::ladder}}));
    const cache::stats st = store_->get_stats();
    EXPECT_EQ(st.ladder_deferred_rungs.at("deferred"), 2);
    EXPECT_EQ(st.ladder_deferred_rungs.at("made"), 2);
    // A session whose system text parts at 540 restores the rung at 536.
    auto r = fakes::new_slot(++next_id_, cat(seq_of(0, 540), seq_of(50000, 160)), 690, "s2");
    r->plan = store_->plan(r->key, r->req->prompt, hints, now_);
    EXPECT_EQ(r->plan.n_restore, 536);
    EXPECT_EQ(r->plan.kind, cache::point_kind::ladder);
}

// Beside other requests (slot::defer_rungs false) the same prefill splits at its deferrable rungs
// and takes them itself: nothing is left to a ladder job.
TEST_F(Lifecycle, BesideOtherRequestsThePrefillSplitsAtItsDeferrableRungs) {
    using cp = std::pair<int32_t, cache::point_kind>;
    cache::config c = test_config();
    c.ladder_step = 128;
    c.ladder_near_step = 64;
    c.ladder_near_tokens = 128;
    c.ladder_max_rungs = 8;
    make(true, 6, c);
    bool owed = false;
    life_->on_rungs_owed([&](const slot &, cache::tokens, std::vector<int32_t>) { owed = true; });
    auto s = fakes::new_slot(++next_id_, seq_of(0, 700), 690, "s");
    const cache::plan_hints hints{602, 690, 102};
    s->plan = store_->plan(s->key, s->req->prompt, hints, now_);
    s->defer_rungs = false;
    fakes::place_and_restore(*s, *pool_, *life_, now_);
    std::vector<int32_t> pass_ends;
    for (bool done = false; !done;) {
        // Another request arrives after the first pass: the rungs from then on are split.
        const int32_t n = std::min(100, s->next_stop() - s->n_past);
        st_->decode(s->seq, n);
        s->n_past += n;
        pass_ends.push_back(s->n_past);
        done = life_->after_chunk(*s, now_);
    }
    EXPECT_EQ(pass_ends, (std::vector<int32_t>{100, 200, 300, 400, 472, 536, 600, 690, 699, 700}));
    EXPECT_FALSE(owed);
    EXPECT_TRUE(s->plan.deferred_rungs.empty());
    life_->commit(*s, now_);
    for (const auto & e : store_->entries()) {
        if (e.anchor && e.n_tokens == 600) {
            EXPECT_EQ(e.checkpoints, (std::vector<cp>{{300, cache::point_kind::ladder},
                                                      {400, cache::point_kind::ladder},
                                                      {472, cache::point_kind::ladder},
                                                      {536, cache::point_kind::ladder}}));
        }
    }
    const cache::stats st = store_->get_stats();
    EXPECT_EQ(st.capture_splits.at("ladder"), 2);
}

TEST_F(Lifecycle, GuardByRollbackEndedOnTheFirstTokenStoresTheEntryAtTheGuard) {
    using cp = std::pair<int32_t, cache::point_kind>;
    auto s = admit_rolling_back(1, seq_of(0, 300), 290);
    const int32_t seq = s->seq;
    finish(*s, 0);  // the first sampled token ended it: the last prompt token was not decoded again
    const auto es = store_->entries();
    ASSERT_EQ(es.size(), 1u);
    EXPECT_EQ(es[0].n_tokens, 299);
    EXPECT_EQ(es[0].checkpoints, (std::vector<cp>{{290, cache::point_kind::turn}}));
    EXPECT_EQ(st_->at(seq).n_kv, 299);
    EXPECT_EQ(st_->at(seq).rec, 299);
    // A resend continues it: one token to compute.
    auto r = admit(seq_of(0, 300), 290);
    EXPECT_EQ(r->n_past, 299);
    EXPECT_EQ(r->stats.hit_kind, "full");
    finish(*r);
}

TEST_F(Lifecycle, GuardByRollbackRefusedByTheEngineIsSkipped) {
    using cp = std::pair<int32_t, cache::point_kind>;
    // An architecture llama.cpp cannot roll back.
    auto s = admit_rolling_back(0, seq_of(0, 300), 290);
    const int32_t seq = s->seq;
    finish(*s);
    EXPECT_EQ(st_->at(seq).n_kv, 300);
    EXPECT_EQ(checkpoints_of_front(), (std::vector<cp>{{290, cache::point_kind::turn}}));
}

TEST_F(Lifecycle, AbandonReleasesTheSequenceAndItsReservations) {
    make(true, 2);
    auto s = admit(seq_of(0, 300), 290);
    st_->decode(s->seq, 290);
    s->n_past = 290;
    life_->after_chunk(*s, now_);
    EXPECT_EQ(s->captured.size(), 1u);
    EXPECT_GT(store_->ram_bytes(), 0u);
    life_->abandon(*s);
    EXPECT_EQ(s->seq, -1);
    EXPECT_EQ(store_->ram_bytes(), 0u);
    EXPECT_EQ(pool_->n_free(), 2u);
    store_->check_invariants();
}

// POST /v1/cache/reset while a request is served (scheduler::impl::fence_reset empties the store
// and flags the slot): the rest of its prefill captures nothing, its commit stores nothing and
// gives back what it reserved and its sequence, and the same prompt then misses; the request
// after the reset stores its entry as usual (the positive case). Hybrid and dense.
TEST_F(Lifecycle, ARequestServedAcrossAResetStoresNothing) {
    for (const bool hybrid : {true, false}) {
        SCOPED_TRACE(hybrid ? "hybrid" : "dense");
        make(hybrid, 2);
        auto s = admit(seq_of(0, 300), 290);
        while (s->n_past < 295) {
            const int32_t n = std::min({64, s->next_stop() - s->n_past, 295 - s->n_past});
            st_->decode(s->seq, n);
            s->n_past += n;
            life_->after_chunk(*s, now_);
        }
        EXPECT_EQ(s->captured.size(), hybrid ? 1u : 0u);  // the turn checkpoint at 290
        store_->reset();
        pool_->drain_released();
        s->reset_since = true;
        finish(*s);
        EXPECT_TRUE(store_->entries().empty());
        EXPECT_EQ(store_->ram_bytes(), 0u);
        EXPECT_EQ(pool_->n_free(), 2u);
        auto again = admit(seq_of(0, 300), 290);
        EXPECT_EQ(again->stats.hit_kind, "miss");
        EXPECT_EQ(again->n_past, 0);
        finish(*again);
        ASSERT_EQ(store_->entries().size(), 1u);
        EXPECT_EQ(store_->entries().front().n_tokens, hybrid ? 300 : 303);  // dense: the reply's 3 too
    }
}

// The scheduler moves a restored sequence next to a running one (scheduler::impl::
// place_next_to_active): the pool offers a free id beside an active one, else the id of the
// shortest parked entry there, which leaves the device for RAM first; never an active id.
TEST_F(Lifecycle, AnIdNextToARunningSequenceIsAFreeOneElseAParkedOneMadeFree) {
    make(true, 4);
    for (const std::string session : {"a", "b", "c"}) {  // parked on 0, 1, 2; 3 is free
        auto s = admit(seq_of(1000 * (session[0] - 'a' + 1), 200), 190, session);
        finish(*s);
    }
    auto where_of = [&](int32_t seq) {
        for (const auto & e : store_->entries()) {
            if (e.where == cache::tier::device && e.seq == seq) {
                return e.k.session;
            }
        }
        return std::string();
    };
    ASSERT_EQ(where_of(0), "a");
    ASSERT_EQ(where_of(1), "b");
    ASSERT_EQ(where_of(2), "c");
    EXPECT_EQ(pool_->acquire_next_to({2}, std::numeric_limits<int32_t>::max()), 3);  // 1 is parked, 3 is free
    EXPECT_EQ(where_of(1), "b");
    pool_->release(3);
    // Beside 0 only 1, which holds b (200 tokens): left alone under a 100-token bound...
    EXPECT_FALSE(pool_->acquire_next_to({0}, 100));
    EXPECT_EQ(where_of(1), "b");
    // ...demoted to RAM (its whole state read) without one, and its id handed out emptied.
    const int n_get = st_->n_get_state;
    EXPECT_EQ(pool_->acquire_next_to({0}, std::numeric_limits<int32_t>::max()), 1);
    EXPECT_EQ(st_->n_get_state, n_get + 1);
    EXPECT_EQ(where_of(1), "");
    EXPECT_EQ(st_->seq_pos_max(1), -1);
    bool b_in_ram = false;
    for (const auto & e : store_->entries()) {
        b_in_ram |= e.k.session == "b" && e.where == cache::tier::ram;
    }
    EXPECT_TRUE(b_in_ram);
    // An active id is never offered: beside {0, 1} only 2 is not active (c, demoted in its turn).
    EXPECT_EQ(pool_->acquire_next_to({0, 1}, std::numeric_limits<int32_t>::max()), 2);
    EXPECT_EQ(where_of(2), "");
    store_->check_invariants();
}
// A parked entry is not dropped for a faster step: with no RAM for it, nothing is offered.
TEST_F(Lifecycle, NoIdNextToARunningSequenceWhenTheParkedEntryThereHasNoRoomInRam) {
    cache::config cfg = test_config();
    cfg.ram_bytes = 1024;  // the entries' restore points fit; a whole state of 200 tokens (1,664 B) does not
    make(true, 3, cfg);
    for (const std::string session : {"a", "b", "c"}) {  // parked on 0, 1, 2
        auto s = admit(seq_of(1000 * (session[0] - 'a' + 1), 200), 190, session);
        finish(*s);
    }
    ASSERT_EQ(store_->entries().size(), 3u);
    EXPECT_FALSE(pool_->acquire_next_to({0}, std::numeric_limits<int32_t>::max()));
    bool b_parked = false;
    for (const auto & e : store_->entries()) {
        b_parked |= e.k.session == "b" && e.where == cache::tier::device && e.seq == 1;
    }
    EXPECT_TRUE(b_parked);
    EXPECT_EQ(store_->entries().size(), 3u);
    store_->check_invariants();
}

// The entry a restore copies from is never the one demoted to make room next to a running
// sequence (scheduler::impl::acquire_sequence passes the plan's source as `protect`).
TEST_F(Lifecycle, AnIdNextToARunningSequenceNeverDemotesTheProtectedEntry) {
    make(true, 3);
    for (const std::string session : {"a", "b", "c"}) {  // parked on 0, 1, 2
        auto s = admit(seq_of(1000 * (session[0] - 'a' + 1), 200), 190, session);
        finish(*s);
    }
    uint64_t b = 0;
    for (const auto & e : store_->entries()) {
        b = e.k.session == "b" && e.where == cache::tier::device && e.seq == 1 ? e.id : b;
    }
    ASSERT_NE(b, 0u);
    // Id 1 is the only one next to 0 (and 2): b is parked there and protected, so nothing.
    auto where = [&]() -> std::optional<cache::tier> {
        for (const auto & e : store_->entries()) {
            if (e.id == b) {
                return e.where;
            }
        }
        return std::nullopt;
    };
    EXPECT_FALSE(pool_->acquire_next_to({0, 2}, std::numeric_limits<int32_t>::max(), b));
    EXPECT_EQ(where(), cache::tier::device);
    // Unprotected, b goes to RAM and its id is the one returned (the positive case).
    EXPECT_EQ(pool_->acquire_next_to({0, 2}, std::numeric_limits<int32_t>::max()), 1);
    EXPECT_EQ(where(), cache::tier::ram);
    store_->check_invariants();
}

// The phase invariants (slot.h) catch what a broken transition would leave behind.
TEST_F(Lifecycle, SlotInvariantsNameTheBrokenRule) {
    make(true);
    auto s = admit(seq_of(0, 300), 290);
    EXPECT_NO_THROW(check_invariants(*s, 0, n_seq_));
    auto expect_broken = [&](const slot & x, const std::string & rule) {
        try {
            check_invariants(x, 0, n_seq_);
            ADD_FAILURE() << "no invariant broken, expected " << rule;
        } catch (const std::logic_error & e) {
            EXPECT_NE(std::string(e.what()).find(rule), std::string::npos) << e.what();
        }
    };
    // A capture skipped: the prefill went past a planned capture point without taking it.
    ASSERT_FALSE(s->plan.captures.empty());
    s->n_past = s->plan.captures.front().n_tokens + 1;
    expect_broken(*s, "3. capture at");
    s->n_past = 0;
    // A prefill stopped inside an image (an image is decoded as one unit).
    s->req->media.push_back({{5, 21}, nullptr});
    s->n_past = 10;
    expect_broken(*s, "3. n_past 10 inside the image at [5, 21)");
    s->n_past = 5;  // at its start: the image comes next
    EXPECT_NO_THROW(check_invariants(*s, 0, n_seq_));
    EXPECT_EQ(s->image_at_past(), &s->req->media.front());
    EXPECT_EQ(s->text_stop(), 5);
    s->n_past = 0;
    EXPECT_EQ(s->text_stop(), 5);  // a text chunk stops at the image
    EXPECT_EQ(s->image_at_past(), nullptr);
    s->req->media.clear();
    // Decoding before the prompt is in.
    s->ph = slot::phase::decode;
    expect_broken(*s, "4. decoding before");
    s->ph = slot::phase::prefill;
    // A sequence id outside the pool.
    const int32_t seq = s->seq;
    s->seq = n_seq_;
    expect_broken(*s, "6. sequence id");
    s->seq = seq;
    // An idle slot that kept its sequence (a missed release).
    slot idle;
    idle.seq = 3;
    expect_broken(idle, "1. an idle slot");
    // Two active slots on one sequence id.
    std::vector<slot> slots(2);
    for (auto & x : slots) {
        x.req = std::make_shared<generation_request>();
        x.req->prompt = seq_of(0, 10);
        x.ph = slot::phase::prefill;
        x.seq = 1;
    }
    try {
        check_invariants(slots, n_seq_);
        ADD_FAILURE() << "two slots on one sequence not caught";
    } catch (const std::logic_error & e) {
        EXPECT_NE(std::string(e.what()).find("held by two active slots"), std::string::npos) << e.what();
    }
    slots[1].seq = 2;
    EXPECT_NO_THROW(check_invariants(slots, n_seq_));
}

}  // namespace
}  // namespace lineage::scheduler

namespace lineage::scheduler {
namespace {

// llama.cpp computes the step of several sequences in one micro-batch only when their ids are
// consecutive (per-sequence KV buffers): the pool hands out an id next to an active one, else
// the lowest free one, whatever order ids came back in.
TEST(SequencePool, HandsOutIdsNextToTheActiveOnesElseTheLowest) {
    fakes::fake_engine_states st(true);
    cache::store store(fakes::lifecycle_config(), true);
    sequence_pool pool(st, store, 6);
    std::vector<int32_t> got;
    for (int i = 0; i < 6; ++i) {
        got.push_back(*pool.acquire(0, got));
    }
    EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
    EXPECT_FALSE(pool.acquire(0, got));  // every id busy, nothing parked to demote
    // Back in another order than they went out: the lowest first when nothing is active.
    for (int32_t s : {5, 2, 0, 4, 1}) {
        pool.release(s);
    }
    EXPECT_EQ(pool.acquire(0, {}), 0);  // free now: 1, 2, 4, 5 (3 is still out)
    EXPECT_EQ(pool.acquire(0, {3}), 2);  // 2 and 4 are beside 3: the lower one
    // Beside an active sequence beats a lower id: 4 (beside 3) before 1, then 5 (beside 4).
    EXPECT_EQ(pool.acquire(0, {3}), 4);
    EXPECT_EQ(pool.acquire(0, {3, 4}), 5);
    EXPECT_EQ(pool.acquire(0, {}), 1);
}

}  // namespace
}  // namespace lineage::scheduler
