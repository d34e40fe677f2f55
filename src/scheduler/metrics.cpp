// scheduler::metrics: histograms and per-request counters.
#include "scheduler/metrics.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

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

namespace {

/** A figure both outputs read as the cache's (no histogram). */
metric_figure stat(cache::stat_figure f) {
    return {std::move(f), std::nullopt};
}

/** The histogram `h` as the metric lineage_<metric> (/metrics only). */
metric_figure histogram_figure(std::string metric, std::string help, const histogram & h) {
    return {cache::figure("", int64_t{0}, std::move(metric), std::move(help)), h};
}

}  // namespace

std::vector<metric_figure> metrics_snapshot::describe(const cache::warmup_stats & warmup) const {
    using cache::figure;
    using cache::figure_map;
    using cache::figure_series;
    using cache::signed_map;
    return {
        stat(figure_map("", signed_map(requests), "requests_total",
                        "Requests that ended, by finish reason (stop, length, cancelled, error).", "finish_reason",
                        finish_reasons)),
        stat(figure("", prompt_tokens, "prompt_tokens_total", "Prompt tokens of the requests that ended.")),
        stat(figure("", prompt_tokens_prefilled, "prompt_tokens_prefilled_total",
                    "Prompt tokens the engine computed (not restored from the cache), of the requests that ended.")),
        stat(figure("", completion_tokens, "completion_tokens_total", "Tokens generated, of the requests that ended.")),
        stat(figure("prefill.passes", prefill_passes, "prefill_passes_total",
                    "Forward passes (llama_decode calls) the prefills of the requests that ended took part in.")),
        stat(figure_map("prefill.splits", signed_map(prefill_splits), "prefill_splits_total",
                        "Of those passes, the ones cut short at a restore point the cache captures, by its kind: each "
                        "is one more read of all the weights.",
                        "kind", split_kinds)),
        stat(figure("sequence_moves.moves", sequence_moves, "sequence_moves_total",
                    "Requests whose restored sequence was copied to an id next to a running request's, so that their "
                    "decode steps run as one micro-batch (--place-sequences).")),
        stat(figure("sequence_moves.tokens", sequence_moved_tokens, "sequence_moved_tokens_total",
                    "Tokens of the states those moves copied.")),
        histogram_figure("time_to_first_token_seconds", "Seconds from the request's arrival to its first sampled token.",
                         of(phase::ttft)),
        histogram_figure("request_queue_seconds", "Seconds a request waited for a free slot.", of(phase::queue)),
        histogram_figure("request_lookup_seconds", "Seconds to plan the restore (requests that used the cache).",
                         of(phase::lookup)),
        histogram_figure("request_restore_seconds", "Seconds to put the restore point in place (hits only).",
                         of(phase::restore)),
        histogram_figure("request_prefill_seconds",
                         "Seconds in the forward passes of the prompt's uncached tokens (batch steps shared with other "
                         "requests count in full).",
                         of(phase::prefill)),
        histogram_figure("request_capture_seconds",
                         "Seconds taking checkpoints and anchors during the prefill (requests that used the cache).",
                         of(phase::capture)),
        histogram_figure("request_commit_seconds",
                         "Seconds storing the finished sequence in the cache (requests that used the cache).",
                         of(phase::commit)),
        // Preparation on the HTTP threads (owners: the scheduler for requests, its warm-up queue
        // for warm-ups; the per-request figures come from server::chat_preparer).
        stat(figure_series("prepare.renders", prepare_renders, "prepare_renders_total",
                           "Chat-template renders of a conversation or a prefix of it on the HTTP threads, by origin: "
                           "request (the requests that ended), warmup (the warm-up jobs received).",
                           "origin", "request")),
        stat(figure_series("", warmup.renders, "prepare_renders_total", "", "origin", "warmup")),
        stat(figure_series("prepare.tokenizations", prepare_tokenizations, "prepare_tokenizations_total",
                           "Tokenizer passes over a rendered conversation or a prefix of it on the HTTP threads, by "
                           "origin: request (the requests that ended), warmup (the warm-up jobs received).",
                           "origin", "request")),
        stat(figure_series("", warmup.tokenizations, "prepare_tokenizations_total", "", "origin", "warmup")),
    };
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
