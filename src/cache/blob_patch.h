// cache::blob_patch: a state blob held as a patch over a base blob: the bytes it shares with the
// base (a pinned anchor's state, whose KV rows a conversation's state repeats) are named by offset
// instead of copied. docs/prompt-cache.md "Prefix sharing in RAM".
// Why: on bench-qwen35 a 3,155-token conversation's whole state is 23.4 MiB, 18.3 MiB of which are
// the KV rows of its persona's system prompt that the anchor already holds; under a tight RAM
// budget those repeated bytes pushed the conversations' first turns out (docs/benchmarks/README.md,
// sessions 22 and 24).
// The patch is engine-agnostic: which bytes are shared is decided by the engine
// (engine/state_blob.h, which knows the state's layout); applying it is a copy of byte ranges.
// Exactness: a patch is made only of bytes the maker checked equal to the base's at the named
// offsets, so apply_patch gives back the original blob byte for byte.
// Format (little-endian, native): u32 magic "LPT1", u32 0, u64 whole size, u64 n_ops, then n_ops
// ops of three u64 {literal bytes, base offset, base bytes}, then the literal bytes in op order.
// Thread safety: value types and pure functions.
#pragma once

#include "cache/types.h"

#include <cstdint>
#include <functional>
#include <optional>

namespace lineage::cache {

/** `len` bytes of a whole blob at offset `at` equal its base's at `base_off`. */
struct shared_run {
    uint64_t at = 0;
    uint64_t base_off = 0;
    uint64_t len = 0;
};

/** The patch that gives `whole` back over a base of which `runs` (ascending in `at`, not
 *  overlapping, inside `whole`; the caller has checked their bytes equal the base's) name the
 *  bytes; the rest of `whole` is copied into it. From the process's blob_pool. nullopt when the
 *  runs are not ascending or reach past `whole`. */
std::optional<blob> make_patch(const blob & whole, const std::vector<shared_run> & runs);

/** The size of the blob `patch` gives back (0 when it is no patch). */
uint64_t patched_size(const blob & patch);

/** The blob `patch` gives back over `base`, or nullopt when the patch is malformed or names
 *  bytes past the base's end (a base that is not the one it was made over). */
std::optional<blob> apply_patch(const blob & base, const blob & patch);

/** Hands the blob `patch` gives back over `base` to `out` in order, run by run (literal bytes
 *  from the patch, shared ones from the base), without building it: a tier writes a patched
 *  state so. False, with nothing or part of it handed over, when apply_patch would refuse it. */
bool visit_patch(const blob & base, const blob & patch, const std::function<void(const uint8_t *, uint64_t)> & out);

}  // namespace lineage::cache
