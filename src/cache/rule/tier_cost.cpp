// cache::tier_cost: see tier_cost.h.
#include "cache/rule/tier_cost.h"

namespace lineage::cache {

namespace {

void blend(std::optional<double> & avg, double sample) {
    avg = avg ? (1 - tier_cost::ewma_weight) * *avg + tier_cost::ewma_weight * sample : sample;
}

}  // namespace

void tier_cost::observe_prefill(int32_t tokens, double seconds, double position_sum) {
    if (tokens < min_pass_tokens || seconds <= 0) {
        return;
    }
    blend(prefill_, tokens / seconds);
    if (position_sum >= 0) {
        const double n = tokens;
        const double s = position_sum;
        const double keep = 1 - fit_weight;
        snn_ = keep * snn_ + n * n;
        sns_ = keep * sns_ + n * s;
        sss_ = keep * sss_ + s * s;
        sny_ = keep * sny_ + n * seconds;
        ssy_ = keep * ssy_ + s * seconds;
    }
}

std::optional<std::pair<double, double>> tier_cost::prefill_fit() const {
    // The normal equations of min sum (y - a n - b S)^2. Passes all at one context length make
    // n and S proportional (det ~ 0): the fit cannot tell a from b, and is not used.
    const double det = snn_ * sss_ - sns_ * sns_;
    if (snn_ <= 0 || sss_ <= 0 || det <= 1e-3 * snn_ * sss_) {
        return std::nullopt;
    }
    const double a = (sny_ * sss_ - ssy_ * sns_) / det;
    const double b = (snn_ * ssy_ - sns_ * sny_) / det;
    if (!(a > 0) || !(b >= 0)) {
        return std::nullopt;
    }
    return std::pair{a, b};
}

std::optional<double> tier_cost::prefill_seconds(int32_t from, int32_t to) const {
    if (to <= from) {
        return 0.0;
    }
    const double n = to - from;
    if (const auto fit = prefill_fit()) {
        const double positions = n * (static_cast<double>(from) + static_cast<double>(to) - 1) / 2;
        return fit->first * n + fit->second * positions;
    }
    if (prefill_) {
        return n / *prefill_;
    }
    return std::nullopt;
}

void tier_cost::observe_read(int32_t tier, uint64_t bytes, double seconds) {
    if (tier < 0 || bytes < min_sample_bytes || seconds <= 0) {
        return;
    }
    if (read_.size() <= static_cast<size_t>(tier)) {
        read_.resize(static_cast<size_t>(tier) + 1);
    }
    blend(read_[static_cast<size_t>(tier)], static_cast<double>(bytes) / seconds);
}

void tier_cost::observe_write(uint64_t bytes, double seconds) {
    if (bytes >= min_sample_bytes && seconds > 0) {
        blend(write_, static_cast<double>(bytes) / seconds);
    }
}

double tier_cost::read_bytes_per_s(int32_t tier) const {
    if (fixed_bps_ > 0) {
        return fixed_bps_;
    }
    if (tier >= 0 && static_cast<size_t>(tier) < read_.size() && read_[static_cast<size_t>(tier)]) {
        return *read_[static_cast<size_t>(tier)];
    }
    if (tier == 0 && write_) {
        return *write_;  // a file just written reads back at least as fast (the page cache)
    }
    return prior_bytes_per_s;
}

double tier_cost::write_bytes_per_s() const {
    if (fixed_bps_ > 0) {
        return fixed_bps_;
    }
    if (write_) {
        return *write_;
    }
    return !read_.empty() && read_[0] ? *read_[0] : prior_bytes_per_s;
}

bool tier_cost::worth_read(int32_t tier, uint64_t bytes, int32_t tokens_gained) const {
    if (tokens_gained <= 0) {
        return false;
    }
    if (!on_ || !prefill_) {
        return true;
    }
    return static_cast<double>(bytes) / read_bytes_per_s(tier) < tokens_gained / *prefill_;
}

bool tier_cost::worth_write(uint64_t bytes, int32_t tokens, bool at_shutdown) const {
    if (!on_ || !prefill_) {
        return true;
    }
    const double saved = tokens / *prefill_ - static_cast<double>(bytes) / read_bytes_per_s(0);
    return at_shutdown ? saved > static_cast<double>(bytes) / write_bytes_per_s() : saved > 0;
}

}  // namespace lineage::cache
