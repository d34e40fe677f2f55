// cache::reuse_model: see value.h.
#include "cache/store/value.h"

#include <algorithm>
#include <cstddef>

namespace lineage::cache {

void reuse_model::observe_gap(double seconds) {
    if (seconds < 0) {
        return;
    }
    gap_s_ = gap_measured_ ? (1 - gap_weight) * gap_s_ + gap_weight * seconds : seconds;
    gap_measured_ = true;
}

void reuse_model::ghost_reused(int32_t uses) {
    const auto c = static_cast<std::size_t>(class_of(uses));
    reused_[c]++;
    left_[c] -= left_[c] > 0 ? 1 : 0;
}

double reuse_model::probability(int32_t uses) const {
    const auto c = static_cast<std::size_t>(class_of(uses));
    const auto r = static_cast<double>(reused_[c]);
    return (r + 1) / (r + static_cast<double>(left_[c]) + 2);
}

double reuse_model::likelihood(int32_t uses, double age_s) const {
    const double gap = std::max(gap_s_, 1e-3);
    return probability(uses) / (1 + std::max(age_s, 0.0) / gap);
}

}  // namespace lineage::cache
