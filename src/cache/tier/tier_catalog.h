// cache::tier_catalog: the in-memory index of a tier's copies (for the disk tier, what its SQLite
// index holds; for Redis, its mirror of the shared index), without the states, for lookups
// (tier_lookup::best): one radix trie per bucket over the copies' tokens, as the
// store keeps for its entries, so that a lookup costs the prompt length plus the files of the
// prompt's bucket it visits, whatever the number of files in other buckets. The restore point
// is chosen by the shared rule (restore_rule.h), exactly as in memory.
// Thread safety: not thread-safe; its tier guards it with its mutex. Ownership: owns its rows.
//
// Invariants (check_invariants()): 1. every file is in its bucket's trie under its tokens, and
// the tries hold nothing else; 2. APC chains are present exactly when the rule has APC on;
// 3. every row is one the index loader accepts (disk_index.h): id in [1, max_copy_id], tokens
// non-empty, history in [-1, |tokens|], checkpoints ascending in [1, |tokens|), bytes > 0.
#pragma once

#include "cache/rule/radix_trie.h"
#include "cache/rule/restore_rule.h"
#include "cache/types.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace lineage::cache {

/** Largest file id the tier allocates or accepts (2^48): ids above it in an index row or a
 *  file header are damage, so that no counter can wrap and no id collides with another file's. */
inline constexpr copy_id max_copy_id = 1ull << 48;

/** The best restore point a tier's copy offers a prompt (`id`: the copy, in that tier's ids). */
struct tier_candidate {
    copy_id id = 0;
    int32_t n = 0;                       ///< prompt tokens restored
    point_kind kind = point_kind::none;  ///< full, prefix (dense), a checkpoint kind, or anchor
    int32_t source_tokens = 0;           ///< the file's whole length, tokens
    int32_t history = -1;                ///< its history boundary
    bool anchor = false;
    bool same_session = false;
    uint64_t bytes = 0;                  ///< the copy's size, bytes (what a restore reads)
};

class tier_catalog {
public:
    /** One indexed file (its row, without the states). */
    struct file {
        copy_id id = 0;
        std::string bucket, session;
        std::string tenant;              ///< the key's tenant ("" without API keys)
        tokens toks;
        std::vector<checkpoint> checkpoints;  ///< lengths and kinds only (no blobs), ascending
        int32_t history = -1;
        bool anchor = false;
        uint64_t bytes = 0;
        double last_use = 0;             ///< wall-clock seconds
        std::vector<std::string> chain;  ///< APC block chain (APC on)
    };

    explicit tier_catalog(restore_settings rule = {}) : rule_(rule) {}

    /** Indexes `f` (REQUIRES: its id is not indexed yet). */
    void add(file f);
    /** Removes file `id`; returns its row, nullopt when it is not indexed. */
    std::optional<file> remove(copy_id id);
    /** The row of `id`, nullptr when not indexed. */
    file * find(copy_id id);
    const std::map<copy_id, file> & files() const { return files_; }
    void clear();

    /** Longest restore point of a file in `bucket` for `prompt`, strictly longer than
     *  `longer_than` tokens and at most |prompt| - 1, chosen by restore_search (in-session first,
     *  another session's only when strictly longer; ties by restore_rule's prefer()). */
    std::optional<tier_candidate> best(const std::string & bucket, const std::string & session, const tokens & prompt,
                                       int32_t longer_than) const;

    /** Throws std::logic_error naming the first broken invariant. */
    void check_invariants() const;

private:
    restore_settings rule_;
    std::map<copy_id, file> files_;
    std::unordered_map<std::string, radix_trie> by_bucket_;
};

}  // namespace lineage::cache
