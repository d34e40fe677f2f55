// cache::reuse_model: how likely a stored copy is to be restored again, learned from this run's
// own traffic, for the eviction value (docs/prompt-cache.md "Eviction by value"; store_value.cpp).
//
// Agents send two kinds of prompt beside each other: the turns of a long conversation, each of
// which continues the one before (its entry is restored again within seconds, while the client
// runs a tool), and one-off calls on a short system text of their own (a title, a summary, a
// classification, a subagent's first step), whose entries are seldom restored whole. Which kind
// an entry is shows in how often it has been used: the model counts, per use class (0 uses, 1,
// 2 or more), the outcomes of entries in that class: restored again (a success), or gone from the
// store without it (evicted or expired: a failure). An entry still stored has no outcome yet, so
// it does not count (counting it at entry would make every class look unused while its entries
// wait for their next turn). A lookup that finds the ghost of an evicted entry turns that
// failure into a success: the entry would have been used again (cf. ARC's ghost lists, Megiddo
// and Modha, FAST 2003).
//   global(u) = (reused[u] + 1) / (reused[u] + left[u] + 2)   (Laplace's rule of succession)
// and the same counts per family (reuse_family: the entry's bucket and first family_tokens
// tokens, i.e. its chat template header and the start of its system text), shrunk toward the
// global estimate: an agent's conversations and its title requests start differently, and a new
// conversation's first entry is as unused as a title's until its family says otherwise:
//   probability(u, f) = (reused[u, f] + 2 global(u)) / (reused[u, f] + left[u, f] + 2)
//   likelihood(u, age) = probability(u) / (1 + age / gap)
// where gap is the moving average of the time between an entry's last use and its next one
// (the clients' think and tool time; prior_gap_s before the first): a copy idle for many gaps
// is less and less likely to come back.
// Thread safety: none (the store's, engine thread only).
#pragma once

#include "cache/types.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace lineage::cache {

class reuse_model {
public:
    /** Use classes: 0, 1, 2 or more restores while stored. */
    static constexpr int32_t classes = 3;
    /** The reuse gap assumed before the first was measured, seconds: an agent's tool step. */
    static constexpr double prior_gap_s = 30;
    /** Weight of the newest gap in its moving average. */
    static constexpr double gap_weight = 0.1;

    /** Tokens of an entry's start that name its family (64: a chat template's header and the
     *  first ~50 tokens of the system text, where an agent's prompt and each kind of its side
     *  calls differ). */
    static constexpr int32_t family_tokens = 64;
    /** Families counted at most (the oldest counts are dropped past it). */
    static constexpr size_t max_families = 4096;

    /** `prior_is_a_sample`: the first gap observed joins prior_gap_s in the moving average
     *  instead of replacing it (the ladder rungs' model: their restores are few, and two new
     *  sessions arriving together must not set every rung's gap to a second). */
    explicit reuse_model(bool prior_is_a_sample = false) : gap_measured_(prior_is_a_sample) {}

    static int32_t class_of(int32_t uses) { return uses < 0 ? 0 : uses < classes ? uses : classes - 1; }

    /** An entry of family `family` that had `uses` uses was restored again. */
    void reused(int32_t uses, uint64_t family = 0);
    /** An entry of family `family` that had `uses` uses left the store without being restored. */
    void left_unused(int32_t uses, uint64_t family = 0);
    /** A lookup found the ghost of an entry of family `family` that had `uses` uses when it was
     *  evicted: it would have been restored, so its failure counts as a success. */
    void ghost_reused(int32_t uses, uint64_t family = 0);
    /** A restore `seconds` after the entry's previous use. */
    void observe_gap(double seconds);

    /** The chance an entry with `uses` uses is restored again, in (0, 1]: over every family
     *  (family 0) or for `family`. */
    double probability(int32_t uses, uint64_t family = 0) const;
    /** The moving average reuse gap, seconds. */
    double gap_s() const { return gap_s_; }
    /** probability(uses, family) discounted by `age_s` seconds since the entry's last use. */
    double likelihood(int32_t uses, double age_s, uint64_t family = 0) const;

    int64_t reused_count(int32_t cls) const { return global_.reused[static_cast<std::size_t>(cls)]; }
    int64_t left_count(int32_t cls) const { return global_.left[static_cast<std::size_t>(cls)]; }

private:
    struct counts {
        std::array<int64_t, classes> reused{};
        std::array<int64_t, classes> left{};
    };
    counts * of(uint64_t family);

    counts global_;
    std::unordered_map<uint64_t, counts> families_;
    double gap_s_ = prior_gap_s;
    bool gap_measured_ = false;
};

/** The family of an entry of `bucket` whose tokens are `t` (value.h): a hash of the bucket and
 *  t's first reuse_model::family_tokens tokens; never 0. */
uint64_t reuse_family(const std::string & bucket, const tokens & t);

}  // namespace lineage::cache
