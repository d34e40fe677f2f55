// cache::ghost_set: small records of entries the store let go of (evicted, expired), so that a
// later miss can be told apart: "this prompt was seen, the budget let it go" (the operator should
// raise the budget) from "this prompt is new" (nothing to do). docs/prompt-cache.md "Why a lookup
// missed". A ghost keeps no state, only a chain of 64-bit hashes of the entry's whole 64-token
// blocks, rooted at its bucket (so buckets never mix), shared between ghosts by reference count; a
// lookup walks the prompt's chain and returns the longest prefix, in whole blocks, some ghost had.
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
    /** Tokens per hashed block. Why 64: one ladder near step; a ghost match is only used to
     *  name a cause, so whole blocks of 64 are precise enough and keep a ghost at 8 bytes per
     *  64 tokens. */
    static constexpr int32_t block_tokens = 64;

    /** `max_ghosts` records at most (0: none kept); the oldest goes first. */
    explicit ghost_set(size_t max_ghosts) : max_(max_ghosts) {}

    /** Records that the state of `toks` under `bucket` left the store. */
    void add(const std::string & bucket, const tokens & toks);

    /** The longest prefix of `prompt`, in tokens (a multiple of block_tokens), that a recorded
     *  ghost under `bucket` shared; 0 when none. */
    int32_t longest(const std::string & bucket, const tokens & prompt) const;

    size_t size() const { return ghosts_.size(); }
    void clear();

private:
    /** The chained block hashes of `toks` (whole blocks only), rooted at `bucket`. */
    static std::vector<uint64_t> chain(const std::string & bucket, const tokens & toks, size_t max_blocks);

    size_t max_;
    std::deque<std::vector<uint64_t>> ghosts_;          // oldest first
    std::unordered_map<uint64_t, int32_t> refs_;        // block hash -> ghosts holding it
};

}  // namespace lineage::cache
