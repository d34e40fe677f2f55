// cache::capacity: the model-aware default budget (docs/prompt-cache.md "Model-aware capacity
// default"); see capacity.h.
#include "cache/store/capacity.h"

#include <algorithm>

namespace lineage::cache {

int64_t representative_tokens(int64_t tokens_per_sequence) {
    return tokens_per_sequence > 0 ? std::min<int64_t>(tokens_per_sequence, 8192) : 8192;
}

uint64_t capacity_default(uint64_t entry_bytes, uint64_t left_bytes, bool hybrid) {
    const uint64_t floor = hybrid ? snapshot_capacity_floor_bytes : kv_capacity_floor_bytes;
    uint64_t cap = std::max(floor, std::min(6 * entry_bytes, left_bytes / 4));
    if (cap < entry_bytes && entry_bytes <= left_bytes / 2) {
        cap = entry_bytes;
    }
    return cap;
}

}  // namespace lineage::cache
