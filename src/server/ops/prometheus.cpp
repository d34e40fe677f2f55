// server::prometheus: names, HELP text and formatting of GET /metrics.
#include "server/ops/prometheus.h"

#include <fmt/format.h>

#include <cmath>

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

    x.counter("lineage_prompt_cache_state_buffers_total",
              "State buffers of 256 KiB or more taken for captures and loads, by source: reused (a freed "
              "buffer kept resident), allocated (new memory, a page fault per 4 KiB page).",
              "source", exposition::labelled{{"reused", static_cast<double>(cs.buffer_pool.reused)},
                                             {"allocated", static_cast<double>(cs.buffer_pool.allocated)}});
    x.gauge("lineage_prompt_cache_state_buffer_idle_bytes",
            "Bytes of freed state buffers kept for reuse (resident, outside the cache's budget).",
            static_cast<double>(cs.buffer_pool.idle_bytes));

    // --- every tier below RAM (owner: cache::store; a tier is listed once attached) ---
    exposition::labelled tier_hits;
    for (const auto & [name, n] : cs.tier_hits) {
        tier_hits.emplace_back(name, static_cast<double>(n));
    }
    x.counter("lineage_prompt_cache_tier_hits_total",
              "Restores served from the tiers below RAM, by tier (disk, redis).",
              "tier", tier_hits);

    // --- disk tier (owner: cache::disk_tier) ---
    const auto & d = cs.disk;
    x.counter("lineage_prompt_cache_disk_hits_total", "Restores served from a tier-2 file.",
              static_cast<double>(cs.hits_of_tier("disk")));
    x.gauge("lineage_prompt_cache_disk_files", "Tier-2 files of this model.", static_cast<double>(d.files));
    x.gauge("lineage_prompt_cache_disk_capacity_bytes", "Byte cap of the tier-2 files (--cache-disk-capacity-bytes).",
            static_cast<double>(d.enabled ? d.capacity_bytes : 0));
    x.counter("lineage_prompt_cache_disk_writes_total", "Tier-2 files written.", static_cast<double>(d.writes));
    x.counter("lineage_prompt_cache_disk_written_bytes_total", "Bytes written to tier-2 files.",
              static_cast<double>(d.bytes_written));
    x.counter("lineage_prompt_cache_disk_loads_total", "Tier-2 files read for a restore.", static_cast<double>(d.loads));
    x.counter("lineage_prompt_cache_disk_damaged_total",
              "Damaged tier-2 files and index rows found (deleted; never served), by kind: corrupt, truncated, "
              "bad_magic, identity, not_regular, other_model, missing, io, index_row, index.",
              "kind", with_known(d.damage, known_keys::disk_damage));
    x.counter("lineage_prompt_cache_disk_overdue_writes_total",
              "Tier-2 writes forced by --cache-disk-max-unwritten-s (the engine busy or not).",
              static_cast<double>(d.overdue_writes));
    x.counter("lineage_prompt_cache_disk_overdue_read_seconds_total",
              "Engine-thread seconds spent reading the states of the forced writes.",
              d.overdue_read_seconds);
    x.counter("lineage_prompt_cache_disk_evictions_total",
              "Tier-2 files deleted, by reason: capacity (LRU under the cap), superseded (a successor was written).",
              "reason",
              exposition::labelled{{"capacity", static_cast<double>(d.evictions)},
                                   {"superseded", static_cast<double>(d.superseded)}});

    // --- Redis tier, shared by replicas (owner: cache::redis_tier) ---
    const auto & rt = cs.redis;
    x.counter("lineage_prompt_cache_redis_hits_total", "Restores served from tier 3 (Redis).",
              static_cast<double>(cs.hits_of_tier("redis")));
    x.gauge("lineage_prompt_cache_redis_connected", "1 when the last call reached Redis (--cache-redis).",
            rt.connected ? 1.0 : 0.0);
    x.gauge("lineage_prompt_cache_redis_entries", "Tier-3 index entries of this model mirrored by this replica.",
            static_cast<double>(rt.entries));
    x.counter("lineage_prompt_cache_redis_writes_total", "Entries written to Redis.", static_cast<double>(rt.writes));
    x.counter("lineage_prompt_cache_redis_written_bytes_total", "Chunk bytes written to Redis.",
              static_cast<double>(rt.bytes_written));
    x.counter("lineage_prompt_cache_redis_write_failures_total",
              "Writes to Redis not done (Redis down or slow, or the queue full).",
              static_cast<double>(rt.write_failures));
    x.counter("lineage_prompt_cache_redis_loads_total", "Entries read from Redis for a restore.",
              static_cast<double>(rt.loads));
    x.counter("lineage_prompt_cache_redis_errors_total",
              "Redis calls that failed (timeouts included); the request went on without tier 3.",
              static_cast<double>(rt.errors));
    x.counter("lineage_prompt_cache_redis_vanished_total",
              "Tier-3 hits whose chunks were gone (Redis eviction, FLUSHALL): misses.",
              static_cast<double>(rt.vanished));
    x.counter("lineage_prompt_cache_redis_damaged_total",
              "Damaged or foreign tier-3 chunks and index entries (never served; deleted), by kind.", "kind",
              with_known(rt.damage, known_keys::redis_damage));

    // --- warm-ups of the next turn (owners: scheduler for runs, cache::store for hits) ---
    const auto & w = cs.warmup;
    x.counter("lineage_prompt_cache_warmups_total",
              "Background warm-ups of a conversation's next turn, by outcome: stored (the whole prefix), preempted "
              "(a request came first; what was done is parked).",
              "outcome", exposition::labelled{{"stored", static_cast<double>(w.runs)},
                                             {"preempted", static_cast<double>(w.preempted)}});
    x.gauge("lineage_prompt_cache_warmups_active", "Warm-ups running now (one at a time, on an idle engine).",
            static_cast<double>(w.active));
    x.counter("lineage_prompt_cache_warmup_tokens_total", "Tokens prefilled by warm-ups.",
              static_cast<double>(w.tokens));
    x.counter("lineage_prompt_cache_warmup_hits_total",
              "Requests that restored at least the length a warm-up stored.", static_cast<double>(w.hits));
    x.counter("lineage_prompt_cache_warmup_wasted_total",
              "Warmed entries that left the cache before a hit, and warm-ups dropped unfinished.",
              static_cast<double>(w.wasted));
    x.counter("lineage_prompt_cache_warmup_skipped_total",
              "Warm-up jobs not run, by cause: not_needed, replaced, queue_full, preempted_too_often.", "cause",
              with_known(w.skipped, known_keys::warmup_skips));

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
