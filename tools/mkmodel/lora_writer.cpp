// lora_writer: the adapter GGUF of --lora-out (see lora_writer.h).
#include "lora_writer.h"
#include "random.h"

#include <ggml.h>
#include <gguf.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include <unistd.h>

namespace lineage::mkmodel {
namespace {

struct gguf_deleter {
    void operator()(gguf_context * g) const { gguf_free(g); }
};
struct ggml_deleter {
    void operator()(ggml_context * c) const { ggml_free(c); }
};

// Like the model's weights: the adapter's contribution B(Ax) is then about as large as the
// weight's own, so it visibly changes the output.
void fill(ggml_tensor * t, uint64_t seed, int64_t fan_in) {
    fill_noise(static_cast<float *>(t->data), ggml_nelements(t), seed, ggml_get_name(t), fan_in);
}

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
    std::unique_ptr<gguf_context, gguf_deleter> model(
        gguf_init_from_file(model_path.c_str(), gguf_init_params{/*no_alloc =*/true, /*ctx =*/nullptr}));
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
    std::unique_ptr<ggml_context, ggml_deleter> ctx(
        ggml_init(ggml_init_params{/*mem_size =*/bytes + 1024, /*mem_buffer =*/nullptr, /*no_alloc =*/false}));
    std::unique_ptr<gguf_context, gguf_deleter> g(gguf_init_empty());
    gguf_set_val_str(g.get(), "general.architecture", arch.c_str());
    gguf_set_val_str(g.get(), "general.type", "adapter");
    gguf_set_val_str(g.get(), "general.name", ("lineage-mkmodel lora seed " + std::to_string(seed)).c_str());
    gguf_set_val_str(g.get(), "adapter.type", "lora");
    gguf_set_val_f32(g.get(), "adapter.lora.alpha", float(lora_rank));
    for (const auto & t : targets) {
        ggml_tensor * a = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, t.n_in, lora_rank);
        ggml_tensor * b = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, lora_rank, t.n_out);
        ggml_set_name(a, (t.name + ".lora_a").c_str());
        ggml_set_name(b, (t.name + ".lora_b").c_str());
        fill(a, seed, t.n_in);
        fill(b, seed, lora_rank);
        gguf_add_tensor(g.get(), a);
        gguf_add_tensor(g.get(), b);
    }
    const std::string tmp = out + ".tmp-" + std::to_string(getpid());
    if (!gguf_write_to_file(g.get(), tmp.c_str(), /*only_meta =*/false) || std::rename(tmp.c_str(), out.c_str()) != 0) {
        std::fprintf(stderr, "lineage-mkmodel: cannot write %s: %s\n", out.c_str(), std::strerror(errno));
        std::remove(tmp.c_str());
        return 1;
    }
    std::printf("wrote %s (LoRA adapter for %s: %zu matrices, rank %lld, seed %llu)\n", out.c_str(), arch.c_str(),
                targets.size(), static_cast<long long>(lora_rank), static_cast<unsigned long long>(seed));
    return 0;
}

}  // namespace lineage::mkmodel
