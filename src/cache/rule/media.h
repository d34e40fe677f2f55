// cache::media: images inside a prompt's token sequence. The engine decodes an image as one
// unit (its embeddings fill n consecutive positions); the cache sees those positions as n
// pseudo-tokens derived from the image's digest, so the radix trie and the restore rule match a
// prompt with the same image at the same place and part from one with another image exactly
// where the image starts, with no change to either. A restore or capture point never falls
// strictly inside an image (the engine cannot stop half-way through one).
// Thread safety: pure functions.
#pragma once

#include "cache/types.h"

#include <cstdint>
#include <span>
#include <string_view>

namespace lineage::cache {

/** Positions [begin, end) of a prompt that one image fills. */
struct token_span {
    int32_t begin = 0;
    int32_t end = 0;
    bool operator==(const token_span &) const = default;
};

/** The i-th pseudo-token of an image whose digest is `digest` (raw or hex bytes; the caller
 *  digests the decoded pixels and the projector): XXH3-64 of (digest, i) mapped into
 *  [-2^30 - 1, -2]: negative, so never a vocabulary id, and never -1 (the "no token" value).
 *  Two different images differ at i = 0 except with probability 2^-30, and a restore point
 *  that includes an image needs all its n pseudo-tokens to agree (30 n bits). */
token media_token(std::string_view digest, int32_t i);

/** True for a pseudo-token of media_token (negative). */
inline bool is_media_token(token t) { return t < 0; }

/** `n` moved back to the start of the span of `spans` (ascending, disjoint) that holds it
 *  strictly inside (begin < n < end); `n` itself when none does. */
int32_t clamp_to_spans(std::span<const token_span> spans, int32_t n);

/** Index of the span of `spans` that begins at `n`, or -1. */
int32_t span_starting_at(std::span<const token_span> spans, int32_t n);

}  // namespace lineage::cache
