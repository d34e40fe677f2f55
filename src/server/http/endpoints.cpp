// server::endpoints: the endpoint table (endpoints.h).
#include "server/http/endpoints.h"

#include "server/dialects/anthropic/anthropic_handler.h"
#include "server/dialects/anthropic/anthropic_response.h"
#include "server/dialects/chat/chat_handler.h"
#include "server/dialects/completions/completions_handler.h"
#include "server/dialects/responses/responses_handler.h"
#include "server/http/errors.h"
#include "server/ops/cache_view.h"
#include "server/ops/ops_handlers.h"

#include <array>

namespace lineage::server {

namespace {

using enum endpoint_access;

// The order is the order of --help and of the 404 answer's list.
constexpr std::array table{
    endpoint{.method = "POST", .path = "/v1/chat/completions", .alias = "/chat/completions",
             .generates = &chat_dialect},
    endpoint{.method = "POST", .path = "/v1/messages", .errors = error_shape::anthropic,
             .generates = &messages_dialect},
    endpoint{.method = "POST", .path = "/v1/messages/count_tokens", .errors = error_shape::anthropic,
             .handler = handle_count_tokens},
    endpoint{.method = "POST", .path = "/v1/responses", .alias = "/responses", .generates = &responses_dialect},
    endpoint{.method = "GET", .path = "/v1/responses/:id", .handler = handle_get_response},
    endpoint{.method = "DELETE", .path = "/v1/responses/:id", .handler = handle_delete_response},
    // Clients send the cancel without a body (and so without a Content-Type).
    endpoint{.method = "POST", .path = "/v1/responses/:id/cancel", .body_optional = true,
             .handler = handle_cancel_response},
    endpoint{.method = "GET", .path = "/v1/responses/:id/input_items", .handler = handle_list_input_items},
    endpoint{.method = "POST", .path = "/v1/completions", .alias = "/completions",
             .generates = &completions_dialect},
    endpoint{.method = "GET", .path = "/v1/models", .alias = "/models", .handler = handle_models},
    endpoint{.method = "GET", .path = "/health", .access = open, .note = "liveness: 200 once the model is loaded",
             .handler = handle_health},
    endpoint{.method = "GET", .path = "/ready", .access = open,
             .note = "readiness: 503 until every cache tier is warm (Redis's index read) or declared unavailable",
             .handler = handle_ready},
    endpoint{.method = "GET", .path = "/", .access = open, .note = "and HEAD: clients probe the base URL",
             .handler = handle_root},
    endpoint{.method = "GET", .path = "/v1/cache/stats", .browser = true, .note = "a tenant's key sees its own figures",
             .handler = handle_cache_stats},
    endpoint{.method = "GET", .path = "/v1/cache/entries", .browser = true,
             .note = "entries and anchors with their restore points; a tenant's key sees its own",
             .handler = handle_cache_entries},
    endpoint{.method = "GET", .path = "/v1/cache/requests", .browser = true,
             .note = "the last requests and outcomes per 10 s; a tenant's key sees its own",
             .handler = handle_cache_requests},
    endpoint{.method = "GET", .path = "/cache", .browser = true,
             .note = "the cache page, with --cache-page; the key may come as the Basic password",
             .handler = handle_cache_page},
    endpoint{.method = "POST", .path = "/v1/cache/reset", .note = "a tenant's key resets its own entries",
             .handler = handle_cache_reset},
    endpoint{.method = "POST", .path = "/tokenize", .handler = handle_tokenize},
    endpoint{.method = "POST", .path = "/apply-template", .handler = handle_apply_template},
    endpoint{.method = "GET", .path = "/lora-adapters", .note = "the adapters' file paths with the admin key only",
             .handler = handle_get_lora_adapters},
    endpoint{.method = "POST", .path = "/lora-adapters", .access = admin,
             .admin_why = "changes the adapters' scales for every tenant", .note = "the admin key",
             .handler = handle_set_lora_adapters},
    endpoint{.method = "GET", .path = "/metrics", .access = admin,
             .admin_why = "shows every tenant's figures (a tenant's own are at GET /v1/cache/stats)",
             .note = "with --metrics; the admin key", .handler = handle_metrics},
};

bool serves(const endpoint & e, std::string_view path) {
    return path_matches(e.path, path) || (!e.alias.empty() && path_matches(e.alias, path));
}

}  // namespace

json error_json(error_shape shape, const api_error & e) {
    return shape == error_shape::anthropic ? anthropic_error_json(e) : to_json(e);
}

std::span<const endpoint> endpoint_table() {
    return table;
}

const endpoint * find_endpoint(std::string_view method, std::string_view path) {
    for (const auto & e : table) {
        if (e.method == method && serves(e, path)) {
            return &e;
        }
    }
    return nullptr;
}

const endpoint * find_path(std::string_view path) {
    for (const auto & e : table) {
        if (serves(e, path)) {
            return &e;
        }
    }
    return nullptr;
}

std::string allowed_methods(std::string_view path, std::string_view separator) {
    std::string allowed;
    for (const auto & e : table) {
        if (serves(e, path)) {
            allowed += std::string(allowed.empty() ? "" : separator) + std::string(e.method);
        }
    }
    return allowed;
}

// The 404 and 405 answers read the table; here rather than in errors.cpp so that the request
// parsers (and their fuzz targets) do not link the handlers.
api_error error_for_status(int status, const std::string & method, const std::string & path,
                           uint64_t max_body_bytes) {
    api_error e;
    e.status = status;
    if (status == 404) {
        // A served path asked with another method: 405, naming the methods it takes.
        const std::string allowed = allowed_methods(path);
        if (!allowed.empty()) {
            e.status = 405;
            e.message = "method " + method + " is not allowed on " + path + "; it takes " + allowed;
            e.code = "method_not_allowed";
            return e;
        }
    }
    switch (e.status) {
        case 401:
            e.message = "missing or incorrect API key: send 'Authorization: Bearer <key>' (or 'x-api-key: <key>')";
            e.code = "invalid_api_key";
            break;
        case 404:
            e.message = "unknown endpoint " + method + " " + path + "; this server serves " + endpoint_list();
            e.code = "not_found";
            break;
        case 405:
            e.message = "method " + method + " is not allowed on " + path;
            break;
        case 413: return body_too_large(max_body_bytes);
        default:
            if (status >= 500) {
                e.type = "server_error";
                e.message = "internal server error";
            } else {
                e.message = "bad request";
            }
            break;
    }
    return e;
}

std::string endpoint_list() {
    std::string out;
    for (const auto & e : table) {
        out += std::string(out.empty() ? "" : ", ") + std::string(e.method) + " " + std::string(e.path);
        std::string extra;
        if (!e.alias.empty()) {
            extra = "alias " + std::string(e.alias);
        }
        if (!e.note.empty()) {
            extra += (extra.empty() ? "" : "; ") + std::string(e.note);
        }
        if (!extra.empty()) {
            out += " (" + extra + ")";
        }
    }
    return out;
}

}  // namespace lineage::server
