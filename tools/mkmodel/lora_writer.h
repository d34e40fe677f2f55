// lora_writer: lineage-mkmodel's --lora-out: a LoRA adapter GGUF with deterministic random
// weights for a model it made, in the layout llama.cpp's adapter loader reads
// (llama-adapter.cpp): general.type = "adapter", adapter.type = "lora", adapter.lora.alpha,
// and a pair <weight>.lora_a [n_in, rank] / <weight>.lora_b [rank, n_out] (F32) for every
// attention-output, FFN and output-head matrix of the model.
// Why: e2e tests of LoRA serving (and of the cache key's lora_id) need adapters for the test
// models, with no download. Thread safety: single-threaded. Ownership: frees what it allocates.
#pragma once

#include <cstdint>
#include <string>

namespace lineage::mkmodel {

/** Rank of the adapters written (alpha = rank, so the effective scale is the request's). */
inline constexpr int64_t lora_rank = 4;

/** Writes the adapter for the model GGUF at `model_path` to `out` (atomically: a temporary
 *  renamed). The weights depend only on `seed` and each tensor's name and shape. Returns the
 *  exit status (1 with a message on stderr when the model cannot be read, has no target
 *  matrix, or the file cannot be written). */
int write_lora(const std::string & model_path, const std::string & out, uint64_t seed);

}  // namespace lineage::mkmodel
