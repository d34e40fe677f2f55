// cache::add_redis_flags: the Redis tier's flags (docs/prompt-cache.md "Tier 3: Redis shared by
// replicas"); see redis_tier.h.
#include "cache/tier/redis/redis_tier.h"

namespace lineage::cache {

namespace {

/** A redis://host[:port][/db] URL (parse_redis_url) with its blanks trimmed, or "" (off). */
util::expected<std::string> redis_url_value(const std::string & s) {
    const auto b = s.find_first_not_of(" \t");
    const std::string t = b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(" \t") - b + 1);
    if (!t.empty()) {
        if (auto u = parse_redis_url(t); !u) {
            return u.error();
        }
    }
    return t;
}

}  // namespace

void add_redis_flags(flag_sink & add, config & cc) {
    add.checked_text({"--cache-redis", "LINEAGE_CACHE_REDIS", "URL", "off",
                      "share the prompt cache between replicas through Redis at redis://host[:port][/db]: entries "
                      "written behind (as to disk) and anchors once pinned, read back when longer than the device, "
                      "RAM and disk tiers hold; Redis down or slow never fails a request"},
                     cc.redis_url, redis_url_value);
    add.text({"--cache-redis-namespace", "LINEAGE_CACHE_REDIS_NAMESPACE", "NAME", "",
              "prefix of the Redis keys; replicas that should share a cache use the same one"},
             cc.redis_namespace, false);
    add.integer({"--cache-redis-timeout-ms", "LINEAGE_CACHE_REDIS_TIMEOUT_MS", "MS", "",
                 "bound on connecting to Redis and on each call; past it the request goes on without Redis "
                 "(counted) and the connection is tried again a second later"},
                cc.redis_timeout_ms, 1, 60000);
    add.bytes({"--cache-redis-chunk-bytes", "LINEAGE_CACHE_REDIS_CHUNK_BYTES", "BYTES", "",
               "most payload bytes per Redis value (an entry is split in chunks)"},
              cc.redis_chunk_bytes, 1024);
}

}  // namespace lineage::cache
