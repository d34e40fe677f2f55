// gguf_io: see gguf_io.h.
#include "gguf_io.h"
#include "random.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <unistd.h>

namespace lineage::mkmodel {

gguf_ptr read_gguf_meta(const std::string & path) {
    return gguf_ptr(gguf_init_from_file(path.c_str(), gguf_init_params{/*no_alloc =*/true, /*ctx =*/nullptr}));
}

ggml_tensor * add_f32_tensor(ggml_context * ctx, gguf_context * g, const std::string & name,
                             const std::vector<int64_t> & ne, uint64_t seed, int64_t fan_in, float constant) {
    ggml_tensor * t = ggml_new_tensor(ctx, GGML_TYPE_F32, static_cast<int>(ne.size()), ne.data());
    ggml_set_name(t, name.c_str());
    auto * data = static_cast<float *>(t->data);
    if (fan_in > 0) {
        fill_noise(data, ggml_nelements(t), seed, name, fan_in);
    } else {
        for (int64_t i = 0; i < ggml_nelements(t); ++i) {
            data[i] = constant;
        }
    }
    gguf_add_tensor(g, t);
    return t;
}

bool write_gguf_atomically(const gguf_context * g, const std::string & out) {
    const std::string tmp = out + ".tmp-" + std::to_string(getpid());
    if (!gguf_write_to_file(g, tmp.c_str(), /*only_meta =*/false) || std::rename(tmp.c_str(), out.c_str()) != 0) {
        std::fprintf(stderr, "lineage-mkmodel: cannot write %s: %s\n", out.c_str(), std::strerror(errno));
        std::remove(tmp.c_str());
        return false;
    }
    return true;
}

}  // namespace lineage::mkmodel
