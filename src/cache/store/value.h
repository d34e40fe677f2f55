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
//   probability(u) = (reused[u] + 1) / (reused[u] + left[u] + 2)   (Laplace's rule of succession)
//   likelihood(u, age) = probability(u) / (1 + age / gap)
// where gap is the moving average of the time between an entry's last use and its next one
// (the clients' think and tool time; prior_gap_s before the first): a copy idle for many gaps
// is less and less likely to come back.
// Thread safety: none (the store's, engine thread only).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace lineage::cache {

class reuse_model {
public:
    /** Use classes: 0, 1, 2 or more restores while stored. */
    static constexpr int32_t classes = 3;
    /** The reuse gap assumed before the first was measured, seconds: an agent's tool step. */
    static constexpr double prior_gap_s = 30;
    /** Weight of the newest gap in its moving average. */
    static constexpr double gap_weight = 0.1;

    static int32_t class_of(int32_t uses) { return uses < 0 ? 0 : uses < classes ? uses : classes - 1; }

    /** An entry that had `uses` uses was restored again. */
    void reused(int32_t uses) { reused_[static_cast<std::size_t>(class_of(uses))]++; }
    /** An entry that had `uses` uses left the store without being restored again. */
    void left_unused(int32_t uses) { left_[static_cast<std::size_t>(class_of(uses))]++; }
    /** A lookup found the ghost of an entry that had `uses` uses when it was evicted: it would
     *  have been restored, so its failure counts as a success. */
    void ghost_reused(int32_t uses);
    /** A restore `seconds` after the entry's previous use. */
    void observe_gap(double seconds);

    /** The chance an entry with `uses` uses is restored again, in (0, 1]. */
    double probability(int32_t uses) const;
    /** The moving average reuse gap, seconds. */
    double gap_s() const { return gap_s_; }
    /** probability(uses) discounted by `age_s` seconds since the entry's last use. */
    double likelihood(int32_t uses, double age_s) const;

    int64_t reused_count(int32_t cls) const { return reused_[static_cast<std::size_t>(cls)]; }
    int64_t left_count(int32_t cls) const { return left_[static_cast<std::size_t>(cls)]; }

private:
    std::array<int64_t, classes> left_{};
    std::array<int64_t, classes> reused_{};
    double gap_s_ = prior_gap_s;
    bool gap_measured_ = false;
};

}  // namespace lineage::cache
