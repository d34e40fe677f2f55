// gguf_io: the GGUF plumbing shared by lineage-mkmodel's writers (mkmodel.cpp, lora_writer.cpp,
// projector_writer.cpp): owning pointers of gguf/ggml contexts, a file's metadata, an F32 tensor
// of deterministic noise (or a constant) added to a GGUF being built, and the atomic write.
// Thread safety: single-threaded. Ownership: the pointers free what they hold.
#pragma once

#include <ggml.h>
#include <gguf.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lineage::mkmodel {

struct gguf_deleter {
    void operator()(gguf_context * g) const { gguf_free(g); }
};
struct ggml_deleter {
    void operator()(ggml_context * c) const { ggml_free(c); }
};
using gguf_ptr = std::unique_ptr<gguf_context, gguf_deleter>;
using ggml_ptr = std::unique_ptr<ggml_context, ggml_deleter>;

/** The metadata (keys and tensor infos, no tensor data) of the GGUF at `path`; null when it
 *  cannot be read (the caller says why it wanted it). */
gguf_ptr read_gguf_meta(const std::string & path);

/** A new F32 tensor of shape `ne` named `name` in `ctx` (which allocates data), added to `g`:
 *  fill_noise(seed, name, fan_in) when fan_in > 0, else every element `constant`. */
ggml_tensor * add_f32_tensor(ggml_context * ctx, gguf_context * g, const std::string & name,
                             const std::vector<int64_t> & ne, uint64_t seed, int64_t fan_in, float constant = 0.0f);

/** Writes `g` with its tensors' data to `out` atomically (a temporary next to it, renamed).
 *  Returns false, with a message on stderr and no temporary left, when it cannot. */
bool write_gguf_atomically(const gguf_context * g, const std::string & out);

}  // namespace lineage::mkmodel
