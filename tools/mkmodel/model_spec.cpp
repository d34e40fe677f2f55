// model_spec: hyperparameters per (arch, preset) as GGUF keys, F16 type overrides, and the
// deterministic weight noise. Key names are the engine's (src/llama-arch.cpp LLM_KV_NAMES);
// which keys each arch reads is in src/models/<arch>.cpp load_arch_hparams.
// Thread safety: stateless. Ownership: see model_spec.h.
#include "model_spec.h"
#include "random.h"

#include <ggml-backend.h>
#include <ggml.h>
#include <gguf.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace lineage::mkmodel {
namespace {

// Shapes of one (arch, preset). Layer il is an attention layer iff (il + 1) % attn_every == 0,
// the Qwen3.5 rule (full_attention_interval); attn_every == 1 means all attention (dense).
struct dims {
    uint32_t n_layer = 0;
    uint32_t n_embd = 0;
    uint32_t n_ff = 0;          // dense FFN width (kimi-linear: the one leading dense layer)
    uint32_t n_head = 0;        // attention heads (kimi-linear: also the KDA heads)
    uint32_t n_head_kv = 0;     // attention KV heads on attention layers
    uint32_t head_dim = 0;      // attention head size (not used by kimi-linear's MLA)
    uint32_t n_rot = 0;         // rotary dims (kimi-linear: qk_rope_head_dim; unrotated there)
    uint32_t attn_every = 0;
    uint32_t rec_heads = 0;     // GDN value heads / KDA heads / Mamba2 heads
    uint32_t rec_k_heads = 0;   // GDN key heads / Mamba2 groups
    uint32_t rec_head_dim = 0;  // GDN / KDA head size; Mamba2 d_state
    uint32_t kv_lora = 0;       // MLA: kv_lora_rank
    uint32_t mla_k = 0;         // MLA: qk_nope + qk_rope head size
    uint32_t mla_v = 0;         // MLA: v head size
    uint32_t n_expert = 0;      // MoE (kimi-linear layers after the first)
    uint32_t n_expert_used = 0;
    uint32_t n_ff_exp = 0;
};

constexpr uint32_t k_n_ctx_train = 65536;  // tokens; >= 32768, the device check's sequence length
constexpr uint32_t k_d_conv      = 4;      // short-conv taps of every recurrent family

// tiny: 4 layers (one attention layer), n_embd 64: ~45 MB, 1,000-token prefill ~0.03-0.2 s.
// bench: n_embd 512, depth chosen so that a cold 3,000-token prefill (n_batch 512, 2 threads)
// takes ~4-5 s on the 2-core dev VM (best of several runs, 2026-11-29: qwen35 4.6 s, qwen3
// 4.5 s, kimi-linear 3.8 s, granite-hybrid 3.8 s); qwen35 bench has Qwen3.5-0.8B's 24 layers
// and a 5 MB recurrent state, qwen3 bench ~24 KB of KV per token.
// large: a GPU's model (scripts/device-check --size device), n_embd 2048, n_ff 6144, 24 layers:
// qwen35 1,996 M parameters (4.0 GB in F16; GDN 16x128, one gated-attention layer in four;
// `--check` passes on it), qwen3 ~1.8B (not made yet). Only these two: the others' layouts
// (MoE, Mamba2 groups) have no large shape.
dims large_dims(model_arch arch) {
    switch (arch) {
        case model_arch::qwen35:
            return dims{.n_layer = 24, .n_embd = 2048, .n_ff = 6144, .n_head = 16, .n_head_kv = 4,
                        .head_dim = 128, .n_rot = 32, .attn_every = 4, .rec_heads = 16,
                        .rec_k_heads = 16, .rec_head_dim = 128};
        case model_arch::qwen3:
            return dims{.n_layer = 24, .n_embd = 2048, .n_ff = 6144, .n_head = 16, .n_head_kv = 8,
                        .head_dim = 128, .n_rot = 128, .attn_every = 1};
        case model_arch::kimi_linear:
        case model_arch::granite_hybrid:
            break;
    }
    return {};
}

dims dims_for(model_arch arch, model_preset preset) {
    if (preset == model_preset::large) {
        return large_dims(arch);
    }
    const bool tiny = preset == model_preset::tiny;
    switch (arch) {
        case model_arch::qwen35:  // Qwen3.5-0.8B: 24 layers, n_embd 1024, GDN 16x128
            return tiny ? dims{.n_layer = 4, .n_embd = 64, .n_ff = 192, .n_head = 2, .n_head_kv = 1,
                               .head_dim = 32, .n_rot = 8, .attn_every = 4, .rec_heads = 2,
                               .rec_k_heads = 2, .rec_head_dim = 32}
                        : dims{.n_layer = 24, .n_embd = 512, .n_ff = 1536, .n_head = 4, .n_head_kv = 2,
                               .head_dim = 128, .n_rot = 32, .attn_every = 4, .rec_heads = 4,
                               .rec_k_heads = 4, .rec_head_dim = 128};
        case model_arch::qwen3:
            return tiny ? dims{.n_layer = 4, .n_embd = 64, .n_ff = 192, .n_head = 2, .n_head_kv = 1,
                               .head_dim = 32, .n_rot = 32, .attn_every = 1}
                        : dims{.n_layer = 24, .n_embd = 512, .n_ff = 1536, .n_head = 4, .n_head_kv = 2,
                               .head_dim = 128, .n_rot = 128, .attn_every = 1};
        case model_arch::kimi_linear:  // Kimi-Linear-48B-A3B: 27 layers, MLA every 4th, MoE
            return tiny ? dims{.n_layer = 4, .n_embd = 64, .n_ff = 192, .n_head = 2, .n_head_kv = 1,
                               .n_rot = 16, .attn_every = 4, .rec_heads = 2, .rec_head_dim = 32,
                               .kv_lora = 64, .mla_k = 48, .mla_v = 32, .n_expert = 4,
                               .n_expert_used = 2, .n_ff_exp = 64}
                        : dims{.n_layer = 16, .n_embd = 512, .n_ff = 1536, .n_head = 4, .n_head_kv = 1,
                               .n_rot = 64, .attn_every = 4, .rec_heads = 4, .rec_head_dim = 128,
                               .kv_lora = 256, .mla_k = 128, .mla_v = 128, .n_expert = 8,
                               .n_expert_used = 2, .n_ff_exp = 512};
        case model_arch::granite_hybrid:  // Granite-4.0-H: Mamba2 d_inner = 2 n_embd, NoPE attention
            return tiny ? dims{.n_layer = 4, .n_embd = 64, .n_ff = 192, .n_head = 2, .n_head_kv = 1,
                               .head_dim = 32, .attn_every = 4, .rec_heads = 4, .rec_k_heads = 1,
                               .rec_head_dim = 32}
                        : dims{.n_layer = 20, .n_embd = 512, .n_ff = 1536, .n_head = 4, .n_head_kv = 2,
                               .head_dim = 128, .attn_every = 5, .rec_heads = 16, .rec_k_heads = 1,
                               .rec_head_dim = 128};
    }
    return {};
}

bool is_attention_layer(const dims & d, uint32_t il) {
    return (il + 1) % d.attn_every == 0;
}

// Writes "<arch>.<suffix>" keys.
class kv_writer {
public:
    kv_writer(gguf_context * meta, model_arch arch) : meta_(meta), prefix_(std::string(gguf_arch_name(arch)) + ".") {}

    void u32(const char * suffix, uint32_t v) { gguf_set_val_u32(meta_, key(suffix), v); }
    void f32(const char * suffix, float v) { gguf_set_val_f32(meta_, key(suffix), v); }
    void boolean(const char * suffix, bool v) { gguf_set_val_bool(meta_, key(suffix), v); }
    void u32s(const char * suffix, const std::vector<uint32_t> & v) {
        gguf_set_arr_data(meta_, key(suffix), GGUF_TYPE_UINT32, v.data(), v.size());
    }

private:
    const char * key(const char * suffix) {
        key_ = prefix_ + suffix;
        return key_.c_str();
    }

    gguf_context * meta_;
    std::string prefix_;
    std::string key_;
};

// Per-layer KV head counts: 0 marks a recurrent layer for kimi-linear and granite-hybrid.
std::vector<uint32_t> head_kv_per_layer(const dims & d) {
    std::vector<uint32_t> v(d.n_layer);
    for (uint32_t il = 0; il < d.n_layer; ++il) {
        v[il] = is_attention_layer(d, il) ? d.n_head_kv : 0;
    }
    return v;
}

void add_arch_keys(kv_writer & kv, model_arch arch, const dims & d) {
    kv.u32("context_length", k_n_ctx_train);
    kv.u32("embedding_length", d.n_embd);
    kv.u32("block_count", d.n_layer);
    kv.u32("feed_forward_length", d.n_ff);
    kv.u32("attention.head_count", d.n_head);
    kv.f32("attention.layer_norm_rms_epsilon", 1e-6f);
    switch (arch) {
        case model_arch::qwen35:
            kv.u32("attention.head_count_kv", d.n_head_kv);
            kv.u32("attention.key_length", d.head_dim);
            kv.u32("attention.value_length", d.head_dim);
            kv.f32("rope.freq_base", 1e7f);
            kv.u32("rope.dimension_count", d.n_rot);
            // Qwen3.5 interleaved M-RoPE: [11, 11, 10, 0] of 32 rotary pairs, scaled to n_rot/2.
            kv.u32s("rope.dimension_sections", {d.n_rot * 11 / 64, d.n_rot * 11 / 64,
                                                d.n_rot / 2 - 2 * (d.n_rot * 11 / 64), 0});
            kv.u32("ssm.conv_kernel", k_d_conv);
            kv.u32("ssm.inner_size", d.rec_heads * d.rec_head_dim);
            kv.u32("ssm.state_size", d.rec_head_dim);
            kv.u32("ssm.time_step_rank", d.rec_heads);
            kv.u32("ssm.group_count", d.rec_k_heads);
            kv.u32("full_attention_interval", d.attn_every);
            break;
        case model_arch::qwen3:
            kv.u32("attention.head_count_kv", d.n_head_kv);
            kv.u32("attention.key_length", d.head_dim);
            kv.u32("attention.value_length", d.head_dim);
            kv.f32("rope.freq_base", 1e6f);
            break;
        case model_arch::kimi_linear:
            // MLA stored as MQA over the compressed KV (conversion/kimi_linear.py).
            kv.u32s("attention.head_count_kv", head_kv_per_layer(d));
            kv.u32("attention.key_length", d.kv_lora + d.n_rot);
            kv.u32("attention.value_length", d.kv_lora);
            kv.u32("attention.kv_lora_rank", d.kv_lora);
            kv.u32("attention.key_length_mla", d.mla_k);
            kv.u32("attention.value_length_mla", d.mla_v);
            kv.u32("rope.dimension_count", d.n_rot);
            kv.u32("ssm.conv_kernel", k_d_conv);
            kv.u32("kda.head_dim", d.rec_head_dim);
            kv.u32("leading_dense_block_count", 1);
            kv.u32("expert_count", d.n_expert);
            kv.u32("expert_used_count", d.n_expert_used);
            kv.u32("expert_feed_forward_length", d.n_ff_exp);
            kv.u32("expert_shared_count", 1);
            kv.f32("expert_weights_scale", 2.446f);  // Kimi routed_scaling_factor
            kv.boolean("expert_weights_norm", true);
            kv.u32("expert_gating_func", 2);         // LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID
            break;
        case model_arch::granite_hybrid:
            kv.u32s("attention.head_count_kv", head_kv_per_layer(d));
            kv.u32("attention.key_length", d.head_dim);
            kv.u32("attention.value_length", d.head_dim);
            kv.boolean("rope.scaling.finetuned", false);  // Granite-4.0-H attention is NoPE
            kv.u32("ssm.conv_kernel", k_d_conv);
            kv.u32("ssm.inner_size", 2 * d.n_embd);       // the engine supports expand = 2 only
            kv.u32("ssm.state_size", d.rec_head_dim);
            kv.u32("ssm.time_step_rank", d.rec_heads);
            kv.u32("ssm.group_count", d.rec_k_heads);
            break;
    }
}

// Matrix weights (names without the "blk.N." prefix) stored as F16; whichever of these an
// arch does not create are ignored by the engine.
constexpr const char * k_f16_layer_weights[] = {
    "attn_q", "attn_k", "attn_v", "attn_output", "attn_qkv", "attn_gate",
    "attn_kv_a_mqa", "attn_k_b", "attn_v_b",
    "ssm_in", "ssm_out", "ssm_beta", "ssm_alpha", "ssm_f_a", "ssm_f_b", "ssm_g_a", "ssm_g_b",
    "ffn_gate", "ffn_up", "ffn_down", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps",
    "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp",
};

void add_f16_override(gguf_context * meta, const std::string & name) {
    ggml_tensor t{};
    t.type = GGML_TYPE_F16;
    for (int i = 0; i < GGML_MAX_DIMS; ++i) {
        t.ne[i] = 1;
        t.nb[i] = ggml_type_size(GGML_TYPE_F16);
    }
    ggml_set_name(&t, name.c_str());
    gguf_add_tensor(meta, &t);
}


bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

const std::vector<std::string> & arch_names() {
    static const std::vector<std::string> names = {"qwen35", "qwen3", "kimi-linear", "granite-hybrid"};
    return names;
}

const std::vector<std::string> & preset_names() {
    static const std::vector<std::string> names = {"tiny", "bench", "large"};
    return names;
}

bool has_shape(model_arch arch, model_preset preset) {
    return dims_for(arch, preset).n_layer > 0;
}

std::optional<model_arch> parse_arch(std::string_view name) {
    if (name == "qwen35") return model_arch::qwen35;
    if (name == "qwen3") return model_arch::qwen3;
    if (name == "kimi-linear") return model_arch::kimi_linear;
    if (name == "granite-hybrid") return model_arch::granite_hybrid;
    return std::nullopt;
}

std::optional<model_preset> parse_preset(std::string_view name) {
    if (name == "tiny") return model_preset::tiny;
    if (name == "bench") return model_preset::bench;
    if (name == "large") return model_preset::large;
    return std::nullopt;
}

const char * gguf_arch_name(model_arch arch) {
    switch (arch) {
        case model_arch::qwen35: return "qwen35";
        case model_arch::qwen3: return "qwen3";
        case model_arch::kimi_linear: return "kimi-linear";
        case model_arch::granite_hybrid: return "granitehybrid";
    }
    return "";
}

bool is_hybrid(model_arch arch) {
    return arch != model_arch::qwen3;
}

std::string describe(model_arch arch, model_preset preset) {
    const dims d = dims_for(arch, preset);
    uint32_t n_attn = 0;
    for (uint32_t il = 0; il < d.n_layer; ++il) {
        n_attn += is_attention_layer(d, il) ? 1 : 0;
    }
    char buf[256];
    std::snprintf(buf, sizeof(buf), "%s: %u layers (%u attention, %u recurrent), n_embd %u, n_ff %u, %u heads",
                  gguf_arch_name(arch), d.n_layer, n_attn, d.n_layer - n_attn, d.n_embd, d.n_ff, d.n_head);
    return buf;
}

void add_model_metadata(gguf_context * meta, model_arch arch, model_preset preset, const std::string & name) {
    const dims d = dims_for(arch, preset);
    gguf_set_val_str(meta, "general.architecture", gguf_arch_name(arch));
    gguf_set_val_str(meta, "general.name", name.c_str());
    kv_writer kv(meta, arch);
    add_arch_keys(kv, arch, d);

    add_f16_override(meta, "token_embd.weight");
    add_f16_override(meta, "output.weight");
    for (uint32_t il = 0; il < d.n_layer; ++il) {
        for (const char * w : k_f16_layer_weights) {
            add_f16_override(meta, "blk." + std::to_string(il) + "." + w + ".weight");
        }
    }
}

bool is_spurious_tensor(std::string_view name) {
    static constexpr std::string_view biases[] = {
        ".attn_q.bias", ".attn_k.bias", ".attn_v.bias", ".attn_qkv.bias", ".attn_output.bias",
        ".ffn_gate.bias", ".ffn_up.bias", ".ffn_down.bias",
    };
    if (ends_with(name, ".scale") || ends_with(name, ".input_scale") || name.rfind("cls.", 0) == 0 ||
        name.rfind("rope_freqs", 0) == 0) {
        return true;
    }
    for (const std::string_view b : biases) {
        if (ends_with(name, b)) {
            return true;
        }
    }
    return false;
}

void fill_tensor(ggml_tensor * tensor, void * seed) {
    const std::string_view name = ggml_get_name(tensor);
    splitmix64 rng{*static_cast<const uint64_t *>(seed) ^ fnv1a64(name)};

    // Irwin-Hall(4) scaled to unit variance: (sum - 2) * sqrt(3). Only correctly rounded IEEE
    // operations in a fixed order (and -ffp-contract=off), so the bits match on every CPU.
    const bool is_vector = ggml_n_dims(tensor) == 1;
    float center = 0.0f;
    float spread = std::sqrt(3.0f) / std::sqrt(float(tensor->ne[0]));  // std 1/sqrt(fan-in)
    if (name.find("norm") != std::string_view::npos || ends_with(name, ".ssm_d")) {
        center = 1.0f;  // RMSNorm scales, Mamba2 D skip
        spread = 0.0f;
    } else if (ends_with(name, ".ssm_a")) {
        center = -1.0f;  // A = -exp(A_log) < 0: every recurrent state decays
        spread = 0.1f;
    } else if (is_vector) {
        spread = 0.02f * std::sqrt(3.0f);  // biases (incl. dt bias, router bias)
    }

    const int64_t n = ggml_nelements(tensor);
    std::vector<float> values(size_t(n), 0.0f);
    for (float & v : values) {
        const float u0 = rng.uniform();
        const float u1 = rng.uniform();
        const float u2 = rng.uniform();
        const float u3 = rng.uniform();
        const float noise = (((u0 + u1) + u2) + u3 - 2.0f) * spread;
        v = center + noise;
    }
    if (tensor->type == GGML_TYPE_F32) {
        ggml_backend_tensor_set(tensor, values.data(), 0, ggml_nbytes(tensor));
    } else if (tensor->type == GGML_TYPE_F16) {
        std::vector<ggml_fp16_t> half(static_cast<size_t>(n));
        ggml_fp32_to_fp16_row(values.data(), half.data(), n);
        ggml_backend_tensor_set(tensor, half.data(), 0, ggml_nbytes(tensor));
    } else {
        std::fprintf(stderr, "lineage-mkmodel: tensor %s has unsupported type %s\n", ggml_get_name(tensor),
                     ggml_type_name(tensor->type));
        std::abort();
    }
}

}  // namespace lineage::mkmodel
