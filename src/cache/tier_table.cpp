// cache::tier_table(): one row per tier below RAM; see tier_table.h.
#include "cache/tier_table.h"

#include "cache/tier/disk/disk_tier.h"
#include "cache/tier/redis/redis_tier.h"

namespace lineage::cache {

const std::vector<tier_row> & tier_table() {
    static const std::vector<tier_row> rows = {
        {.name = "disk",
         .flags = add_disk_flags,
         .named = [](const config & c) { return !c.disk_dir.empty(); },
         .open = open_disk_tier,
         .off = [] { return describe(disk_stats{}, 0); },
         .reset_keys = {.copies = "disk_files_freed", .bytes = "disk_bytes_freed", .always = true}},
        {.name = "redis",
         .flags = add_redis_flags,
         .named = [](const config & c) { return !c.redis_url.empty(); },
         .open = open_redis_tier,
         .off = [] { return describe(redis_stats{}); },
         .reset_keys = {.copies = "redis_entries_freed", .bytes = "redis_bytes_freed", .always = false}},
    };
    return rows;
}

}  // namespace lineage::cache
