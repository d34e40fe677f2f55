// cache::block_chain: APC block hash chains (docs/prompt-cache.md "Automatic Prefix Caching
// (APC)"): a token sequence cut into blocks of B tokens, block i hashed as H(hash of block i-1, its
// B tokens), block 0 chained to a root (the cache bucket, which already covers model, template,
// tools and multimodal digest). A change to any token changes every later hash, so the number of
// leading blocks on which two chains agree is exactly how many whole blocks two sequences share.
// Thread safety: pure functions.
#pragma once

#include "cache/rule/digest.h"
#include "cache/types.h"

#include <cstdint>
#include <string>
#include <vector>

namespace lineage::cache {

/** Hashes of the first min(|t| / block_size, max_blocks) whole blocks of `t` (a partial last
 *  block is not hashed), each the raw digest of `algo`. REQUIRES: block_size >= 1. */
std::vector<std::string> block_chain(const std::string & root, const tokens & t, int32_t block_size,
                                     size_t max_blocks, hash_algo algo);

/** Leading blocks on which `a` and `b` agree (the lockstep walk), at most `limit`. */
size_t agreeing_blocks(const std::vector<std::string> & a, const std::vector<std::string> & b, size_t limit);

}  // namespace lineage::cache
