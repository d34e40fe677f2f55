// server::prometheus: GET /metrics in the Prometheus text exposition format (version 0.0.4).
// The values come from their owners: the cache's counters and gauges from cache::stats, the
// per-request counters and histograms from scheduler::metrics_snapshot (a metric is owned by
// the component that does the work), each described once by its owner (cache/figure.h,
// scheduler::metric_figure: name after the prefix, HELP, labels); this file names none of them:
// it adds the prefix (lineage_prompt_cache_, lineage_), writes the HELP and TYPE lines and
// formats them.
// docs/prompt-cache.md "GET /metrics (Prometheus)" lists them.
// Thread safety: pure functions and a value-type writer.
#pragma once

#include "cache/stats.h"
#include "scheduler/metrics.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace lineage::server {

/** Content-Type of the text exposition format. */
inline constexpr const char * prometheus_content_type = "text/plain; version=0.0.4; charset=utf-8";

/** Writes metric families in the order they are added: "# HELP", "# TYPE", then the samples.
 *  Label values and HELP text are escaped as the format requires (\\, \", \n). */
class exposition {
public:
    using labelled = std::vector<std::pair<std::string, double>>;  ///< label value -> sample value

    void counter(const std::string & name, const std::string & help, double v);
    void gauge(const std::string & name, const std::string & help, double v);
    /** One family with one sample per value of label `label`, in the order given. */
    void counter(const std::string & name, const std::string & help, const std::string & label, const labelled & vs);
    void gauge(const std::string & name, const std::string & help, const std::string & label, const labelled & vs);
    /** An info-style gauge: one sample of value 1 carrying `labels`. */
    void info(const std::string & name, const std::string & help,
              const std::vector<std::pair<std::string, std::string>> & labels);
    void histogram(const std::string & name, const std::string & help, const scheduler::histogram & h);

    const std::string & text() const { return out_; }

private:
    void header(const std::string & name, const std::string & help, const char * type);
    void sample(const std::string & name, const std::string & labels, double v);

    std::string out_;
};

/** Sample value text: integers without a fraction ("42"), others in the shortest form that
 *  reads back exactly ("0.0025"), "+Inf"/"-Inf"/"NaN". */
std::string format_value(double v);

/** `known` keys in order, each with its value in `m` (0 when absent), then any other key of
 *  `m` in its order: so a series exists (at 0) before its first event, and a new reason
 *  still shows up. */
template <class V>
exposition::labelled with_known(const std::map<std::string, V> & m, const std::vector<std::string> & known) {
    exposition::labelled out;
    for (const auto & k : known) {
        auto it = m.find(k);
        out.emplace_back(k, it == m.end() ? 0.0 : static_cast<double>(it->second));
    }
    for (const auto & [k, v] : m) {
        bool listed = false;
        for (const auto & x : known) {
            listed = listed || x == k;
        }
        if (!listed) {
            out.emplace_back(k, static_cast<double>(v));
        }
    }
    return out;
}

/** The whole GET /metrics body. */
std::string render_metrics(const cache::stats & cs, const scheduler::metrics_snapshot & ms);

}  // namespace lineage::server
