// mkmodel's deterministic randomness, shared by the model writer (model_spec.cpp) and the
// noise tensors of the LoRA and projector writers (gguf_io.cpp add_f32_tensor): splitmix64,
// seeded per tensor with FNV-1a of its name, so a given seed writes the same bytes on every
// platform. Thread safety: value types.
#pragma once

#include <cmath>
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

// Irwin-Hall(4) noise of std 1/sqrt(fan_in) into data[0, n), seeded by `seed` and the tensor's
// name: the adapter's and the projector's weights (about as large as a trained layer's).
inline void fill_noise(float * data, int64_t n, uint64_t seed, std::string_view name, int64_t fan_in) {
    splitmix64 r{seed ^ fnv1a64(name)};
    const float spread = std::sqrt(3.0f) / std::sqrt(float(fan_in));
    for (int64_t i = 0; i < n; ++i) {
        const float u0 = r.uniform();
        const float u1 = r.uniform();
        const float u2 = r.uniform();
        const float u3 = r.uniform();
        data[i] = (((u0 + u1) + u2) + u3 - 2.0f) * spread;
    }
}

}  // namespace lineage::mkmodel
