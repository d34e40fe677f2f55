// model_spec: what lineage-mkmodel builds for each (arch, preset): the GGUF hyperparameter
// keys the engine reads for that architecture, which weights are stored as F16, and the
// deterministic noise every weight tensor is filled with.
// Why: engine tests and the prompt-cache benchmark need small models of each hybrid family
// (Gated DeltaNet, Kimi Delta Attention, Mamba2) and a dense control, with no download.
// Thread safety: all functions are pure or touch only their arguments; safe from any thread.
// Ownership: callers own every gguf_context and ggml_tensor passed in.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

struct gguf_context;
struct ggml_tensor;

namespace lineage::mkmodel {

enum class model_arch { qwen35, qwen3, kimi_linear, granite_hybrid };
enum class model_preset { tiny, bench, large };

// The CLI spellings, in the order --help lists them.
const std::vector<std::string> & arch_names();
const std::vector<std::string> & preset_names();

// True when lineage-mkmodel has a shape for (arch, preset): every arch has tiny and bench;
// large (billions of parameters, for a GPU: scripts/device-check) exists for qwen35 and qwen3.
bool has_shape(model_arch arch, model_preset preset);

// Parses a CLI spelling ("qwen35", "kimi-linear", ...); nullopt when unknown.
std::optional<model_arch> parse_arch(std::string_view name);
std::optional<model_preset> parse_preset(std::string_view name);

// The value of general.architecture for `arch` ("granitehybrid" for granite-hybrid).
const char * gguf_arch_name(model_arch arch);

// True when the arch mixes recurrent layers with attention layers (all but qwen3); only
// these have recurrent-only (PARTIAL_ONLY) checkpoints.
bool is_hybrid(model_arch arch);

// One line describing the shape of (arch, preset), e.g. for --help and logs.
std::string describe(model_arch arch, model_preset preset);

// Adds to `meta` the general.* and <arch>.* keys that llama_model_init_from_user needs for
// (arch, preset), plus a type-only tensor entry (GGML_TYPE_F16) for every matrix weight so
// that the engine allocates those in F16 (all other tensors default to F32). Does not add
// tokenizer.* keys. `name` becomes general.name.
// REQUIRES: meta has none of these keys or tensors yet.
void add_model_metadata(gguf_context * meta, model_arch arch, model_preset preset,
                        const std::string & name);

// True for tensors that llama_model_init_from_user creates only because it creates every
// optional tensor, and that converted checkpoints of these families lack: per-tensor quant
// scales ("*.scale", which the graph multiplies in, and "*.input_scale"), attention and FFN
// biases, the reranker head ("cls.*") and rope_freqs. lineage-mkmodel leaves them out of the
// file, so it loads like a converted model.
bool is_spurious_tensor(std::string_view name);

// Fills `tensor` (F32 or F16, host memory through ggml_backend_tensor_set) with values that
// depend only on (seed, tensor name, shape): Irwin-Hall noise of std 1/sqrt(ne[0]) (fan-in)
// for weights, 1 for norm scales / D skips / rope factors, about -1 for the recurrent decay A
// (so that every recurrent state decays), small noise for biases. Bit-identical across runs
// and platforms (integer PRNG, no libm). Aborts on any other tensor type.
// Signature matches llama_model_set_tensor_data_t; `seed` points to a uint64_t.
void fill_tensor(ggml_tensor * tensor, void * seed);

}  // namespace lineage::mkmodel
