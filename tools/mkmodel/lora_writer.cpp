// lora_writer: the adapter GGUF of --lora-out (see lora_writer.h).
#include "lora_writer.h"
#include "gguf_io.h"

#include <cstdio>
#include <string_view>
#include <vector>

namespace lineage::mkmodel {
namespace {

bool is_target(std::string_view name) {
    if (name == "output.weight") {
        return true;
    }
    if (name.rfind("blk.", 0) != 0) {
        return false;
    }
    for (const char * w : {".attn_output.weight", ".ffn_down.weight", ".ffn_up.weight", ".ffn_gate.weight"}) {
        const std::string_view suffix(w);
        if (name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix) {
            return true;
        }
    }
    return false;
}

struct target {
    std::string name;
    int64_t n_in;
    int64_t n_out;
};

}  // namespace

int write_lora(const std::string & model_path, const std::string & out, uint64_t seed) {
    gguf_ptr model = read_gguf_meta(model_path);
    if (!model) {
        std::fprintf(stderr, "lineage-mkmodel: cannot read the model %s for --lora-out\n", model_path.c_str());
        return 1;
    }
    const int64_t arch_key = gguf_find_key(model.get(), "general.architecture");
    if (arch_key < 0) {
        std::fprintf(stderr, "lineage-mkmodel: %s has no general.architecture\n", model_path.c_str());
        return 1;
    }
    const std::string arch = gguf_get_val_str(model.get(), arch_key);
    std::vector<target> targets;
    for (int64_t i = 0; i < gguf_get_n_tensors(model.get()); ++i) {
        const std::string name = gguf_get_tensor_name(model.get(), i);
        const int64_t * ne = gguf_get_tensor_ne(model.get(), i);
        if (is_target(name) && ne[2] == 1 && ne[3] == 1) {
            targets.push_back({name, ne[0], ne[1]});
        }
    }
    if (targets.empty()) {
        std::fprintf(stderr, "lineage-mkmodel: %s has no attention-output, FFN or output matrix to adapt\n",
                     model_path.c_str());
        return 1;
    }

    size_t bytes = 0;
    for (const auto & t : targets) {
        bytes += size_t(lora_rank * (t.n_in + t.n_out)) * sizeof(float) + 2 * ggml_tensor_overhead();
    }
    ggml_ptr ctx(ggml_init(ggml_init_params{/*mem_size =*/bytes + 1024, /*mem_buffer =*/nullptr, /*no_alloc =*/false}));
    gguf_ptr g(gguf_init_empty());
    gguf_set_val_str(g.get(), "general.architecture", arch.c_str());
    gguf_set_val_str(g.get(), "general.type", "adapter");
    gguf_set_val_str(g.get(), "general.name", ("lineage-mkmodel lora seed " + std::to_string(seed)).c_str());
    gguf_set_val_str(g.get(), "adapter.type", "lora");
    gguf_set_val_f32(g.get(), "adapter.lora.alpha", float(lora_rank));
    // Noise like the model's weights: the adapter's contribution B(Ax) is then about as large
    // as the weight's own, so it visibly changes the output.
    for (const auto & t : targets) {
        add_f32_tensor(ctx.get(), g.get(), t.name + ".lora_a", {t.n_in, lora_rank}, seed, t.n_in);
        add_f32_tensor(ctx.get(), g.get(), t.name + ".lora_b", {lora_rank, t.n_out}, seed, lora_rank);
    }
    if (!write_gguf_atomically(g.get(), out)) {
        return 1;
    }
    std::printf("wrote %s (LoRA adapter for %s: %zu matrices, rank %lld, seed %llu)\n", out.c_str(), arch.c_str(),
                targets.size(), static_cast<long long>(lora_rank), static_cast<unsigned long long>(seed));
    return 0;
}

}  // namespace lineage::mkmodel
