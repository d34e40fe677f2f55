// projector_writer: the projector GGUF of --mmproj-out (see projector_writer.h). The keys and
// tensor names are those clip.cpp's loader reads for PROJECTOR_TYPE_MLP (clip-impl.h).
#include "projector_writer.h"
#include "gguf_io.h"

#include <cstdio>
#include <vector>

namespace lineage::mkmodel {
namespace {

constexpr int64_t n_embd = 32;      // vision width
constexpr int64_t n_ff = 64;
constexpr int64_t n_head = 2;
constexpr int64_t n_layer = 2;      // the LLaVA graph runs n_layer - 1 of them
constexpr int64_t image_size = 32;
constexpr int64_t patch_size = 8;

}  // namespace

int write_projector(const std::string & model_path, const std::string & out, uint64_t seed) {
    gguf_ptr model = read_gguf_meta(model_path);
    if (!model) {
        std::fprintf(stderr, "lineage-mkmodel: cannot read the model %s for --mmproj-out\n", model_path.c_str());
        return 1;
    }
    const int64_t arch_key = gguf_find_key(model.get(), "general.architecture");
    const std::string arch = arch_key >= 0 ? gguf_get_val_str(model.get(), arch_key) : "";
    const int64_t embd_key = gguf_find_key(model.get(), (arch + ".embedding_length").c_str());
    if (embd_key < 0) {
        std::fprintf(stderr, "lineage-mkmodel: %s has no %s.embedding_length\n", model_path.c_str(), arch.c_str());
        return 1;
    }
    const int64_t n_text = gguf_get_val_u32(model.get(), embd_key);
    const int64_t n_patches = (image_size / patch_size) * (image_size / patch_size);

    ggml_ptr ctx(
        ggml_init(ggml_init_params{/*mem_size =*/size_t(64) << 20, /*mem_buffer =*/nullptr, /*no_alloc =*/false}));
    gguf_ptr g(gguf_init_empty());
    gguf_set_val_str(g.get(), "general.architecture", "clip");
    gguf_set_val_str(g.get(), "general.name", ("lineage-mkmodel mmproj seed " + std::to_string(seed)).c_str());
    gguf_set_val_str(g.get(), "clip.projector_type", "mlp");
    gguf_set_val_bool(g.get(), "clip.has_vision_encoder", true);
    gguf_set_val_bool(g.get(), "clip.use_gelu", true);
    gguf_set_val_u32(g.get(), "clip.vision.embedding_length", n_embd);
    gguf_set_val_u32(g.get(), "clip.vision.feed_forward_length", n_ff);
    gguf_set_val_u32(g.get(), "clip.vision.block_count", n_layer);
    gguf_set_val_u32(g.get(), "clip.vision.attention.head_count", n_head);
    gguf_set_val_u32(g.get(), "clip.vision.projection_dim", static_cast<uint32_t>(n_text));
    gguf_set_val_f32(g.get(), "clip.vision.attention.layer_norm_epsilon", 1e-5f);
    gguf_set_val_u32(g.get(), "clip.vision.image_size", image_size);
    gguf_set_val_u32(g.get(), "clip.vision.patch_size", patch_size);
    const float mean[3] = {0.5f, 0.5f, 0.5f};
    gguf_set_arr_data(g.get(), "clip.vision.image_mean", GGUF_TYPE_FLOAT32, mean, 3);
    gguf_set_arr_data(g.get(), "clip.vision.image_std", GGUF_TYPE_FLOAT32, mean, 3);

    size_t n_tensors = 0;
    // A weight of random noise (fan_in > 0), or a constant (a norm's scale 1, a bias 0).
    auto add = [&](const std::string & name, const std::vector<int64_t> & ne, int64_t fan_in, float constant = 0.0f) {
        add_f32_tensor(ctx.get(), g.get(), name, ne, seed, fan_in, constant);
        ++n_tensors;
    };
    add("v.patch_embd.weight", {patch_size, patch_size, 3, n_embd}, patch_size * patch_size * 3);
    add("v.patch_embd.bias", {n_embd}, 0);
    add("v.position_embd.weight", {n_embd, n_patches}, n_embd);
    for (int64_t il = 0; il < n_layer; ++il) {
        const std::string b = "v.blk." + std::to_string(il) + ".";
        for (const char * w : {"attn_q", "attn_k", "attn_v", "attn_out"}) {
            add(b + w + ".weight", {n_embd, n_embd}, n_embd);
            add(b + w + ".bias", {n_embd}, 0);
        }
        for (const char * ln : {"ln1", "ln2"}) {
            add(b + ln + ".weight", {n_embd}, 0, 1.0f);
            add(b + ln + ".bias", {n_embd}, 0);
        }
        add(b + "ffn_up.weight", {n_embd, n_ff}, n_embd);
        add(b + "ffn_up.bias", {n_ff}, 0);
        add(b + "ffn_down.weight", {n_ff, n_embd}, n_ff);
        add(b + "ffn_down.bias", {n_embd}, 0);
    }
    add("mm.0.weight", {n_embd, n_text}, n_embd);
    add("mm.0.bias", {n_text}, 0);
    add("mm.2.weight", {n_text, n_text}, n_text);
    add("mm.2.bias", {n_text}, 0);

    if (!write_gguf_atomically(g.get(), out)) {
        return 1;
    }
    std::printf("wrote %s (mlp projector for %s, n_embd %lld: %zu tensors, %lldx%lld images -> %lld tokens, seed %llu)\n",
                out.c_str(), arch.c_str(), static_cast<long long>(n_text), n_tensors,
                static_cast<long long>(image_size), static_cast<long long>(image_size),
                static_cast<long long>(projector_image_tokens), static_cast<unsigned long long>(seed));
    return 0;
}

}  // namespace lineage::mkmodel
