// cache::tier_cost: see tier_cost.h.
#include "cache/rule/tier_cost.h"

namespace lineage::cache {

namespace {

void blend(std::optional<double> & avg, double sample) {
    avg = avg ? (1 - tier_cost::ewma_weight) * *avg + tier_cost::ewma_weight * sample : sample;
}

}  // namespace

void tier_cost::observe_prefill(int32_t tokens, double seconds) {
    if (tokens >= min_pass_tokens && seconds > 0) {
        blend(prefill_, tokens / seconds);
    }
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
