// Unit tests of the one restore-point rule (restore_rule.h) with fake states, no model: the
// same entries held in RAM (cache::store) and on disk (disk_tier, its catalog indexed by
// bucket) give the same plan for every prompt: restore length, kind, source and absorption,
// the session rule and the tie order included; and the tie order itself, exactly.
#include "cache/tier/disk/disk_tier.h"
#include "cache/rule/restore_rule.h"
#include "cache/store/store.h"

#include "fake_states.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include <unistd.h>

namespace lineage::cache {
namespace {

using fakes::cat;
using fakes::fake;
using fakes::seq;

namespace fs = std::filesystem;

struct spec {
    key k;
    tokens toks;
    std::vector<std::pair<int32_t, point_kind>> cps;
    int32_t history = -1;
    bool anchor = false;
};

config rule_config() {
    config c;
    c.ram_bytes = 1 << 24;
    c.min_prefix = 8;
    return c;
}

// Conversations of two sessions in one bucket, an anchor, and an entry of another bucket.
std::vector<spec> specs(bool hybrid) {
    auto cps = [hybrid](std::vector<std::pair<int32_t, point_kind>> c) {
        return hybrid ? c : std::vector<std::pair<int32_t, point_kind>>{};
    };
    const key s1{"b", "s1"}, s2{"b", "s2"}, other{"b2", "s1"};
    return {
        {s1, seq(0, 30), {}, -1, true},                                                        // anchor
        {s1, seq(0, 100), cps({{60, point_kind::turn}, {99, point_kind::guard}}), 60, false},  // A
        {s2, cat(seq(0, 80), seq(1000, 40)), cps({{80, point_kind::divergence}, {110, point_kind::turn}}), 110, false},
        {s1, cat(seq(0, 60), seq(5000, 20)), cps({{60, point_kind::turn}}), 70, false},  // ties with A at 60
        {other, seq(0, 200), cps({{150, point_kind::turn}}), 150, false},
    };
}

std::vector<std::pair<key, tokens>> prompts() {
    const key s1{"b", "s1"}, s2{"b", "s2"}, s3{"b", "s3"};
    return {
        {s1, seq(0, 150)},                     // extends A: full 100, absorbs
        {s1, seq(0, 100)},                     // verbatim resend of A
        {s1, cat(seq(0, 70), seq(-50, 5))},    // leaves A and its sibling after 60: tie at 60
        {s1, cat(seq(0, 80), seq(1000, 50))},  // s2's entry whole (cross-session, strictly longer)
        {s2, cat(seq(0, 80), seq(1000, 50))},  // the same in s2's own session
        {s3, cat(seq(0, 85), seq(-9, 3))},     // a new session past the sibling point
        {s1, cat(seq(0, 35), seq(-7, 10))},    // past the anchor only
        {s1, cat(seq(0, 5), seq(-3, 10))},     // shorter than min prefix: miss
        {key{"b3", "s1"}, seq(0, 150)},        // unknown bucket: miss
    };
}

std::unique_ptr<store> in_ram(bool hybrid, const std::vector<spec> & sp) {
    auto st = std::make_unique<store>(rule_config(), hybrid);
    int32_t seq_id = 0;
    double now = 1;
    for (const auto & s : sp) {
        if (s.anchor) {
            EXPECT_TRUE(st->reserve(500));
            st->commit_anchor(s.k, s.toks, fake(500), 500, now);
        } else {
            commit_input in;
            in.k = s.k;
            in.toks = s.toks;
            in.seq = seq_id++;
            in.device_bytes = 1000;
            in.hints.history_tokens = s.history;
            for (auto [n, kind] : s.cps) {
                EXPECT_TRUE(st->reserve(100));
                in.reserved_bytes += 100;
                in.captured.push_back({n, kind, fake(100)});
            }
            EXPECT_TRUE(st->commit(std::move(in), now));
            const auto v = st->device_lru();
            EXPECT_TRUE(v && st->reserve(1000));
            st->demote(v->id, fake(1000), 1000);  // RAM, as the disk holds it
        }
        now += 1;
    }
    st->take_released_seqs();
    st->check_invariants();
    return st;
}

class RestoreRule : public ::testing::TestWithParam<bool> {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("lineage-rule-test-" + std::to_string(::getpid()) + "-" + (GetParam() ? "hybrid" : "dense"));
        fs::remove_all(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    fs::path dir_;
};

TEST_P(RestoreRule, SameEntriesInRamAndOnDiskGiveTheSamePlan) {
    const bool hybrid = GetParam();
    const auto sp = specs(hybrid);
    disk_config dc;
    dc.dir = dir_.string();
    dc.model = "model-a";
    dc.rule = restore_settings::from(rule_config(), hybrid);
    disk_tier tier(dc);
    double now = 1;
    for (const auto & s : sp) {
        tier_write w;
        w.rec.bucket = s.k.bucket;
        w.rec.session = s.k.session;
        w.rec.toks = s.toks;
        w.rec.history = s.history;
        w.rec.anchor = s.anchor;
        w.rec.full = fake(1000);
        for (auto [n, kind] : s.cps) {
            w.rec.checkpoints.push_back({n, kind, fake(100)});
        }
        w.last_use = now;  // the same recency order as the store's commits
        now += 1;
        tier.write(std::move(w));
    }
    tier.drain();
    ASSERT_EQ(tier.take_completions().size(), sp.size());

    int32_t hits = 0, absorbing = 0;
    for (const auto & [k, prompt] : prompts()) {
        auto ram = in_ram(hybrid, sp);  // fresh: an absorbing plan takes its entry
        const restore_plan a = ram->plan(k, prompt, {}, 100);
        store on_disk(rule_config(), hybrid);
        on_disk.attach_tier(&tier, disk_tier::kind());
        const restore_plan b = on_disk.plan(k, prompt, {}, 100);
        SCOPED_TRACE(a.reason + " | " + b.reason);
        EXPECT_EQ(a.n_restore, b.n_restore);
        EXPECT_EQ(a.kind, b.kind);
        EXPECT_EQ(a.absorbs, b.absorbs);
        EXPECT_EQ(a.source_tokens, b.source_tokens);
        EXPECT_EQ(a.source_history, b.source_history);
        EXPECT_EQ(a.op, a.n_restore > 0 ? restore_op::load_ram : restore_op::none);
        EXPECT_EQ(b.op, b.n_restore > 0 ? restore_op::load_tier : restore_op::none);
        hits += a.n_restore > 0 ? 1 : 0;
        absorbing += a.absorbs ? 1 : 0;
    }
    // The positive case: most prompts hit, and continuing ones absorb (caching on both tiers).
    EXPECT_EQ(hits, 7);
    // hybrid: the next turn, the resend (guard), the other session's entry whole, from both
    // sessions; dense adds the prompts that leave A at 70 and at 85 (a prefix past A's history
    // boundary continues A; the hybrid restores the s2 entry's divergence point at 80 there).
    EXPECT_EQ(absorbing, hybrid ? 4 : 6);
}

INSTANTIATE_TEST_SUITE_P(Families, RestoreRule, ::testing::Values(true, false),
                         [](const auto & info) { return info.param ? "hybrid" : "dense"; });

TEST(RestoreRuleOrder, LongerThenParkedThenFullThenRecentThenSmallerId) {
    restore_candidate a{1, 50, point_kind::full, -1, true, false, 1};
    restore_candidate b = a;
    b.id = 2;
    b.n = 51;
    EXPECT_TRUE(prefer(b, a));  // longer
    b.n = 50;
    b.parked = true;
    EXPECT_TRUE(prefer(b, a));  // parked
    b.parked = false;
    b.checkpoint = 0;
    EXPECT_TRUE(prefer(a, b));  // full snapshot over a checkpoint
    b.checkpoint = -1;
    b.recency = 2;
    EXPECT_TRUE(prefer(b, a));  // more recent
    b.recency = 1;
    EXPECT_TRUE(prefer(a, b));  // smaller id
    EXPECT_FALSE(prefer(a, a));
}

TEST(RestoreRuleOrder, ContinuesAtTheHistoryBoundaryNeverAnAnchorNorInExactMode) {
    restore_settings r;
    EXPECT_TRUE(continues(r, 60, 100, 60, false));
    EXPECT_FALSE(continues(r, 59, 100, 60, false));
    EXPECT_TRUE(continues(r, 100, 100, -1, false));
    EXPECT_FALSE(continues(r, 99, 100, -1, false));
    EXPECT_FALSE(continues(r, 100, 100, 60, true));
    r.lineage = false;
    EXPECT_FALSE(continues(r, 100, 100, 60, false));
}

TEST(RestoreRuleOrder, ApcClampsTheDiskCatalogLikeMemory) {
    config c = rule_config();
    c.apc_enabled = true;
    c.apc_block_size = 16;
    const auto rule = restore_settings::from(c, false);
    tier_catalog cat(rule);
    tier_catalog::file f;
    f.id = 1;
    f.bucket = "b";
    f.session = "s";
    f.toks = seq(0, 100);
    f.bytes = 1000;
    cat.add(f);
    cat.check_invariants();
    tokens p = seq(0, 40);
    p.push_back(-1);
    const auto d = cat.best("b", "s", p, 0);
    ASSERT_TRUE(d);
    EXPECT_EQ(d->n, 32);  // 40 shared tokens: two whole blocks of 16
    EXPECT_EQ(d->kind, point_kind::prefix);
    store st(c, false);
    commit_input in;
    in.k = key{"b", "s"};
    in.toks = seq(0, 100);
    in.seq = 0;
    ASSERT_TRUE(st.commit(std::move(in), 1));
    EXPECT_EQ(st.plan(key{"b", "s"}, p, {}, 2).n_restore, 32);
}

}  // namespace
}  // namespace lineage::cache
