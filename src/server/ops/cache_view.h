// server::cache_view: what an operator sees of the cache in a browser (docs/prompt-cache.md "Cache
// page"): the page itself (GET /cache, HTML, CSS and JS embedded in the binary from
// src/server/ops/cache_page.html at build time; it fetches nothing from elsewhere) and the two JSON
// endpoints it polls beside GET /v1/cache/stats: the entries and anchors with their restore
// points (GET /v1/cache/entries) and the last requests with their outcomes over time
// (GET /v1/cache/requests). Access is /v1/cache/stats's: the admin key (or no keys) sees
// everything, a tenant's key its own entries and requests (tenants.h).
// Thread safety: the JSON builders are pure functions; the handlers run on httplib's threads
// and read the scheduler's thread-safe snapshots.
#pragma once

#include "cache/store/store.h"
#include "scheduler/request_log.h"
#include "server/http/errors.h"
#include "server/http/http_message.h"

#include <string>
#include <string_view>
#include <vector>

namespace lineage::server {

struct server_context;

/** The body of GET /v1/cache/entries for the entries in `v` (store order: most recently used
 *  first) whose tenant is `*tenant` (nullptr: all, each row then names its tenant when it has
 *  one): {family, entries: [{id, anchor, tier ("device"|"ram"), on_disk, tokens, session,
 *  warmed, bytes: {device, ram}, points: [{tokens, kind, tier}]}], totals: {entries, anchors,
 *  points, bytes: {device, ram}}}. `points` ascend: the checkpoints (recurrent states, held in
 *  RAM), then the entry's own end (kind "full", or "anchor" for an anchor) in the entry's tier.
 *  Bytes in bytes, positions in tokens; totals are those of cache::stats for the same entries. */
json entries_json(const std::vector<cache::entry_view> & v, const std::string * tenant, std::string_view family);

/** The body of GET /v1/cache/requests: {bucket_s, recent: [{id, at (Unix seconds), tenant
 *  (admin view, when set), finish, prompt_tokens, cached_tokens, computed_tokens,
 *  completion_tokens, ttft_ms, hit, tier, miss_reason}], buckets: [{start, requests, hits,
 *  misses, tokens_restored, tokens_computed, hits_by_kind, misses_by_cause,
 *  short_hits_by_cause}], window: the buckets' sum}. `hit` is the restore point kind ("miss"
 *  on a miss), `tier` and `miss_reason` null when empty, as in a response's timings
 *  (docs/prompt-cache.md "Per response"). */
json requests_json(const scheduler::request_log_snapshot & s, bool show_tenant);

/** The page's HTML (one document with its CSS and JS; no external references). */
std::string_view cache_page_html();

/** GET /cache: the page; 404 in the OpenAI error shape with --cache-page=false. */
void handle_cache_page(const http_request & req, http_response & res, server_context & ctx);
/** GET /v1/cache/entries: entries_json for the caller (the admin key or no keys: all). */
void handle_cache_entries(const http_request & req, http_response & res, server_context & ctx);
/** GET /v1/cache/requests: requests_json for the caller (the admin key or no keys: all). */
void handle_cache_requests(const http_request & req, http_response & res, server_context & ctx);

}  // namespace lineage::server
