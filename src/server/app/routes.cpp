// server::routes: the guards before routing (limits, Host, Content-Type, API keys), the error
// and exception handlers, and the endpoint table's rows installed on httplib (endpoints.h); the
// handlers themselves are in the *_handler.cpp files.
#include "server/app/routes.h"

#include "server/http/base64.h"
#include "server/http/endpoints.h"
#include "server/http/errors.h"
#include "server/http/http_guard.h"
#include "server/http/http_message.h"
#include "server/run/generation.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <strings.h>

#include <ctime>
#include <exception>
#include <optional>
#include <stdexcept>
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

// A POST to an endpoint that may come without a body (endpoint::body_optional), sent without
// one: clients send it with no Content-Type, and an empty body carries nothing a web page could
// forge. A body that is there must still be JSON.
bool bodyless_post(const httplib::Request & req) {
    const endpoint * e = find_endpoint(req.method, req.path);
    const std::string length = req.get_header_value("Content-Length");
    return e && e->body_optional && !req.has_header("Transfer-Encoding") && (length.empty() || length == "0");
}

// What httplib parsed, as the handlers' request (http_message.h); the body only when asked (the
// guards before routing read the headers alone).
http_request to_http_request(const httplib::Request & req, bool with_body) {
    http_request r;
    r.method = req.method;
    r.path = req.path;
    if (with_body) {
        // Moved, not copied (a body may be --max-body-bytes): nothing after the handler (the
        // logger, the error handler, the write) reads httplib's copy, and the Request object
        // httplib passes as const is its own non-const member.
        r.body = std::move(const_cast<std::string &>(req.body));
    }
    r.headers.assign(req.headers.begin(), req.headers.end());
    r.query.assign(req.params.begin(), req.params.end());
    r.path_params.insert(req.path_params.begin(), req.path_params.end());
    r.connection_closed = req.is_connection_closed;  // valid while the request's connection is
    return r;
}

// httplib's DataSink as the handlers' stream_sink.
class httplib_sink final : public stream_sink {
public:
    explicit httplib_sink(httplib::DataSink & sink) : sink_(sink) {}
    bool write(std::string_view bytes) override { return sink_.write(bytes.data(), bytes.size()); }
    bool writable() const override { return sink_.is_writable(); }
    void done() override { sink_.done(); }

private:
    httplib::DataSink & sink_;
};

// A handler's response written into httplib's: a whole body, or a chunked stream driven by
// `next` once the handler returned.
void to_httplib_response(http_response && in, httplib::Response & out) {
    out.status = in.status;
    for (auto & [k, v] : in.headers) {
        out.set_header(k, v);
    }
    if (!in.next) {
        if (!in.body.empty() || !in.content_type.empty()) {  // none: the client went away first
            out.set_content(std::move(in.body), in.content_type);
        }
        return;
    }
    auto next = std::move(in.next);
    auto on_close = std::move(in.on_close);
    out.set_chunked_content_provider(
        in.content_type,
        [next](size_t /*offset*/, httplib::DataSink & sink) {
            httplib_sink s(sink);
            return next(s);
        },
        [on_close](bool success) {
            if (on_close) {
                on_close(success);
            }
        });
}

// The error shape of a path: its endpoint's (endpoint::errors); Anthropic's for unknown paths
// under /v1/messages.
error_shape shape_of(const std::string & path) {
    const endpoint * e = find_path(path);
    return e ? e->errors : path.rfind("/v1/messages", 0) == 0 ? error_shape::anthropic : error_shape::openai;
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
                               .kv_type = kv_type_dimension(c.sched.type_k, c.sched.type_v),
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
      trimmer(c.memory_trim_interval_s),
      script(c.test_reply_script.empty() ? nullptr : std::make_unique<reply_script>(c.test_reply_script, m, preparer)) {
    if (responses->persistent()) {
        spdlog::info("responses store: {}", responses->path());
    } else {
        spdlog::warn("responses store: in memory only (the disk tier is off, or --responses-store is 'memory' or "
                     "unusable): stored responses are lost at a restart; give --responses-store PATH to keep them");
    }
}

caller server_context::caller_of(const http_request & req) const {
    std::string given;
    bool present = false;
    if (req.has_header("x-api-key")) {
        given = req.header("x-api-key");
        present = true;
    } else {
        const std::string auth = req.header("Authorization");
        // The scheme is case-insensitive (RFC 9110 section 11.1): "bearer KEY" is "Bearer KEY".
        const auto scheme_is = [&auth](std::string_view scheme) {
            return auth.size() >= scheme.size() && strncasecmp(auth.c_str(), scheme.data(), scheme.size()) == 0;
        };
        const std::string prefix = "Bearer ";
        const std::string basic = "Basic ";
        if (scheme_is(prefix)) {
            given = auth.substr(prefix.size());
            present = true;
        } else if (scheme_is(basic) && req.method == "GET") {
            // A browser's login dialog (endpoint::browser): the key is the password, after the
            // first ':' of "user:password".
            const endpoint * e = find_endpoint(req.method, req.path);
            const std::optional<std::string> pair = base64_decode(auth.substr(basic.size()));
            const size_t colon = pair ? pair->find(':') : std::string::npos;
            if (e && e->browser && colon != std::string::npos) {
                given = pair->substr(colon + 1);
                present = true;
            }
        }
    }
    const std::string_view v(given);
    return access.identify(present ? &v : nullptr);
}

std::string server_context::tenant_of(const http_request & req) const {
    return caller_of(req).tenant;
}

namespace {

// The first of the guards on the request's size and origin that it fails, in this order: the
// target's length, the header block's size, the Host allow-list (DNS rebinding), a JSON body on
// POST (CSRF from a web page).
std::optional<api_error> transport_error(const httplib::Request & req, const server_context & ctx) {
    if (req.target.size() > ctx.cfg.max_uri_bytes) {
        api_error e;
        e.status = 414;
        e.message = "the request target is " + std::to_string(req.target.size()) + " bytes, more than " +
                    std::to_string(ctx.cfg.max_uri_bytes) + " (--max-uri-bytes): send the data in a JSON body";
        e.code = "uri_too_long";
        return e;
    }
    if (const uint64_t n = header_bytes(req); n > ctx.cfg.max_header_bytes) {
        api_error e;
        e.status = 431;
        e.message = "the request headers are " + std::to_string(n) + " bytes, more than " +
                    std::to_string(ctx.cfg.max_header_bytes) + " (--max-header-bytes): send fewer or shorter headers";
        e.code = "request_header_fields_too_large";
        return e;
    }
    const std::string host = req.get_header_value("Host");
    if (!host_allowed(host, ctx.allowed_hosts)) {
        api_error e;
        e.status = 403;
        e.message = "Host '" + host + "' is not allowed: use an IP address or localhost, or start the server with "
                    "--allowed-hosts " + host.substr(0, host.rfind(':')) + " (or with --api-key)";
        e.code = "host_not_allowed";
        return e;
    }
    if (req.method == "POST" && !is_json_content_type(req.get_header_value("Content-Type")) && !bodyless_post(req)) {
        api_error e;
        e.status = 415;
        e.message = "POST bodies must be JSON: send 'Content-Type: application/json' (got '" +
                    req.get_header_value("Content-Type") + "')";
        e.code = "unsupported_media_type";
        return e;
    }
    return std::nullopt;
}

// The API key check: who may call the path (endpoint::access); an unknown path needs a key like
// the rest. A 401 on a browser's endpoint asks for the key with the login dialog.
std::optional<api_error> access_error(const httplib::Request & req, httplib::Response & res,
                                      const server_context & ctx) {
    const endpoint * target = find_endpoint(req.method, req.path);
    if (target == nullptr) {
        target = find_path(req.path);  // another method: answered 405 after the key check
    }
    const endpoint_access access = target ? target->access : endpoint_access::tenant;
    if (ctx.access.open() || access == endpoint_access::open) {
        return std::nullopt;
    }
    const caller c = ctx.caller_of(to_http_request(req, /*with_body=*/false));
    if (!c.known) {
        if (target && target->browser) {
            res.set_header("WWW-Authenticate", "Basic realm=\"lineage-server\", charset=\"UTF-8\"");
        }
        return error_for_status(401, req.method, req.path, ctx.cfg.max_body_bytes);
    }
    if (access == endpoint_access::admin && !c.admin) {
        api_error e;
        e.status = 403;
        e.message = req.method + " " + req.path + " " + std::string(target->admin_why) +
                    ": send the admin key (the server's --admin-api-key)";
        e.code = "admin_key_required";
        return e;
    }
    return std::nullopt;
}

// The pre-routing handler: the transport guards, then the API key (http_guard.h); a request
// that fails one is answered here in its path's error shape.
httplib::Server::HandlerResponse guard(const httplib::Request & req, httplib::Response & res,
                                       const server_context & ctx) {
    header_limit_hit = false;
    std::optional<api_error> e = transport_error(req, ctx);
    if (!e) {
        e = access_error(req, res, ctx);
    }
    if (!e) {
        return httplib::Server::HandlerResponse::Unhandled;
    }
    send_json(res, error_json(shape_of(req.path), *e), e->status);
    return httplib::Server::HandlerResponse::Handled;
}

// The body of an answer httplib makes on its own (404, 413, ...); handlers' bodies are kept.
httplib::Server::HandlerResponse answer_httplib_error(const httplib::Request & req, httplib::Response & res,
                                                      uint64_t max_body) {
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
        res.set_content(dump(error_json(shape_of(req.path), e)), "application/json");
        return httplib::Server::HandlerResponse::Handled;
    }
    const api_error e = error_for_status(res.status, req.method, req.path, max_body);
    res.status = e.status;  // a served path asked with another method: 405
    if (e.status == 405) {
        res.set_header("Allow", allowed_methods(req.path, ", "));  // RFC 9110 section 15.5.6
    }
    res.set_content(dump(error_json(shape_of(req.path), e)), "application/json");
    return httplib::Server::HandlerResponse::Handled;
}

// The access log line of an answered request.
void log_answer(const httplib::Request & req, const httplib::Response & res) {
    if (res.status >= 400) {
        // A refused request leaves a line at the default level: an operator sees a client that
        // keeps sending what the server refuses (the error's message, from its JSON body).
        const json body = json::parse(res.body, nullptr, /*allow_exceptions=*/false);
        std::string why;
        if (body.is_object() && body.contains("error")) {
            const json & e = body["error"];
            const json & msg = e.is_object() && e.contains("message") ? e["message"] : e;
            why = msg.is_string() ? msg.get<std::string>() : msg.dump();
        }
        if (why.size() > 300) {
            why = why.substr(0, 300) + "...";
        }
        spdlog::log(res.status >= 500 ? spdlog::level::warn : spdlog::level::info, "http {} {} -> {}{}{}", req.method,
                    req.path, res.status, why.empty() ? "" : ": ", why);
    } else {
        spdlog::debug("http {} {} -> {}", req.method, req.path, res.status);
    }
}

// Every row of the endpoint table, under its path and its alias.
void install_endpoints(httplib::Server & srv, server_context & ctx) {
    for (const endpoint & e : endpoint_table()) {
        const endpoint_handler fn = e.handler;
        const dialect * generates = e.generates;
        if ((fn == nullptr) == (generates == nullptr) || (generates && generates->errors != e.errors)) {
            throw std::logic_error("endpoint table: " + std::string(e.method) + " " + std::string(e.path) +
                                   " needs exactly one of a handler and a dialect, and a dialect's error shape");
        }
        auto handler = [&ctx, fn, generates](const httplib::Request & req, httplib::Response & res) {
            const http_request in = to_http_request(req, /*with_body=*/true);
            http_response out;
            if (generates != nullptr) {
                handle_generation(*generates, in, out, ctx);
            } else {
                fn(in, out, ctx);
            }
            to_httplib_response(std::move(out), res);
        };
        for (const std::string_view path : {e.path, e.alias}) {
            if (path.empty()) {
                continue;
            }
            const std::string pattern(path);
            if (e.method == "GET") {
                srv.Get(pattern, handler);
            } else if (e.method == "POST") {
                srv.Post(pattern, handler);
            } else if (e.method == "DELETE") {
                srv.Delete(pattern, handler);
            } else {
                throw std::logic_error("endpoint table: no route installer for method " + std::string(e.method));
            }
        }
    }
}

}  // namespace

void install_routes(httplib::Server & srv, server_context & ctx) {
    const uint64_t max_body = ctx.cfg.max_body_bytes;
    srv.set_payload_max_length(static_cast<size_t>(max_body));

    // Before any handler: the Host allow-list (DNS rebinding), JSON-only POST bodies (CSRF from
    // a web page), then the API key (http_guard.h).
    srv.set_pre_routing_handler(
        [&ctx](const httplib::Request & req, httplib::Response & res) { return guard(req, res, ctx); });

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
        return answer_httplib_error(req, res, max_body);
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
        log_answer(req, res);
        ctx.trimmer.note_request_end();  // the response is written; its memory is free to return
    });

    install_endpoints(srv, ctx);
}

}  // namespace lineage::server
