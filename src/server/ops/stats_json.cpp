// server::stats_json: the JSON of GET /v1/cache/stats.
#include "server/ops/stats_json.h"


#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace lineage::server {

namespace {

// A counter map as a JSON object: each of `known` in order (0 when absent), then any other key
// of `m` (as /metrics lists them: prometheus.h with_known).
json known_json(const std::map<std::string, int64_t> & m, const std::vector<std::string> & known) {
    json j = json::object();
    for (const auto & k : known) {
        const auto it = m.find(k);
        j[k] = it == m.end() ? int64_t{0} : it->second;
    }
    for (const auto & [k, v] : m) {
        if (!j.contains(k)) {
            j[k] = v;
        }
    }
    return j;
}

/** Each of `figures` with a key under it in `into`, in order (a map as known_json lists it, or as
 *  it is where its figure says so; "a.b" under key b of the object at a). */
void add_figures(json & into, const std::vector<cache::stat_figure> & figures) {
    for (const auto & f : figures) {
        if (f.key.empty()) {
            continue;  // /metrics only
        }
        json * at = &into;
        std::string key = f.key;
        if (const auto dot = key.find('.'); dot != std::string::npos) {
            at = &into[key.substr(0, dot)];
            key = key.substr(dot + 1);
        }
        std::visit(
            [&](const auto & v) {
                using V = std::decay_t<decltype(v)>;
                if constexpr (std::is_same_v<V, std::map<std::string, int64_t>>) {
                    (*at)[key] = known_json(v, f.known_in_json ? f.known : std::vector<std::string>{});
                } else {
                    (*at)[key] = v;
                }
            },
            f.value);
    }
}

}  // namespace

json stats_json(const cache::stats & s) {
    // The cache's own figures, as it describes them (cache::stats::describe).
    json j = json::object();
    add_figures(j, s.describe());
    // Every tier below RAM, as it describes itself (cache::tier_report): "<name>_hits", then
    // "<name>" with its figures in order.
    for (const auto & t : s.tiers) {
        j[t.name + "_hits"] = s.hits_of_tier(t.name);
        json tj = json::object();
        tj["enabled"] = t.enabled;
        add_figures(tj, t.figures);
        j[t.name] = std::move(tj);
    }
    // The warm-ups and the buffer pool, as they describe themselves (cache/figure.h).
    add_figures(j["warmup"] = json::object(), s.warmup.describe());
    add_figures(j["buffer_pool"] = json::object(), s.buffer_pool.describe());
    return j;
}

void add_scheduler_figures(json & j, const std::vector<scheduler::metric_figure> & figures) {
    std::vector<cache::stat_figure> stats;
    for (const auto & f : figures) {
        if (!f.hist) {  // a histogram is /metrics only
            stats.push_back(f.figure);
        }
    }
    add_figures(j, stats);
}

}  // namespace lineage::server
