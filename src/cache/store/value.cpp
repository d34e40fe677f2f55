// cache::reuse_model: see value.h.
#include "cache/store/value.h"

#include <xxhash.h>

#include <algorithm>
#include <cstddef>

namespace lineage::cache {

reuse_model::counts * reuse_model::of(uint64_t family) {
    if (family == 0) {
        return nullptr;
    }
    if (families_.size() >= max_families && families_.find(family) == families_.end()) {
        families_.erase(families_.begin());  // an arbitrary one: a bound, not a policy
    }
    return &families_[family];
}

void reuse_model::reused(int32_t uses, uint64_t family) {
    const auto c = static_cast<std::size_t>(class_of(uses));
    global_.reused[c]++;
    if (counts * f = of(family)) {
        f->reused[c]++;
    }
}

void reuse_model::left_unused(int32_t uses, uint64_t family) {
    const auto c = static_cast<std::size_t>(class_of(uses));
    global_.left[c]++;
    if (counts * f = of(family)) {
        f->left[c]++;
    }
}

void reuse_model::ghost_reused(int32_t uses, uint64_t family) {
    const auto c = static_cast<std::size_t>(class_of(uses));
    auto turn = [c](counts & x) {
        x.reused[c]++;
        x.left[c] -= x.left[c] > 0 ? 1 : 0;
    };
    turn(global_);
    if (counts * f = of(family)) {
        turn(*f);
    }
}

void reuse_model::observe_gap(double seconds) {
    if (seconds < 0) {
        return;
    }
    gap_s_ = gap_measured_ ? (1 - gap_weight) * gap_s_ + gap_weight * seconds : seconds;
    gap_measured_ = true;
}

double reuse_model::probability(int32_t uses, uint64_t family) const {
    const auto c = static_cast<std::size_t>(class_of(uses));
    const auto r = static_cast<double>(global_.reused[c]);
    const double global = (r + 1) / (r + static_cast<double>(global_.left[c]) + 2);
    const auto f = family == 0 ? families_.end() : families_.find(family);
    if (f == families_.end()) {
        return global;
    }
    const auto fr = static_cast<double>(f->second.reused[c]);
    return (fr + 2 * global) / (fr + static_cast<double>(f->second.left[c]) + 2);
}

double reuse_model::likelihood(int32_t uses, double age_s, uint64_t family) const {
    const double gap = std::max(gap_s_, 1e-3);
    return probability(uses, family) / (1 + std::max(age_s, 0.0) / gap);
}

uint64_t reuse_family(const std::string & bucket, const tokens & t) {
    const uint64_t seed = XXH3_64bits(bucket.data(), bucket.size());
    const size_t n = std::min(t.size(), static_cast<size_t>(reuse_model::family_tokens));
    const uint64_t h = XXH3_64bits_withSeed(t.data(), n * sizeof(token), seed);
    return h == 0 ? 1 : h;
}

}  // namespace lineage::cache
