// server::stats_json: the JSON of GET /v1/cache/stats.
#include "server/ops/stats_json.h"

#include "server/ops/prometheus.h"

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

/** Each of `figures` under its key in `into`, in order (a map as known_json lists it). */
void add_figures(json & into, const std::vector<cache::stat_figure> & figures) {
    for (const auto & f : figures) {
        std::visit(
            [&](const auto & v) {
                using V = std::decay_t<decltype(v)>;
                if constexpr (std::is_same_v<V, std::map<std::string, int64_t>>) {
                    into[f.key] = known_json(v, f.known);
                } else {
                    into[f.key] = v;
                }
            },
            f.value);
    }
}

}  // namespace

json stats_json(const cache::stats & s) {
    json j = json::object();
    j["enabled"] = s.enabled;
    j["mode"] = s.mode;
    j["family"] = s.family;
    j["entries"] = s.entries;
    j["anchors"] = s.anchors;
    j["anchor_bytes"] = s.anchor_bytes;
    j["checkpoints"] = map_json(s.checkpoints);
    j["checkpoint_bytes"] = map_json(s.checkpoint_bytes);
    j["bytes"] = map_json(s.bytes);
    j["largest_lineage"] = {{"bytes", s.largest_lineage.bytes},
                            {"checkpoints", s.largest_lineage.checkpoints},
                            {"message_rungs", s.largest_lineage.message_rungs},
                            {"reply_checkpoints", s.largest_lineage.reply_checkpoints}};
    j["budget_bytes"] = s.budget_bytes;
    j["lookups"] = s.lookups;
    j["misses"] = s.misses;
    j["hits"] = known_json(s.hits, known_keys::restore_kinds);
    j["tokens_reused"] = s.tokens_reused;
    j["cross_template_hits"] = s.cross_template_hits;
    j["live_hits"] = s.live_hits;
    j["prefix_holds"] = s.prefix_holds;
    j["tokens_prefilled"] = s.tokens_prefilled;
    j["rejections"] = known_json(s.rejections, known_keys::rejection_causes);
    j["misses_by_cause"] = known_json(s.misses_by_cause, known_keys::miss_causes);
    j["short_hits_by_cause"] = known_json(s.short_hits_by_cause, known_keys::miss_causes);
    j["key_differs"] = known_json(s.key_differs, known_keys::key_dimensions);
    j["ghosts"] = s.ghosts;
    j["evictions"] = known_json(s.evictions, known_keys::eviction_reasons);
    j["tier_hits"] = s.tier_hits;
    j["requests_committed"] = s.requests_committed;
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
    j["apc_enabled"] = s.apc_enabled;
    j["total_blocks_stored"] = s.total_blocks_stored;
    j["unique_block_hashes"] = s.unique_block_hashes;
    j["apc_active_entries"] = s.apc_active_entries;
    return j;
}

}  // namespace lineage::server
