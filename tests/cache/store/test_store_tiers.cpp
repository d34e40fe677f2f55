// Unit tests of the store's list of tiers below RAM (store::attach_tier), with lookups that offer
// fixed candidates and an in-memory tier (mem_tier.h): the order they are consulted in, each only
// for something longer than those before; per-tier hit counts and load-failure causes; a copy
// of a shared tier never superseded; a third tier working as the first two do. No model.
#include "cache/store/store.h"

#include "disk_fixture.h"
#include "fake_states.h"
#include "mem_tier.h"

#include <gtest/gtest.h>

namespace lineage::cache {
namespace {

using fakes::cat;
using fakes::seq;

/** Writes a 40-token record (1000 bytes of state) of bucket "b", session `session`, through `t`'s
 *  worker and waits for it. */
void put_record(fakes::mem_tier & t, const std::string & session, bool anchor = false) {
    tier_write w;
    w.entry_id = 1;
    w.rec = record(seq(0, 40), 1000);
    w.rec.bucket = "b";
    w.rec.session = session;
    w.rec.anchor = anchor;
    w.last_use = 1.0;
    t.write(std::move(w));
    t.drain();
}

tier_traits traits_of(const std::string & name, bool shared) {
    return tier_traits{.name = name, .shared = shared, .load_failed = name + "_failed", .copy_noun = name + " copy"};
}

TEST(StoreTiers, ConsultedInOrderEachOnlyForSomethingLonger) {
    store st(hybrid_config(), true);
    fake_disk a, b, c;
    st.attach_tier(&a, traits_of("a", false));
    st.attach_tier(&b, traits_of("b", true));
    st.attach_tier(&c, traits_of("c", true));
    const key k{"b", "s"};
    park(st, k, seq(0, 40), 1, 1.0);
    a.offer = tier_candidate{5, 50, point_kind::turn, 60, 55, false, true};
    b.offer = tier_candidate{6, 45, point_kind::turn, 60, 55, false, true};  // shorter than a's
    c.offer = tier_candidate{7, 58, point_kind::turn, 60, 55, false, true};
    auto p = st.plan(k, seq(0, 70), {}, 2.0);
    EXPECT_EQ(a.asked_longer_than, 40);  // the parked entry restores 40
    EXPECT_EQ(b.asked_longer_than, 50);  // a's 50
    EXPECT_EQ(c.asked_longer_than, 50);  // b offered nothing longer
    EXPECT_EQ(p.op, restore_op::load_tier);
    EXPECT_EQ(p.tier, 2);
    EXPECT_EQ(p.tier_name, "c");
    EXPECT_EQ(p.tier_copy, 7u);
    EXPECT_EQ(p.n_restore, 58);
    EXPECT_TRUE(p.tier_ancestors.empty());  // c is shared: its copies are not ours to supersede
    EXPECT_NE(p.reason.find("from c copy 7"), std::string::npos) << p.reason;
    const stats s = st.get_stats();
    EXPECT_EQ(s.hits_of_tier("c"), 1);
    EXPECT_EQ(s.hits_of_tier("a"), 0);
    EXPECT_EQ(s.tier_hits.size(), 3u);  // every attached tier is listed, hit or not
    // The copy cannot be read: a counted miss under c's own cause, no other tier's.
    st.tier_load_failed(p);
    EXPECT_EQ(st.get_stats().hits_of_tier("c"), 0);
    EXPECT_EQ(st.get_stats().misses, 1);
    EXPECT_EQ(st.get_stats().rejections.at("c_failed"), 1);
    EXPECT_EQ(st.get_stats().rejections.count("a_failed"), 0u);

    // The first tier is this replica's own: its copy is superseded by the entry that absorbs it.
    store st2(hybrid_config(), true);
    st2.attach_tier(&a, traits_of("a", false));
    st2.attach_tier(&b, traits_of("b", true));
    c.offer.reset();
    a.offer = tier_candidate{5, 55, point_kind::turn, 60, 55, false, true};  // reaches its history: a continuation
    auto q = st2.plan(k, seq(0, 70), {}, 2.0);
    EXPECT_EQ(q.tier, 0);
    EXPECT_EQ(q.tier_name, "a");
    EXPECT_TRUE(q.absorbs);
    EXPECT_EQ(q.tier_ancestors, std::vector<copy_id>{5});
}

TEST(StoreTiers, NoTierAttachedPlansNoLoadAndWritesNothing) {
    store st(hybrid_config(), true);
    const key k{"b", "s"};
    park(st, k, seq(0, 40), 1, 1.0);
    EXPECT_TRUE(st.take_idle_writes(1000.0, 30).empty());
    auto p = st.plan(k, seq(0, 70), {}, 2.0);
    EXPECT_EQ(p.op, restore_op::take_device);
    EXPECT_TRUE(st.get_stats().tier_hits.empty());
    // Detached tiers are forgotten: no lookup goes to them.
    fake_disk a;
    a.offer = tier_candidate{5, 58, point_kind::turn, 60, 55, false, true};
    store st2(hybrid_config(), true);
    st2.attach_tier(&a, traits_of("a", false));
    st2.detach_tiers();
    EXPECT_EQ(st2.plan(k, seq(0, 70), {}, 2.0).op, restore_op::none);
    EXPECT_EQ(a.asked_longer_than, -1);
}

// The fake tier through the store's whole hit path: written by its worker, found by the one
// restore rule over its catalog, read back and completed by tier_loaded as a hit of that tier.
TEST(StoreTiers, AnInMemoryTierServesAHitThroughTheStore) {
    fakes::mem_tier mem("mem");
    put_record(mem, "s");
    const auto done = mem.take_completions();
    ASSERT_EQ(done.size(), 1u);
    ASSERT_TRUE(done[0].result.is_ok());
    const copy_id id = done[0].file;

    store st(hybrid_config(), true);
    st.attach_tier(&mem, mem.traits());
    const key k{"b", "s"};
    auto p = st.plan(k, seq(0, 50), {}, 2.0);
    ASSERT_EQ(p.op, restore_op::load_tier) << p.reason;
    EXPECT_EQ(p.tier, 0);
    EXPECT_EQ(p.tier_name, "mem");
    EXPECT_EQ(p.tier_copy, id);
    EXPECT_EQ(p.n_restore, 40);
    // Another bucket's prompt finds nothing: the rule's bucket match holds in the fake too.
    store other(hybrid_config(), true);
    other.attach_tier(&mem, mem.traits());
    EXPECT_EQ(other.plan(key{"b2", "s"}, seq(0, 50), {}, 2.0).op, restore_op::none);

    tier_expect want{.bucket = "b", .prefix = seq(0, 40)};
    tier_load_result r = mem.load(p.tier_copy, want).get();
    ASSERT_TRUE(r.record.has_value()) << r.detail;
    ASSERT_TRUE(st.tier_loaded(k, p, std::move(r), 3.0).is_ok());
    EXPECT_EQ(p.n_restore, 40);
    EXPECT_EQ(st.get_stats().hits_of_tier("mem"), 1);
    EXPECT_EQ(mem.loads(), 1);
    st.check_invariants();

    // The copy vanished behind the store's back: the load fails and the hit becomes a miss
    // counted under the tier's own cause.
    store st2(hybrid_config(), true);
    st2.attach_tier(&mem, mem.traits());
    auto q = st2.plan(k, seq(0, 50), {}, 4.0);
    ASSERT_EQ(q.op, restore_op::load_tier);
    mem.fail_loads = true;
    tier_load_result bad = mem.load(q.tier_copy, want).get();
    EXPECT_FALSE(bad.record.has_value());
    EXPECT_FALSE(st2.tier_loaded(k, q, std::move(bad), 5.0).is_ok());
    EXPECT_EQ(st2.get_stats().rejections.at("mem_failed"), 1);
    EXPECT_EQ(st2.get_stats().hits_of_tier("mem"), 0);
    EXPECT_EQ(q.n_restore, 0);  // a cold plan now
}

// A copy deleted between the plan and its read (a successor superseded it, the disk budget
// evicted it): the request is planned again without it, and what memory holds restores, counted
// as one lookup. The scheduler does this (complete_load); a cold prefill of the whole prompt was
// what it did before, though the entry in memory held 20 of its tokens.
TEST(StoreTiers, ACopyGoneBeforeItsReadIsPlannedAgainFromWhatMemoryHolds) {
    fakes::mem_tier mem("mem");
    put_record(mem, "s");  // 40 tokens
    ASSERT_EQ(mem.take_completions().size(), 1u);
    store st(hybrid_config(), true);
    st.attach_tier(&mem, mem.traits());
    const key k{"b", "s"};
    park(st, k, seq(0, 20), 1, 1.0);
    const tokens prompt = seq(0, 50);
    auto p = st.plan(k, prompt, {}, 2.0);
    ASSERT_EQ(p.op, restore_op::load_tier) << p.reason;  // the copy restores more than memory's 20
    EXPECT_EQ(p.n_restore, 40);
    EXPECT_TRUE(p.counted);

    mem.vanish_on_load = true;
    const restore_plan first = p;  // as planned: what retract_lookup takes back
    tier_load_result gone = mem.load(p.tier_copy, tier_expect{.bucket = "b", .prefix = seq(0, 40)}).get();
    EXPECT_EQ(gone.error, tier_load_error::missing);
    EXPECT_FALSE(st.tier_loaded(k, p, std::move(gone), 3.0).is_ok());
    EXPECT_EQ(p.n_restore, 0);
    EXPECT_EQ(st.get_stats().misses, 1);  // what a request prefilling cold now counts

    st.retract_lookup(first, static_cast<int32_t>(prompt.size()));
    auto again = st.plan(k, prompt, {}, 3.0);
    EXPECT_EQ(again.op, restore_op::take_device) << again.reason;  // the parked entry, continued
    EXPECT_EQ(again.n_restore, 20);
    const stats s = st.get_stats();
    EXPECT_EQ(s.lookups, 1);
    EXPECT_EQ(s.misses, 0);
    EXPECT_EQ(s.hits_of_tier("mem"), 0);
    EXPECT_EQ(s.tokens_prefilled, 30);
    EXPECT_EQ(s.tokens_reused, 20);
    EXPECT_EQ(s.rejections.at("mem_failed"), 1);  // the failed read stays counted
    st.check_invariants();

    // After a damaged copy, an I/O error or a timeout the plan made again skips that tier.
    store st3(hybrid_config(), true);
    st3.attach_tier(&mem, mem.traits());
    mem.vanish_on_load = false;
    put_record(mem, "s");
    ASSERT_EQ(mem.take_completions().size(), 1u);
    EXPECT_EQ(st3.plan(k, prompt, {}, 3.5).op, restore_op::load_tier);
    plan_hints skip;
    skip.skip_tier = 0;
    EXPECT_EQ(st3.plan(k, prompt, skip, 3.6).op, restore_op::none);

    // A short hit's cause is counted once too: an entry in memory shares 300 tokens but has no
    // restore point before its end (310), the copy restores 40 (a short hit, before the first
    // restore point); once the copy is gone the second plan is a miss of the same cause.
    fakes::mem_tier mem4("mem");
    store st4(hybrid_config(), true);
    st4.attach_tier(&mem4, mem4.traits());
    put_record(mem4, "s");
    ASSERT_EQ(mem4.take_completions().size(), 1u);
    park(st4, k, cat(seq(0, 300), seq(9000, 10)), 1, 1.0);
    const tokens long_prompt = seq(0, 320);
    auto short_hit = st4.plan(k, long_prompt, {}, 2.0);
    ASSERT_EQ(short_hit.op, restore_op::load_tier) << short_hit.reason;
    ASSERT_EQ(short_hit.cause, miss_cause::before_first_restore_point) << short_hit.reason;
    const restore_plan short_first = short_hit;
    mem4.vanish_on_load = true;
    EXPECT_FALSE(st4.tier_loaded(k, short_hit, mem4.load(short_hit.tier_copy, {}).get(), 3.0).is_ok());
    st4.retract_lookup(short_first, static_cast<int32_t>(long_prompt.size()));
    const auto miss = st4.plan(k, long_prompt, {}, 3.0);
    EXPECT_EQ(miss.n_restore, 0) << miss.reason;
    const stats s4 = st4.get_stats();
    const std::string cause(to_string(miss_cause::before_first_restore_point));
    EXPECT_EQ(s4.short_hits_by_cause.count(cause) ? s4.short_hits_by_cause.at(cause) : 0, 0);
    EXPECT_EQ(s4.misses_by_cause.at(cause), 1);
    EXPECT_EQ(s4.lookups, 1);
    EXPECT_EQ(s4.misses, 1);

    // A warm-up's lookup is counted nowhere: its failed read takes back no request's hit.
    store st2(hybrid_config(), true);
    st2.attach_tier(&mem, mem.traits());
    auto w = st2.plan_warmup(k, prompt, {}, 4.0);
    ASSERT_EQ(w.op, restore_op::load_tier) << w.reason;
    EXPECT_FALSE(w.counted);
    mem.fail_loads = true;
    tier_load_result bad = mem.load(w.tier_copy, tier_expect{.bucket = "b", .prefix = seq(0, 40)}).get();
    EXPECT_FALSE(st2.tier_loaded(k, w, std::move(bad), 5.0).is_ok());
    EXPECT_EQ(st2.get_stats().misses, 0);
    EXPECT_EQ(st2.get_stats().lookups, 0);
    EXPECT_EQ(st2.get_stats().tokens_prefilled, 0);
    EXPECT_EQ(st2.get_stats().rejections.at("mem_failed"), 1);
}

// An anchor read back from a tier for a new session: pinned in RAM again with its ladder where
// the config says so (a GPU, or RAM release off), else it serves that hit from the file's state
// and stays a file (the CPU alone with RAM release on: config::repin_read_anchors_for).
TEST(StoreTiers, AnAnchorReadBackIsPinnedAgainOnlyWhereTheConfigSays) {
    EXPECT_TRUE(config::repin_read_anchors_for(/*gpu=*/true, 30));
    EXPECT_TRUE(config::repin_read_anchors_for(/*gpu=*/false, 0));
    EXPECT_FALSE(config::repin_read_anchors_for(/*gpu=*/false, 5));
    fakes::mem_tier mem("mem");
    put_record(mem, "s1", /*anchor=*/true);
    ASSERT_EQ(mem.take_completions().size(), 1u);
    const tier_expect want{.bucket = "b", .prefix = seq(0, 40)};
    for (const bool repin : {true, false}) {
        SCOPED_TRACE(repin ? "pinned again" : "stays a file");
        config c = hybrid_config();
        c.repin_read_anchors = repin;
        store st(c, true);
        st.attach_tier(&mem, mem.traits());
        const key k{"b", "s2"};  // a new session on the anchor's system prompt
        plan_hints h;
        h.anchor_tokens = 40 + c.anchor_slack;  // the same system prompt: its anchor is the file's 40 tokens
        auto p = st.plan(k, seq(0, 50), h, 2.0);
        ASSERT_EQ(p.op, restore_op::load_tier) << p.reason;
        EXPECT_EQ(p.kind, point_kind::anchor);
        EXPECT_EQ(p.n_restore, 40);
        if (!repin) {
            // The file is the anchor still: no anchor (pinned without a file, written a second
            // time) and no ladder is captured over it.
            for (const auto & cp : p.captures) {
                EXPECT_NE(cp.kind, point_kind::anchor) << cp.n_tokens;
                EXPECT_NE(cp.kind, point_kind::ladder) << cp.n_tokens;
            }
        }
        ASSERT_TRUE(st.tier_loaded(k, p, mem.load(p.tier_copy, want).get(), 3.0).is_ok());
        ASSERT_TRUE(p.full);  // the hit restores from the file's state either way
        EXPECT_EQ(p.full->size(), 1000u);
        EXPECT_EQ(st.get_stats().anchors, repin ? 1 : 0);
        EXPECT_EQ(st.get_stats().anchor_bytes, repin ? 1000u : 0u);
        EXPECT_EQ(st.get_stats().hits_of_tier("mem"), 1);
        st.check_invariants();
        // The next new session: from the pinned RAM copy, or from the file again.
        const auto q = st.plan(key{"b", "s3"}, seq(0, 50), h, 4.0);
        EXPECT_EQ(q.op, repin ? restore_op::load_ram : restore_op::load_tier) << q.reason;
        EXPECT_EQ(q.n_restore, 40);
    }
    // From a shared tier (Redis: no file of this replica's own) it is pinned either way.
    fakes::mem_tier shared("shared", /*shared=*/true);
    put_record(shared, "s1", /*anchor=*/true);
    ASSERT_EQ(shared.take_completions().size(), 1u);
    config c = hybrid_config();
    c.repin_read_anchors = false;
    store st(c, true);
    st.attach_tier(&shared, shared.traits());
    const key k{"b", "s2"};
    auto p = st.plan(k, seq(0, 50), {}, 2.0);
    ASSERT_EQ(p.op, restore_op::load_tier) << p.reason;
    ASSERT_TRUE(st.tier_loaded(k, p, shared.load(p.tier_copy, want).get(), 3.0).is_ok());
    EXPECT_EQ(st.get_stats().anchors, 1);
    st.check_invariants();
}

// What a load keeps of a file (store::checkpoints_to_read): the checkpoint it restores; those up
// to it when it absorbs the file; every one when an anchor's file is pinned again with its ladder.
TEST(StoreTiers, ALoadKeepsTheCheckpointsItsRestoreUses) {
    fakes::mem_tier mem("mem");
    config c = hybrid_config();
    c.repin_read_anchors = false;
    store st(c, true);
    st.attach_tier(&mem, mem.traits());  // this server's own copies: a read anchor stays a file
    restore_plan p;
    p.op = restore_op::load_tier;
    p.tier = 0;
    p.n_restore = 40;
    p.source_tokens = 60;
    p.kind = point_kind::turn;
    checkpoint_filter f = st.checkpoints_to_read(p);
    EXPECT_TRUE(f.keeps(40));
    EXPECT_FALSE(f.keeps(20));
    EXPECT_FALSE(f.keeps(59));
    p.absorbs = true;  // its restore points up to 40 return with the commit
    f = st.checkpoints_to_read(p);
    EXPECT_TRUE(f.keeps(20));
    EXPECT_TRUE(f.keeps(40));
    EXPECT_FALSE(f.keeps(59));
    p.absorbs = false;
    p.kind = point_kind::ladder;  // one rung of an anchor file that stays a file
    f = st.checkpoints_to_read(p);
    EXPECT_TRUE(f.keeps(40));
    EXPECT_FALSE(f.keeps(20));
    EXPECT_FALSE(f.keeps(59));
    config r = hybrid_config();
    r.repin_read_anchors = true;
    store pin(r, true);
    pin.attach_tier(&mem, mem.traits());
    f = pin.checkpoints_to_read(p);  // pinned again in RAM with its whole ladder
    EXPECT_TRUE(f.keeps(20));
    EXPECT_TRUE(f.keeps(40));
    EXPECT_TRUE(f.keeps(59));
}

// The tier cost rule (tier_cost.h) in the store's decisions: with a measured prefill rate of
// 1,000 tokens/s and a tier read at a fixed 1,000 bytes/s, a copy adding 18 tokens (18 ms of
// recompute) is read when it holds 10 bytes (10 ms) and not when it holds 100,000 (100 s).
TEST(StoreTiers, TheCostRuleReadsACopyOnlyWhereItBeatsRecomputing) {
    config cfg = hybrid_config();
    cfg.tier_bandwidth_bytes_per_s = 1000;
    const key k{"b", "s"};
    fake_disk a;
    a.offer = tier_candidate{5, 58, point_kind::turn, 60, 55, false, true, 100000};

    // No prefill measured yet (a fresh process): every copy is worth it.
    store fresh(cfg, true);
    fresh.attach_tier(&a, traits_of("a", false));
    park(fresh, k, seq(0, 40), 1, 1.0);
    EXPECT_EQ(fresh.plan(k, seq(0, 70), {}, 2.0).op, restore_op::load_tier);

    store st(cfg, true);
    st.attach_tier(&a, traits_of("a", false));
    park(st, k, seq(0, 40), 1, 1.0);
    st.cost().observe_prefill(1000, 1.0);
    auto p = st.plan(k, seq(0, 70), {}, 2.0);
    EXPECT_EQ(p.op, restore_op::take_device) << p.reason;  // the parked entry's 40 tokens
    EXPECT_EQ(p.n_restore, 40);
    EXPECT_EQ(st.get_stats().tier_reads_declined.at("a"), 1);
    EXPECT_EQ(st.get_stats().hits_of_tier("a"), 0);
    EXPECT_DOUBLE_EQ(st.get_stats().tier_cost_prefill_tokens_per_s, 1000);
    EXPECT_DOUBLE_EQ(st.get_stats().tier_cost_read_bytes_per_s, 1000);

    store small(cfg, true);
    small.attach_tier(&a, traits_of("a", false));
    park(small, k, seq(0, 40), 1, 1.0);
    small.cost().observe_prefill(1000, 1.0);
    a.offer->bytes = 10;
    auto q = small.plan(k, seq(0, 70), {}, 2.0);
    EXPECT_EQ(q.op, restore_op::load_tier) << q.reason;
    EXPECT_EQ(q.n_restore, 58);
    EXPECT_EQ(q.tier_bytes, 10u);
    EXPECT_EQ(small.get_stats().tier_reads_declined.at("a"), 0);
}

// Writes: an entry of 1,000 bytes and 40 tokens (40 ms of recompute at 1,000 tokens/s) read back
// at 1,000 bytes/s (1 s) is not worth a copy: not written when idle, not at shutdown, counted
// once; at 1 MB/s (1 ms) it is written.
TEST(StoreTiers, TheCostRuleWritesOnlyCopiesWorthReadingBack) {
    config cfg = hybrid_config();
    cfg.tier_bandwidth_bytes_per_s = 1000;
    const key k{"b", "s"};
    fake_disk a;
    store st(cfg, true);
    st.attach_tier(&a, traits_of("a", false));
    park(st, k, seq(0, 40), 1, 1.0);
    st.cost().observe_prefill(1000, 1.0);
    EXPECT_TRUE(st.take_idle_writes(100.0, 30).empty());
    EXPECT_EQ(st.get_stats().tier_writes_declined, 1);
    EXPECT_TRUE(st.take_idle_writes(200.0, -1).empty());  // shutdown: declined already, not counted again
    EXPECT_FALSE(st.take_overdue_write(200.0, 10).has_value());
    EXPECT_EQ(st.get_stats().tier_writes_declined, 1);
    st.check_invariants();

    cfg.tier_bandwidth_bytes_per_s = 1000000;
    store fast(cfg, true);
    fast.attach_tier(&a, traits_of("a", false));
    park(fast, k, seq(0, 40), 1, 1.0);
    fast.cost().observe_prefill(1000, 1.0);
    EXPECT_EQ(fast.take_idle_writes(100.0, 30).size(), 1u);
    EXPECT_EQ(fast.get_stats().tier_writes_declined, 0);

    // The rule off: the slow tier gets the write.
    cfg.tier_bandwidth_bytes_per_s = 1000;
    cfg.tier_cost = false;
    store off(cfg, true);
    off.attach_tier(&a, traits_of("a", false));
    park(off, k, seq(0, 40), 1, 1.0);
    off.cost().observe_prefill(1000, 1.0);
    EXPECT_EQ(off.take_idle_writes(100.0, 30).size(), 1u);
}

}  // namespace
}  // namespace lineage::cache
