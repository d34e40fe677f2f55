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

/** One figure of a stats struct (the cache's own counters, a tier below RAM, the warm-ups, the
 *  buffer pool), described once, by its owner, for both readers (docs/prompt-cache.md "`GET
 *  /v1/cache/stats`", "GET /metrics (Prometheus)"): GET /v1/cache/stats shows every figure with
 *  a `key` in its owner's object, in order; GET /metrics shows those with a `metric`. */
struct stat_figure {
    using value_type = std::variant<bool, int64_t, uint64_t, double, std::string, std::map<std::string, int64_t>>;
    /** Its JSON key; "a.b" is key b of the object under a (made where its first figure comes); ""
     *  for /metrics only (a sum of a map the JSON shows). */
    std::string key;
    value_type value;
    /** "" for JSON only; else the metric's name after its owner's prefix: a tier's figures are
     *  lineage_prompt_cache_<tier>_<metric>, the others lineage_prompt_cache_<metric> (a counter
     *  when it ends in "_total", an info gauge when it is "info", else a gauge; a bool reads 1 or
     *  0). Figures of one metric are its series (an info's: its labels), listed in the order they
     *  come, the family where its first one comes. */
    std::string metric;
    std::string help;                ///< the metric's HELP text (its first figure's)
    /** A map: the label its keys go under. A scalar that is one series of a labelled metric: that
     *  label, and `series` its value. A figure of an info metric: the label its value goes under. */
    std::string label;
    std::string series;
    /** A map: the keys always listed first, 0 before their first event; then any other key. */
    std::vector<std::string> known;
    /** A map: whether the JSON lists the `known` keys too (false: the map as it is, e.g. bytes
     *  by tier, where a tier that is off has no key). /metrics always does. */
    bool known_in_json = true;
};

/** A map of unsigned counts (bytes, events: they stay below 2^63) as a map figure's value. */
inline std::map<std::string, int64_t> signed_map(const std::map<std::string, uint64_t> & m) {
    std::map<std::string, int64_t> out;
    for (const auto & [k, v] : m) {
        out[k] = static_cast<int64_t>(v);
    }
    return out;
}

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

/** A map figure whose JSON is the map as it is (no key at 0 before its first event); on /metrics
 *  as figure_map. */
inline stat_figure figure_map_as_held(std::string key, std::map<std::string, int64_t> v, std::string metric,
                                      std::string help, std::string label, std::vector<std::string> known) {
    stat_figure f = figure_map(std::move(key), std::move(v), std::move(metric), std::move(help), std::move(label),
                               std::move(known));
    f.known_in_json = false;
    return f;
}

/** A figure that is the label `label` of the info metric `metric` (value 1; its text the label's
 *  value: a bool reads true or false). */
inline stat_figure figure_info(std::string key, stat_figure::value_type v, std::string metric, std::string help,
                               std::string label) {
    stat_figure f = figure(std::move(key), std::move(v), std::move(metric), std::move(help));
    f.label = std::move(label);
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
