// engine::lora_adapter: llama_adapter_lora_init / llama_adapter_lora_free.
#include "engine/lora.h"

#include "llama.h"

#include <stdexcept>
#include <string>

namespace lineage::engine {

lora_adapter::lora_adapter(const model & m, const std::string & path) : path_(path) {
    adapter_ = llama_adapter_lora_init(m.raw(), path.c_str());
    if (adapter_ == nullptr) {
        throw std::runtime_error("llama.cpp could not load the LoRA adapter " + path +
                                 " (it must be a LoRA adapter GGUF made for this model's architecture and shapes; "
                                 "the engine log says which check failed)");
    }
}

lora_adapter::~lora_adapter() {
    llama_adapter_lora_free(adapter_);
}

float lora_adapter::alpha() const {
    char buf[64] = {0};
    if (llama_adapter_meta_val_str(adapter_, "adapter.lora.alpha", buf, sizeof(buf)) < 0) {
        return 0.0f;
    }
    return std::stof(buf);
}

}  // namespace lineage::engine
