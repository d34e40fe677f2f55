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
 *  first figure comes, its series in order; figures without a metric are JSON only. */
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
    std::vector<std::string> done;
    for (size_t i = 0; i < figures.size(); ++i) {
        const cache::stat_figure & f = figures[i];
        if (f.metric.empty() || std::find(done.begin(), done.end(), f.metric) != done.end()) {
            continue;
        }
        done.push_back(f.metric);
        const std::string name = prefix + f.metric;
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
    using scheduler::phase;
    exposition x;
    // --- prompt cache (owner: cache::store) ---
    x.info("lineage_prompt_cache_info",
           "Prompt cache configuration: enabled, mode (lineage or exact) and model family (dense or hybrid).",
           {{"enabled", cs.enabled ? "true" : "false"}, {"mode", cs.mode}, {"family", cs.family}});
    int64_t hits = 0;
    for (const auto & [kind, n] : cs.hits) {
        hits += n;
    }
    x.counter("lineage_prompt_cache_lookups_total", "Cache lookups (one per request that reads the cache).",
              static_cast<double>(cs.lookups));
    x.counter("lineage_prompt_cache_hits_total", "Lookups that restored at least one prompt token.",
              static_cast<double>(hits));
    x.counter("lineage_prompt_cache_misses_total", "Lookups that found no restore point: cold prefill.",
              static_cast<double>(cs.misses));
    x.counter("lineage_prompt_cache_restore_point_hits_total", "Hits by kind of restore point taken.", "kind",
              with_known(cs.hits, known_keys::restore_kinds));
    x.counter("lineage_prompt_cache_misses_by_cause_total",
              "Misses by cause: no_shared_prefix (a new prompt), below_min_prefix, key_differs (an entry under "
              "another key shared more), before_first_restore_point (a live entry shared more but has no restore "
              "point in reach), evicted (an evicted entry shared more: the budget), bypassed (cache_prompt false).",
              "cause", with_known(cs.misses_by_cause, known_keys::miss_causes));
    x.counter("lineage_prompt_cache_short_hits_by_cause_total",
              "Hits that restored more than 64 tokens less than the prompt shared with something seen, by cause.",
              "cause", with_known(cs.short_hits_by_cause, known_keys::miss_causes));
    x.counter("lineage_prompt_cache_key_differs_total",
              "Misses and short hits of cause key_differs, by the first key dimension that differs.", "dimension",
              with_known(cs.key_differs, known_keys::key_dimensions));
    x.gauge("lineage_prompt_cache_ghosts", "Records of evicted entries kept to classify misses (at most 1024).",
            static_cast<double>(cs.ghosts));
    x.counter("lineage_prompt_cache_prefix_tokens_reused_total",
              "Prompt tokens restored from the cache instead of prefilled.", static_cast<double>(cs.tokens_reused));
    x.counter("lineage_prompt_cache_cross_template_hits_total",
              "Hits restored from an entry rendered under another template_sig (tools, kwargs, template or "
              "tool_choice) whose tokens agree with the prompt.",
              static_cast<double>(cs.cross_template_hits));
    x.counter("lineage_prompt_cache_live_hits_total",
              "Hits restored from a running request's sequence (parallel requests on one prefix).",
              static_cast<double>(cs.live_hits));
    x.counter("lineage_prompt_cache_prefix_holds_total",
              "Requests that waited at admission for a running request to compute the prefix they share.",
              static_cast<double>(cs.prefix_holds));
    x.counter("lineage_prompt_cache_evictions_total",
              "Entries removed, by reason: lru (entry cap), ttl, capacity (RAM budget, or no RAM for a demoted "
              "device entry), superseded (a resend replaced its twin), anchor_cap, released (idle and on disk: RAM given back).",
              "reason", with_known(cs.evictions, known_keys::eviction_reasons));
    x.counter("lineage_prompt_cache_rejections_total",
              "States or entries not stored, by cause: too_large (one state exceeds the RAM budget), budget (the "
              "budget is held by pinned or in-flight states), min_prefix, disabled, anchor_too_large, abandoned (a "
              "request that had taken an entry failed).",
              "cause", with_known(cs.rejections, known_keys::rejection_causes));
    uint64_t total_bytes = 0;
    for (const auto & [tier, b] : cs.bytes) {
        total_bytes += b;
    }
    x.gauge("lineage_prompt_cache_bytes", "Bytes held by all entries, every tier.", static_cast<double>(total_bytes));
    x.gauge("lineage_prompt_cache_tier_bytes",
            "Bytes held by tier: device (parked sequences in the KV pool), ram (state blobs and checkpoints), disk "
            "(tier-2 files).",
            "tier", with_known(cs.bytes, {"device", "ram", "disk"}));
    x.gauge("lineage_prompt_cache_ram_budget_bytes",
            "Byte budget of the RAM tier (--prompt-cache-capacity-bytes on dense models, "
            "--prompt-cache-snapshot-capacity-bytes on hybrid models).",
            static_cast<double>(cs.budget_bytes));
    x.gauge("lineage_prompt_cache_entries", "Conversation entries (every tier), anchors excluded.",
            static_cast<double>(cs.entries));
    x.gauge("lineage_prompt_cache_checkpoints", "Checkpoints held, by kind.", "kind",
            with_known(cs.checkpoints, {"turn", "guard", "divergence", "ladder", "message", "reply"}));
    x.gauge("lineage_prompt_cache_checkpoint_bytes", "Bytes of the checkpoints held, by kind.", "kind",
            with_known(cs.checkpoint_bytes, {"turn", "guard", "divergence", "ladder", "message", "reply"}));
    x.gauge("lineage_prompt_cache_anchors", "Pinned system-prompt anchors.", static_cast<double>(cs.anchors));
    x.gauge("lineage_prompt_cache_anchor_bytes", "Bytes of the pinned anchors (inside the ram tier).",
            static_cast<double>(cs.anchor_bytes));
    x.gauge("lineage_prompt_cache_apc_enabled", "1 when APC block hash chains are active (dense model, --apc-enabled).",
            cs.apc_enabled ? 1.0 : 0.0);
    x.gauge("lineage_prompt_cache_apc_blocks", "APC block hashes held, summed over the entries' chains.",
            static_cast<double>(cs.total_blocks_stored));
    x.gauge("lineage_prompt_cache_apc_unique_blocks", "Distinct APC block hashes over all entries.",
            static_cast<double>(cs.unique_block_hashes));
    x.gauge("lineage_prompt_cache_apc_entries", "Entries carrying an APC block hash chain.",
            static_cast<double>(cs.apc_active_entries));

    // --- the state buffer pool, as it describes itself (owner: cache::blob_pool) ---
    figure_metrics(x, "lineage_prompt_cache_", cs.buffer_pool.describe());

    // --- every tier below RAM (owner: cache::store; a tier is listed once attached) ---
    exposition::labelled tier_hits;
    for (const auto & [name, n] : cs.tier_hits) {
        tier_hits.emplace_back(name, static_cast<double>(n));
    }
    x.counter("lineage_prompt_cache_tier_hits_total",
              "Restores served from the tiers below RAM, by tier (disk, redis).",
              "tier", tier_hits);

    // --- each tier below RAM, as it describes itself (owner: the tier; cache::tier_report) ---
    for (const auto & t : cs.tiers) {
        tier_metrics(x, t, cs.hits_of_tier(t.name));
    }

    // --- warm-ups of the next turn, as they describe themselves (owners: scheduler for runs,
    // cache::store for hits; cache::warmup_stats::describe) ---
    figure_metrics(x, "lineage_prompt_cache_", cs.warmup.describe());

    // --- requests (owner: scheduler) ---
    x.counter("lineage_requests_total", "Requests that ended, by finish reason (stop, length, cancelled, error).",
              "finish_reason", with_known(ms.requests, {"stop", "length", "cancelled", "error"}));
    x.counter("lineage_prompt_tokens_total", "Prompt tokens of the requests that ended.",
              static_cast<double>(ms.prompt_tokens));
    x.counter("lineage_prompt_tokens_prefilled_total",
              "Prompt tokens the engine computed (not restored from the cache), of the requests that ended.",
              static_cast<double>(ms.prompt_tokens_prefilled));
    x.counter("lineage_completion_tokens_total", "Tokens generated, of the requests that ended.",
              static_cast<double>(ms.completion_tokens));
    x.counter("lineage_prefill_passes_total",
              "Forward passes (llama_decode calls) the prefills of the requests that ended took part in.",
              static_cast<double>(ms.prefill_passes));
    x.counter("lineage_prefill_splits_total",
              "Of those passes, the ones cut short at a restore point the cache captures, by its kind: each is one "
              "more read of all the weights.",
              "kind", with_known(ms.prefill_splits, known_keys::split_kinds));
    x.histogram("lineage_time_to_first_token_seconds",
                "Seconds from the request's arrival to its first sampled token.", ms.of(phase::ttft));
    x.histogram("lineage_request_queue_seconds", "Seconds a request waited for a free slot.", ms.of(phase::queue));
    x.histogram("lineage_request_lookup_seconds", "Seconds to plan the restore (requests that used the cache).",
                ms.of(phase::lookup));
    x.histogram("lineage_request_restore_seconds", "Seconds to put the restore point in place (hits only).",
                ms.of(phase::restore));
    x.histogram("lineage_request_prefill_seconds",
                "Seconds in the forward passes of the prompt's uncached tokens (batch steps shared with other "
                "requests count in full).",
                ms.of(phase::prefill));
    x.histogram("lineage_request_capture_seconds",
                "Seconds taking checkpoints and anchors during the prefill (requests that used the cache).",
                ms.of(phase::capture));
    x.histogram("lineage_request_commit_seconds",
                "Seconds storing the finished sequence in the cache (requests that used the cache).",
                ms.of(phase::commit));

    // --- preparation on the HTTP threads (owners: scheduler for requests, its warm-up queue for
    // warm-ups; the per-request figures come from server::chat_preparer) ---
    x.counter("lineage_prepare_renders_total",
              "Chat-template renders of a conversation or a prefix of it on the HTTP threads, by origin: request "
              "(the requests that ended), warmup (the warm-up jobs received).",
              "origin",
              exposition::labelled{{"request", static_cast<double>(ms.prepare_renders)},
                                   {"warmup", static_cast<double>(cs.warmup.renders)}});
    x.counter("lineage_prepare_tokenizations_total",
              "Tokenizer passes over a rendered conversation or a prefix of it on the HTTP threads, by origin: "
              "request (the requests that ended), warmup (the warm-up jobs received).",
              "origin",
              exposition::labelled{{"request", static_cast<double>(ms.prepare_tokenizations)},
                                   {"warmup", static_cast<double>(cs.warmup.tokenizations)}});
    return x.text();
}

}  // namespace lineage::server
