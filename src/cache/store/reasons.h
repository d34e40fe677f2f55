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
    released,    ///< idle in RAM with its state on disk: the RAM copy goes, the disk tier serves the next hit
                 ///< (--cache-ram-release-s; not a loss: no ghost, no wasted warm-up)
};
std::string_view to_string(eviction_reason r);

/** Why a state or entry was not stored (stats "rejections"). A tier's hit that could not be
 *  loaded is counted there too, under the tier's own name (lower_tier::traits().load_failed:
 *  "disk_damaged", "redis_failed"), not by a value here. */
enum class rejection_reason {
    too_large,         ///< one state exceeds the whole RAM budget
    budget,            ///< the budget is held by pinned, protected or in-flight states
    min_prefix,        ///< the sequence is shorter than --prompt-cache-min-prefix
    disabled,          ///< the cache is off
    anchor_too_large,  ///< an anchor exceeds the anchor byte cap
    abandoned,         ///< a request that had taken an entry failed before its commit
    /** a parked entry leaving the device was worth less than the RAM copy it would push out
     *  (--cache-eviction value: store_value.cpp) and was not kept */
    not_admitted,
};
std::string_view to_string(rejection_reason r);

/** Why a lookup restored nothing, or much less than the prompt shares with what the server has seen
 *  (stats "misses_by_cause", "short_hits_by_cause"; docs/prompt-cache.md "Why a lookup missed"). A
 *  hit is short when it restores more than short_hit_tokens fewer tokens than the longest prefix
 *  the prompt shares with a live entry, a ghost of an evicted one, or an entry under another key.
 *  */
enum class miss_cause {
    no_shared_prefix,   ///< nothing reusable seen: < --prompt-cache-min-prefix shared (a template
                        ///< header at most) and less than half the prompt: a new prompt
    below_min_prefix,   ///< a short prompt mostly seen before (>= half shared), but the shared
                        ///< part is shorter than --prompt-cache-min-prefix
    key_differs,        ///< an entry under another key shares more (which dimension: key_differs map)
    before_first_restore_point,  ///< a live entry shares more, but (hybrid) has no restore point in reach
    evicted,            ///< an entry that shared more was evicted (the budget, not the traffic)
    bypassed,           ///< cache_prompt false or the cache off
};
std::string_view to_string(miss_cause c);

/** Tokens a hit may restore short of the longest shared prefix and still count as a full hit:
 *  one ladder near step (the ladder's promise inside a system prompt). */
inline constexpr int32_t short_hit_tokens = 64;

}  // namespace lineage::cache
