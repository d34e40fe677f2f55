// cache::radix_trie: a compressed trie over token sequences that maps each stored sequence to
// the ids stored under it (several ids may share one sequence), with the longest-prefix match
// in O(prompt length) of docs/prompt-cache.md "Lookup".
// The store keeps one trie per bucket so that a lookup costs the prompt length plus the
// candidates it visits, not the number of entries times their length.
// Thread safety: not thread-safe (the store owns it on the engine thread). Ownership: move-only
// owner of its nodes.
//
// Invariants (check_invariants()):
//   1. every edge but the root's has a non-empty label; siblings start with distinct tokens,
//      and each child is filed under the first token of its label;
//   2. every node but the root holds ids or has >= 2 children (no chains of empty nodes);
//   3. size() equals the number of (sequence, id) pairs stored.
#pragma once

#include "cache/types.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

namespace lineage::cache {

class radix_trie {
public:
    radix_trie();
    ~radix_trie();
    radix_trie(radix_trie &&) noexcept;
    radix_trie & operator=(radix_trie &&) noexcept;
    radix_trie(const radix_trie &) = delete;
    radix_trie & operator=(const radix_trie &) = delete;

    /** Stores `id` under the sequence `t[0, n)` (n < 0: all of `t`). Storing the same pair twice
     *  stores it twice. O(n). */
    void insert(const tokens & t, uint64_t id, int32_t n = -1);

    /** Removes one `id` stored under `t`. Returns false when it is not there. O(|t|). */
    bool erase(const tokens & t, uint64_t id);

    /** The ids stored under exactly `t[0, n)` (n < 0: all of `t`), in insertion order. O(n). */
    std::vector<uint64_t> exact(const tokens & t, int32_t n = -1) const;

    /** Visitor of match(): an id and its stored sequence's longest common prefix with the
     *  query, tokens. Returns false to stop the walk. */
    using visitor = std::function<bool(uint64_t id, int32_t common_prefix)>;

    /** Visits every stored id in descending order of its sequence's common prefix with `q`
     *  (ties in an unspecified order) until `visit` returns false. Cost: O(|q|) to find the
     *  deepest match, plus the nodes of the ids visited. */
    void match(const tokens & q, const visitor & visit) const;

    /** The longest common prefix of `q` with any stored sequence, tokens (0 when empty). */
    int32_t longest_match(const tokens & q) const;

    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }

    /** Throws std::logic_error naming the first broken invariant (see the header comment). */
    void check_invariants() const;

private:
    struct node;
    std::unique_ptr<node> root_;
    size_t size_ = 0;
};

}  // namespace lineage::cache
