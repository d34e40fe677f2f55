// server::ops_handlers: the endpoints that do not generate: the base URL, health, the model
// list, llama-server's /tokenize, /apply-template and /lora-adapters, the cache's stats and
// reset, and the Prometheus metrics. Each is a row of the endpoint table (endpoints.h).
// Thread safety: handlers run on httplib's worker threads; they read server_context and call
// the scheduler's thread-safe snapshots and operations.
#pragma once

#include "server/http/http_message.h"

namespace lineage::server {

struct server_context;

/** GET / (and HEAD /): {"status": "ok", "service": "lineage-server"}; clients probe the base URL. */
void handle_root(const http_request & req, http_response & res, server_context & ctx);
/** GET /health (liveness): {"status": "ok"} once the server listens (the model is loaded), with or
 *  without API keys. */
void handle_health(const http_request & req, http_response & res, server_context & ctx);
/** GET /ready (readiness): 200 {"status": "ready", "tiers": {name: {state, detail}}} once every
 *  tier below RAM is warm or declared unavailable (cache::tier_readiness); until then 503 in the
 *  OpenAI error shape (type unavailable_error, code warming_up, the tiers waited for in the
 *  message) with the same "status" ("warming") and "tiers", and Retry-After: 1. No key needed. */
void handle_ready(const http_request & req, http_response & res, server_context & ctx);
/** GET /v1/models: the served model under its id, then under each --model-alias. */
void handle_models(const http_request & req, http_response & res, server_context & ctx);
/** POST /tokenize (llama-server's): {content, add_special = false, parse_special = true} -> {tokens}. */
void handle_tokenize(const http_request & req, http_response & res, server_context & ctx);
/** POST /apply-template (llama-server's): a chat completion body -> {prompt}; ?api=messages
 *  takes an Anthropic Messages body. */
void handle_apply_template(const http_request & req, http_response & res, server_context & ctx);
/** GET /lora-adapters: [{id, path, scale, digest}]; `path` only for the admin key (or without keys). */
void handle_get_lora_adapters(const http_request & req, http_response & res, server_context & ctx);
/** POST /lora-adapters: [{id, scale}] -> {success, reloaded}; the admin key only (endpoints.cpp). */
void handle_set_lora_adapters(const http_request & req, http_response & res, server_context & ctx);
/** GET /v1/cache/stats: the global figures for the admin key (or without keys), else the
 *  caller's tenant's. */
void handle_cache_stats(const http_request & req, http_response & res, server_context & ctx);
/** POST /v1/cache/reset: the admin key (or no keys) resets everything, a tenant's key its own. */
void handle_cache_reset(const http_request & req, http_response & res, server_context & ctx);
/** GET /metrics: Prometheus text (docs/prompt-cache.md "GET /metrics (Prometheus)"); 404 without
 *  --metrics. */
void handle_metrics(const http_request & req, http_response & res, server_context & ctx);

}  // namespace lineage::server
