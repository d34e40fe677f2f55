// server::endpoint_table: the rows of the endpoint table (http/endpoints.h) with the handlers of
// every dialect and of the operations endpoints, and each error shape's body. Here, in the
// composition root, so that http/ includes nothing above it (docs/architecture.md "Endpoints").
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

}  // namespace

json error_json(error_shape shape, const api_error & e) {
    return shape == error_shape::anthropic ? anthropic_error_json(e) : to_json(e);
}

std::span<const endpoint> endpoint_table() {
    return table;
}

}  // namespace lineage::server
