// cache::lower_tier: the public side of a tier below RAM, on its worker (lower_tier.h).
#include "cache/tier/lower_tier.h"

namespace lineage::cache {

const char * to_string(tier_readiness r) {
    switch (r) {
        case tier_readiness::warming: return "warming";
        case tier_readiness::ready: return "ready";
        case tier_readiness::unavailable: return "unavailable";
    }
    return "unknown";
}

lower_tier::lower_tier(worker_config cfg, tier_traits traits)
    : name_(cfg.name), traits_(std::move(traits)), ticks_(cfg.tick_s > 0), worker_(*this, std::move(cfg)) {}

lower_tier::~lower_tier() {
    worker_.stop();  // normally done by the derived destructor already
}

void lower_tier::write(tier_write w) {
    if (!worker_.write(std::move(w))) {
        write_dropped();
    }
}

std::future<tier_load_result> lower_tier::load(copy_id id, tier_expect want, std::function<void()> on_done) {
    return worker_.load(id, std::move(want), std::move(on_done));
}

void lower_tier::remove(std::vector<copy_id> ids) {
    worker_.remove(std::move(ids));
}

std::vector<tier_completion> lower_tier::take_completions() {
    return worker_.take_completions();
}

void lower_tier::drain() {
    worker_.drain(/*tick_first=*/ticks_);
}

std::pair<int64_t, uint64_t> lower_tier::reset(const std::optional<std::string> & tenant) {
    return worker_.reset(tenant);
}

}  // namespace lineage::cache
