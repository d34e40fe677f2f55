// cache::restore_rule: the one rule that chooses a restore point, used by every tier that holds
// states: the store (T0 device, T1 RAM) and the disk catalog (T2). A tier describes each stored
// state it visits as a `stored_state`; the rule says which restore point of it serves a prompt
// (best_point: full snapshot, dense prefix or checkpoint, the APC clamp), which of two candidates
// wins (prefer: longer, then a parked sequence, then a full snapshot over a checkpoint, then the
// more recently used), how in-session and cross-session candidates combine (restore_search: the
// two-tier rule), and whether restoring continues the stored conversation (continues: absorption).
// docs/architecture.md "The restore rule: one function, every tier". Thread safety: value types and
// const functions.
#pragma once

#include "cache/config.h"
#include "cache/rule/digest.h"
#include "cache/types.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lineage::cache {

/** The rule's parameters, taken from the cache config and the model family. */
struct restore_settings {
    bool hybrid = false;         ///< restore points inside a stored state are its checkpoints only
    bool lineage = true;         ///< absorption happens in lineage mode only
    int32_t min_prefix = 1;      ///< shorter restore points are rejected, tokens
    int32_t apc_block_size = 0;  ///< > 0 on a dense family: APC on, matches clamped to whole blocks
    hash_algo apc_hash = hash_algo::sha256;

    static restore_settings from(const config & c, bool hybrid);
    bool apc_on() const { return !hybrid && apc_block_size > 0; }
    /** The APC chain of the prompt's restorable head, `[0, |prompt| - 1)` ({} with APC off). */
    std::vector<std::string> prompt_chain(const std::string & bucket, const tokens & prompt) const;
};

/** What a tier tells the rule about one stored state. References must outlive the call. */
struct stored_state {
    const tokens & toks;                          ///< the tokens its full snapshot holds
    const std::vector<checkpoint> & checkpoints;  ///< ascending; blobs may be null (disk catalog)
    bool anchor = false;
    int32_t history = -1;                              ///< its history boundary (-1: unknown)
    bool same_session = false;                         ///< same session key as the request
    bool parked = false;                               ///< on a device sequence (T0): restored without a copy
    double recency = 0;                                ///< larger = used more recently
    const std::vector<std::string> * chain = nullptr;  ///< its APC chain (APC on)
};

/** One stored state's best restore point for a prompt. */
struct restore_candidate {
    uint64_t id = 0;                     ///< the tier's id of the stored state
    int32_t n = 0;                       ///< prompt tokens restored
    point_kind kind = point_kind::none;  ///< full, prefix, anchor or the checkpoint's kind
    int32_t checkpoint = -1;             ///< index into its checkpoints; -1: its full snapshot (maybe trimmed)
    bool same_session = false;
    bool parked = false;
    double recency = 0;
};

/** The restore-point choice (the only place it is written). The best restore point that `s`
 *  offers `prompt` (REQUIRES: non-empty) given their common prefix `lcp`, tokens, and the
 *  prompt's APC chain: the full snapshot when the prompt covers it and leaves >= 1 token to
 *  prefill; else on a dense family any prefix up to min(lcp, |prompt| - 1), clamped to whole
 *  agreeing blocks with APC; else (hybrid) the longest checkpoint at or before that. nullopt
 *  when there is none (n <= 0). min_prefix is not applied here (restore_search does). */
std::optional<restore_candidate> best_point(const restore_settings & rule, uint64_t id, const stored_state & s,
                                            const tokens & prompt, int32_t lcp,
                                            const std::vector<std::string> & prompt_chain);

/** Tie order: true when `a` beats `b`: longer; at equal length a parked sequence (no copy), then
 *  a full snapshot over a checkpoint, then the more recently used, then the smaller id. */
bool prefer(const restore_candidate & a, const restore_candidate & b);

/** Absorption (docs/prompt-cache.md "Entries and lineages", docs/architecture.md "Restore points as
 *  implemented"): restoring `n` tokens of a stored conversation of `len` tokens continues it when n
 *  reaches its history boundary (or its whole length when unknown). Anchors are never continued,
 *  nor anything in exact mode. */
bool continues(const restore_settings & rule, int32_t n, int32_t len, int32_t history, bool anchor);

/** One lookup over one tier: feed it the stored states of the prompt's bucket in descending common
 *  prefix (radix_trie::match order); it keeps the best in-session and cross-session candidates and
 *  returns the two-tier choice (cross-session only when strictly longer: docs/prompt-cache.md
 *  "Lookup"). Candidates of at most `longer_than` tokens are ignored (the tier below memory is
 *  asked only for something longer). */
class restore_search {
public:
    restore_search(const restore_settings & rule, const tokens & prompt, const std::vector<std::string> & prompt_chain,
                   int32_t longer_than = 0);
    /** False when a state sharing `lcp` tokens with the prompt, and every later one, can no
     *  longer change the decision: stop the walk. */
    bool worth(int32_t lcp) const;
    /** Considers state `id` (common prefix `lcp` with the prompt). */
    void offer(uint64_t id, const stored_state & s, int32_t lcp);
    /** The choice: the in-session candidate, or the cross-session one when strictly longer. */
    std::optional<restore_candidate> chosen() const;
    /** Longest restore point rejected for min_prefix, tokens (0: none), for the log. */
    int32_t best_short() const { return best_short_; }

private:
    const restore_settings & rule_;
    const tokens & prompt_;
    const std::vector<std::string> & chain_;
    int32_t longer_than_;
    int32_t limit_;
    std::optional<restore_candidate> in_session_, cross_;
    int32_t best_short_ = 0;
};

}  // namespace lineage::cache
