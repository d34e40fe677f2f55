// cache::stat_figure: one figure of a stats struct, described once for GET /v1/cache/stats and
// GET /metrics (server/ops/stats_json.cpp and prometheus.cpp read it; neither names the figure).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace lineage::cache {

/** One figure of a stats struct (a tier below RAM, the warm-ups, the buffer pool), described once,
 *  by its owner, for both readers (docs/prompt-cache.md "`GET /v1/cache/stats`", "GET /metrics
 *  (Prometheus)"): GET /v1/cache/stats shows every figure under `key` in its owner's object, in
 *  order; GET /metrics shows those with a `metric`. */
struct stat_figure {
    using value_type = std::variant<bool, int64_t, uint64_t, double, std::string, std::map<std::string, int64_t>>;
    std::string key;
    value_type value;
    /** "" for JSON only; else the metric's name after its owner's prefix: a tier's figures are
     *  lineage_prompt_cache_<tier>_<metric>, the warm-ups' and the buffer pool's
     *  lineage_prompt_cache_<metric> (a counter when it ends in "_total", else a gauge; a bool reads
     *  1 or 0). Figures of one metric are its series, listed in the order they come, the family
     *  where its first one comes. */
    std::string metric;
    std::string help;                ///< the metric's HELP text (its first figure's)
    /** A map: the label its keys go under. A scalar that is one series of a labelled metric: that
     *  label, and `series` its value. */
    std::string label;
    std::string series;
    /** A map: the keys always listed first, 0 before their first event; then any other key. */
    std::vector<std::string> known;
};

/** A figure with `key` and value `v`; with `metric` (and its `help`), also on /metrics. */
inline stat_figure figure(std::string key, stat_figure::value_type v, std::string metric = {}, std::string help = {}) {
    stat_figure f;
    f.key = std::move(key);
    f.value = std::move(v);
    f.metric = std::move(metric);
    f.help = std::move(help);
    return f;
}

/** A map figure, on /metrics one series per key under `label`, the `known` keys always listed. */
inline stat_figure figure_map(std::string key, std::map<std::string, int64_t> v, std::string metric, std::string help,
                              std::string label, std::vector<std::string> known) {
    stat_figure f = figure(std::move(key), std::move(v), std::move(metric), std::move(help));
    f.label = std::move(label);
    f.known = std::move(known);
    return f;
}

/** A scalar figure that is the series `label`="`series`" of `metric` (its other series are the
 *  figures of the same metric after it). */
inline stat_figure figure_series(std::string key, stat_figure::value_type v, std::string metric, std::string help,
                                 std::string label, std::string series) {
    stat_figure f = figure(std::move(key), std::move(v), std::move(metric), std::move(help));
    f.label = std::move(label);
    f.series = std::move(series);
    return f;
}

}  // namespace lineage::cache
