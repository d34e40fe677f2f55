// Helpers of the cache unit tests: token runs, fake state blobs and the small store config
// most store tests start from (no model). Header-only, pure functions.
#pragma once

#include "cache/config.h"
#include "cache/types.h"

#include <cstdint>
#include <numeric>

namespace lineage::cache::fakes {

/** Tokens from, from + 1, ..., from + n - 1. */
inline tokens seq(int32_t from, int32_t n) {
    tokens t(static_cast<size_t>(n));
    std::iota(t.begin(), t.end(), from);
    return t;
}

/** a followed by b. */
inline tokens cat(tokens a, const tokens & b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

/** A 1 MiB store, a 4-token minimum prefix, guard checkpoints when 64 tokens are left,
 *  divergence checkpoints that gain 32 tokens, and the guard at prompt - guard_distance (no resend
 *  checkpoint). */
inline config small_config() {
    config c;
    c.ram_bytes = 1 << 20;
    c.min_prefix = 4;
    c.guard_min_suffix = 64;
    c.divergence_min_gain = 32;
    c.resend_checkpoint = false;
    return c;
}

/** A fake state of `bytes` bytes, every byte `v`. */
inline blob_ptr fake(size_t bytes, uint8_t v = 0xab) {
    return make_blob(blob(bytes, v));
}

}  // namespace lineage::cache::fakes
