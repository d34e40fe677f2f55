// server::ops_handlers: the endpoints that do not generate (ops_handlers.h).
#include "server/ops/ops_handlers.h"

#include "cache/tier_table.h"
#include "engine/chat_template.h"
#include "engine/model.h"
#include "scheduler/scheduler.h"
#include "server/dialects/anthropic/anthropic_handler.h"
#include "server/dialects/chat/chat_request.h"
#include "server/http/errors.h"
#include "server/http/json_body.h"
#include "server/http/json_fields.h"
#include "server/ops/prometheus.h"
#include "util/thread_priority.h"
#include "server/http/request_limits.h"
#include "server/app/routes.h"
#include "server/ops/stats_json.h"

#include <spdlog/spdlog.h>

#include <optional>
#include <string>
#include <vector>

namespace lineage::server {

namespace {

void send_error(http_response & res, const api_error & e) {
    send_json_body(res, to_json(e), e.status);
}

// The body of POST /tokenize as a JSON object; nullopt after sending the 400.
std::optional<json> parse_object(const http_request & req, http_response & res) {
    json j;
    if (auto err = parse_json_body(req.body, j, /*require_object=*/true, default_json_limits())) {
        send_error(res, *err);
        return std::nullopt;
    }
    return j;
}

// An optional boolean field; false after sending the 400.
bool get_flag(const json & body, const char * name, bool & out, http_response & res) {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) {
        return true;
    }
    if (!it->is_boolean()) {
        send_error(res, invalid_request(std::string("'") + name + "' must be a boolean", name));
        return false;
    }
    out = it->get<bool>();
    return true;
}

json tenant_stats_json(const std::string & tenant, const cache::stats & s, const scheduler::metrics_snapshot & m) {
    json j = json::object();
    const auto u = s.tenants.find(tenant);
    const auto t = m.tenants.find(tenant);
    const cache::tenant_usage usage = u == s.tenants.end() ? cache::tenant_usage{} : u->second;
    const scheduler::metrics_snapshot::tenant_counts counts =
        t == m.tenants.end() ? scheduler::metrics_snapshot::tenant_counts{} : t->second;
    j["requests"] = counts.requests;
    j["prompt_tokens"] = counts.prompt_tokens;
    j["cached_tokens"] = counts.cached_tokens;
    j["completion_tokens"] = counts.completion_tokens;
    j["entries"] = usage.entries;
    j["anchors"] = usage.anchors;
    j["bytes"] = usage.bytes;
    return j;
}

}  // namespace

// The base URL itself: clients (Claude Code) probe it with HEAD / (httplib answers HEAD
// with the GET handler, without the body).
void handle_root(const http_request &, http_response & res, server_context &) {
    json j = json::object();
    j["status"] = "ok";
    j["service"] = "lineage-server";
    send_json_body(res, j);
}

// The served model under its id, then under each --model-alias (every generating endpoint
// accepts any model name; the aliases are for clients that look for theirs in the list).
void handle_models(const http_request &, http_response & res, server_context & ctx) {
    json m = json::object();
    m["id"] = ctx.model_id;
    m["object"] = "model";
    m["created"] = ctx.created;
    m["owned_by"] = "lineage";
    json meta = json::object();
    meta["architecture"] = ctx.model.architecture();
    meta["family"] = engine::to_string(ctx.model.family());
    meta["n_ctx_train"] = ctx.model.n_ctx_train();
    meta["n_vocab"] = ctx.model.n_vocab();
    meta["size_bytes"] = ctx.model.size_bytes();
    meta["max_sequence_tokens"] = ctx.sched.max_sequence_tokens();
    m["meta"] = std::move(meta);
    json list = json::object();
    list["object"] = "list";
    json data = json::array({m});
    for (const auto & alias : ctx.cfg.model_aliases) {
        if (alias != ctx.model_id) {
            json a = m;
            a["id"] = alias;
            data.push_back(std::move(a));
        }
    }
    list["data"] = std::move(data);
    send_json_body(res, list);
}

void handle_health(const http_request &, http_response & res, server_context &) {
    json j = json::object();
    j["status"] = "ok";
    send_json_body(res, j);
}

// Liveness (/health) and readiness (/ready) apart, as Kubernetes probes them: a replica whose
// shared tier is still warming is alive (restarting it would not help) but must not be sent
// requests, which would miss what the other replicas stored.
void handle_ready(const http_request &, http_response & res, server_context & ctx) {
    json tiers = json::object();
    std::string waiting;
    for (const auto & [name, st] : ctx.sched.readiness()) {
        json t = json::object();
        t["state"] = cache::to_string(st.state);
        t["detail"] = string_or_null(st.detail);
        tiers[name] = std::move(t);
        if (st.state == cache::tier_readiness::warming) {
            waiting += (waiting.empty() ? "" : "; ") + name + ": " + st.detail;
        }
    }
    if (waiting.empty()) {
        json j = json::object();
        j["status"] = "ready";
        j["tiers"] = std::move(tiers);
        send_json_body(res, j);
        return;
    }
    api_error e;
    e.status = 503;
    e.type = "unavailable_error";
    e.code = "warming_up";
    e.message = "the prompt cache is warming up (" + waiting +
                "); a load balancer should send requests once GET /ready answers 200";
    json j = to_json(e);
    j["status"] = "warming";
    j["tiers"] = std::move(tiers);
    res.set_header("Retry-After", "1");
    send_json_body(res, j, e.status);
}

// llama-server's POST /tokenize: {content, add_special = false, parse_special = true} ->
// {tokens}. With /apply-template it gives a client the exact prompt tokens of a chat
// request (the benchmark's oracle needs them).
void handle_tokenize(const http_request & req, http_response & res, server_context & ctx) {
    const std::optional<json> body = parse_object(req, res);
    if (!body) {
        return;
    }
    auto content = body->find("content");
    if (content == body->end() || !content->is_string()) {
        send_error(res, invalid_request("'content' is required and must be a string", "content"));
        return;
    }
    bool add_special = false;
    bool parse_special = true;
    if (!get_flag(*body, "add_special", add_special, res) || !get_flag(*body, "parse_special", parse_special, res)) {
        return;
    }
    if (auto err = check_prompt_bytes(content->get_ref<const std::string &>().size(), "'content'", "content")) {
        send_error(res, *err);
        return;
    }
    util::expected<std::vector<int32_t>> tokens = util::status::error("not tokenized");
    // A large text is tokenized below the engine's priority (--http-nice), and stops between
    // windows once the client has gone.
    util::run_at_lower_priority(prepare_at_low_priority(req.body) ? ctx.cfg.http_nice : 0, [&] {
        const engine::tokenize_stop_scope stop_when_gone([&req] { return req.closed(); });
        tokens = ctx.model.tokenize(content->get<std::string>(), parse_special, add_special);
    });
    if (!tokens && req.closed()) {  // the stop scope's probe said so: nobody to answer
        spdlog::info("/tokenize: the client closed the connection; tokenization stopped");
        return;
    }
    if (!tokens) {  // as an exception out of a handler is answered (routes.cpp)
        spdlog::error("{} {}: tokenization failed: {}", req.method, req.path, tokens.error().message());
        send_error(res, server_error("internal error: " + tokens.error().message()));
        return;
    }
    json j = json::object();
    j["tokens"] = std::move(*tokens);
    send_json_body(res, j);
}

// llama-server's POST /apply-template: a chat completion body -> {prompt}, the text that
// /v1/chat/completions would tokenize (with parse_special) for it.
// With ?api=messages the body is an Anthropic Messages body (anthropic_handler.h).
void handle_apply_template(const http_request & req, http_response & res, server_context & ctx) {
    if (req.param("api") == "messages") {
        handle_messages_apply_template(req, res, ctx);
        return;
    }
    chat_request r;
    if (auto err = parse_chat_request(req.body, r)) {
        send_error(res, *err);
        return;
    }
    std::string prompt;
    if (auto err = ctx.preparer.render_prompt(r, prompt)) {
        send_error(res, *err);
        return;
    }
    json j = json::object();
    j["prompt"] = std::move(prompt);
    send_json_body(res, j);
}

// llama-server's LoRA endpoints: GET lists [{id, path, scale}] (+ digest: the file content's,
// part of the cache key); POST [{id, scale}] sets the global scales (adapters not named go
// to 0), re-reads every adapter file and reloads those whose content changed (once the
// requests in flight are done) -> {success: true, reloaded: [ids]}.
void handle_get_lora_adapters(const http_request & req, http_response & res, server_context & ctx) {
    // A tenant's key: no server paths (the admin key, or a server without tenants, sees them).
    const bool admin = ctx.caller_of(req).admin;
    json list = json::array();
    for (const auto & e : ctx.loras.list()) {
        json a = {{"id", e.id}, {"scale", e.scale}, {"digest", e.digest}};
        if (admin) {
            a["path"] = e.path;
        }
        list.push_back(std::move(a));
    }
    send_json_body(res, list);
}
void handle_set_lora_adapters(const http_request & req, http_response & res, server_context & ctx) {
    json body;
    if (auto err = parse_json_body(req.body, body, /*require_object=*/false, default_json_limits())) {
        send_error(res, *err);
        return;
    }
    std::vector<lora_scale> scales;
    try {
        scales = parse_lora_list(body, "body");
    } catch (const fields::bad_field & e) {
        send_error(res, e.err);
        return;
    }
    std::vector<int64_t> reloaded;
    auto reload = [&ctx](size_t id, uint64_t epoch) { return ctx.sched.reload_lora(id, epoch); };
    if (auto err = ctx.loras.apply(scales, reload, reloaded)) {
        send_error(res, *err);
        return;
    }
    json j = json::object();
    j["success"] = true;
    j["reloaded"] = reloaded;
    send_json_body(res, j);
}

namespace {
// The scheduler's cache figures and the warm-up renderer's: jobs it dropped unrendered.
cache::stats server_stats(server_context & ctx) {
    cache::stats s = ctx.sched.snapshot_stats();
    if (ctx.warm) {
        s.warmup.skipped["superseded"] += static_cast<int64_t>(ctx.warm->superseded());
    }
    return s;
}
}  // namespace

// Without API keys, and for the admin key: the global figures (with the admin key also
// "tenants": each tenant's). For a tenant's key: that tenant's figures only.
void handle_cache_stats(const http_request & req, http_response & res, server_context & ctx) {
    const caller c = ctx.caller_of(req);
    const cache::stats s = server_stats(ctx);
    if (!c.admin) {
        json j = tenant_stats_json(c.tenant, s, ctx.sched.snapshot_metrics());
        j["tenant"] = c.tenant;
        j["enabled"] = s.enabled;
        j["mode"] = s.mode;
        send_json_body(res, j);
        return;
    }
    json j = stats_json(s);
    const scheduler::metrics_snapshot m = ctx.sched.snapshot_metrics();
    // The scheduler's figures, as it describes them (scheduler::metrics_snapshot::describe):
    // "prefill" (passes, splits by kind), "sequence_moves", "prepare" (the requests'; the
    // warm-ups' are in "warmup").
    add_scheduler_figures(j, m.describe(s.warmup));
    if (!ctx.access.open()) {
        std::vector<std::string> names = ctx.access.tenants();
        for (const auto & [name, _] : s.tenants) {
            names.push_back(name);
        }
        for (const auto & [name, _] : m.tenants) {
            names.push_back(name);
        }
        json tenants = json::object();
        for (const auto & name : names) {
            tenants[name] = tenant_stats_json(name, s, m);
        }
        j["tenants"] = std::move(tenants);
    }
    send_json_body(res, j);
}

// Prometheus text format (docs/prompt-cache.md "GET /metrics (Prometheus)"); behind the API key
// like the rest.
void handle_metrics(const http_request &, http_response & res, server_context & ctx) {
    if (!ctx.cfg.metrics) {
        api_error e;
        e.status = 404;
        e.message = "metrics are off: start the server with --metrics (or LINEAGE_METRICS=1) to serve GET /metrics";
        e.code = "not_found";
        send_error(res, e);
        return;
    }
    const cache::stats cs = server_stats(ctx);
    res.status = 200;
    res.set_content(render_metrics(cs, ctx.sched.snapshot_metrics()), prometheus_content_type);
}

// The admin key (or no keys) resets everything; a tenant's key its own entries only.
void handle_cache_reset(const http_request & req, http_response & res, server_context & ctx) {
    const caller c = ctx.caller_of(req);
    const cache::reset_result r = c.admin ? ctx.sched.reset_cache() : ctx.sched.reset_cache_of(c.tenant);
    spdlog::info("cache reset{}: {} entries, {} bytes freed", c.admin ? "" : " of tenant " + c.tenant,
                 r.entries_freed, r.bytes_freed);
    json j = json::object();
    if (!c.admin) {
        j["tenant"] = c.tenant;
    }
    j["entries_freed"] = r.entries_freed;
    j["bytes_freed"] = r.bytes_freed;
    for (const cache::tier_row & row : cache::tier_table()) {  // each tier's older flat names
        const auto f = r.tiers.find(row.name);
        if (!row.reset_keys.copies.empty() && (f != r.tiers.end() || row.reset_keys.always)) {
            j[row.reset_keys.copies] = f != r.tiers.end() ? f->second.copies : 0;
            j[row.reset_keys.bytes] = f != r.tiers.end() ? f->second.bytes : 0;
        }
    }
    json tiers = json::object();
    for (const auto & [name, f] : r.tiers) {
        tiers[name] = {{"copies_freed", f.copies}, {"bytes_freed", f.bytes}};
    }
    j["tiers"] = std::move(tiers);
    send_json_body(res, j);
}

}  // namespace lineage::server
