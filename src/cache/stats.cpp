// cache::stats: the figures the cache and its warm-ups describe of themselves (stats.h).
#include "cache/stats.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace lineage::cache {

std::vector<stat_figure> warmup_stats::describe() const {
    return {
        figure("queued", queued),
        figure("renders", renders),
        figure("tokenizations", tokenizations),
        figure_series("runs", runs, "warmups_total",
                      "Background warm-ups of a conversation's next turn, by outcome: stored (the whole prefix), "
                      "preempted (a request came first; what was done is parked).",
                      "outcome", "stored"),
        figure_series("preempted", preempted, "warmups_total", "", "outcome", "preempted"),
        figure("active", active, "warmups_active", "Warm-ups running now (one at a time, on an idle engine)."),
        figure("tokens", tokens, "warmup_tokens_total", "Tokens prefilled by warm-ups."),
        figure("hits", hits, "warmup_hits_total", "Requests that restored at least the length a warm-up stored."),
        figure("wasted", wasted, "warmup_wasted_total",
               "Warmed entries that left the cache before a hit, and warm-ups dropped unfinished."),
        figure_map("skipped", skipped, "warmup_skipped_total",
                   "Warm-up jobs not run, by cause: not_needed, replaced, queue_full, preempted_too_often, "
                   "superseded (not rendered: a newer reply of the conversation came while requests were served), "
                   "reset (dropped by a cache reset of its scope).",
                   "cause", skip_causes),
    };
}

namespace {

int64_t sum(const std::map<std::string, int64_t> & m) {
    int64_t n = 0;
    for (const auto & [k, v] : m) {
        n += v;
    }
    return n;
}

}  // namespace

std::vector<stat_figure> stats::describe() const {
    const std::map<std::string, int64_t> tier_bytes = signed_map(bytes);
    return {
        figure_info("enabled", enabled, "info",
                    "Prompt cache configuration: enabled, mode (lineage or exact), model family (dense or hybrid) and "
                    "eviction policy (value or recency: --cache-eviction).",
                    "enabled"),
        figure_info("mode", mode, "info", "", "mode"),
        figure_info("family", family, "info", "", "family"),
        figure("entries", entries, "entries", "Conversation entries (every tier), anchors excluded."),
        figure("anchors", anchors, "anchors", "Pinned system-prompt anchors."),
        figure("anchor_bytes", anchor_bytes, "anchor_bytes", "Bytes of the pinned anchors (inside the ram tier)."),
        figure("shared_prefix_entries", shared_prefix_entries, "shared_prefix_entries",
               "Entries held in RAM as a patch over their anchor's state (--cache-ram-share-prefix)."),
        figure("shared_prefix_bytes", shared_prefix_bytes, "shared_prefix_bytes",
               "RAM those entries save: their whole states' bytes less their patches' (what prefix sharing saves; "
               "not in the ram tier's bytes)."),
        figure_map_as_held("checkpoints", checkpoints, "checkpoints", "Checkpoints held, by kind.", "kind", checkpoint_kinds),
        figure_map_as_held("checkpoint_bytes", signed_map(checkpoint_bytes), "checkpoint_bytes",
                   "Bytes of the checkpoints held, by kind.", "kind", checkpoint_kinds),
        figure("", sum(tier_bytes), "bytes", "Bytes held by all entries, every tier."),
        figure_map_as_held("bytes", tier_bytes, "tier_bytes",
                   "Bytes held by tier: device (parked sequences in the KV pool), ram (state blobs and checkpoints), "
                   "disk (tier-2 files).",
                   "tier", {"device", "ram", "disk"}),
        figure("largest_lineage.bytes", largest_lineage.bytes),
        figure("largest_lineage.checkpoints", largest_lineage.checkpoints),
        figure("largest_lineage.message_rungs", largest_lineage.message_rungs),
        figure("largest_lineage.reply_checkpoints", largest_lineage.reply_checkpoints),
        figure("budget_bytes", budget_bytes, "ram_budget_bytes",
               "Byte budget of the RAM tier (--prompt-cache-capacity-bytes on dense models, "
               "--prompt-cache-snapshot-capacity-bytes on hybrid models)."),
        figure("lookups", lookups, "lookups_total", "Cache lookups (one per request that reads the cache)."),
        figure("", sum(hits), "hits_total", "Lookups that restored at least one prompt token."),
        figure("misses", misses, "misses_total", "Lookups that found no restore point: cold prefill."),
        figure_map("hits", hits, "restore_point_hits_total", "Hits by kind of restore point taken.", "kind",
                   restore_kinds),
        figure("tokens_reused", tokens_reused, "prefix_tokens_reused_total",
               "Prompt tokens restored from the cache instead of prefilled."),
        figure_map("tokens_restored", tokens_restored, "restore_point_tokens_total",
                   "Prompt tokens restored by hits, by kind of restore point taken.", "kind", restore_kinds),
        figure_map("captures", captures, "captures_total",
                   "Restore points captured (states copied out of the engine), by kind.", "kind", capture_kinds),
        figure_map("capture_splits", capture_splits, "capture_splits_total",
                   "Restore points captured by cutting a prefill pass short there (each one more forward pass), "
                   "by kind.",
                   "kind", capture_kinds),
        figure_map("capture_bytes", capture_bytes, "capture_bytes_total",
                   "Bytes of the restore points captured, by kind.", "kind", capture_kinds),
        figure("cross_template_hits", cross_template_hits, "cross_template_hits_total",
               "Hits restored from an entry rendered under another template_sig (tools, kwargs, template or "
               "tool_choice) whose tokens agree with the prompt."),
        figure("live_hits", live_hits, "live_hits_total",
               "Hits restored from a running request's sequence (parallel requests on one prefix)."),
        figure("prefix_holds", prefix_holds, "prefix_holds_total",
               "Requests that waited at admission for a running request to compute the prefix they share."),
        figure("tokens_prefilled", tokens_prefilled),
        figure_map("rejections", rejections, "rejections_total",
                   "States or entries not stored, by cause: too_large (one state exceeds the RAM budget), budget (the "
                   "budget is held by pinned or in-flight states), min_prefix, disabled, anchor_too_large, abandoned "
                   "(a request that had taken an entry failed).",
                   "cause", rejection_causes),
        figure_map("misses_by_cause", misses_by_cause, "misses_by_cause_total",
                   "Misses by cause: no_shared_prefix (a new prompt), below_min_prefix, key_differs (an entry under "
                   "another key shared more), before_first_restore_point (a live entry shared more but has no "
                   "restore point in reach), evicted (an evicted entry shared more: the budget), bypassed "
                   "(cache_prompt false).",
                   "cause", miss_causes),
        figure_map("short_hits_by_cause", short_hits_by_cause, "short_hits_by_cause_total",
                   "Hits that restored more than 64 tokens less than the prompt shared with something seen, by cause.",
                   "cause", miss_causes),
        figure_map("key_differs", key_differs, "key_differs_total",
                   "Misses and short hits of cause key_differs, by the first key dimension that differs.", "dimension",
                   key_dimensions),
        figure("ghosts", ghosts, "ghosts", "Records of evicted entries kept to classify misses (at most 1024)."),
        figure_map("evictions", evictions, "evictions_total",
                   "Entries removed, by reason: lru (entry cap), ttl, capacity (RAM budget, or no RAM for a demoted "
                   "device entry), superseded (a resend replaced its twin), anchor_cap, released (idle and on disk: "
                   "RAM given back).",
                   "reason", eviction_reasons),
        figure_map("evictions_by_uses", evictions_by_uses, "evictions_by_uses_total",
                   "Entries evicted for room in the RAM budget, by how often they had been restored: unused (never), "
                   "reused (at least once).",
                   "uses", use_classes),
        figure("ladder_rungs_evicted", ladder_rungs_evicted, "ladder_rungs_evicted_total",
               "Ladder rungs of pinned anchors dropped for room in the RAM budget (their anchors stay), the "
               "copies of least value per byte (--cache-eviction value)."),
        figure("ladder_rungs_not_planned", ladder_rungs_not_planned, "ladder_rungs_not_planned_total",
               "Ladder rungs not planned at a system text's first sight: the RAM budget had no room left and each "
               "was worth less per byte than what it would push out (--cache-eviction value); no split, no state."),
        figure_map("ladder_deferred_rungs", ladder_deferred_rungs, "ladder_deferred_rungs_total",
                   "Ladder rungs made off the request's path (--cache-ladder-defer), by outcome: deferred (left by the "
                   "request that pinned their anchor to a ladder job on an idle engine), made (captured by a ladder "
                   "job and added to the anchor), dropped (the anchor was gone, or the job was dropped).",
                   "outcome", ladder_outcomes),
        figure_info("eviction.policy", eviction.policy, "info", "", "eviction"),
        figure_series("eviction.reuse_probability_unused", eviction.reuse_probability_unused, "reuse_probability",
                      "The eviction value's learned chance that an entry is restored again, by how often it has been "
                      "restored (0, 1, 2 or more).",
                      "uses", "0"),
        figure_series("eviction.reuse_probability_once", eviction.reuse_probability_once, "reuse_probability", "",
                      "uses", "1"),
        figure_series("eviction.reuse_probability_more", eviction.reuse_probability_more, "reuse_probability", "",
                      "uses", "2+"),
        figure("eviction.reuse_gap_s", eviction.reuse_gap_s, "reuse_gap_seconds",
               "Moving average of the time between an entry's last use and its next restore, seconds."),
        figure("eviction.prefill_s_per_token", eviction.prefill_s_per_token),
        figure("eviction.prefill_s_per_token_position", eviction.prefill_s_per_token_position),
        figure_map("tier_hits", tier_hits, "tier_hits_total",
                   "Restores served from the tiers below RAM, by tier (disk, redis).", "tier", {}),
        figure_map("tier_reads_declined", tier_reads_declined, "tier_reads_declined_total",
                   "Restore points in a tier below RAM not read because recomputing the tokens they add was estimated "
                   "cheaper (the tier cost rule, --cache-tier-cost), by tier.",
                   "tier", {}),
        figure("tier_writes_declined", tier_writes_declined, "tier_writes_declined_total",
               "Entries not written to the tiers below RAM because reading them back was estimated to save less than "
               "recomputing them costs (at shutdown: less than the write delays the exit)."),
        figure("tier_cost.prefill_tokens_per_s", tier_cost_prefill_tokens_per_s, "tier_cost_prefill_tokens_per_second",
               "The engine's prefill rate the tier cost rule uses, tokens/s (0 before it is measured)."),
        figure("tier_cost.read_bytes_per_s", tier_cost_read_bytes_per_s, "tier_cost_read_bytes_per_second",
               "The first tier's restore rate the tier cost rule uses, bytes/s (0 with no tier)."),
        figure("tier_cost.write_bytes_per_s", tier_cost_write_bytes_per_s, "tier_cost_write_bytes_per_second",
               "The first tier's write rate the tier cost rule uses, bytes/s (0 with no tier)."),
        figure("requests_committed", requests_committed),
        figure("apc_enabled", apc_enabled, "apc_enabled",
               "1 when APC block hash chains are active (dense model, --apc-enabled)."),
        figure("total_blocks_stored", total_blocks_stored, "apc_blocks",
               "APC block hashes held, summed over the entries' chains."),
        figure("unique_block_hashes", unique_block_hashes, "apc_unique_blocks",
               "Distinct APC block hashes over all entries."),
        figure("apc_active_entries", apc_active_entries, "apc_entries", "Entries carrying an APC block hash chain."),
    };
}

}  // namespace lineage::cache
