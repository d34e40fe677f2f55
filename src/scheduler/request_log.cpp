// scheduler::request_log: recent requests and outcome buckets (request_log.h).
#include "scheduler/request_log.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace lineage::scheduler {

void outcome_counts::add(const request_record & r) {
    requests++;
    tokens_restored += std::max(0, r.cached_tokens);
    tokens_computed += std::max(0, r.prefilled_tokens);
    if (r.miss_cause == "bypassed") {
        misses_by_cause[r.miss_cause]++;
    } else if (r.cached_tokens > 0) {
        hits++;
        hits_by_kind[r.hit_kind]++;
        if (!r.miss_cause.empty()) {
            short_hits_by_cause[r.miss_cause]++;
        }
    } else {
        misses++;
        misses_by_cause[r.miss_cause.empty() ? "unclassified" : r.miss_cause]++;
    }
}

void outcome_counts::add(const outcome_counts & o) {
    requests += o.requests;
    hits += o.hits;
    misses += o.misses;
    tokens_restored += o.tokens_restored;
    tokens_computed += o.tokens_computed;
    for (const auto & [k, n] : o.hits_by_kind) {
        hits_by_kind[k] += n;
    }
    for (const auto & [k, n] : o.misses_by_cause) {
        misses_by_cause[k] += n;
    }
    for (const auto & [k, n] : o.short_hits_by_cause) {
        short_hits_by_cause[k] += n;
    }
}

request_log::request_log(size_t max_recent, int64_t bucket_s, int64_t window_s)
    : max_recent_(max_recent), bucket_s_(bucket_s), window_s_(window_s) {
    if (max_recent < 1 || bucket_s < 1 || window_s < bucket_s || window_s % bucket_s != 0) {
        throw std::invalid_argument("request_log: max_recent >= 1, bucket_s >= 1, window_s a multiple of bucket_s");
    }
}

int64_t request_log::bucket_of(double t) const {
    const auto s = static_cast<int64_t>(std::floor(t));
    return s - (((s % bucket_s_) + bucket_s_) % bucket_s_);
}

void request_log::record(request_record r) {
    const int64_t start = bucket_of(r.at_s);
    util::lock_guard lk(mu_);
    // Buckets are kept ascending; a record that ends out of order (a clock step back) goes to
    // its own bucket wherever it sits.
    auto it = std::lower_bound(buckets_.begin(), buckets_.end(), start,
                               [](const bucket & b, int64_t s) { return b.start_s < s; });
    if (it == buckets_.end() || it->start_s != start) {
        it = buckets_.insert(it, bucket{.start_s = start, .by_tenant = {}});
    }
    it->by_tenant[r.tenant].add(r);
    const int64_t oldest = buckets_.back().start_s - window_s_ + bucket_s_;
    while (!buckets_.empty() && buckets_.front().start_s < oldest) {
        buckets_.pop_front();
    }
    recent_.push_front(std::move(r));
    if (recent_.size() > max_recent_) {
        recent_.pop_back();
    }
}

request_log_snapshot request_log::snapshot(const std::string * tenant, double now_s) const {
    request_log_snapshot out;
    out.bucket_s = bucket_s_;
    const int64_t last = bucket_of(now_s);
    const int64_t first = last - window_s_ + bucket_s_;
    for (int64_t s = first; s <= last; s += bucket_s_) {
        out.buckets.push_back(outcome_bucket{.start_s = s, .counts = {}});
    }
    util::lock_guard lk(mu_);
    for (const auto & r : recent_) {
        if (!tenant || r.tenant == *tenant) {
            out.recent.push_back(r);
        }
    }
    for (const auto & b : buckets_) {
        if (b.start_s < first || b.start_s > last) {
            continue;
        }
        auto & counts = out.buckets[static_cast<size_t>((b.start_s - first) / bucket_s_)].counts;
        for (const auto & [name, c] : b.by_tenant) {
            if (!tenant || name == *tenant) {
                counts.add(c);
            }
        }
    }
    return out;
}

}  // namespace lineage::scheduler
