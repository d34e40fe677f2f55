// scheduler::metrics: what the engine thread measures per request, for GET /metrics: requests
// by finish reason, prompt / prefilled / completion token counters, and histograms of TTFT and
// of each phase of a request (queue, lookup, restore, prefill, capture, commit), in seconds.
// Owned by the scheduler, the component that does the work; the cache's own counters are in
// cache::stats. The snapshot describes its figures once (metrics_snapshot::describe, as
// cache/figure.h does for the cache's) for both GET /metrics and GET /v1/cache/stats.
// Engine-agnostic (no llama.h).
// Thread safety: `metrics` may be used from any thread (one mutex, held for a few dozen
// additions per finished request); `histogram` and `metrics_snapshot` are plain values.
#pragma once

#include "cache/figure.h"
#include "cache/stats.h"
#include "scheduler/request.h"
#include "util/thread_annotations.h"

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace lineage::scheduler {

/** A histogram with fixed upper bounds, Prometheus semantics: a value v counts in every bucket
 *  whose bound `le` satisfies v <= le; the implicit +Inf bucket counts every value. */
class histogram {
public:
    /** REQUIRES: `bounds` finite and strictly ascending. */
    explicit histogram(std::vector<double> bounds);

    void observe(double v);

    const std::vector<double> & bounds() const { return bounds_; }
    /** Cumulative counts: one per bound, then +Inf (== count()). */
    std::vector<uint64_t> cumulative() const;
    uint64_t count() const { return count_; }
    double sum() const { return sum_; }

private:
    std::vector<double> bounds_;
    std::vector<uint64_t> counts_;  // per bucket, not cumulative; bounds_.size() + 1 (last: > every bound)
    uint64_t count_ = 0;
    double sum_ = 0;
};

/** Bucket bounds for request phases, seconds: 1 ms to 60 s in 1-2.5-5 steps. A restore from
 *  the device or a checkpoint capture takes milliseconds; a cold prefill of a 10k-token system
 *  prompt takes ~20 s on a large model. */
const std::vector<double> & phase_seconds_buckets();

/** The phases a request's time is split into (request_stats), in exposition order. */
enum class phase : uint8_t { ttft, queue, lookup, restore, prefill, capture, commit };
inline constexpr std::array<phase, 7> all_phases = {phase::ttft,    phase::queue,   phase::lookup, phase::restore,
                                                    phase::prefill, phase::capture, phase::commit};
const char * to_string(phase p);

/** One figure of the scheduler's metrics (metrics_snapshot::describe), described once for
 *  GET /metrics and GET /v1/cache/stats: `figure` as the cache's are (cache/figure.h: its JSON
 *  key, "" for /metrics only; its metric name after "lineage_", HELP text and labels); with
 *  `hist`, a histogram instead, /metrics only, named figure.metric with HELP figure.help. */
struct metric_figure {
    cache::stat_figure figure;
    std::optional<histogram> hist;
};

/** A consistent copy of the counters. */
struct metrics_snapshot {
    /** Finish reasons /metrics always lists (lineage_requests_total), 0 before the first. */
    static inline const std::vector<std::string> finish_reasons = {"stop", "length", "cancelled", "error"};
    /** Restore points a prefill is split at (cache::point_kind; reply checkpoints split
     *  nothing), always listed (lineage_prefill_splits_total, "prefill.splits"), 0 before the
     *  first. */
    static inline const std::vector<std::string> split_kinds = {"turn",       "guard",  "anchor",
                                                                "divergence", "ladder", "message"};
    /** Requests that ended, by finish reason: stop, length, cancelled, error (all present). */
    std::map<std::string, uint64_t> requests;
    uint64_t prompt_tokens = 0;            ///< prompt tokens of the requests that ended
    uint64_t prompt_tokens_prefilled = 0;  ///< of those, computed by the engine (not restored)
    uint64_t completion_tokens = 0;
    /** Forward passes the prefills of the requests that ended took, and of those the passes cut
     *  short at a restore point, by capture kind (request_stats::prefill_splits_by_kind). */
    uint64_t prefill_passes = 0;
    std::map<std::string, uint64_t> prefill_splits;
    /** Requests whose sequence was moved next to a running request's before the prefill (a
     *  state copy that makes their decode steps one micro-batch: request_stats::moved_tokens),
     *  and the tokens those copies held. */
    uint64_t sequence_moves = 0;
    uint64_t sequence_moved_tokens = 0;
    /** Chat-template renders and tokenizer passes the HTTP threads spent preparing the requests
     *  that ended (request_stats::prepared; warm-ups: cache::warmup_stats). */
    uint64_t prepare_renders = 0;
    uint64_t prepare_tokenizations = 0;
    /** Seconds per request, by phase (index: static_cast<size_t>(phase)). Observed for:
     *  ttft: requests that sampled a first token; queue: every request admitted; lookup,
     *  capture, commit: requests that used the cache; restore: requests that restored >= 1
     *  token (hits); prefill: requests that prefilled >= 1 token. */
    std::vector<histogram> phases;
    /** Per tenant (cache_hints::tenant; requests without one are not listed): requests ended,
     *  their prompt tokens, of those restored from the cache, and completion tokens. */
    struct tenant_counts {
        uint64_t requests = 0;
        uint64_t prompt_tokens = 0;
        uint64_t cached_tokens = 0;
        uint64_t completion_tokens = 0;
    };
    std::map<std::string, tenant_counts> tenants;

    metrics_snapshot();
    const histogram & of(phase p) const { return phases[static_cast<size_t>(p)]; }

    /** The figures, in /metrics order (lineage_<metric>): requests by finish reason, the token
     *  counters, prefill passes and splits (JSON "prefill"), sequence moves (JSON
     *  "sequence_moves"), the phase histograms (seconds), then the renders and tokenizations of
     *  preparation (JSON "prepare"), by origin: request (these), warmup (`warmup`'s, the
     *  warm-up jobs received; their JSON is the warm-ups' own). The tenants' counts are not
     *  among them (GET /v1/cache/stats per tenant only). */
    std::vector<metric_figure> describe(const cache::warmup_stats & warmup) const;
};

class metrics {
public:
    /** Records one request that ended (its done or error event); `used_cache`: it read the
     *  cache (cache on and cache_prompt true); `tenant`: its API key's tenant ("": none). */
    void record(const request_stats & st, finish_reason why, bool used_cache, const std::string & tenant = {});

    metrics_snapshot snapshot() const;

private:
    void observe(phase p, double v) REQUIRES(mu_);

    mutable util::mutex mu_;
    metrics_snapshot m_ GUARDED_BY(mu_);
};

}  // namespace lineage::scheduler
