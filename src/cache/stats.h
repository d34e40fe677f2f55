// cache::stats: counters and gauges of the prompt cache, as served by GET /v1/cache/stats.
// Owned and updated by the cache on the engine thread; readers get a copy.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace lineage::cache {

struct stats {
    bool enabled = true;
    std::string mode;                 ///< "lineage" or "exact"
    std::string family;               ///< "dense" or "hybrid"
    int64_t entries = 0;              ///< conversation entries (all tiers), anchors excluded
    int64_t anchors = 0;
    uint64_t anchor_bytes = 0;        ///< RAM bytes of the pinned anchors (inside bytes["ram"])
    std::map<std::string, int64_t> checkpoints;  ///< by kind: turn, guard, anchor, divergence
    std::map<std::string, uint64_t> checkpoint_bytes;  ///< by kind, bytes (inside bytes["ram"])
    std::map<std::string, uint64_t> bytes;       ///< by tier: device, ram, disk
    uint64_t budget_bytes = 0;        ///< T1 byte budget
    int64_t lookups = 0;
    int64_t misses = 0;
    std::map<std::string, int64_t> hits;         ///< by restore point kind: full, turn, guard, anchor, divergence
    int64_t tokens_reused = 0;        ///< prompt tokens restored instead of prefilled
    int64_t tokens_prefilled = 0;     ///< prompt tokens computed
    std::map<std::string, int64_t> rejections;   ///< by cause, e.g. too_large, min_prefix, disabled
    std::map<std::string, int64_t> evictions;    ///< by reason: lru, ttl, capacity, superseded, anchor_cap
    // APC (seed 001 "APC observability")
    bool apc_enabled = false;         ///< APC active for the running model (dense family, --apc-enabled)
    int64_t total_blocks_stored = 0;  ///< sum of the entries' block hash chain lengths
    int64_t unique_block_hashes = 0;  ///< distinct block hashes over all entries
    int64_t apc_active_entries = 0;   ///< entries carrying a non-empty chain
};

struct reset_result {
    int64_t entries_freed = 0;
    uint64_t bytes_freed = 0;
};

}  // namespace lineage::cache
