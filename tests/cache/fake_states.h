// Helpers of the cache unit tests: token runs and fake state blobs (no model).
#pragma once

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

/** A fake state of `bytes` bytes, every byte `v`. */
inline blob_ptr fake(size_t bytes, uint8_t v = 0xab) {
    return make_blob(blob(bytes, v));
}

}  // namespace lineage::cache::fakes
