// server::routes: endpoint registration and the small endpoints; the chat completion itself is
// in chat_handler.cpp.
#include "server/routes.h"

#include "engine/chat_template.h"
#include "engine/model.h"
#include "scheduler/scheduler.h"
#include "server/anthropic_handler.h"
#include "server/anthropic_response.h"
#include "server/chat_handler.h"
#include "server/chat_request.h"
#include "server/completions_handler.h"
#include "server/errors.h"
#include "server/http_guard.h"
#include "server/json_body.h"
#include "server/json_fields.h"
#include "server/prometheus.h"
#include "server/request_limits.h"
#include "server/responses_handler.h"
#include "server/stats_json.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <ctime>
#include <exception>
#include <optional>
#include <string>

namespace lineage::server {

namespace {

void send_json(httplib::Response & res, const json & j, int status = 200) {
    res.status = status;
    res.set_content(dump(j), "application/json");
}

void send_error(httplib::Response & res, const api_error & e) {
    send_json(res, to_json(e), e.status);
}

// The body of POST /tokenize as a JSON object; nullopt after sending the 400.
std::optional<json> parse_object(const httplib::Request & req, httplib::Response & res) {
    json j;
    if (auto err = parse_json_body(req.body, j, /*require_object=*/true, default_json_limits())) {
        send_error(res, *err);
        return std::nullopt;
    }
    return j;
}

// An optional boolean field; false after sending the 400.
bool get_flag(const json & body, const char * name, bool & out, httplib::Response & res) {
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

// The error logger records why httplib is about to answer 400 on its own, for the error
// handler on the same thread (a header block over httplib's limits becomes a 431).
thread_local bool header_limit_hit = false;

// Total bytes of the request's header names and values.
uint64_t header_bytes(const httplib::Request & req) {
    uint64_t n = 0;
    for (const auto & [k, v] : req.headers) {
        n += k.size() + v.size() + 4;  // ": " and CRLF
    }
    return n;
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

// A POST to an endpoint that takes no body (POST /v1/responses/{id}/cancel), sent without one:
// clients send it with no Content-Type, and an empty body carries nothing a web page could
// forge. A body that is there must still be JSON.
bool bodyless_post(const httplib::Request & req) {
    const std::string length = req.get_header_value("Content-Length");
    return path_matches("/v1/responses/:id/cancel", req.path) && !req.has_header("Transfer-Encoding") &&
           (length.empty() || length == "0");
}

// Paths answered in Anthropic's error shape.
bool anthropic_path(const std::string & path) {
    return path.rfind("/v1/messages", 0) == 0;
}

}  // namespace

server_context::server_context(const server_config & c, const engine::model & m, const engine::chat_template & t,
                               scheduler::scheduler & s, lora_registry & l, const engine::projector * projector,
                               std::string projector_digest)
    : cfg(c),
      model(m),
      sched(s),
      loras(l),
      model_id(c.alias.empty() ? m.id() : c.alias),
      created(static_cast<int64_t>(std::time(nullptr))),
      allowed_hosts(!c.allowed_hosts.empty() ? c.allowed_hosts
                    : !c.has_keys()          ? std::vector<std::string>{}
                                             : std::vector<std::string>{"*"}),
      access(c.api_key, c.tenant_keys, c.admin_api_key),
      preparer(m, t,
               prepare_options{.model_id = c.alias.empty() ? m.id() : c.alias,
                               .cache_enabled = c.sched.cache.enabled,
                               .cache_trace = c.sched.cache.trace,
                               .default_kwargs = default_template_kwargs(t.source(), c.sched.cache.enabled),
                               .key_hash = c.sched.cache.key_hash,
                               .loras = &l,
                               .projector = projector,
                               .projector_digest = std::move(projector_digest)}),
      signer(c.alias.empty() ? m.id() : c.alias, c.api_key),
      responses(std::make_unique<response_store>(response_store_config{.path = c.responses_store,
                                                                       .ttl_s = c.responses_ttl_s,
                                                                       .capacity_bytes = c.responses_capacity_bytes})),
      seal(std::make_unique<reasoning_seal>(responses->reasoning_key())),
      warm(std::make_unique<warmer>(preparer, s, next_id, c.sched.cache.enabled && c.sched.cache.warmup)),
      trimmer(c.memory_trim_interval_s) {
    if (responses->persistent()) {
        spdlog::info("responses store: {}", responses->path());
    } else {
        spdlog::warn("responses store: in memory only (the disk tier is off, or --responses-store is 'memory' or "
                     "unusable): stored responses are lost at a restart; give --responses-store PATH to keep them");
    }
}

caller server_context::caller_of(const httplib::Request & req) const {
    std::string given;
    bool present = false;
    if (req.has_header("x-api-key")) {
        given = req.get_header_value("x-api-key");
        present = true;
    } else {
        const std::string auth = req.get_header_value("Authorization");
        const std::string prefix = "Bearer ";
        if (auth.compare(0, prefix.size(), prefix) == 0) {
            given = auth.substr(prefix.size());
            present = true;
        }
    }
    const std::string_view v(given);
    return access.identify(present ? &v : nullptr);
}

std::string server_context::tenant_of(const httplib::Request & req) const {
    return caller_of(req).tenant;
}

void install_routes(httplib::Server & srv, server_context & ctx) {
    const uint64_t max_body = ctx.cfg.max_body_bytes;
    srv.set_payload_max_length(static_cast<size_t>(max_body));

    // Before any handler: the Host allow-list (DNS rebinding), JSON-only POST bodies (CSRF from
    // a web page), then the API key (http_guard.h).
    srv.set_pre_routing_handler([&ctx](const httplib::Request & req, httplib::Response & res) {
        auto reject = [&](const api_error & e) {
            send_json(res, anthropic_path(req.path) ? anthropic_error_json(e) : to_json(e), e.status);
            return httplib::Server::HandlerResponse::Handled;
        };
        header_limit_hit = false;
        if (req.target.size() > ctx.cfg.max_uri_bytes) {
            api_error e;
            e.status = 414;
            e.message = "the request target is " + std::to_string(req.target.size()) + " bytes, more than " +
                        std::to_string(ctx.cfg.max_uri_bytes) + " (--max-uri-bytes): send the data in a JSON body";
            e.code = "uri_too_long";
            return reject(e);
        }
        if (const uint64_t n = header_bytes(req); n > ctx.cfg.max_header_bytes) {
            api_error e;
            e.status = 431;
            e.message = "the request headers are " + std::to_string(n) + " bytes, more than " +
                        std::to_string(ctx.cfg.max_header_bytes) + " (--max-header-bytes): send fewer or shorter headers";
            e.code = "request_header_fields_too_large";
            return reject(e);
        }
        const std::string host = req.get_header_value("Host");
        if (!host_allowed(host, ctx.allowed_hosts)) {
            api_error e;
            e.status = 403;
            e.message = "Host '" + host + "' is not allowed: use an IP address or localhost, or start the server with "
                        "--allowed-hosts " + host.substr(0, host.rfind(':')) + " (or with --api-key)";
            e.code = "host_not_allowed";
            return reject(e);
        }
        if (req.method == "POST" && !is_json_content_type(req.get_header_value("Content-Type")) &&
            !bodyless_post(req)) {
            api_error e;
            e.status = 415;
            e.message = "POST bodies must be JSON: send 'Content-Type: application/json' (got '" +
                        req.get_header_value("Content-Type") + "')";
            e.code = "unsupported_media_type";
            return reject(e);
        }
        if (ctx.access.open() || req.path == "/health" || req.path == "/") {
            return httplib::Server::HandlerResponse::Unhandled;
        }
        const caller c = ctx.caller_of(req);
        if (!c.known) {
            return reject(error_for_status(401, req.method, req.path, ctx.cfg.max_body_bytes));
        }
        if (req.path == "/metrics" && !c.admin) {
            api_error e;
            e.status = 403;
            e.message = "GET /metrics shows every tenant's figures: send the admin key (--admin-api-key); a tenant's "
                        "own figures are at GET /v1/cache/stats";
            e.code = "admin_key_required";
            return reject(e);
        }
        return httplib::Server::HandlerResponse::Unhandled;
    });

    // httplib answers 400 on its own when it cannot read the header block (more than 100 lines,
    // a line over 8 KiB, a malformed line): remember it so that the error handler says which
    // (431 for the line count).
    srv.set_error_logger([](const httplib::Error & err, const httplib::Request *) {
        if (err == httplib::Error::InvalidHeaders) {
            header_limit_hit = true;
        }
    });

    // Bodies for what httplib answers on its own (404, 413, ...); handlers' bodies are kept.
    srv.set_error_handler([max_body](const httplib::Request & req, httplib::Response & res) {
        if (!res.body.empty()) {
            return httplib::Server::HandlerResponse::Unhandled;
        }
        if (res.status == 400 && header_limit_hit) {
            header_limit_hit = false;
            // httplib stops reading at its header count limit with exactly that many parsed; any
            // other failure (a line over 8 KiB, a malformed line, a client that stopped sending)
            // leaves fewer and stays a 400.
            const bool too_many = req.headers.size() >= CPPHTTPLIB_HEADER_MAX_COUNT;
            api_error e;
            e.status = too_many ? 431 : 400;
            e.message = too_many ? "more than " + std::to_string(CPPHTTPLIB_HEADER_MAX_COUNT) +
                                       " request header lines: send fewer headers"
                                 : "the request headers could not be read: a header line over " +
                                       std::to_string(CPPHTTPLIB_HEADER_MAX_LENGTH) +
                                       " bytes, a malformed line, or the client stopped sending";
            e.code = too_many ? "request_header_fields_too_large" : "invalid_headers";
            res.status = e.status;
            res.set_content(dump(anthropic_path(req.path) ? anthropic_error_json(e) : to_json(e)), "application/json");
            return httplib::Server::HandlerResponse::Handled;
        }
        const api_error e = error_for_status(res.status, req.method, req.path, max_body);
        res.status = e.status;  // a served path asked with another method: 405
        res.set_content(dump(anthropic_path(req.path) ? anthropic_error_json(e) : to_json(e)), "application/json");
        return httplib::Server::HandlerResponse::Handled;
    });

    srv.set_exception_handler([](const httplib::Request & req, httplib::Response & res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
            if (ep) {
                std::rethrow_exception(ep);
            }
        } catch (const std::exception & e) {
            what = e.what();
        } catch (...) {
        }
        spdlog::error("{} {}: unhandled exception: {}", req.method, req.path, what);
        send_error(res, server_error("internal error: " + what));
    });

    srv.set_logger([&ctx](const httplib::Request & req, const httplib::Response & res) {
        spdlog::debug("http {} {} -> {}", req.method, req.path, res.status);
        ctx.trimmer.note_request_end();  // the response is written; its memory is free to return
    });

    auto chat = [&ctx](const httplib::Request & req, httplib::Response & res) {
        handle_chat_completions(req, res, ctx);
    };
    srv.Post("/v1/chat/completions", chat);
    srv.Post("/chat/completions", chat);

    auto responses = [&ctx](const httplib::Request & req, httplib::Response & res) { handle_responses(req, res, ctx); };
    srv.Post("/v1/responses", responses);
    srv.Post("/responses", responses);
    srv.Get("/v1/responses/:id",
            [&ctx](const httplib::Request & req, httplib::Response & res) { handle_get_response(req, res, ctx); });
    srv.Delete("/v1/responses/:id",
               [&ctx](const httplib::Request & req, httplib::Response & res) { handle_delete_response(req, res, ctx); });
    srv.Post("/v1/responses/:id/cancel",
             [&ctx](const httplib::Request & req, httplib::Response & res) { handle_cancel_response(req, res, ctx); });
    srv.Get("/v1/responses/:id/input_items",
            [&ctx](const httplib::Request & req, httplib::Response & res) { handle_list_input_items(req, res, ctx); });

    auto completions = [&ctx](const httplib::Request & req, httplib::Response & res) {
        handle_completions(req, res, ctx);
    };
    srv.Post("/v1/completions", completions);
    srv.Post("/completions", completions);

    // Anthropic Messages API (Claude Code adds ?beta=true; the query does not change the route).
    srv.Post("/v1/messages", [&ctx](const httplib::Request & req, httplib::Response & res) {
        handle_messages(req, res, ctx);
    });
    srv.Post("/v1/messages/count_tokens", [&ctx](const httplib::Request & req, httplib::Response & res) {
        handle_count_tokens(req, res, ctx);
    });

    // The base URL itself: clients (Claude Code) probe it with HEAD / (httplib answers HEAD
    // with the GET handler, without the body).
    srv.Get("/", [](const httplib::Request &, httplib::Response & res) {
        json j = json::object();
        j["status"] = "ok";
        j["service"] = "lineage-server";
        send_json(res, j);
    });

    // The served model under its id, then under each --model-alias (every generating endpoint
    // accepts any model name; the aliases are for clients that look for theirs in the list).
    auto models = [&ctx](const httplib::Request &, httplib::Response & res) {
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
        send_json(res, list);
    };
    srv.Get("/v1/models", models);
    srv.Get("/models", models);

    srv.Get("/health", [](const httplib::Request &, httplib::Response & res) {
        json j = json::object();
        j["status"] = "ok";
        send_json(res, j);
    });

    // llama-server's POST /tokenize: {content, add_special = false, parse_special = true} ->
    // {tokens}. With /apply-template it gives a client the exact prompt tokens of a chat
    // request (the benchmark's oracle needs them).
    srv.Post("/tokenize", [&ctx](const httplib::Request & req, httplib::Response & res) {
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
        json j = json::object();
        j["tokens"] = ctx.model.tokenize(content->get<std::string>(), parse_special, add_special);
        send_json(res, j);
    });

    // llama-server's POST /apply-template: a chat completion body -> {prompt}, the text that
    // /v1/chat/completions would tokenize (with parse_special) for it.
    // With ?api=messages the body is an Anthropic Messages body (anthropic_handler.h).
    srv.Post("/apply-template", [&ctx](const httplib::Request & req, httplib::Response & res) {
        if (req.get_param_value("api") == "messages") {
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
        send_json(res, j);
    });

    // llama-server's LoRA endpoints: GET lists [{id, path, scale}] (+ digest: the file content's,
    // part of the cache key); POST [{id, scale}] sets the global scales (adapters not named go
    // to 0), re-reads every adapter file and reloads those whose content changed (once the
    // requests in flight are done) -> {success: true, reloaded: [ids]}.
    srv.Get("/lora-adapters", [&ctx](const httplib::Request &, httplib::Response & res) {
        json list = json::array();
        for (const auto & e : ctx.loras.list()) {
            list.push_back({{"id", e.id}, {"path", e.path}, {"scale", e.scale}, {"digest", e.digest}});
        }
        send_json(res, list);
    });
    srv.Post("/lora-adapters", [&ctx](const httplib::Request & req, httplib::Response & res) {
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
        send_json(res, j);
    });

    // Without API keys, and for the admin key: the global figures (with the admin key also
    // "tenants": each tenant's). For a tenant's key: that tenant's figures only.
    srv.Get("/v1/cache/stats", [&ctx](const httplib::Request & req, httplib::Response & res) {
        const caller c = ctx.caller_of(req);
        const cache::stats s = ctx.sched.snapshot_stats();
        if (!c.admin) {
            json j = tenant_stats_json(c.tenant, s, ctx.sched.snapshot_metrics());
            j["tenant"] = c.tenant;
            j["enabled"] = s.enabled;
            j["mode"] = s.mode;
            send_json(res, j);
            return;
        }
        json j = stats_json(s);
        const scheduler::metrics_snapshot m = ctx.sched.snapshot_metrics();
        // Forward passes of the prefills, and those cut short at a restore point, by kind
        // (lineage_prefill_passes_total, lineage_prefill_splits_total).
        json splits = json::object();
        for (const auto & [kind, n] : with_known(m.prefill_splits, known_keys::split_kinds)) {
            splits[kind] = static_cast<uint64_t>(n);
        }
        j["prefill"] = {{"passes", m.prefill_passes}, {"splits", std::move(splits)}};
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
        send_json(res, j);
    });

    // Prometheus text format (docs/prompt-cache.md "Metrics"); behind the API key like the rest.
    srv.Get("/metrics", [&ctx](const httplib::Request &, httplib::Response & res) {
        if (!ctx.cfg.metrics) {
            api_error e;
            e.status = 404;
            e.message = "metrics are off: start the server with --metrics (or LINEAGE_METRICS=1) to serve GET /metrics";
            e.code = "not_found";
            send_error(res, e);
            return;
        }
        const cache::stats cs = ctx.sched.snapshot_stats();
        res.status = 200;
        res.set_content(render_metrics(cs, ctx.sched.snapshot_metrics()), prometheus_content_type);
    });

    // The admin key (or no keys) resets everything; a tenant's key its own entries only.
    srv.Post("/v1/cache/reset", [&ctx](const httplib::Request & req, httplib::Response & res) {
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
        j["disk_files_freed"] = r.disk_files_freed;
        j["disk_bytes_freed"] = r.disk_bytes_freed;
        if (r.redis) {
            j["redis_entries_freed"] = r.redis_entries_freed;
            j["redis_bytes_freed"] = r.redis_bytes_freed;
        }
        send_json(res, j);
    });
}

}  // namespace lineage::server
