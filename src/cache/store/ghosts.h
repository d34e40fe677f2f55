// cache::ghost_set: small records of entries the store let go of (evicted, expired), so that a
// later miss can be told apart: "this prompt was seen, the budget let it go" (the operator should
// raise the budget) from "this prompt is new" (nothing to do). docs/prompt-cache.md "Why a lookup
// missed". A ghost keeps no state, only a chain of 64-bit hashes of the entry's whole 16-token
// blocks, rooted at its bucket (so buckets never mix), shared between ghosts by reference count, and
// how many times the entry had been used (the eviction value's reuse model learns from a ghost
// that comes back: store_value.cpp); a lookup walks the prompt's chain and returns the longest
// prefix, in whole blocks, some ghost had.
// Thread safety: not thread-safe; owned by the store (engine thread). Ownership: owns its hashes.
#pragma once

#include "cache/types.h"

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

namespace lineage::cache {

class ghost_set {
public:
    /** Tokens per hashed block. Why 16: an agent's conversation often holds a few dozen tokens
     *  beyond its system prompt's anchor, and a short hit on the anchor whose conversation was
     *  evicted must still be told apart (issue: "every short hit caused by an eviction says
     *  evicted"); 8 bytes per 16 tokens. */
    static constexpr int32_t block_tokens = 16;
    /** Block hashes held over all ghosts at most (65,536: ~1M tokens, a few MB with the map);
     *  the oldest ghosts go first past it. */
    static constexpr size_t max_blocks = 65536;

    /** A ghost's last whole blocks that count as its end (`match::whole`): a conversation's
     *  entry ends with the generation prompt of its turn, which the next turn's prompt renders
     *  again differently once the reply follows it (a few tokens: Qwen3.5's empty reasoning
     *  block; a reply's reasoning dropped).
     *  2 blocks: the prompt may part within the entry's last 32-47 tokens; a one-off call whose
     *  own part (after a system text it shares) is shorter than that would count as found again. */
    static constexpr size_t tail_blocks = 2;

    /** What a lookup found: the longest shared prefix, tokens (a multiple of block_tokens; 0:
     *  none); the most uses an entry that left holding its last block had had; and whether that
     *  block is one of the tail_blocks last whole blocks of an entry that left (`whole`: the
     *  prompt holds that entry but for its end, so the entry would have been restored, not just
     *  a prefix it shares with others, such as a system text). */
    struct match {
        int32_t tokens = 0;
        int32_t uses = 0;
        bool whole = false;
    };

    /** `max_ghosts` records at most (0: none kept); the oldest goes first. */
    explicit ghost_set(size_t max_ghosts) : max_(max_ghosts) {}

    /** Records that the state of `toks` under `bucket`, restored `uses` times while stored, left
     *  the store. */
    void add(const std::string & bucket, const tokens & toks, int32_t uses = 0);

    /** The longest prefix of `prompt` that a recorded ghost under `bucket` shared. */
    match longest(const std::string & bucket, const tokens & prompt) const;

    size_t size() const { return ghosts_.size(); }
    void clear();

private:
    /** The chained block hashes of `toks` (whole blocks only), rooted at `bucket`. */
    static std::vector<uint64_t> chain(const std::string & bucket, const tokens & toks, size_t max_blocks);

    struct block {
        int32_t refs = 0;   // ghosts holding it
        int32_t uses = 0;   // the most uses of any of them
        int32_t ends = 0;   // ghosts whose last whole block it is
    };
    void pop_oldest();

    size_t max_;
    size_t n_blocks_ = 0;
    std::deque<std::vector<uint64_t>> ghosts_;  // oldest first
    std::unordered_map<uint64_t, block> refs_;  // block hash -> its ghosts
};

}  // namespace lineage::cache
