// projector_writer: lineage-mkmodel's --mmproj-out: a multimodal projector GGUF with
// deterministic random weights for a model it made, that llama.cpp's libmtmd loads (clip.cpp):
// projector type "mlp" (LLaVA-1.5: a CLIP-style vision tower, then mm.0 -> GELU -> mm.2 into
// the text model's embedding width), 32x32 images in 8x8 patches: 16 image tokens an image.
// Why MLP: it is the simplest projector libmtmd supports with a fixed-size preprocessor and
// ordinary (not M-RoPE) positions, so it pairs with any text model of this tool
// (docs/prompt-cache.md "Images").
// Thread safety: single-threaded. Ownership: frees what it allocates.
#pragma once

#include <cstdint>
#include <string>

namespace lineage::mkmodel {

/** Image tokens per image of the projector written (image 32x32, patches 8x8). */
inline constexpr int64_t projector_image_tokens = 16;

/** Writes the projector for the model GGUF at `model_path` (its embedding width) to `out`
 *  (atomically). Weights depend only on `seed` and each tensor's name and shape. Returns the
 *  exit status (1 with a message on stderr when the model cannot be read or the file written). */
int write_projector(const std::string & model_path, const std::string & out, uint64_t seed);

}  // namespace lineage::mkmodel
