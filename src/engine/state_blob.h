// engine::state_blob: where one sequence's whole state (context::get_state, recurrent_only false)
// repeats another's byte for byte: the KV rows of the cells the two hold at the same positions.
// The cache keeps a conversation's state in RAM as a patch over its pinned anchor's state
// (cache/blob_patch.h; docs/prompt-cache.md "Prefix sharing in RAM"); this finds what it shares.
//
// The layout read is llama.cpp's sequence state (src/llama-kv-cache.cpp, state_write at the
// pinned engine commit, after llama-context.cpp's header: u32 magic 0xaf143cd8, i32 the source
// sequence id): u32 n_stream; per stream u32 cell_count and, when non-zero, the cells'
// metadata (i32 pos, u32 n_seq_id, a 12-byte llama_kv_cell_ext on M-RoPE models, n_seq_id x i32
// seq id), then u32 v_trans, u32 n_layer, per layer {i32 K type, u64 row bytes, cell_count rows},
// then per layer V: {i32 type, u64 row bytes, cell_count rows}, or transposed (v_trans) {i32 type,
// u32 element bytes, u32 n_embd, n_embd x cell_count elements}; an MLA cache (Kimi Linear,
// DeepSeek) has no V rows, and the layout is read both ways. What follows the KV cache (a
// hybrid model's recurrent state, an iSWA model's window cache) is not read: it is never shared.
//
// Exactness does not rest on this reading: a range is returned only where the two blobs' bytes
// were compared equal, so a patch made of these ranges gives `whole` back byte for byte whatever
// the layout. A layout read wrongly only finds less to share (none where it does not parse).
// Thread safety: a pure function.
#pragma once

#include <cstdint>
#include <vector>

namespace lineage::engine {

/** `len` bytes of the whole state at offset `at` equal the base state's at `base_off`. */
struct shared_range {
    uint64_t at = 0;
    uint64_t base_off = 0;
    uint64_t len = 0;
};

/** The ranges of `whole` (one sequence's whole state) that repeat `base` (another sequence's
 *  whole state): the K and V rows of whole's first cells when they hold, in the same order, the
 *  positions of all of base's cells and their rows are equal byte for byte. Ascending in `at`,
 *  not overlapping. Empty when base's cells are not such a prefix of whole's (a base of other
 *  tokens, other numerics, another cache type), when either blob does not parse, or when base
 *  holds no cell. */
std::vector<shared_range> shared_state_ranges(const std::vector<uint8_t> & base, const std::vector<uint8_t> & whole);

}  // namespace lineage::engine
