// server::cache_view: the cache page and its JSON (cache_view.h).
#include "server/ops/cache_view.h"

#include "engine/model.h"
#include "scheduler/scheduler.h"
#include "server/ops/cache_page_html.h"  // generated from cache_page.html (src/CMakeLists.txt)
#include "server/run/generation.h"
#include "server/app/routes.h"

namespace lineage::server {

namespace {

json outcome_json(const scheduler::outcome_counts & c) {
    json j = json::object();
    j["requests"] = c.requests;
    j["hits"] = c.hits;
    j["misses"] = c.misses;
    j["tokens_restored"] = c.tokens_restored;
    j["tokens_computed"] = c.tokens_computed;
    j["hits_by_kind"] = map_json(c.hits_by_kind);
    j["misses_by_cause"] = map_json(c.misses_by_cause);
    j["short_hits_by_cause"] = map_json(c.short_hits_by_cause);
    return j;
}

// The page is browser content: it must not be framed by another site, and its own script and
// style are inline (no other source is allowed).
void set_page_headers(http_response & res) {
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
                   "img-src data:; frame-ancestors 'none'");
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Cache-Control", "no-store");
}

}  // namespace

json entries_json(const std::vector<cache::entry_view> & v, const std::string * tenant, std::string_view family) {
    json rows = json::array();
    int64_t n_entries = 0;
    int64_t n_anchors = 0;
    int64_t n_points = 0;
    uint64_t device = 0;
    uint64_t ram = 0;
    for (const auto & e : v) {
        if (tenant && e.k.tenant != *tenant) {
            continue;
        }
        json points = json::array();
        for (const auto & [n, kind] : e.checkpoints) {
            points.push_back({{"tokens", n}, {"kind", std::string(cache::to_string(kind))}, {"tier", "ram"}});
        }
        points.push_back({{"tokens", e.n_tokens},
                          {"kind", e.anchor ? "anchor" : "full"},
                          {"tier", std::string(cache::to_string(e.where))}});
        json row = json::object();
        row["id"] = e.id;
        row["anchor"] = e.anchor;
        row["tier"] = std::string(cache::to_string(e.where));
        row["on_disk"] = e.tier_copy != 0;
        row["tokens"] = e.n_tokens;
        row["session"] = e.k.session;
        if (!tenant && !e.k.tenant.empty()) {
            row["tenant"] = e.k.tenant;
        }
        row["warmed"] = e.warmed;
        row["bytes"] = {{"device", e.device_bytes}, {"ram", e.ram_bytes}};
        n_points += static_cast<int64_t>(points.size());
        row["points"] = std::move(points);
        rows.push_back(std::move(row));
        (e.anchor ? n_anchors : n_entries)++;
        device += e.device_bytes;
        ram += e.ram_bytes;
    }
    json j = json::object();
    if (tenant) {
        j["tenant"] = *tenant;
    }
    j["family"] = std::string(family);
    j["entries"] = std::move(rows);
    j["totals"] = {{"entries", n_entries},
                   {"anchors", n_anchors},
                   {"points", n_points},
                   {"bytes", {{"device", device}, {"ram", ram}}}};
    return j;
}

json requests_json(const scheduler::request_log_snapshot & s, bool show_tenant) {
    json recent = json::array();
    for (const auto & r : s.recent) {
        json row = json::object();
        row["id"] = r.id;
        row["at"] = r.at_s;
        if (show_tenant && !r.tenant.empty()) {
            row["tenant"] = r.tenant;
        }
        row["finish"] = r.finish;
        row["prompt_tokens"] = r.prompt_tokens;
        row["cached_tokens"] = r.cached_tokens;
        row["computed_tokens"] = r.prefilled_tokens;
        row["completion_tokens"] = r.completion_tokens;
        row["ttft_ms"] = r.ttft_s * 1e3;
        row["hit"] = r.hit_kind.empty() ? "miss" : r.hit_kind;
        row["tier"] = string_or_null(r.restored_from);
        row["miss_reason"] = string_or_null(r.miss_cause);
        recent.push_back(std::move(row));
    }
    json buckets = json::array();
    scheduler::outcome_counts window;
    for (const auto & b : s.buckets) {
        json row = outcome_json(b.counts);
        row["start"] = b.start_s;
        buckets.push_back(std::move(row));
        window.add(b.counts);
    }
    json j = json::object();
    j["bucket_s"] = s.bucket_s;
    j["recent"] = std::move(recent);
    j["buckets"] = std::move(buckets);
    j["window"] = outcome_json(window);
    return j;
}

std::string_view cache_page_html() {
    return cache_page_html_text;
}

void handle_cache_page(const http_request &, http_response & res, server_context & ctx) {
    if (!ctx.cfg.cache_page) {
        api_error e;
        e.status = 404;
        e.message =
            "the cache page is off: start the server without --cache-page=false (LINEAGE_CACHE_PAGE=0) to "
            "serve GET /cache; the JSON it reads is at GET /v1/cache/stats, /v1/cache/entries and "
            "/v1/cache/requests";
        e.code = "not_found";
        send_json_body(res, to_json(e), e.status);
        return;
    }
    set_page_headers(res);
    res.status = 200;
    res.set_content(std::string(cache_page_html()), "text/html; charset=utf-8");
}

void handle_cache_entries(const http_request & req, http_response & res, server_context & ctx) {
    const caller c = ctx.caller_of(req);
    const std::vector<cache::entry_view> v = ctx.sched.snapshot_entries();
    send_json_body(res, entries_json(v, c.admin ? nullptr : &c.tenant, engine::to_string(ctx.model.family())), 200);
}

void handle_cache_requests(const http_request & req, http_response & res, server_context & ctx) {
    const caller c = ctx.caller_of(req);
    const scheduler::request_log_snapshot s = ctx.sched.snapshot_requests(c.admin ? nullptr : &c.tenant);
    send_json_body(res, requests_json(s, c.admin), 200);
}

}  // namespace lineage::server
