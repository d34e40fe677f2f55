// Unit tests of cache::radix_trie: insert, erase, exact lookup, matches in descending common
// prefix, and agreement with a brute-force scan over many sequences. check_invariants() after
// every mutation.
#include "cache/rule/radix_trie.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <utility>
#include <vector>

namespace lineage::cache {
namespace {

std::vector<std::pair<uint64_t, int32_t>> all_matches(const radix_trie & t, const tokens & q) {
    std::vector<std::pair<uint64_t, int32_t>> out;
    t.match(q, [&](uint64_t id, int32_t lcp) {
        out.emplace_back(id, lcp);
        return true;
    });
    return out;
}

TEST(RadixTrie, InsertExactAndErase) {
    radix_trie t;
    t.insert({1, 2, 3, 4}, 10);
    t.insert({1, 2, 3, 4}, 11);  // same tokens, another id
    t.insert({1, 2, 9}, 12);     // splits the edge after {1, 2}
    t.insert({1, 2}, 13);        // lands on the split node
    t.check_invariants();
    EXPECT_EQ(t.size(), 4u);
    EXPECT_EQ(t.exact({1, 2, 3, 4}), (std::vector<uint64_t>{10, 11}));
    EXPECT_EQ(t.exact({1, 2}), (std::vector<uint64_t>{13}));
    EXPECT_EQ(t.exact({1, 2, 3, 4, 5}, 2), (std::vector<uint64_t>{13}));
    EXPECT_TRUE(t.exact({1, 2, 3}).empty());
    EXPECT_FALSE(t.erase({1, 2, 3}, 10));  // not stored there
    EXPECT_FALSE(t.erase({1, 2, 3, 4}, 99));
    EXPECT_TRUE(t.erase({1, 2}, 13));
    t.check_invariants();
    EXPECT_TRUE(t.erase({1, 2, 9}, 12));  // {1, 2} now has one child: merged back
    t.check_invariants();
    EXPECT_TRUE(t.erase({1, 2, 3, 4}, 10));
    EXPECT_TRUE(t.erase({1, 2, 3, 4}, 11));
    t.check_invariants();
    EXPECT_TRUE(t.empty());
    EXPECT_EQ(t.longest_match({1, 2, 3}), 0);
}

TEST(RadixTrie, MatchVisitsInDescendingCommonPrefix) {
    radix_trie t;
    t.insert({1, 2, 3, 4, 5}, 1);  // lcp with the query: 4
    t.insert({1, 2, 3}, 2);        // 3 (a prefix of the query)
    t.insert({1, 2, 7, 7}, 3);     // 2
    t.insert({1, 9}, 4);           // 1
    t.insert({5, 5}, 5);           // 0
    t.insert({1, 2, 3, 4, 6, 6}, 6);  // 4
    const tokens q{1, 2, 3, 4, 8};
    const auto m = all_matches(t, q);
    ASSERT_EQ(m.size(), 6u);
    std::vector<int32_t> lcps;
    for (const auto & [id, l] : m) {
        lcps.push_back(l);
    }
    EXPECT_EQ(lcps, (std::vector<int32_t>{4, 4, 3, 2, 1, 0}));
    EXPECT_EQ(m[2].first, 2u);
    EXPECT_EQ(m[3].first, 3u);
    EXPECT_EQ(m[4].first, 4u);
    EXPECT_EQ(m[5].first, 5u);
    EXPECT_EQ(t.longest_match(q), 4);
    // A query that ends on a node: everything below shares all of it.
    EXPECT_EQ(all_matches(t, {1, 2, 3}).front().second, 3);
    EXPECT_EQ(t.longest_match({1, 2, 3}), 3);
    // The visitor stops the walk.
    int visited = 0;
    t.match(q, [&](uint64_t, int32_t) { return ++visited < 2; });
    EXPECT_EQ(visited, 2);
}

TEST(RadixTrie, AgreesWithBruteForceOverManySequences) {
    std::mt19937 rng(7);
    radix_trie t;
    std::map<uint64_t, tokens> stored;
    auto random_tokens = [&](const tokens & base) {
        // Share a random prefix of `base`, then go on with a small alphabet (many shared edges).
        tokens out(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(rng() % (base.size() + 1)));
        const size_t more = rng() % 40;
        for (size_t i = 0; i < more; ++i) {
            out.push_back(static_cast<token>(rng() % 4));
        }
        return out;
    };
    tokens base;
    for (int i = 0; i < 200; ++i) {
        base.push_back(static_cast<token>(rng() % 4));
    }
    for (uint64_t id = 1; id <= 600; ++id) {
        stored[id] = random_tokens(base);
        t.insert(stored[id], id);
        if (id % 3 == 0) {  // erase an earlier one now and then
            const uint64_t victim = id - 2;
            if (stored.count(victim) != 0) {
                ASSERT_TRUE(t.erase(stored[victim], victim));
                stored.erase(victim);
            }
        }
    }
    t.check_invariants();
    ASSERT_EQ(t.size(), stored.size());
    for (int qi = 0; qi < 50; ++qi) {
        const tokens q = random_tokens(base);
        std::map<uint64_t, int32_t> expected;
        for (const auto & [id, s] : stored) {
            const size_t n = std::min(s.size(), q.size());
            size_t l = 0;
            while (l < n && s[l] == q[l]) {
                ++l;
            }
            expected[id] = static_cast<int32_t>(l);
        }
        const auto m = all_matches(t, q);
        ASSERT_EQ(m.size(), stored.size());
        std::map<uint64_t, int32_t> got;
        for (size_t i = 0; i < m.size(); ++i) {
            got[m[i].first] = m[i].second;
            if (i > 0) {
                ASSERT_GE(m[i - 1].second, m[i].second) << "not in descending common prefix";
            }
        }
        EXPECT_EQ(got, expected);
    }
}

}  // namespace
}  // namespace lineage::cache
