// engine::lora_adapter: one LoRA adapter GGUF loaded for a model (llama.cpp's
// llama_adapter_lora), and the set of adapters a context applies to its next decode.
// Why: LoRA adapters change what the model computes, so the scheduler applies the set a
// request asks for to the batches that carry it (llama.cpp applies one set per llama_decode).
// Thread safety: not thread-safe; loaded and used on the engine thread only.
// Ownership: move-only; owns the adapter (freed on destruction); the model must outlive it.
#pragma once

#include "engine/model.h"

#include <string>

struct llama_adapter_lora;

namespace lineage::engine {

class lora_adapter {
public:
    /** Loads `path` for `m`. Throws std::runtime_error naming the file when llama.cpp refuses
     *  it (unreadable, not general.type=adapter / adapter.type=lora, another architecture, a
     *  tensor the model lacks or of the wrong shape). */
    lora_adapter(const model & m, const std::string & path);
    ~lora_adapter();
    lora_adapter(const lora_adapter &) = delete;
    lora_adapter & operator=(const lora_adapter &) = delete;

    const std::string & path() const { return path_; }
    /** adapter.lora.alpha of the file (0 when absent: the scale is then used as is). */
    float alpha() const;
    llama_adapter_lora * raw() const { return adapter_; }  // for src/engine only

private:
    llama_adapter_lora * adapter_ = nullptr;
    std::string path_;
};

}  // namespace lineage::engine
