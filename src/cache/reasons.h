// cache::reasons: why the cache let an entry go or did not keep a state, as enums that the
// code branches on; rendered to their names (the stats' map keys, metric labels, the decision
// trace, the JSON of GET /v1/cache/stats) only at those edges, by to_string.
// Thread safety: value types and pure functions.
#pragma once

#include <string_view>

namespace lineage::cache {

/** Why an entry left the store (stats "evictions"). */
enum class eviction_reason {
    lru,         ///< over the entry cap (--prompt-cache-max-entries): the least recently used goes
    ttl,         ///< unused longer than the TTL
    capacity,    ///< over the RAM budget, or no RAM for a demoted device entry
    superseded,  ///< a resend replaced its twin (same tokens)
    anchor_cap,  ///< over the anchor caps (count or bytes)
};
std::string_view to_string(eviction_reason r);

/** Why a state or entry was not stored, or a hit was lost (stats "rejections"). */
enum class rejection_reason {
    too_large,         ///< one state exceeds the whole RAM budget
    budget,            ///< the budget is held by pinned, protected or in-flight states
    min_prefix,        ///< the sequence is shorter than --prompt-cache-min-prefix
    disabled,          ///< the cache is off
    anchor_too_large,  ///< an anchor exceeds the anchor byte cap
    abandoned,         ///< a request that had taken an entry failed before its commit
    disk_damaged,      ///< a tier-2 file failed its checks on load
};
std::string_view to_string(rejection_reason r);

}  // namespace lineage::cache
