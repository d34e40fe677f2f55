// server::prometheus: names, HELP text and formatting of GET /metrics.
#include "server/ops/prometheus.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <variant>

namespace lineage::server {

namespace {

std::string escape(const std::string & s, bool quote) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        if (c == '\\') {
            out += "\\\\";
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '"' && quote) {
            out += "\\\"";
        } else {
            out += c;
        }
    }
    return out;
}

std::string label(const std::string & name, const std::string & value) {
    return name + "=\"" + escape(value, true) + "\"";
}

/** Figures as metric families <prefix><metric> (cache/figure.h stat_figure): each metric where its
 *  first figure comes, its series (an info metric's labels) in order; figures without a metric
 *  are JSON only. */
void figure_metrics(exposition & x, const std::string & prefix, const std::vector<cache::stat_figure> & figures) {
    const auto number = [](const cache::stat_figure::value_type & v) {
        return std::visit(
            [](const auto & a) -> double {
                using V = std::decay_t<decltype(a)>;
                if constexpr (std::is_same_v<V, bool>) {
                    return a ? 1.0 : 0.0;
                } else if constexpr (std::is_arithmetic_v<V>) {
                    return static_cast<double>(a);
                } else {
                    return 0.0;  // strings and maps are not one number (maps are handled below)
                }
            },
            v);
    };
    const auto text = [](const cache::stat_figure::value_type & v) {
        return std::visit(
            [](const auto & a) -> std::string {
                using V = std::decay_t<decltype(a)>;
                if constexpr (std::is_same_v<V, bool>) {
                    return a ? "true" : "false";
                } else if constexpr (std::is_same_v<V, std::string>) {
                    return a;
                } else if constexpr (std::is_arithmetic_v<V>) {
                    return format_value(static_cast<double>(a));
                } else {
                    return "";  // a map is not one label value
                }
            },
            v);
    };
    std::vector<std::string> done;
    for (size_t i = 0; i < figures.size(); ++i) {
        const cache::stat_figure & f = figures[i];
        if (f.metric.empty() || std::find(done.begin(), done.end(), f.metric) != done.end()) {
            continue;
        }
        done.push_back(f.metric);
        const std::string name = prefix + f.metric;
        if (f.metric == "info") {
            std::vector<std::pair<std::string, std::string>> labels;
            for (size_t k = i; k < figures.size(); ++k) {
                if (figures[k].metric == f.metric) {
                    labels.emplace_back(figures[k].label, text(figures[k].value));
                }
            }
            x.info(name, f.help, labels);
            continue;
        }
        const bool counter = name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0;
        exposition::labelled series;
        if (const auto * m = std::get_if<std::map<std::string, int64_t>>(&f.value)) {
            series = with_known(*m, f.known);
        } else if (!f.label.empty()) {
            for (size_t k = i; k < figures.size(); ++k) {
                if (figures[k].metric == f.metric) {
                    series.emplace_back(figures[k].series, number(figures[k].value));
                }
            }
        } else {
            if (counter) {
                x.counter(name, f.help, number(f.value));
            } else {
                x.gauge(name, f.help, number(f.value));
            }
            continue;
        }
        if (counter) {
            x.counter(name, f.help, f.label, series);
        } else {
            x.gauge(name, f.help, f.label, series);
        }
    }
}

/** The scheduler's figures as metric families lineage_<metric>, in order: each run of figures
 *  as figure_metrics writes them (a metric's series stay within one run), each histogram where
 *  it comes. */
void scheduler_metrics(exposition & x, const std::vector<scheduler::metric_figure> & figures) {
    std::vector<cache::stat_figure> run;
    for (const auto & f : figures) {
        if (!f.hist) {
            run.push_back(f.figure);
            continue;
        }
        figure_metrics(x, "lineage_", run);
        run.clear();
        x.histogram("lineage_" + f.figure.metric, f.figure.help, *f.hist);
    }
    figure_metrics(x, "lineage_", run);
}

/** One tier's figures as metric families lineage_prompt_cache_<tier>_<metric>: its hits first. */
void tier_metrics(exposition & x, const cache::tier_report & t, int64_t hits) {
    const std::string prefix = "lineage_prompt_cache_" + t.name + "_";
    x.counter(prefix + "hits_total", t.hits_help, static_cast<double>(hits));
    figure_metrics(x, prefix, t.figures);
}

}  // namespace

std::string format_value(double v) {
    if (std::isnan(v)) {
        return "NaN";
    }
    if (std::isinf(v)) {
        return v > 0 ? "+Inf" : "-Inf";
    }
    if (v == std::floor(v) && std::fabs(v) < 1e15) {
        return fmt::format("{}", static_cast<int64_t>(v));
    }
    return fmt::format("{}", v);
}

void exposition::header(const std::string & name, const std::string & help, const char * type) {
    out_ += "# HELP " + name + " " + escape(help, false) + "\n";
    out_ += "# TYPE " + name + " " + type + "\n";
}

void exposition::sample(const std::string & name, const std::string & labels, double v) {
    out_ += name;
    if (!labels.empty()) {
        out_ += "{" + labels + "}";
    }
    out_ += " " + format_value(v) + "\n";
}

void exposition::counter(const std::string & name, const std::string & help, double v) {
    header(name, help, "counter");
    sample(name, "", v);
}

void exposition::gauge(const std::string & name, const std::string & help, double v) {
    header(name, help, "gauge");
    sample(name, "", v);
}

void exposition::counter(const std::string & name, const std::string & help, const std::string & lbl,
                         const labelled & vs) {
    header(name, help, "counter");
    for (const auto & [value, v] : vs) {
        sample(name, label(lbl, value), v);
    }
}

void exposition::gauge(const std::string & name, const std::string & help, const std::string & lbl,
                       const labelled & vs) {
    header(name, help, "gauge");
    for (const auto & [value, v] : vs) {
        sample(name, label(lbl, value), v);
    }
}

void exposition::info(const std::string & name, const std::string & help,
                      const std::vector<std::pair<std::string, std::string>> & labels) {
    header(name, help, "gauge");
    std::string ls;
    for (const auto & [k, v] : labels) {
        ls += (ls.empty() ? "" : ",") + label(k, v);
    }
    sample(name, ls, 1);
}

void exposition::histogram(const std::string & name, const std::string & help, const scheduler::histogram & h) {
    header(name, help, "histogram");
    const auto cum = h.cumulative();
    for (size_t i = 0; i < h.bounds().size(); ++i) {
        sample(name + "_bucket", label("le", format_value(h.bounds()[i])), static_cast<double>(cum[i]));
    }
    sample(name + "_bucket", label("le", "+Inf"), static_cast<double>(h.count()));
    sample(name + "_sum", "", h.sum());
    sample(name + "_count", "", static_cast<double>(h.count()));
}

std::string render_metrics(const cache::stats & cs, const scheduler::metrics_snapshot & ms) {
    exposition x;
    // --- prompt cache, as it describes itself (owner: cache::store; cache::stats::describe) ---
    figure_metrics(x, "lineage_prompt_cache_", cs.describe());

    // --- the state buffer pool, as it describes itself (owner: cache::blob_pool) ---
    figure_metrics(x, "lineage_prompt_cache_", cs.buffer_pool.describe());

    // --- each tier below RAM, as it describes itself (owner: the tier; cache::tier_report) ---
    for (const auto & t : cs.tiers) {
        tier_metrics(x, t, cs.hits_of_tier(t.name));
    }

    // --- warm-ups of the next turn, as they describe themselves (owners: scheduler for runs,
    // cache::store for hits; cache::warmup_stats::describe) ---
    figure_metrics(x, "lineage_prompt_cache_", cs.warmup.describe());

    // --- requests, their phases and the preparation on the HTTP threads, as the scheduler
    // describes them (owners: scheduler for requests, its warm-up queue for warm-ups;
    // scheduler::metrics_snapshot::describe) ---
    scheduler_metrics(x, ms.describe(cs.warmup));
    return x.text();
}

}  // namespace lineage::server
