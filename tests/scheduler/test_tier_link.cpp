// Unit tests of scheduler::tier_link over two in-memory tiers (tests/cache/mem_tier.h), the
// second shared: every write goes to every tier, the superseded copies only to the first; the
// first tier's completions reach the store, the others' do not; a load goes to the tier the plan
// names; stats and reset loop over every tier by name. No model: the engine's states are
// fake_engine_states.
#include "scheduler/tier_link.h"

#include "../cache/mem_tier.h"
#include "fake_engine_states.h"

#include <gtest/gtest.h>

#include <numeric>

namespace lineage::scheduler {
namespace {

cache::tokens seq_tokens(int32_t n) {
    cache::tokens t(static_cast<size_t>(n));
    std::iota(t.begin(), t.end(), 100);
    return t;
}

cache::config small_config() {
    cache::config c;
    c.ram_bytes = 1 << 20;
    c.min_prefix = 4;
    c.resend_checkpoint = false;
    c.guard_min_suffix = 1 << 20;
    c.divergence_min_gain = 1 << 20;
    c.disk_idle_s = 0;
    return c;
}

struct two_tiers {
    cache::fakes::mem_tier * own = nullptr;
    cache::fakes::mem_tier * shared = nullptr;
    std::vector<std::unique_ptr<cache::lower_tier>> list;
    two_tiers() {
        auto a = std::make_unique<cache::fakes::mem_tier>("own");
        auto b = std::make_unique<cache::fakes::mem_tier>("shared", /*shared=*/true);
        own = a.get();
        shared = b.get();
        list.push_back(std::move(a));
        list.push_back(std::move(b));
    }
};

/** Commits `toks` as an entry parked on sequence `seq` of `states` (which holds its KV). */
void park(cache::store & st, fakes::fake_engine_states & states, const cache::key & k, const cache::tokens & toks,
          int32_t seq, double now) {
    states.decode(seq, static_cast<int32_t>(toks.size()));
    cache::commit_input in;
    in.k = k;
    in.toks = toks;
    in.seq = seq;
    in.device_bytes = states.state_size(seq, false);
    ASSERT_TRUE(st.commit(std::move(in), now));
}

TEST(TierLink, WritesGoToEveryTierAndOnlyTheFirstTiersCopiesReachTheStore) {
    const cache::config cfg = small_config();
    cache::store st(cfg, /*hybrid=*/true);
    fakes::fake_engine_states states(true);
    two_tiers t;
    tier_link link(st, states, cfg, std::move(t.list));
    ASSERT_TRUE(link.on());
    const cache::key k{"b", "s"};
    park(st, states, k, seq_tokens(40), 1, 1.0);

    // Idle: the parked entry is written (its state read from sequence 1 now) to both tiers.
    link.housekeeping(/*idle=*/true, 10.0);
    t.own->drain();
    t.shared->drain();
    ASSERT_EQ(t.own->held().size(), 1u);
    ASSERT_EQ(t.shared->held().size(), 1u);
    const auto held = t.own->held();  // a copy: held() returns the map by value
    const cache::copy_record & rec = held.begin()->second;
    EXPECT_EQ(rec.toks, seq_tokens(40));
    ASSERT_TRUE(rec.full);
    EXPECT_EQ(rec.full->size(), states.state_size(1, false));
    EXPECT_EQ((*rec.full)[0], 'F');  // the whole state, read from the sequence
    EXPECT_EQ(t.shared->held().begin()->second.full, rec.full);  // shared, not copied

    // The next step hands the first tier's completion to the store: the entry has its copy.
    link.housekeeping(false, 11.0);
    const auto entries = st.entries();
    ASSERT_EQ(entries.size(), 1u);
    EXPECT_EQ(entries[0].tier_copy, t.own->held().begin()->first);

    // A superseding write: its ancestors are deleted from the first tier only, after it lands.
    cache::tier_job j;
    j.entry_id = 99;
    j.k = k;
    j.toks = seq_tokens(60);
    j.full = cache::make_blob(cache::blob(100, 'F'));
    j.ancestors = {entries[0].tier_copy};
    const cache::copy_id shared_first = t.shared->held().begin()->first;
    link.write(std::move(j));
    t.own->drain();
    t.shared->drain();
    EXPECT_EQ(t.own->removed(), std::vector<cache::copy_id>{entries[0].tier_copy});
    EXPECT_EQ(t.own->held().size(), 1u);
    EXPECT_TRUE(t.shared->removed().empty());
    EXPECT_EQ(t.shared->held().size(), 2u);
    EXPECT_EQ(t.shared->held().count(shared_first), 1u);

    // Stats: each tier reports under its own name; the table's tiers, off here, report their
    // zeros first (GET /v1/cache/stats and /metrics list every tier the server knows).
    cache::stats s;
    link.report(s);
    EXPECT_GT(s.bytes.at("own"), 0u);
    EXPECT_GT(s.bytes.at("shared"), s.bytes.at("own"));  // two copies against one
    std::vector<std::string> names;
    for (const auto & tr : s.tiers) {
        names.push_back(tr.name);
    }
    EXPECT_EQ(names, (std::vector<std::string>{"disk", "redis", "own", "shared"}));
    ASSERT_EQ(s.tiers[3].figures.at(0).key, "copies");
    EXPECT_EQ(std::get<int64_t>(s.tiers[3].figures.at(0).value), 2);
    EXPECT_FALSE(s.tiers[0].enabled);  // the disk tier, off
    EXPECT_TRUE(s.tiers[3].enabled);

    // Reset: every tier's copies go, counted by name.
    cache::reset_result r;
    link.reset(r, std::nullopt);
    ASSERT_EQ(r.tiers.size(), 2u);
    EXPECT_EQ(r.tiers.at("own").copies, 1);
    EXPECT_EQ(r.tiers.at("shared").copies, 2);
    EXPECT_GT(r.tiers.at("shared").bytes, 0u);
    EXPECT_TRUE(t.own->held().empty());
    EXPECT_TRUE(t.shared->held().empty());
}

TEST(TierLink, ALoadGoesToTheTierThePlanNames) {
    const cache::config cfg = small_config();
    cache::store st(cfg, true);
    fakes::fake_engine_states states(true);
    two_tiers t;
    tier_link link(st, states, cfg, std::move(t.list));
    const cache::key k{"b", "s"};
    park(st, states, k, seq_tokens(40), 1, 1.0);
    link.housekeeping(true, 10.0);
    t.own->drain();
    t.shared->drain();
    link.housekeeping(false, 11.0);

    // A fresh store over the same tiers (a restart): the plan names the first tier, which holds
    // the longest copy; the shared tier is asked only for something longer.
    cache::store st2(cfg, true);
    st2.attach_tier(t.own, t.own->traits());
    st2.attach_tier(t.shared, t.shared->traits());
    const cache::tokens prompt = [] {
        cache::tokens p = seq_tokens(40);
        p.push_back(7);
        p.push_back(8);
        return p;
    }();
    auto p = st2.plan(k, prompt, {}, 12.0);
    ASSERT_EQ(p.op, cache::restore_op::load_tier) << p.reason;
    EXPECT_EQ(p.tier, 0);
    EXPECT_EQ(p.tier_name, "own");

    // Loads are routed by index: the shared tier's copy is read from the shared tier.
    const cache::copy_id shared_copy = t.shared->held().begin()->first;
    auto r = link.load(1, shared_copy, "b", prompt, 40, {}, [] {}).get();
    ASSERT_TRUE(r.record.has_value()) << r.detail;
    EXPECT_EQ(r.record->toks, seq_tokens(40));
    EXPECT_EQ(t.shared->loads(), 1);
    EXPECT_EQ(t.own->loads(), 0);
    // The tier checks the copy holds the prompt's first n_restore tokens.
    cache::tokens other = prompt;
    other[3] = 1;
    EXPECT_EQ(link.load(0, p.tier_copy, "b", other, 40, {}, [] {}).get().error, cache::tier_load_error::identity);
    EXPECT_EQ(t.own->loads(), 1);
    st2.detach_tiers();
}

}  // namespace
}  // namespace lineage::scheduler
