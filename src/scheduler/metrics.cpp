// scheduler::metrics: histograms and per-request counters.
#include "scheduler/metrics.h"

#include <algorithm>
#include <stdexcept>

namespace lineage::scheduler {

histogram::histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
    for (size_t i = 1; i < bounds_.size(); ++i) {
        if (!(bounds_[i - 1] < bounds_[i])) {
            throw std::invalid_argument("histogram bounds must ascend strictly");
        }
    }
}

void histogram::observe(double v) {
    // First bound >= v: v <= le (a value on a bound counts in that bucket).
    const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), v);
    counts_[static_cast<size_t>(it - bounds_.begin())]++;
    count_++;
    sum_ += v;
}

std::vector<uint64_t> histogram::cumulative() const {
    std::vector<uint64_t> out(counts_.size());
    uint64_t acc = 0;
    for (size_t i = 0; i < counts_.size(); ++i) {
        acc += counts_[i];
        out[i] = acc;
    }
    return out;
}

const std::vector<double> & phase_seconds_buckets() {
    static const std::vector<double> b = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                          0.5,   1,      2.5,   5,    10,    30,   60};
    return b;
}

const char * to_string(phase p) {
    switch (p) {
        case phase::ttft: return "ttft";
        case phase::queue: return "queue";
        case phase::lookup: return "lookup";
        case phase::restore: return "restore";
        case phase::prefill: return "prefill";
        case phase::capture: return "capture";
        case phase::commit: return "commit";
    }
    return "?";
}

metrics_snapshot::metrics_snapshot() {
    for (auto r : {finish_reason::stop, finish_reason::length, finish_reason::cancelled, finish_reason::error}) {
        requests[to_string(r)] = 0;
    }
    phases.assign(all_phases.size(), histogram(phase_seconds_buckets()));
}

void metrics::record(const request_stats & st, finish_reason why, bool used_cache, const std::string & tenant) {
    util::lock_guard lk(mu_);
    if (!tenant.empty()) {
        auto & t = m_.tenants[tenant];
        t.requests++;
        t.prompt_tokens += static_cast<uint64_t>(std::max(0, st.prompt_tokens));
        t.cached_tokens += static_cast<uint64_t>(std::max(0, st.cached_tokens));
        t.completion_tokens += static_cast<uint64_t>(std::max(0, st.completion_tokens));
    }
    m_.requests[to_string(why)]++;
    m_.prompt_tokens += static_cast<uint64_t>(std::max(0, st.prompt_tokens));
    m_.prompt_tokens_prefilled += static_cast<uint64_t>(std::max(0, st.prefilled_tokens));
    m_.completion_tokens += static_cast<uint64_t>(std::max(0, st.completion_tokens));
    m_.prefill_passes += static_cast<uint64_t>(std::max(0, st.prefill_passes));
    if (st.moved_tokens >= 0) {
        m_.sequence_moves++;
        m_.sequence_moved_tokens += static_cast<uint64_t>(st.moved_tokens);
    }
    for (const auto & [kind, n] : st.prefill_splits_by_kind) {
        m_.prefill_splits[kind] += static_cast<uint64_t>(std::max(0, n));
    }
    m_.prepare_renders += static_cast<uint64_t>(std::max(0, st.prepared.renders));
    m_.prepare_tokenizations += static_cast<uint64_t>(std::max(0, st.prepared.tokenizations));
    if (st.ttft_s > 0) {
        observe(phase::ttft, st.ttft_s);
    }
    observe(phase::queue, st.queue_s);
    if (used_cache) {
        observe(phase::lookup, st.lookup_s);
        observe(phase::capture, st.capture_s);
        observe(phase::commit, st.commit_s);
    }
    if (st.cached_tokens > 0) {
        observe(phase::restore, st.restore_s);
    }
    if (st.prefilled_tokens > 0) {
        observe(phase::prefill, st.prefill_s);
    }
}

void metrics::observe(phase p, double v) {
    m_.phases[static_cast<size_t>(p)].observe(v);
}

metrics_snapshot metrics::snapshot() const {
    util::lock_guard lk(mu_);
    return m_;
}

}  // namespace lineage::scheduler
