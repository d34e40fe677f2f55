// mkmodel's deterministic randomness, shared by the model writer (model_spec.cpp) and the LoRA
// adapter writer (lora_writer.cpp): splitmix64, seeded per tensor with FNV-1a of its name, so a
// given seed writes the same bytes on every platform. Thread safety: value types.
#pragma once

#include <cstdint>
#include <string_view>

namespace lineage::mkmodel {

// splitmix64: a tiny, well-mixed, platform-independent PRNG.
struct splitmix64 {
    uint64_t state;
    uint64_t next() {
        uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    // Uniform in [0, 1) with 24 bits, exact in float.
    float uniform() { return float(next() >> 40) * (1.0f / 16777216.0f); }
};

inline uint64_t fnv1a64(std::string_view s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char c : s) {
        h = (h ^ c) * 0x100000001b3ull;
    }
    return h;
}

}  // namespace lineage::mkmodel
