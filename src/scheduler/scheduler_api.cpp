// scheduler: the public API (scheduler.h); calls that touch the engine thread's state run on
// it (run_on_engine). See scheduler_impl.h.
#include "scheduler/scheduler_impl.h"

namespace lineage::scheduler {


scheduler::scheduler(const engine::model & m, const params & p) : impl_(std::make_unique<impl>(m, p)) {}

scheduler::~scheduler() = default;

void scheduler::submit(std::shared_ptr<generation_request> req) {
    impl_->submit(std::move(req));
}

void scheduler::impl::add_warmup_stats(cache::stats & s) {
    util::lock_guard lk(mu_);
    s.warmup.queued = warmups_.received;
    s.warmup.renders = warmups_.renders;
    s.warmup.tokenizations = warmups_.tokenizations;
    s.warmup.active = std::count_if(slots_.begin(), slots_.end(),
                                    [](const slot & x) { return x.active() && x.req->warmup; });
    s.warmup.skipped["replaced"] += warmups_.replaced;
    s.warmup.skipped["queue_full"] += warmups_.dropped;
}

bool scheduler::serving() const {
    return impl_->serving_.load();
}

int32_t scheduler::max_sequence_tokens() const {
    return impl_->max_seq_tokens_;
}

std::vector<std::pair<std::string, cache::tier_state>> scheduler::readiness() const {
    return impl_->tiers_->readiness();
}

cache::stats scheduler::snapshot_stats() {
    return impl_->run_on_engine([this] {
        cache::stats s = impl_->store_.get_stats();
        impl_->add_warmup_stats(s);
        impl_->tiers_->report(s);
        return s;
    });
}

metrics_snapshot scheduler::snapshot_metrics() const {
    return impl_->metrics_.snapshot();
}

std::vector<cache::entry_view> scheduler::snapshot_entries() {
    return impl_->run_on_engine([this] { return impl_->store_.entries(); });
}

request_log_snapshot scheduler::snapshot_requests(const std::string * tenant) const {
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    return impl_->requests_.snapshot(tenant, now);
}

uint64_t scheduler::reset_epoch() const {
    return impl_->resets_.load();
}

cache::reset_result scheduler::reset_cache() {
    return impl_->run_on_engine([this] {
        impl_->last_full_reset_ = ++impl_->resets_;
        impl_->fence_reset(std::nullopt);
        auto r = impl_->store_.reset();
        impl_->pool_->drain_released();
        impl_->tiers_->reset(r, std::nullopt);
        spdlog::info("cache: reset freed {} entries, {} bytes", r.entries_freed, r.bytes_freed);
        return r;
    });
}

cache::reset_result scheduler::reset_cache_of(const std::string & tenant) {
    return impl_->run_on_engine([this, &tenant] {
        impl_->tenant_resets_[tenant] = ++impl_->resets_;
        impl_->fence_reset(tenant);
        auto r = impl_->store_.reset_if([&](const cache::key & k) { return k.tenant == tenant; });
        impl_->pool_->drain_released();
        impl_->tiers_->reset(r, tenant);
        std::string below;  // ", 3 disk copies, 2 redis copies"
        for (const auto & [name, f] : r.tiers) {
            below += fmt::format(", {} {} copies", f.copies, name);
        }
        spdlog::info("cache: reset of tenant {} freed {} entries, {} bytes{}", tenant, r.entries_freed, r.bytes_freed,
                     below);
        return r;
    });
}

util::status scheduler::reload_lora(size_t id, uint64_t epoch) {
    return impl_->run_on_engine(
        [this, id, epoch]() -> util::status {
            auto & slot_adapter = impl_->loras_.at(id);
            std::unique_ptr<engine::lora_adapter> fresh;
            try {
                fresh = std::make_unique<engine::lora_adapter>(impl_->model_, slot_adapter->path());
            } catch (const std::exception & e) {
                return util::status::error(e.what());
            }
            // The context must not point at the adapter freed below: back to the base model.
            impl_->ctx_->set_loras({}, {});
            impl_->applied_lora_.clear();
            slot_adapter = std::move(fresh);
            impl_->lora_epoch_ = epoch;
            spdlog::info("lora: adapter {} reloaded from {} (generation {})", id, slot_adapter->path(), epoch);
            return util::status::ok();
        },
        /*when_idle=*/true);
}

void scheduler::stop() {
    impl_->stop();
}

}  // namespace lineage::scheduler
