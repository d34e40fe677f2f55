// cache::stats: counters and gauges of the prompt cache, as served by GET /v1/cache/stats.
// Owned and updated by the cache on the engine thread; readers get a copy.
#pragma once

#include "cache/blob_pool.h"
#include "cache/figure.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace lineage::cache {

/** What a tier below RAM reports of itself (lower_tier::report): its name and its figures. */
struct tier_report {
    std::string name;       ///< tier_traits::name: the tier's key in the JSON and its metrics' infix
    bool enabled = false;   ///< its flags named it and it opened: the first key of its JSON object
    std::string hits_help;  ///< HELP of lineage_prompt_cache_<name>_hits_total (stats::tier_hits[name])
    std::vector<stat_figure> figures;
};

/** One tenant's share of the store (docs/prompt-cache.md "Tenants and access"): its entries in the
 *  device and RAM tiers (anchors included) and their bytes. */
struct tenant_usage {
    int64_t entries = 0;
    int64_t anchors = 0;
    uint64_t bytes = 0;               ///< device + RAM bytes of those entries
};

/** Background warm-ups of the next turn (docs/prompt-cache.md "Warm-up"): after a reply, the
 *  conversation's entry is extended over the reply as the next request will render it. The
 *  scheduler counts the runs, the store the hits and the waste (it sees later plans and
 *  evictions). */
struct warmup_stats {
    int64_t queued = 0;     ///< warm-up jobs received
    /** Chat-template renders and tokenizer passes the jobs received took to compute their
     *  prefixes (server::chat_preparer::next_turn_prefix: two of each per job). */
    int64_t renders = 0;
    int64_t tokenizations = 0;
    int64_t active = 0;     ///< warm-ups running now (0 or 1: one at a time, on an idle engine)
    int64_t runs = 0;       ///< warm-ups that prefilled their whole prefix and stored it
    int64_t preempted = 0;  ///< runs interrupted by a foreground request (what was done is parked)
    int64_t tokens = 0;     ///< tokens prefilled by warm-ups
    int64_t hits = 0;       ///< later requests that restored at least a warmed length
    /** Warmed entries that left the cache (evicted, superseded, continued short of the warmed
     *  length) before any hit, plus warm-ups dropped unfinished. */
    int64_t wasted = 0;
    /** Jobs not run, by cause: not_needed (an entry already holds the prefix), replaced (a newer
     *  job of the same conversation came first), queue_full, preempted_too_often, superseded (not
     *  even rendered: a newer reply of the same conversation came while the engine was serving
     *  requests; server/run/warmup.h, filled by the server, not the scheduler), reset (queued, or
     *  running, when a POST /v1/cache/reset of its scope ran: dropped). */
    std::map<std::string, int64_t> skipped;

    /** The causes of `skipped`, listed (at 0) before their first event. */
    static inline const std::vector<std::string> skip_causes = {"not_needed", "replaced", "queue_full",
                                                                "preempted_too_often", "superseded", "reset"};

    /** Every figure, in the order GET /v1/cache/stats lists them under "warmup"; those on /metrics
     *  are lineage_prompt_cache_warmup(s)_*. renders and tokenizations are JSON here: /metrics shows
     *  them in the preparation's families, beside the requests' (source="warmup"). */
    std::vector<stat_figure> describe() const;
};

struct stats {
    bool enabled = true;
    std::string mode;                 ///< "lineage" or "exact"
    std::string family;               ///< "dense" or "hybrid"
    int64_t entries = 0;              ///< conversation entries (all tiers), anchors excluded
    int64_t anchors = 0;
    uint64_t anchor_bytes = 0;        ///< RAM bytes of the pinned anchors (inside bytes["ram"])
    /** Entries held in RAM as a patch over their anchor's state (docs/prompt-cache.md "Prefix
     *  sharing in RAM"), and what that saves: their whole states' bytes less their patches'. */
    int64_t shared_prefix_entries = 0;
    uint64_t shared_prefix_bytes = 0;
    std::map<std::string, int64_t> checkpoints;  ///< by kind: turn, guard, anchor, divergence
    std::map<std::string, uint64_t> checkpoint_bytes;  ///< by kind, bytes (inside bytes["ram"])
    std::map<std::string, uint64_t> bytes;       ///< by tier: device, ram, disk
    /** The largest conversation entry now (anchors excluded): its bytes on device and in RAM
     *  (KV or whole state plus its checkpoints), its checkpoints besides message rungs and
     *  reply checkpoints (<= --cache-max-checkpoints), its message rungs (<=
     *  --cache-message-rungs) and its reply checkpoints (<= config::max_reply_candidates);
     *  the bound on RAM per lineage (docs/architecture.md "Reply checkpoints"). */
    struct {
        uint64_t bytes = 0;
        int64_t checkpoints = 0;
        int64_t message_rungs = 0;
        int64_t reply_checkpoints = 0;
    } largest_lineage;
    uint64_t budget_bytes = 0;        ///< T1 byte budget
    int64_t lookups = 0;
    int64_t misses = 0;
    std::map<std::string, int64_t> hits;         ///< by restore point kind: full, turn, guard, anchor, divergence
    int64_t tokens_reused = 0;        ///< prompt tokens restored instead of prefilled
    /** What each kind of restore point costs and returns (docs/prompt-cache.md "What a restore
     *  point costs"): the prompt tokens hits restored from it (tokens_restored; its hits are
     *  `hits`), by restore kind; and, by capture kind, the states captured (captures), of those
     *  taken by cutting a prefill pass short (capture_splits: each one more forward pass; not a
     *  pass end, the prompt end, a decode step or a rollback), and their bytes (capture_bytes). */
    std::map<std::string, int64_t> tokens_restored;
    std::map<std::string, int64_t> captures;
    std::map<std::string, int64_t> capture_splits;
    std::map<std::string, int64_t> capture_bytes;
    /** Hits restored from an entry rendered under another template_sig (other tools, kwargs,
     *  template or tool_choice) whose tokens agree with the prompt's: template_sig is not a
     *  bucket dimension (key.h). */
    int64_t cross_template_hits = 0;
    /** Hits restored from a running request's sequence (store.h live_state): a request sharing
     *  a prefix with one in flight, which would otherwise have prefilled it again. */
    int64_t live_hits = 0;
    /** Requests that waited at admission for a running request to compute the prefix they
     *  share (scheduler admission.h prefix_hold), instead of prefilling it beside it. */
    int64_t prefix_holds = 0;
    int64_t tokens_prefilled = 0;     ///< prompt tokens computed
    std::map<std::string, int64_t> rejections;   ///< by cause, e.g. too_large, min_prefix, disabled
    /** Misses by cause (reasons.h miss_cause): no_shared_prefix, below_min_prefix, key_differs,
     *  before_first_restore_point, evicted; bypassed counts requests that did not look up
     *  (so the map sums to misses + bypassed requests). */
    std::map<std::string, int64_t> misses_by_cause;
    /** Hits that restored more than short_hit_tokens fewer tokens than the prompt shared with
     *  something seen, by the same causes. */
    std::map<std::string, int64_t> short_hits_by_cause;
    /** key_differs misses and short hits by the first dimension that differs (model_id,
     *  lora_id, template_sig, rope, mm_digest, ...). */
    std::map<std::string, int64_t> key_differs;
    int64_t ghosts = 0;               ///< records of evicted entries kept to classify misses
    std::map<std::string, int64_t> evictions;    ///< by reason: lru, ttl, capacity, superseded, anchor_cap
    /** Evictions for room (the RAM budget) by the evicted entry's reuse class: unused (never
     *  restored while stored), reused (restored at least once: a conversation's entry). */
    std::map<std::string, int64_t> evictions_by_uses;
    /** Ladder rungs of pinned anchors dropped for room in the RAM budget (--cache-eviction value:
     *  a rung worth less per byte than every entry; docs/prompt-cache.md "Eviction by value"). */
    int64_t ladder_rungs_evicted = 0;
    /** Ladder rungs a first sight of a system text did not plan at all (--cache-eviction value:
     *  the RAM budget had no room left and each was worth less per byte than what it would push
     *  out; docs/prompt-cache.md "Eviction by value"): no split, no ladder job, no state. */
    int64_t ladder_rungs_not_planned = 0;
    /** Ladder rungs made off the request's path (config::ladder_defer; docs/architecture.md
     *  "Ladder jobs"), by outcome: deferred (a request that pinned an anchor left them to a ladder
     *  job), made (a ladder job captured them and they joined their anchor), dropped (their anchor
     *  was gone, or the job was dropped: preempted too often, a reset, no RAM). */
    std::map<std::string, int64_t> ladder_deferred_rungs;
    static inline const std::vector<std::string> ladder_outcomes = {"deferred", "made", "dropped"};
    /** The eviction value's policy and inputs (docs/prompt-cache.md "Eviction by value"): the
     *  policy (--cache-eviction value|recency), the reuse model's probabilities by use class
     *  (value.h: 0, 1, 2 or more uses), its reuse gap, seconds, and the prefill cost fit
     *  (tier_cost::prefill_fit: seconds per token at position 0, and per token per position; 0
     *  while unusable). */
    struct {
        std::string policy = "value";
        double reuse_probability_unused = 0;
        double reuse_probability_once = 0;
        double reuse_probability_more = 0;
        double reuse_gap_s = 0;
        double prefill_s_per_token = 0;
        double prefill_s_per_token_position = 0;
    } eviction;
    /** Restores served by each tier below RAM, by tier_traits::name ("disk", "redis"); an
     *  attached tier is listed from the start (0). */
    std::map<std::string, int64_t> tier_hits;
    /** tier_hits[name], 0 when that tier is not attached. */
    int64_t hits_of_tier(const std::string & name) const {
        const auto it = tier_hits.find(name);
        return it == tier_hits.end() ? 0 : it->second;
    }
    /** The tier cost rule (cache/rule/tier_cost.h): restore points in a tier below RAM not read
     *  because recomputing the tokens they add was estimated cheaper, by tier; entries not written
     *  because reading them back would not save their cost. */
    std::map<std::string, int64_t> tier_reads_declined;
    int64_t tier_writes_declined = 0;
    /** The rule's rates in effect: the engine's measured prefill rate (tokens/s, 0 before the
     *  first pass of tier_cost::min_pass_tokens), the first tier's restore and write rates
     *  (bytes/s; measured, --cache-tier-bandwidth, or the prior; 0 with no tier). */
    double tier_cost_prefill_tokens_per_s = 0;
    double tier_cost_read_bytes_per_s = 0;
    double tier_cost_write_bytes_per_s = 0;
    int64_t requests_committed = 0;   ///< requests whose state was offered to the cache (commit calls)
    /** Every tier below RAM the server knows, in the store's order: an open tier's figures, and a
     *  tier that is off reports its zeros (scheduler::tier_link::report). */
    std::vector<tier_report> tiers;
    warmup_stats warmup;
    // APC (docs/prompt-cache.md "Automatic Prefix Caching (APC)")
    bool apc_enabled = false;         ///< APC active for the running model (dense family, --apc-enabled)
    int64_t total_blocks_stored = 0;  ///< sum of the entries' block hash chain lengths
    int64_t unique_block_hashes = 0;  ///< distinct block hashes over all entries
    int64_t apc_active_entries = 0;   ///< entries carrying a non-empty chain
    /** The process's recycled state buffers (blob_pool.h). */
    blob_pool_stats buffer_pool;
    /** By key::tenant, for entries with a non-empty tenant (servers with API keys). */
    std::map<std::string, tenant_usage> tenants;

    // The keys of the maps above listed (at 0) before their first event (stat_figure::known).
    static inline const std::vector<std::string> restore_kinds = {"full",       "prefix", "turn",    "guard", "anchor",
                                                                  "divergence", "ladder", "message", "reply"};
    static inline const std::vector<std::string> miss_causes = {
        "no_shared_prefix", "below_min_prefix", "key_differs", "before_first_restore_point", "evicted", "bypassed"};
    static inline const std::vector<std::string> key_dimensions = {"tenant",      "model_id",  "lora_id",
                                                                   "rope_regime", "mm_digest", "kv_type"};
    static inline const std::vector<std::string> eviction_reasons = {"lru",        "ttl",        "capacity",
                                                                     "superseded", "anchor_cap", "released"};
    // rejection_reason's names, then the load_failed key of each tier below RAM (tier_traits).
    static inline const std::vector<std::string> rejection_causes = {
        "too_large", "budget", "min_prefix", "disabled", "anchor_too_large", "abandoned", "disk_damaged",
        "redis_failed", "not_admitted"};
    static inline const std::vector<std::string> use_classes = {"unused", "reused"};
    static inline const std::vector<std::string> checkpoint_kinds = {"turn",   "guard",   "divergence",
                                                                     "ladder", "message", "reply"};
    static inline const std::vector<std::string> capture_kinds = {"anchor", "turn",    "guard", "divergence",
                                                                  "ladder", "message", "reply"};

    /** The cache's own figures (not the tiers', warm-ups' or buffer pool's: those describe
     *  themselves), in the order GET /v1/cache/stats lists them; on /metrics
     *  lineage_prompt_cache_<metric>, in the same order. */
    std::vector<stat_figure> describe() const;
};

struct reset_result {
    int64_t entries_freed = 0;
    uint64_t bytes_freed = 0;
    /** Every open tier below RAM by name (tier_traits::name): copies deleted (disk files, Redis
     *  entries of this model, any replica's) and their bytes (payload bytes). POST
     *  /v1/cache/reset also shows them under each tier's older flat names
     *  (cache::tier_row::reset_keys). */
    struct freed {
        int64_t copies = 0;
        uint64_t bytes = 0;
    };
    std::map<std::string, freed> tiers;
};

}  // namespace lineage::cache
