// server::routes: installs the endpoint table (endpoints.h) on httplib, behind the guards that run
// before any handler: request-target and header limits (414, 431), the Host allow-list, JSON-only
// POST bodies, and the API-key check ('Authorization: Bearer' or Anthropic's 'x-api-key') naming
// the caller's tenant (tenants.h) against the endpoint's access (the admin key alone reads
// /metrics); OpenAI-shaped errors (Anthropic-shaped under /v1/messages) for everything httplib
// rejects on its own (404 listing the endpoints, 405 naming a path's methods, 413, ...).
// Per chat request, on its HTTP thread: parse + validate -> render + tokenize + cache hints
// (chat_preparer) -> scheduler.submit -> consume the request's events into one response or an
// SSE stream (docs/architecture.md "Layers").
// Thread safety: handlers run on httplib's worker threads; server_context is shared read-only
// except for the request-id counter (atomic). Ownership: borrows everything it points to.
#pragma once

#include "server/config.h"
#include "server/dialects/anthropic/thinking_signature.h"
#include "server/dialects/responses/reasoning_seal.h"
#include "server/dialects/responses/response_store.h"
#include "server/http/http_message.h"
#include "server/http/memory_trim.h"
#include "server/http/tenants.h"
#include "server/prepare/chat_prepare.h"
#include "server/prepare/lora_registry.h"
#include "server/prepare/reply_script.h"
#include "server/run/warmup.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace httplib {
class Server;
struct Request;
}

namespace lineage::engine {
class model;
class chat_template;
}  // namespace lineage::engine

namespace lineage::scheduler {
class scheduler;
}

namespace lineage::server {

struct server_context {
    /** `projector` (--mmproj; nullptr: none) and `projector_digest` (its file's content
     *  digest) go to the preparer: requests' images are keyed and tokenized with them. */
    server_context(const server_config & c, const engine::model & m, const engine::chat_template & t,
                   scheduler::scheduler & s, lora_registry & l, const engine::projector * projector = nullptr,
                   std::string projector_digest = {});

    const server_config & cfg;
    const engine::model & model;
    scheduler::scheduler & sched;
    lora_registry & loras;    ///< the LoRA adapters (GET/POST /lora-adapters, request keys)
    std::string model_id;     ///< --alias, else the model file name
    int64_t created = 0;      ///< unix seconds at start (/v1/models "created")
    /** Host names accepted besides IP literals and localhost (http_guard.h host_allowed):
     *  --allowed-hosts, else "*" when an API key is set, else none. */
    std::vector<std::string> allowed_hosts;
    access_table access;      ///< API keys -> tenants
    chat_preparer preparer;
    thinking_signer signer;   ///< signs /v1/messages thinking blocks (key: model id + --api-key)
    std::unique_ptr<response_store> responses;  ///< stored Responses API responses
    std::unique_ptr<reasoning_seal> seal;       ///< encrypted_content of reasoning items (key in the store)
    std::atomic<uint64_t> next_id{1};

    /** The caller of `req`, from its 'x-api-key' header (Anthropic clients) or else its
     *  'Authorization: Bearer KEY' header; on a GET of a browser endpoint (endpoint::browser)
     *  also 'Authorization: Basic' with the key as the password. */
    caller caller_of(const http_request & req) const;
    /** caller_of(req).tenant: "" without API keys. Handlers put it in the cache key. */
    std::string tenant_of(const http_request & req) const;
    /** Renders the next turn's prefix after a reply and submits its warm-up (last: it borrows
     *  the members above and joins its thread first). */
    std::unique_ptr<warmer> warm;
    /** Gives the memory requests freed back to the system (--memory-trim-interval). */
    memory_trimmer trimmer;
    /** --test-reply-script (a test instrument): the replies every generation is forced to;
     *  nullptr = off. */
    std::unique_ptr<reply_script> script;
};

/** Registers every endpoint and the error/auth handlers on `srv`. `ctx` must outlive `srv`'s
 *  listening. */
void install_routes(httplib::Server & srv, server_context & ctx);

}  // namespace lineage::server
