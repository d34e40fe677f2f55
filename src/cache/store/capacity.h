// cache::capacity: the model-aware default byte budget of the RAM tier (docs/prompt-cache.md
// "Model-aware capacity default"), a pure function of a representative entry's size and the memory
// left after the model, so that it is tested without a model. The scheduler measures the inputs.
// Thread safety: pure functions.
#pragma once

#include <cstdint>

namespace lineage::cache {

/** Floors of the default (docs/prompt-cache.md "Model-aware capacity default"): 2 GiB for the KV
 *  store of dense families, 512 MiB for the snapshot store of hybrid families. */
constexpr uint64_t kv_capacity_floor_bytes = 2ull << 30;
constexpr uint64_t snapshot_capacity_floor_bytes = 512ull << 20;

/** Representative entry length, tokens: min(tokens per sequence, 8192). */
int64_t representative_tokens(int64_t tokens_per_sequence);

/** The default budget, bytes: max(floor, min(6 * entry_bytes, left_bytes / 4)), raised to one
 *  entry when that entry fits in left_bytes / 2. `entry_bytes`: the whole state at
 *  representative_tokens(); `left_bytes`: physical memory minus the model's footprint (weights
 *  and its KV pool); `hybrid` picks the floor. */
uint64_t capacity_default(uint64_t entry_bytes, uint64_t left_bytes, bool hybrid);

}  // namespace lineage::cache
