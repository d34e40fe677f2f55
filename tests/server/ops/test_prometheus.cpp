// Tests of server::prometheus: the exact GET /metrics text of a known cache and scheduler state
// (names, HELP/TYPE lines, label order, zero-filled known labels, histogram lines), escaping,
// and number formatting.
#include "server/ops/prometheus.h"

#include "cache/tier/disk/disk_tier.h"
#include "cache/tier/redis/redis_tier.h"

#include <gtest/gtest.h>

using namespace lineage;
using namespace lineage::server;

namespace {

cache::stats known_cache_stats() {
    cache::stats s;
    s.enabled = true;
    s.mode = "lineage";
    s.family = "hybrid";
    s.entries = 3;
    s.anchors = 1;
    s.anchor_bytes = 4096;
    s.shared_prefix_entries = 2;
    s.shared_prefix_bytes = 70000;
    s.buffer_pool.reused = 5;
    s.buffer_pool.allocated = 2;
    s.buffer_pool.idle_bytes = 10485760;
    s.checkpoints = {{"turn", 2}, {"guard", 1}};
    s.checkpoint_bytes = {{"turn", 200}, {"guard", 100}};
    s.bytes = {{"device", 1000}, {"ram", 4396}, {"disk", 3000}};
    s.budget_bytes = 1 << 20;
    s.lookups = 10;
    s.misses = 4;
    s.hits = {{"full", 3}, {"turn", 2}, {"anchor", 1}};
    s.tokens_reused = 1234;
    s.tokens_restored["turn"] = 1000;
    s.captures["guard"] = 2;
    s.capture_splits["guard"] = 1;
    s.capture_bytes["guard"] = 4096;
    s.cross_template_hits = 2;
    s.live_hits = 3;
    s.prefix_holds = 1;
    s.tokens_prefilled = 99;
    s.rejections = {{"min_prefix", 2}};
    s.evictions = {{"ttl", 1}, {"superseded", 2}, {"brand_new", 7}};
    s.misses_by_cause = {{"no_shared_prefix", 1}, {"evicted", 2}, {"key_differs", 1}};
    s.short_hits_by_cause = {{"before_first_restore_point", 1}};
    s.key_differs = {{"lora_id", 1}};
    s.ghosts = 3;
    s.evictions_by_uses["unused"] = 5;
    s.eviction.policy = "value";
    s.eviction.reuse_probability_unused = 0.25;
    s.eviction.reuse_probability_once = 0.5;
    s.eviction.reuse_probability_more = 0.75;
    s.eviction.reuse_gap_s = 12.5;
    s.tier_hits["disk"] = 1;
    cache::disk_stats d;
    d.enabled = true;
    d.capacity_bytes = 1 << 30;
    d.files = 2;
    d.bytes = 3000;
    d.writes = 3;
    d.bytes_written = 4500;
    d.loads = 2;
    d.damaged = 1;
    d.damage = {{"identity", 1}};
    d.overdue_writes = 2;
    d.overdue_read_seconds = 0.25;
    d.superseded = 1;
    s.tiers.push_back(cache::describe(d, 0));
    s.tier_hits["redis"] = 4;
    s.tier_reads_declined = {{"disk", 2}, {"redis", 0}};
    s.tier_writes_declined = 3;
    s.tier_cost_prefill_tokens_per_s = 700.5;
    s.tier_cost_read_bytes_per_s = 536870912;
    s.tier_cost_write_bytes_per_s = 268435456;
    cache::redis_stats r;
    r.enabled = true;
    r.connected = true;
    r.entries = 9;
    r.writes = 5;
    r.bytes_written = 7000;
    r.write_failures = 1;
    r.loads = 4;
    r.errors = 3;
    r.vanished = 2;
    r.damaged = 1;
    r.damage = {{"corrupt", 1}};
    s.tiers.push_back(cache::describe(r));
    s.warmup.active = 1;
    s.warmup.runs = 6;
    s.warmup.preempted = 2;
    s.warmup.tokens = 480;
    s.warmup.hits = 5;
    s.warmup.wasted = 1;
    s.warmup.skipped = {{"not_needed", 3}, {"replaced", 1}};
    s.warmup.renders = 12;
    s.warmup.tokenizations = 12;
    s.apc_enabled = true;
    s.total_blocks_stored = 40;
    s.unique_block_hashes = 31;
    s.apc_active_entries = 3;
    return s;
}

scheduler::metrics_snapshot known_metrics() {
    scheduler::metrics_snapshot m;
    m.requests["stop"] = 5;
    m.requests["length"] = 4;
    m.requests["error"] = 1;
    m.prompt_tokens = 1500;
    m.prompt_tokens_prefilled = 266;
    m.completion_tokens = 120;
    m.prefill_passes = 31;
    m.prefill_splits["turn"] = 9;
    m.prefill_splits["ladder"] = 12;
    m.prefill_splits["future_kind"] = 1;  // a kind not (yet) in metrics_snapshot::split_kinds still shows
    m.prepare_renders = 14;
    m.prepare_tokenizations = 12;
    m.sequence_moves = 2;
    m.sequence_moved_tokens = 5800;
    // Two bounds keep the expected text short; the server uses phase_seconds_buckets().
    m.phases.assign(scheduler::all_phases.size(), scheduler::histogram({0.1, 1}));
    auto & ttft = m.phases[static_cast<size_t>(scheduler::phase::ttft)];
    ttft.observe(0.05);
    ttft.observe(0.1);  // on a bound: counts in that bucket (le is inclusive)
    ttft.observe(2.5);
    m.phases[static_cast<size_t>(scheduler::phase::restore)].observe(0.5);
    return m;
}

const char * const expected_text =
    R"(# HELP lineage_prompt_cache_info Prompt cache configuration: enabled, mode (lineage or exact), model family (dense or hybrid) and eviction policy (value or recency: --cache-eviction).
# TYPE lineage_prompt_cache_info gauge
lineage_prompt_cache_info{enabled="true",mode="lineage",family="hybrid",eviction="value"} 1
# HELP lineage_prompt_cache_entries Conversation entries (every tier), anchors excluded.
# TYPE lineage_prompt_cache_entries gauge
lineage_prompt_cache_entries 3
# HELP lineage_prompt_cache_anchors Pinned system-prompt anchors.
# TYPE lineage_prompt_cache_anchors gauge
lineage_prompt_cache_anchors 1
# HELP lineage_prompt_cache_anchor_bytes Bytes of the pinned anchors (inside the ram tier).
# TYPE lineage_prompt_cache_anchor_bytes gauge
lineage_prompt_cache_anchor_bytes 4096
# HELP lineage_prompt_cache_shared_prefix_entries Entries held in RAM as a patch over their anchor's state (--cache-ram-share-prefix).
# TYPE lineage_prompt_cache_shared_prefix_entries gauge
lineage_prompt_cache_shared_prefix_entries 2
# HELP lineage_prompt_cache_shared_prefix_bytes RAM those entries save: their whole states' bytes less their patches' (what prefix sharing saves; not in the ram tier's bytes).
# TYPE lineage_prompt_cache_shared_prefix_bytes gauge
lineage_prompt_cache_shared_prefix_bytes 70000
# HELP lineage_prompt_cache_checkpoints Checkpoints held, by kind.
# TYPE lineage_prompt_cache_checkpoints gauge
lineage_prompt_cache_checkpoints{kind="turn"} 2
lineage_prompt_cache_checkpoints{kind="guard"} 1
lineage_prompt_cache_checkpoints{kind="divergence"} 0
lineage_prompt_cache_checkpoints{kind="ladder"} 0
lineage_prompt_cache_checkpoints{kind="message"} 0
lineage_prompt_cache_checkpoints{kind="reply"} 0
# HELP lineage_prompt_cache_checkpoint_bytes Bytes of the checkpoints held, by kind.
# TYPE lineage_prompt_cache_checkpoint_bytes gauge
lineage_prompt_cache_checkpoint_bytes{kind="turn"} 200
lineage_prompt_cache_checkpoint_bytes{kind="guard"} 100
lineage_prompt_cache_checkpoint_bytes{kind="divergence"} 0
lineage_prompt_cache_checkpoint_bytes{kind="ladder"} 0
lineage_prompt_cache_checkpoint_bytes{kind="message"} 0
lineage_prompt_cache_checkpoint_bytes{kind="reply"} 0
# HELP lineage_prompt_cache_bytes Bytes held by all entries, every tier.
# TYPE lineage_prompt_cache_bytes gauge
lineage_prompt_cache_bytes 8396
# HELP lineage_prompt_cache_tier_bytes Bytes held by tier: device (parked sequences in the KV pool), ram (state blobs and checkpoints), disk (tier-2 files).
# TYPE lineage_prompt_cache_tier_bytes gauge
lineage_prompt_cache_tier_bytes{tier="device"} 1000
lineage_prompt_cache_tier_bytes{tier="ram"} 4396
lineage_prompt_cache_tier_bytes{tier="disk"} 3000
# HELP lineage_prompt_cache_ram_budget_bytes Byte budget of the RAM tier (--prompt-cache-capacity-bytes on dense models, --prompt-cache-snapshot-capacity-bytes on hybrid models).
# TYPE lineage_prompt_cache_ram_budget_bytes gauge
lineage_prompt_cache_ram_budget_bytes 1048576
# HELP lineage_prompt_cache_lookups_total Cache lookups (one per request that reads the cache).
# TYPE lineage_prompt_cache_lookups_total counter
lineage_prompt_cache_lookups_total 10
# HELP lineage_prompt_cache_hits_total Lookups that restored at least one prompt token.
# TYPE lineage_prompt_cache_hits_total counter
lineage_prompt_cache_hits_total 6
# HELP lineage_prompt_cache_misses_total Lookups that found no restore point: cold prefill.
# TYPE lineage_prompt_cache_misses_total counter
lineage_prompt_cache_misses_total 4
# HELP lineage_prompt_cache_restore_point_hits_total Hits by kind of restore point taken.
# TYPE lineage_prompt_cache_restore_point_hits_total counter
lineage_prompt_cache_restore_point_hits_total{kind="full"} 3
lineage_prompt_cache_restore_point_hits_total{kind="prefix"} 0
lineage_prompt_cache_restore_point_hits_total{kind="turn"} 2
lineage_prompt_cache_restore_point_hits_total{kind="guard"} 0
lineage_prompt_cache_restore_point_hits_total{kind="anchor"} 1
lineage_prompt_cache_restore_point_hits_total{kind="divergence"} 0
lineage_prompt_cache_restore_point_hits_total{kind="ladder"} 0
lineage_prompt_cache_restore_point_hits_total{kind="message"} 0
lineage_prompt_cache_restore_point_hits_total{kind="reply"} 0
# HELP lineage_prompt_cache_prefix_tokens_reused_total Prompt tokens restored from the cache instead of prefilled.
# TYPE lineage_prompt_cache_prefix_tokens_reused_total counter
lineage_prompt_cache_prefix_tokens_reused_total 1234
# HELP lineage_prompt_cache_restore_point_tokens_total Prompt tokens restored by hits, by kind of restore point taken.
# TYPE lineage_prompt_cache_restore_point_tokens_total counter
lineage_prompt_cache_restore_point_tokens_total{kind="full"} 0
lineage_prompt_cache_restore_point_tokens_total{kind="prefix"} 0
lineage_prompt_cache_restore_point_tokens_total{kind="turn"} 1000
lineage_prompt_cache_restore_point_tokens_total{kind="guard"} 0
lineage_prompt_cache_restore_point_tokens_total{kind="anchor"} 0
lineage_prompt_cache_restore_point_tokens_total{kind="divergence"} 0
lineage_prompt_cache_restore_point_tokens_total{kind="ladder"} 0
lineage_prompt_cache_restore_point_tokens_total{kind="message"} 0
lineage_prompt_cache_restore_point_tokens_total{kind="reply"} 0
# HELP lineage_prompt_cache_captures_total Restore points captured (states copied out of the engine), by kind.
# TYPE lineage_prompt_cache_captures_total counter
lineage_prompt_cache_captures_total{kind="anchor"} 0
lineage_prompt_cache_captures_total{kind="turn"} 0
lineage_prompt_cache_captures_total{kind="guard"} 2
lineage_prompt_cache_captures_total{kind="divergence"} 0
lineage_prompt_cache_captures_total{kind="ladder"} 0
lineage_prompt_cache_captures_total{kind="message"} 0
lineage_prompt_cache_captures_total{kind="reply"} 0
# HELP lineage_prompt_cache_capture_splits_total Restore points captured by cutting a prefill pass short there (each one more forward pass), by kind.
# TYPE lineage_prompt_cache_capture_splits_total counter
lineage_prompt_cache_capture_splits_total{kind="anchor"} 0
lineage_prompt_cache_capture_splits_total{kind="turn"} 0
lineage_prompt_cache_capture_splits_total{kind="guard"} 1
lineage_prompt_cache_capture_splits_total{kind="divergence"} 0
lineage_prompt_cache_capture_splits_total{kind="ladder"} 0
lineage_prompt_cache_capture_splits_total{kind="message"} 0
lineage_prompt_cache_capture_splits_total{kind="reply"} 0
# HELP lineage_prompt_cache_capture_bytes_total Bytes of the restore points captured, by kind.
# TYPE lineage_prompt_cache_capture_bytes_total counter
lineage_prompt_cache_capture_bytes_total{kind="anchor"} 0
lineage_prompt_cache_capture_bytes_total{kind="turn"} 0
lineage_prompt_cache_capture_bytes_total{kind="guard"} 4096
lineage_prompt_cache_capture_bytes_total{kind="divergence"} 0
lineage_prompt_cache_capture_bytes_total{kind="ladder"} 0
lineage_prompt_cache_capture_bytes_total{kind="message"} 0
lineage_prompt_cache_capture_bytes_total{kind="reply"} 0
# HELP lineage_prompt_cache_cross_template_hits_total Hits restored from an entry rendered under another template_sig (tools, kwargs, template or tool_choice) whose tokens agree with the prompt.
# TYPE lineage_prompt_cache_cross_template_hits_total counter
lineage_prompt_cache_cross_template_hits_total 2
# HELP lineage_prompt_cache_live_hits_total Hits restored from a running request's sequence (parallel requests on one prefix).
# TYPE lineage_prompt_cache_live_hits_total counter
lineage_prompt_cache_live_hits_total 3
# HELP lineage_prompt_cache_prefix_holds_total Requests that waited at admission for a running request to compute the prefix they share.
# TYPE lineage_prompt_cache_prefix_holds_total counter
lineage_prompt_cache_prefix_holds_total 1
# HELP lineage_prompt_cache_rejections_total States or entries not stored, by cause: too_large (one state exceeds the RAM budget), budget (the budget is held by pinned or in-flight states), min_prefix, disabled, anchor_too_large, abandoned (a request that had taken an entry failed).
# TYPE lineage_prompt_cache_rejections_total counter
lineage_prompt_cache_rejections_total{cause="too_large"} 0
lineage_prompt_cache_rejections_total{cause="budget"} 0
lineage_prompt_cache_rejections_total{cause="min_prefix"} 2
lineage_prompt_cache_rejections_total{cause="disabled"} 0
lineage_prompt_cache_rejections_total{cause="anchor_too_large"} 0
lineage_prompt_cache_rejections_total{cause="abandoned"} 0
lineage_prompt_cache_rejections_total{cause="disk_damaged"} 0
lineage_prompt_cache_rejections_total{cause="redis_failed"} 0
lineage_prompt_cache_rejections_total{cause="not_admitted"} 0
# HELP lineage_prompt_cache_misses_by_cause_total Misses by cause: no_shared_prefix (a new prompt), below_min_prefix, key_differs (an entry under another key shared more), before_first_restore_point (a live entry shared more but has no restore point in reach), evicted (an evicted entry shared more: the budget), bypassed (cache_prompt false).
# TYPE lineage_prompt_cache_misses_by_cause_total counter
lineage_prompt_cache_misses_by_cause_total{cause="no_shared_prefix"} 1
lineage_prompt_cache_misses_by_cause_total{cause="below_min_prefix"} 0
lineage_prompt_cache_misses_by_cause_total{cause="key_differs"} 1
lineage_prompt_cache_misses_by_cause_total{cause="before_first_restore_point"} 0
lineage_prompt_cache_misses_by_cause_total{cause="evicted"} 2
lineage_prompt_cache_misses_by_cause_total{cause="bypassed"} 0
# HELP lineage_prompt_cache_short_hits_by_cause_total Hits that restored more than 64 tokens less than the prompt shared with something seen, by cause.
# TYPE lineage_prompt_cache_short_hits_by_cause_total counter
lineage_prompt_cache_short_hits_by_cause_total{cause="no_shared_prefix"} 0
lineage_prompt_cache_short_hits_by_cause_total{cause="below_min_prefix"} 0
lineage_prompt_cache_short_hits_by_cause_total{cause="key_differs"} 0
lineage_prompt_cache_short_hits_by_cause_total{cause="before_first_restore_point"} 1
lineage_prompt_cache_short_hits_by_cause_total{cause="evicted"} 0
lineage_prompt_cache_short_hits_by_cause_total{cause="bypassed"} 0
# HELP lineage_prompt_cache_key_differs_total Misses and short hits of cause key_differs, by the first key dimension that differs.
# TYPE lineage_prompt_cache_key_differs_total counter
lineage_prompt_cache_key_differs_total{dimension="tenant"} 0
lineage_prompt_cache_key_differs_total{dimension="model_id"} 0
lineage_prompt_cache_key_differs_total{dimension="lora_id"} 1
lineage_prompt_cache_key_differs_total{dimension="rope_regime"} 0
lineage_prompt_cache_key_differs_total{dimension="mm_digest"} 0
lineage_prompt_cache_key_differs_total{dimension="kv_type"} 0
# HELP lineage_prompt_cache_ghosts Records of evicted entries kept to classify misses (at most 1024).
# TYPE lineage_prompt_cache_ghosts gauge
lineage_prompt_cache_ghosts 3
# HELP lineage_prompt_cache_evictions_total Entries removed, by reason: lru (entry cap), ttl, capacity (RAM budget, or no RAM for a demoted device entry), superseded (a resend replaced its twin), anchor_cap, released (idle and on disk: RAM given back).
# TYPE lineage_prompt_cache_evictions_total counter
lineage_prompt_cache_evictions_total{reason="lru"} 0
lineage_prompt_cache_evictions_total{reason="ttl"} 1
lineage_prompt_cache_evictions_total{reason="capacity"} 0
lineage_prompt_cache_evictions_total{reason="superseded"} 2
lineage_prompt_cache_evictions_total{reason="anchor_cap"} 0
lineage_prompt_cache_evictions_total{reason="released"} 0
lineage_prompt_cache_evictions_total{reason="brand_new"} 7
# HELP lineage_prompt_cache_evictions_by_uses_total Entries evicted for room in the RAM budget, by how often they had been restored: unused (never), reused (at least once).
# TYPE lineage_prompt_cache_evictions_by_uses_total counter
lineage_prompt_cache_evictions_by_uses_total{uses="unused"} 5
lineage_prompt_cache_evictions_by_uses_total{uses="reused"} 0
# HELP lineage_prompt_cache_ladder_rungs_evicted_total Ladder rungs of pinned anchors dropped for room in the RAM budget (their anchors stay), the copies of least value per byte (--cache-eviction value).
# TYPE lineage_prompt_cache_ladder_rungs_evicted_total counter
lineage_prompt_cache_ladder_rungs_evicted_total 0
# HELP lineage_prompt_cache_ladder_rungs_not_planned_total Ladder rungs not planned at a system text's first sight: the RAM budget had no room left and each was worth less per byte than what it would push out (--cache-eviction value); no split, no state.
# TYPE lineage_prompt_cache_ladder_rungs_not_planned_total counter
lineage_prompt_cache_ladder_rungs_not_planned_total 0
# HELP lineage_prompt_cache_ladder_deferred_rungs_total Ladder rungs made off the request's path (--cache-ladder-defer), by outcome: deferred (left by the request that pinned their anchor to a ladder job on an idle engine), made (captured by a ladder job and added to the anchor), dropped (the anchor was gone, or the job was dropped).
# TYPE lineage_prompt_cache_ladder_deferred_rungs_total counter
lineage_prompt_cache_ladder_deferred_rungs_total{outcome="deferred"} 0
lineage_prompt_cache_ladder_deferred_rungs_total{outcome="made"} 0
lineage_prompt_cache_ladder_deferred_rungs_total{outcome="dropped"} 0
# HELP lineage_prompt_cache_reuse_probability The eviction value's learned chance that an entry is restored again, by how often it has been restored (0, 1, 2 or more).
# TYPE lineage_prompt_cache_reuse_probability gauge
lineage_prompt_cache_reuse_probability{uses="0"} 0.25
lineage_prompt_cache_reuse_probability{uses="1"} 0.5
lineage_prompt_cache_reuse_probability{uses="2+"} 0.75
# HELP lineage_prompt_cache_reuse_gap_seconds Moving average of the time between an entry's last use and its next restore, seconds.
# TYPE lineage_prompt_cache_reuse_gap_seconds gauge
lineage_prompt_cache_reuse_gap_seconds 12.5
# HELP lineage_prompt_cache_tier_hits_total Restores served from the tiers below RAM, by tier (disk, redis).
# TYPE lineage_prompt_cache_tier_hits_total counter
lineage_prompt_cache_tier_hits_total{tier="disk"} 1
lineage_prompt_cache_tier_hits_total{tier="redis"} 4
# HELP lineage_prompt_cache_tier_reads_declined_total Restore points in a tier below RAM not read because recomputing the tokens they add was estimated cheaper (the tier cost rule, --cache-tier-cost), by tier.
# TYPE lineage_prompt_cache_tier_reads_declined_total counter
lineage_prompt_cache_tier_reads_declined_total{tier="disk"} 2
lineage_prompt_cache_tier_reads_declined_total{tier="redis"} 0
# HELP lineage_prompt_cache_tier_writes_declined_total Entries not written to the tiers below RAM because reading them back was estimated to save less than recomputing them costs (at shutdown: less than the write delays the exit).
# TYPE lineage_prompt_cache_tier_writes_declined_total counter
lineage_prompt_cache_tier_writes_declined_total 3
# HELP lineage_prompt_cache_tier_cost_prefill_tokens_per_second The engine's prefill rate the tier cost rule uses, tokens/s (0 before it is measured).
# TYPE lineage_prompt_cache_tier_cost_prefill_tokens_per_second gauge
lineage_prompt_cache_tier_cost_prefill_tokens_per_second 700.5
# HELP lineage_prompt_cache_tier_cost_read_bytes_per_second The first tier's restore rate the tier cost rule uses, bytes/s (0 with no tier).
# TYPE lineage_prompt_cache_tier_cost_read_bytes_per_second gauge
lineage_prompt_cache_tier_cost_read_bytes_per_second 536870912
# HELP lineage_prompt_cache_tier_cost_write_bytes_per_second The first tier's write rate the tier cost rule uses, bytes/s (0 with no tier).
# TYPE lineage_prompt_cache_tier_cost_write_bytes_per_second gauge
lineage_prompt_cache_tier_cost_write_bytes_per_second 268435456
# HELP lineage_prompt_cache_apc_enabled 1 when APC block hash chains are active (dense model, --apc-enabled).
# TYPE lineage_prompt_cache_apc_enabled gauge
lineage_prompt_cache_apc_enabled 1
# HELP lineage_prompt_cache_apc_blocks APC block hashes held, summed over the entries' chains.
# TYPE lineage_prompt_cache_apc_blocks gauge
lineage_prompt_cache_apc_blocks 40
# HELP lineage_prompt_cache_apc_unique_blocks Distinct APC block hashes over all entries.
# TYPE lineage_prompt_cache_apc_unique_blocks gauge
lineage_prompt_cache_apc_unique_blocks 31
# HELP lineage_prompt_cache_apc_entries Entries carrying an APC block hash chain.
# TYPE lineage_prompt_cache_apc_entries gauge
lineage_prompt_cache_apc_entries 3
# HELP lineage_prompt_cache_state_buffers_total State buffers of 256 KiB or more taken for captures and loads, by source: reused (a freed buffer kept resident), allocated (new memory, a page fault per 4 KiB page).
# TYPE lineage_prompt_cache_state_buffers_total counter
lineage_prompt_cache_state_buffers_total{source="reused"} 5
lineage_prompt_cache_state_buffers_total{source="allocated"} 2
# HELP lineage_prompt_cache_state_buffer_idle_bytes Bytes of freed state buffers kept for reuse (resident, outside the cache's budget).
# TYPE lineage_prompt_cache_state_buffer_idle_bytes gauge
lineage_prompt_cache_state_buffer_idle_bytes 10485760
# HELP lineage_prompt_cache_disk_hits_total Restores served from a tier-2 file.
# TYPE lineage_prompt_cache_disk_hits_total counter
lineage_prompt_cache_disk_hits_total 1
# HELP lineage_prompt_cache_disk_files Tier-2 files of this model.
# TYPE lineage_prompt_cache_disk_files gauge
lineage_prompt_cache_disk_files 2
# HELP lineage_prompt_cache_disk_capacity_bytes Byte cap of the tier-2 files (--cache-disk-capacity-bytes).
# TYPE lineage_prompt_cache_disk_capacity_bytes gauge
lineage_prompt_cache_disk_capacity_bytes 1073741824
# HELP lineage_prompt_cache_disk_writes_total Tier-2 files written.
# TYPE lineage_prompt_cache_disk_writes_total counter
lineage_prompt_cache_disk_writes_total 3
# HELP lineage_prompt_cache_disk_written_bytes_total Bytes written to tier-2 files.
# TYPE lineage_prompt_cache_disk_written_bytes_total counter
lineage_prompt_cache_disk_written_bytes_total 4500
# HELP lineage_prompt_cache_disk_loads_total Tier-2 files read for a restore.
# TYPE lineage_prompt_cache_disk_loads_total counter
lineage_prompt_cache_disk_loads_total 2
# HELP lineage_prompt_cache_disk_damaged_total Damaged tier-2 files and index rows found (deleted; never served), by kind: corrupt, truncated, bad_magic, identity, not_regular, other_model, missing, io, index_row, index.
# TYPE lineage_prompt_cache_disk_damaged_total counter
lineage_prompt_cache_disk_damaged_total{kind="corrupt"} 0
lineage_prompt_cache_disk_damaged_total{kind="truncated"} 0
lineage_prompt_cache_disk_damaged_total{kind="bad_magic"} 0
lineage_prompt_cache_disk_damaged_total{kind="identity"} 1
lineage_prompt_cache_disk_damaged_total{kind="not_regular"} 0
lineage_prompt_cache_disk_damaged_total{kind="index_row"} 0
lineage_prompt_cache_disk_damaged_total{kind="index"} 0
# HELP lineage_prompt_cache_disk_overdue_writes_total Tier-2 writes forced by --cache-disk-max-unwritten-s (the engine busy or not).
# TYPE lineage_prompt_cache_disk_overdue_writes_total counter
lineage_prompt_cache_disk_overdue_writes_total 2
# HELP lineage_prompt_cache_disk_overdue_read_seconds_total Engine-thread seconds spent reading the states of the forced writes.
# TYPE lineage_prompt_cache_disk_overdue_read_seconds_total counter
lineage_prompt_cache_disk_overdue_read_seconds_total 0.25
# HELP lineage_prompt_cache_disk_evictions_total Tier-2 files deleted, by reason: capacity (LRU under the cap), superseded (a successor was written).
# TYPE lineage_prompt_cache_disk_evictions_total counter
lineage_prompt_cache_disk_evictions_total{reason="capacity"} 0
lineage_prompt_cache_disk_evictions_total{reason="superseded"} 1
# HELP lineage_prompt_cache_redis_hits_total Restores served from tier 3 (Redis).
# TYPE lineage_prompt_cache_redis_hits_total counter
lineage_prompt_cache_redis_hits_total 4
# HELP lineage_prompt_cache_redis_connected 1 when the last call reached Redis (--cache-redis).
# TYPE lineage_prompt_cache_redis_connected gauge
lineage_prompt_cache_redis_connected 1
# HELP lineage_prompt_cache_redis_entries Tier-3 index entries of this model mirrored by this replica.
# TYPE lineage_prompt_cache_redis_entries gauge
lineage_prompt_cache_redis_entries 9
# HELP lineage_prompt_cache_redis_writes_total Entries written to Redis.
# TYPE lineage_prompt_cache_redis_writes_total counter
lineage_prompt_cache_redis_writes_total 5
# HELP lineage_prompt_cache_redis_written_bytes_total Chunk bytes written to Redis.
# TYPE lineage_prompt_cache_redis_written_bytes_total counter
lineage_prompt_cache_redis_written_bytes_total 7000
# HELP lineage_prompt_cache_redis_write_failures_total Writes to Redis not done (Redis down or slow, or the queue full).
# TYPE lineage_prompt_cache_redis_write_failures_total counter
lineage_prompt_cache_redis_write_failures_total 1
# HELP lineage_prompt_cache_redis_loads_total Entries read from Redis for a restore.
# TYPE lineage_prompt_cache_redis_loads_total counter
lineage_prompt_cache_redis_loads_total 4
# HELP lineage_prompt_cache_redis_errors_total Redis calls that failed (timeouts included); the request went on without tier 3.
# TYPE lineage_prompt_cache_redis_errors_total counter
lineage_prompt_cache_redis_errors_total 3
# HELP lineage_prompt_cache_redis_vanished_total Tier-3 hits whose chunks were gone (Redis eviction, FLUSHALL): misses.
# TYPE lineage_prompt_cache_redis_vanished_total counter
lineage_prompt_cache_redis_vanished_total 2
# HELP lineage_prompt_cache_redis_damaged_total Damaged or foreign tier-3 chunks and index entries, and bad values in the index (never served; deleted, skipped or repaired), by kind.
# TYPE lineage_prompt_cache_redis_damaged_total counter
lineage_prompt_cache_redis_damaged_total{kind="corrupt"} 1
lineage_prompt_cache_redis_damaged_total{kind="truncated"} 0
lineage_prompt_cache_redis_damaged_total{kind="bad_magic"} 0
lineage_prompt_cache_redis_damaged_total{kind="identity"} 0
lineage_prompt_cache_redis_damaged_total{kind="other_format"} 0
lineage_prompt_cache_redis_damaged_total{kind="index"} 0
lineage_prompt_cache_redis_damaged_total{kind="counter"} 0
lineage_prompt_cache_redis_damaged_total{kind="wrong_type"} 0
lineage_prompt_cache_redis_damaged_total{kind="too_large"} 0
# HELP lineage_prompt_cache_warmups_total Background warm-ups of a conversation's next turn, by outcome: stored (the whole prefix), preempted (a request came first; what was done is parked).
# TYPE lineage_prompt_cache_warmups_total counter
lineage_prompt_cache_warmups_total{outcome="stored"} 6
lineage_prompt_cache_warmups_total{outcome="preempted"} 2
# HELP lineage_prompt_cache_warmups_active Warm-ups running now (one at a time, on an idle engine).
# TYPE lineage_prompt_cache_warmups_active gauge
lineage_prompt_cache_warmups_active 1
# HELP lineage_prompt_cache_warmup_tokens_total Tokens prefilled by warm-ups.
# TYPE lineage_prompt_cache_warmup_tokens_total counter
lineage_prompt_cache_warmup_tokens_total 480
# HELP lineage_prompt_cache_warmup_hits_total Requests that restored at least the length a warm-up stored.
# TYPE lineage_prompt_cache_warmup_hits_total counter
lineage_prompt_cache_warmup_hits_total 5
# HELP lineage_prompt_cache_warmup_wasted_total Warmed entries that left the cache before a hit, and warm-ups dropped unfinished.
# TYPE lineage_prompt_cache_warmup_wasted_total counter
lineage_prompt_cache_warmup_wasted_total 1
# HELP lineage_prompt_cache_warmup_skipped_total Warm-up jobs not run, by cause: not_needed, replaced, queue_full, preempted_too_often, superseded (not rendered: a newer reply of the conversation came while requests were served), reset (dropped by a cache reset of its scope).
# TYPE lineage_prompt_cache_warmup_skipped_total counter
lineage_prompt_cache_warmup_skipped_total{cause="not_needed"} 3
lineage_prompt_cache_warmup_skipped_total{cause="replaced"} 1
lineage_prompt_cache_warmup_skipped_total{cause="queue_full"} 0
lineage_prompt_cache_warmup_skipped_total{cause="preempted_too_often"} 0
lineage_prompt_cache_warmup_skipped_total{cause="superseded"} 0
lineage_prompt_cache_warmup_skipped_total{cause="reset"} 0
# HELP lineage_requests_total Requests that ended, by finish reason (stop, length, cancelled, error).
# TYPE lineage_requests_total counter
lineage_requests_total{finish_reason="stop"} 5
lineage_requests_total{finish_reason="length"} 4
lineage_requests_total{finish_reason="cancelled"} 0
lineage_requests_total{finish_reason="error"} 1
# HELP lineage_prompt_tokens_total Prompt tokens of the requests that ended.
# TYPE lineage_prompt_tokens_total counter
lineage_prompt_tokens_total 1500
# HELP lineage_prompt_tokens_prefilled_total Prompt tokens the engine computed (not restored from the cache), of the requests that ended.
# TYPE lineage_prompt_tokens_prefilled_total counter
lineage_prompt_tokens_prefilled_total 266
# HELP lineage_completion_tokens_total Tokens generated, of the requests that ended.
# TYPE lineage_completion_tokens_total counter
lineage_completion_tokens_total 120
# HELP lineage_prefill_passes_total Forward passes (llama_decode calls) the prefills of the requests that ended took part in.
# TYPE lineage_prefill_passes_total counter
lineage_prefill_passes_total 31
# HELP lineage_prefill_splits_total Of those passes, the ones cut short at a restore point the cache captures, by its kind: each is one more read of all the weights.
# TYPE lineage_prefill_splits_total counter
lineage_prefill_splits_total{kind="turn"} 9
lineage_prefill_splits_total{kind="guard"} 0
lineage_prefill_splits_total{kind="anchor"} 0
lineage_prefill_splits_total{kind="divergence"} 0
lineage_prefill_splits_total{kind="ladder"} 12
lineage_prefill_splits_total{kind="message"} 0
lineage_prefill_splits_total{kind="future_kind"} 1
# HELP lineage_sequence_moves_total Requests whose restored sequence was copied to an id next to a running request's, so that their decode steps run as one micro-batch (--place-sequences).
# TYPE lineage_sequence_moves_total counter
lineage_sequence_moves_total 2
# HELP lineage_sequence_moved_tokens_total Tokens of the states those moves copied.
# TYPE lineage_sequence_moved_tokens_total counter
lineage_sequence_moved_tokens_total 5800
# HELP lineage_time_to_first_token_seconds Seconds from the request's arrival to its first sampled token.
# TYPE lineage_time_to_first_token_seconds histogram
lineage_time_to_first_token_seconds_bucket{le="0.1"} 2
lineage_time_to_first_token_seconds_bucket{le="1"} 2
lineage_time_to_first_token_seconds_bucket{le="+Inf"} 3
lineage_time_to_first_token_seconds_sum 2.65
lineage_time_to_first_token_seconds_count 3
# HELP lineage_request_queue_seconds Seconds a request waited for a free slot.
# TYPE lineage_request_queue_seconds histogram
lineage_request_queue_seconds_bucket{le="0.1"} 0
lineage_request_queue_seconds_bucket{le="1"} 0
lineage_request_queue_seconds_bucket{le="+Inf"} 0
lineage_request_queue_seconds_sum 0
lineage_request_queue_seconds_count 0
# HELP lineage_request_lookup_seconds Seconds to plan the restore (requests that used the cache).
# TYPE lineage_request_lookup_seconds histogram
lineage_request_lookup_seconds_bucket{le="0.1"} 0
lineage_request_lookup_seconds_bucket{le="1"} 0
lineage_request_lookup_seconds_bucket{le="+Inf"} 0
lineage_request_lookup_seconds_sum 0
lineage_request_lookup_seconds_count 0
# HELP lineage_request_restore_seconds Seconds to put the restore point in place (hits only).
# TYPE lineage_request_restore_seconds histogram
lineage_request_restore_seconds_bucket{le="0.1"} 0
lineage_request_restore_seconds_bucket{le="1"} 1
lineage_request_restore_seconds_bucket{le="+Inf"} 1
lineage_request_restore_seconds_sum 0.5
lineage_request_restore_seconds_count 1
# HELP lineage_request_prefill_seconds Seconds in the forward passes of the prompt's uncached tokens (batch steps shared with other requests count in full).
# TYPE lineage_request_prefill_seconds histogram
lineage_request_prefill_seconds_bucket{le="0.1"} 0
lineage_request_prefill_seconds_bucket{le="1"} 0
lineage_request_prefill_seconds_bucket{le="+Inf"} 0
lineage_request_prefill_seconds_sum 0
lineage_request_prefill_seconds_count 0
# HELP lineage_request_capture_seconds Seconds taking checkpoints and anchors during the prefill (requests that used the cache).
# TYPE lineage_request_capture_seconds histogram
lineage_request_capture_seconds_bucket{le="0.1"} 0
lineage_request_capture_seconds_bucket{le="1"} 0
lineage_request_capture_seconds_bucket{le="+Inf"} 0
lineage_request_capture_seconds_sum 0
lineage_request_capture_seconds_count 0
# HELP lineage_request_commit_seconds Seconds storing the finished sequence in the cache (requests that used the cache).
# TYPE lineage_request_commit_seconds histogram
lineage_request_commit_seconds_bucket{le="0.1"} 0
lineage_request_commit_seconds_bucket{le="1"} 0
lineage_request_commit_seconds_bucket{le="+Inf"} 0
lineage_request_commit_seconds_sum 0
lineage_request_commit_seconds_count 0
# HELP lineage_prepare_renders_total Chat-template renders of a conversation or a prefix of it on the HTTP threads, by origin: request (the requests that ended), warmup (the warm-up jobs received).
# TYPE lineage_prepare_renders_total counter
lineage_prepare_renders_total{origin="request"} 14
lineage_prepare_renders_total{origin="warmup"} 12
# HELP lineage_prepare_tokenizations_total Tokenizer passes over a rendered conversation or a prefix of it on the HTTP threads, by origin: request (the requests that ended), warmup (the warm-up jobs received).
# TYPE lineage_prepare_tokenizations_total counter
lineage_prepare_tokenizations_total{origin="request"} 12
lineage_prepare_tokenizations_total{origin="warmup"} 12
)";

}  // namespace

TEST(Prometheus, RendersAKnownStateExactly) {
    EXPECT_EQ(render_metrics(known_cache_stats(), known_metrics()), expected_text);
}

TEST(Prometheus, ATierNoneOfThisFileNamesIsItsOwnFigures) {
    // What a new tier reports (cache::tier_report) is all /metrics needs: its hits, then each
    // figure with a metric (a gauge, a bool, a map with its known keys, a metric whose series are
    // two scalars), in order; JSON-only figures are left out.
    cache::stats s;
    s.tier_hits["mem"] = 2;
    s.tiers.push_back(cache::tier_report{
        .name = "mem",
        .enabled = true,
        .hits_help = "Restores served from memory.",
        .figures = {cache::figure("copies", int64_t{7}, "copies", "Copies held."),
                    cache::figure("where", std::string("here")),
                    cache::figure("up", true, "up", "1 when up."),
                    cache::figure_series("dropped", int64_t{3}, "removed_total", "Copies removed, by why.", "why",
                                         "dropped"),
                    cache::figure_map("lost", {{"z", 1}}, "lost_total", "Copies lost, by cause.", "cause", {"a"}),
                    cache::figure_series("aged", uint64_t{4}, "removed_total", {}, "why", "aged")}});
    const std::string text = render_metrics(s, known_metrics());
    const std::string want = R"(# HELP lineage_prompt_cache_mem_hits_total Restores served from memory.
# TYPE lineage_prompt_cache_mem_hits_total counter
lineage_prompt_cache_mem_hits_total 2
# HELP lineage_prompt_cache_mem_copies Copies held.
# TYPE lineage_prompt_cache_mem_copies gauge
lineage_prompt_cache_mem_copies 7
# HELP lineage_prompt_cache_mem_up 1 when up.
# TYPE lineage_prompt_cache_mem_up gauge
lineage_prompt_cache_mem_up 1
# HELP lineage_prompt_cache_mem_removed_total Copies removed, by why.
# TYPE lineage_prompt_cache_mem_removed_total counter
lineage_prompt_cache_mem_removed_total{why="dropped"} 3
lineage_prompt_cache_mem_removed_total{why="aged"} 4
# HELP lineage_prompt_cache_mem_lost_total Copies lost, by cause.
# TYPE lineage_prompt_cache_mem_lost_total counter
lineage_prompt_cache_mem_lost_total{cause="a"} 0
lineage_prompt_cache_mem_lost_total{cause="z"} 1
)";
    EXPECT_NE(text.find(want), std::string::npos) << text;
    EXPECT_EQ(text.find("where"), std::string::npos);
}

TEST(Prometheus, EscapesLabelValuesAndHelp) {
    exposition x;
    x.counter("a_total", "line one\nback\\slash \"quoted\"", "who", {{"x\"y\\z\nw", 3}});
    EXPECT_EQ(x.text(),
              "# HELP a_total line one\\nback\\\\slash \"quoted\"\n"
              "# TYPE a_total counter\n"
              "a_total{who=\"x\\\"y\\\\z\\nw\"} 3\n");
}

TEST(Prometheus, FormatsValues) {
    EXPECT_EQ(format_value(0), "0");
    EXPECT_EQ(format_value(42), "42");
    EXPECT_EQ(format_value(18446744073709551615.0), "1.8446744073709552e+19");
    EXPECT_EQ(format_value(0.0025), "0.0025");
    EXPECT_EQ(format_value(1.0 / 0.0), "+Inf");
    EXPECT_EQ(format_value(-1.0 / 0.0), "-Inf");
}
