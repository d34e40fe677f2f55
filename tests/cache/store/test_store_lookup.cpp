// Unit tests of cache::store's lookup structure (docs/prompt-cache.md "Lookup"): the per-bucket
// radix trie gives the same decisions as the rule it replaces (a scan of every entry: the longest
// restore point in the session, another session's only when strictly longer, ties to the most
// recently used), and APC block chains clamp a partial dense match to whole blocks.
#include "cache/store/store.h"

#include "fake_states.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <numeric>
#include <random>

namespace lineage::cache {
namespace {

using fakes::seq;
using fakes::cat;

config dense_config() {
    config c;
    c.ram_bytes = 1 << 20;
    c.min_prefix = 4;
    c.lineage = false;  // exact mode: no absorption, so every hit leaves its entry in place
    return c;
}

void commit(store & st, const key & k, const tokens & t, int32_t seq_id, double now = 1.0) {
    commit_input in;
    in.k = k;
    in.toks = t;
    in.seq = seq_id;
    in.device_bytes = 1000;
    ASSERT_TRUE(st.commit(std::move(in), now));
    st.check_invariants();
}

TEST(StoreLookup, TrieLookupEqualsTheScanRuleOverManyEntries) {
    std::mt19937 rng(11);
    store st(dense_config(), false);
    // The reference: the entries in recency order (front = most recently used).
    struct ref_entry {
        uint64_t id;
        key k;
        tokens toks;
    };
    std::list<ref_entry> ref;
    const tokens system = seq(1, 64);
    auto random_prompt = [&] {
        tokens t = system;
        t.resize(static_cast<size_t>(rng() % 65));  // a random part of the shared system prompt
        const size_t more = 1 + rng() % 60;
        for (size_t i = 0; i < more; ++i) {
            t.push_back(static_cast<token>(1000 + rng() % 3));  // small alphabet: long shared runs
        }
        return t;
    };
    const std::vector<std::string> sessions{"", "alice", "bob"};
    int32_t next_seq = 0;
    for (int i = 0; i < 300; ++i) {
        const key k{(rng() % 4 == 0) ? "other" : "b", sessions[rng() % 3]};
        const tokens prompt = random_prompt();
        // Reference decision: the scan of every entry that the trie replaced.
        const int32_t limit = static_cast<int32_t>(prompt.size()) - 1;
        const ref_entry * in = nullptr;
        const ref_entry * cross = nullptr;
        int32_t n_in = 0;
        int32_t n_cross = 0;
        for (const auto & e : ref) {
            if (e.k.bucket != k.bucket) {
                continue;
            }
            const int32_t n = std::min(common_prefix(e.toks, prompt), limit);
            if (n < 4) {
                continue;
            }
            auto & best = e.k.session == k.session ? in : cross;
            auto & best_n = e.k.session == k.session ? n_in : n_cross;
            if (best == nullptr || n > best_n) {  // ties: the first in recency order stays
                best = &e;
                best_n = n;
            }
        }
        const ref_entry * chosen = in;
        int32_t n_chosen = n_in;
        if (cross != nullptr && (in == nullptr || n_cross > n_in)) {
            chosen = cross;
            n_chosen = n_cross;
        }
        const restore_plan p = st.plan(k, prompt, {}, 1.0);
        st.check_invariants();
        ASSERT_EQ(p.n_restore, chosen ? n_chosen : 0) << "request " << i;
        ASSERT_EQ(p.source, chosen ? chosen->id : 0) << "request " << i;
        if (chosen != nullptr) {
            ref.splice(ref.begin(), ref, std::find_if(ref.begin(), ref.end(), [&](const ref_entry & e) {
                           return e.id == chosen->id;
                       }));
        }
        // Store the prompt unless it is a twin of an entry (the store would supersede it).
        const bool twin = std::any_of(ref.begin(), ref.end(), [&](const ref_entry & e) {
            return e.k.bucket == k.bucket && e.toks == prompt;
        });
        if (!twin && prompt.size() >= 4) {
            commit(st, k, prompt, next_seq++);
            ref.push_front({st.entries().front().id, k, prompt});
        }
    }
    EXPECT_EQ(st.entries().size(), ref.size());
}

TEST(StoreLookup, EqualLengthGoesToTheSessionAndThenToTheMostRecent) {
    store st(dense_config(), false);
    const tokens common = seq(0, 50);
    commit(st, key{"b", "bob"}, cat(common, seq(500, 10)), 0);    // id 1
    commit(st, key{"b", "alice"}, cat(common, seq(600, 10)), 1);  // id 2
    commit(st, key{"b", "alice"}, cat(common, seq(700, 10)), 2);  // id 3
    commit(st, key{"b", "bob"}, cat(common, seq(800, 10)), 3);    // id 4, most recent
    // All four share exactly 50 tokens with the prompt: Alice's own, the more recent of hers.
    auto p = st.plan(key{"b", "alice"}, cat(common, seq(900, 10)), {}, 2.0);
    EXPECT_EQ(p.n_restore, 50);
    EXPECT_EQ(p.source, 3u);
    // A hit makes an entry the most recent: id 2 now wins the tie.
    auto q = st.plan(key{"b", "alice"}, cat(common, seq(600, 5)), {}, 3.0);
    EXPECT_EQ(q.n_restore, 54);  // 55 shared, 1 left to prefill
    EXPECT_EQ(q.source, 2u);
    auto r = st.plan(key{"b", "alice"}, cat(common, seq(900, 10)), {}, 4.0);
    EXPECT_EQ(r.source, 2u);
    // Carol has no entry: the most recent cross-session entry at that length.
    auto c = st.plan(key{"b", "carol"}, cat(common, seq(900, 10)), {}, 5.0);
    EXPECT_EQ(c.source, 2u);
    EXPECT_NE(c.reason.find("cross-session"), std::string::npos);
}

config apc_config() {
    config c = dense_config();
    c.apc_enabled = true;
    c.apc_block_size = 16;
    return c;
}

TEST(StoreLookup, ApcClampsAPartialDenseMatchToWholeBlocks) {
    store st(apc_config(), false);
    commit(st, key{"b", "s"}, seq(0, 100), 0);  // 6 whole blocks
    const stats s0 = st.get_stats();
    EXPECT_TRUE(s0.apc_enabled);
    EXPECT_EQ(s0.total_blocks_stored, 6);
    EXPECT_EQ(s0.unique_block_hashes, 6);
    EXPECT_EQ(s0.apc_active_entries, 1);
    // The prompt leaves the entry at token 50: 3 whole blocks agree, so 48 tokens.
    auto p = st.plan(key{"b", "s"}, cat(seq(0, 50), seq(5000, 20)), {}, 2.0);
    EXPECT_EQ(p.n_restore, 48);
    EXPECT_EQ(p.kind, point_kind::prefix);
    // Exactly on a block boundary: nothing lost.
    auto q = st.plan(key{"b", "s"}, cat(seq(0, 64), seq(6000, 20)), {}, 3.0);
    EXPECT_EQ(q.n_restore, 64);
    // A prompt that extends the whole entry restores all of it (a full match, not a block walk).
    auto r = st.plan(key{"b", "s"}, cat(seq(0, 100), seq(7000, 5)), {}, 4.0);
    EXPECT_EQ(r.n_restore, 100);
    EXPECT_EQ(r.kind, point_kind::full);
    // Under 16 shared tokens no whole block agrees: a miss, though 10 tokens match.
    auto m = st.plan(key{"b", "s"}, cat(seq(0, 10), seq(8000, 20)), {}, 5.0);
    EXPECT_EQ(m.n_restore, 0);
    // A second entry sharing the first 3 blocks: 6 + 4 blocks stored, 3 of them shared.
    commit(st, key{"b", "s2"}, cat(seq(0, 48), seq(9000, 20)), 1);
    const stats s1 = st.get_stats();
    EXPECT_EQ(s1.total_blocks_stored, 10);
    EXPECT_EQ(s1.unique_block_hashes, 7);
    EXPECT_EQ(s1.apc_active_entries, 2);
    // Without APC the same partial match restores every shared token.
    store plain(dense_config(), false);
    commit(plain, key{"b", "s"}, seq(0, 100), 0);
    EXPECT_EQ(plain.plan(key{"b", "s"}, cat(seq(0, 50), seq(5000, 20)), {}, 2.0).n_restore, 50);
    EXPECT_FALSE(plain.get_stats().apc_enabled);
    EXPECT_EQ(plain.get_stats().total_blocks_stored, 0);
    // Reset drops the chains with the entries.
    const reset_result rr = st.reset();
    EXPECT_EQ(rr.entries_freed, 2);
    EXPECT_EQ(rr.bytes_freed, 2000u);
    EXPECT_EQ(st.get_stats().total_blocks_stored, 0);
    EXPECT_EQ(st.get_stats().unique_block_hashes, 0);
    st.check_invariants();
}

TEST(StoreLookup, ApcXxh3GivesTheSameClampAndNumBlocksCapsTheChains) {
    config c = apc_config();
    c.apc_hash = hash_algo::xxh3;
    c.apc_num_blocks = 8;
    store st(c, false);
    commit(st, key{"b", "s"}, seq(0, 100), 0);                        // 6 blocks
    commit(st, key{"b", "t"}, cat(seq(0, 40), seq(3000, 60)), 1);      // 6 more wanted, 2 fit
    EXPECT_EQ(st.get_stats().total_blocks_stored, 8);
    // The first entry: the same clamp as with SHA-256.
    EXPECT_EQ(st.plan(key{"b", "s"}, cat(seq(0, 50), seq(5000, 20)), {}, 2.0).n_restore, 48);
    // The second entry's chain stops after 2 blocks: a partial match is clamped to 32 tokens,
    // even though 3 more of its blocks agree with the prompt.
    auto p = st.plan(key{"b", "t"}, cat(cat(seq(0, 40), seq(3000, 50)), seq(7000, 9)), {}, 3.0);
    EXPECT_EQ(p.n_restore, 32);
    EXPECT_EQ(p.source, 2u);
}

// A running request's sequence (live_state) is a restore source when it is longer than every
// stored one: a prefix of its KV (dense), a checkpoint its prefill took (hybrid).
TEST(StoreLookup, ALiveSequenceLongerThanTheStoredStatesIsRestoredFrom) {
    config c = dense_config();
    c.lineage = true;
    store st(c, false);
    const key k{"b", "s"};
    commit(st, k, seq(1, 40), 0);  // a stored entry sharing 40 tokens
    const tokens prompt = cat(seq(1, 300), seq(9000, 10));
    live_state l;
    l.request = 7;
    l.seq = 3;
    l.bucket = "b";
    l.session = "s";
    l.toks = seq(1, 250);  // it has computed 250 of the tokens they share
    std::vector<live_state> live{l};
    plan_hints h;
    h.live = live;
    restore_plan p = st.plan(k, prompt, h, 2.0);
    EXPECT_EQ(p.n_restore, 250);
    EXPECT_EQ(p.op, restore_op::share_device);
    EXPECT_EQ(p.device_seq, 3);
    EXPECT_EQ(p.source, 0u);
    EXPECT_FALSE(p.absorbs);
    EXPECT_NE(p.reason.find("from running request 7"), std::string::npos) << p.reason;
    EXPECT_EQ(st.get_stats().live_hits, 1);
    // Another bucket's live sequence is never offered: the stored entry is restored.
    live[0].bucket = "other";
    p = st.plan(k, prompt, h, 3.0);
    EXPECT_EQ(p.n_restore, 40);
    EXPECT_EQ(p.op, restore_op::take_device);
    EXPECT_EQ(st.get_stats().live_hits, 1);
    st.check_invariants();
}

TEST(StoreLookup, AHybridLiveSequenceRestoresAtACheckpointItsPrefillTook) {
    config c = dense_config();
    c.lineage = true;
    store st(c, true);
    const key k{"b", "s"};
    const tokens prompt = seq(1, 300);
    live_state l;
    l.seq = 1;
    l.bucket = "b";
    l.toks = seq(1, 310);  // a longer prompt's prefill, past the shared 300 tokens
    l.checkpoints = {{120, point_kind::turn, make_blob(blob(8, 'T'))}, {290, point_kind::guard, make_blob(blob(8, 'G'))}};
    std::vector<live_state> live{l};
    plan_hints h;
    h.live = live;
    restore_plan p = st.plan(k, prompt, h, 2.0);
    EXPECT_EQ(p.n_restore, 290);  // its state at 310 holds other tokens past 300: the checkpoint
    EXPECT_EQ(p.kind, point_kind::guard);
    ASSERT_TRUE(p.recurrent);
    EXPECT_EQ(p.recurrent->front(), 'G');
    EXPECT_EQ(p.op, restore_op::share_device);
    EXPECT_EQ(p.source_tokens, 310);
}

TEST(StoreLookup, ApcIsOffForHybridFamilies) {
    store st(apc_config(), true);
    EXPECT_FALSE(st.get_stats().apc_enabled);
    commit_input in;
    in.k = key{"b", "s"};
    in.toks = seq(0, 100);
    in.seq = 0;
    ASSERT_TRUE(st.commit(std::move(in), 1.0));
    st.check_invariants();
    EXPECT_EQ(st.get_stats().total_blocks_stored, 0);
    EXPECT_EQ(st.get_stats().apc_active_entries, 0);
}

}  // namespace
}  // namespace lineage::cache
