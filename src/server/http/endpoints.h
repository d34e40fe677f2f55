// server::endpoints: the one table of the HTTP endpoints. Each row is a method, a path (and the
// alias some clients use for it), who may call it when API keys are set, and its handler. Route
// installation (server/app/routes.cpp), the 404 and 405 answers (errors.cpp), the access check before
// routing and the --help footer (config.cpp) all read this table, so an endpoint added here is
// served, listed, checked and documented at once (docs/architecture.md "Endpoints"). The rows
// live in the composition root (server/app/endpoint_table.cpp), which includes the handlers.
// Thread safety: the table is immutable static data.
#pragma once

#include "server/http/errors.h"
#include "server/http/http_message.h"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace lineage::server {

struct server_context;
struct dialect;  // server/run/generation.h

/** Who may call an endpoint once API keys are configured (--api-key, --tenant-key,
 *  --admin-api-key; without keys everyone may call everything). */
enum class endpoint_access {
    open,    ///< no key needed (health probes, the base URL)
    tenant,  ///< any known key; the tenant it names scopes what is seen (tenants.h)
    admin,   ///< the admin key only (every tenant's figures)
};

/** The error body shape of an endpoint's API dialect. */
enum class error_shape {
    openai,     ///< {"error": {"message", "type", "param", "code"}}
    anthropic,  ///< {"type": "error", "error": {"type", "message"}} (anthropic_response.h)
};

/** The error body of `e` in `shape` (each dialect writes its own shape: defined with the table,
 *  server/app/endpoint_table.cpp). */
json error_json(error_shape shape, const api_error & e);

using endpoint_handler = void (*)(const http_request &, http_response &, server_context &);

struct endpoint {
    std::string_view method = {};  ///< "GET", "POST" or "DELETE" (httplib answers HEAD with GET's handler)
    std::string_view path = {};    ///< ":id" stands for one path segment
    std::string_view alias = {};   ///< a second path served the same ("" = none), e.g. "/chat/completions"
    endpoint_access access = endpoint_access::tenant;
    /** access admin: why a tenant's key is refused, after "METHOD PATH " in the 403 (e.g. "shows
     *  every tenant's figures"). */
    std::string_view admin_why = {};
    error_shape errors = error_shape::openai;
    bool body_optional = false;  ///< a POST that may come without a body (and so without Content-Type)
    /** Read by a web browser (the cache page and the JSON it polls): the key may also come as the
     *  password of HTTP Basic authentication (any user name), and a 401 asks for it with
     *  `WWW-Authenticate: Basic`, so the browser's own login dialog sends it. GET only. */
    bool browser = false;
    std::string_view note = {};  ///< shown after the endpoint in --help ("" = none)
    /** A generating endpoint: the API dialect handle_generation() runs it with (its `errors`
     *  is this row's too); nullptr for the others, which name their own `handler`. */
    const dialect * generates = nullptr;
    endpoint_handler handler = nullptr;
};

/** Every endpoint lineage-server serves, in the order --help and the 404 answer list them
 *  (the composition root's rows: server/app/endpoint_table.cpp). */
std::span<const endpoint> endpoint_table();

/** The row serving `method` on `path` (its path or alias), or nullptr. */
const endpoint * find_endpoint(std::string_view method, std::string_view path);

/** The first row whose path or alias is `path` with any method, or nullptr: the access and
 *  error shape of a path are the same for all its methods. */
const endpoint * find_path(std::string_view path);

/** The methods `path` is served with, joined by `separator` ("GET or DELETE"; ", " gives the
 *  value of a 405's Allow header, RFC 9110 section 10.2.1); "" when none. */
std::string allowed_methods(std::string_view path, std::string_view separator = " or ");

/** Status and type an HTTP status code gets when httplib answers it without a handler body
 *  (404, 405, 413, ...): an unknown path's 404 lists the endpoints; a served path asked
 *  with another method becomes a 405 naming the methods it takes. */
api_error error_for_status(int status, const std::string & method, const std::string & path,
                           uint64_t max_body_bytes);

/** "METHOD /path (alias /x, note)" for every row, comma-separated: the --help footer and the
 *  404 answer's list. */
std::string endpoint_list();

}  // namespace lineage::server
