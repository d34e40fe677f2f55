// server::http_guard: checks a request must pass before any handler sees it (docs/prompt-cache.md
// "HTTP input", "Tenants and access"): the API key compared in constant time; JSON endpoints refuse
// the content types a browser may send cross-site without a preflight (text/plain, form encodings)
// and bodies with no type at all, so a web page cannot POST to a local server (CSRF); and the Host
// header is checked against an allow-list so that a DNS-rebinding page cannot reach a server that
// has no key.
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace lineage::server {

/** True when `given` equals `key`. The time taken depends only on the lengths' maximum, not
 *  on where the strings differ or on the key's length (both are hashed with SHA-256 first,
 *  then compared with OpenSSL's CRYPTO_memcmp). */
bool api_key_matches(std::string_view given, std::string_view key);

/** True when `content_type` (a Content-Type header value, parameters allowed) is JSON:
 *  application/json or application/<x>+json, case-insensitive. */
bool is_json_content_type(std::string_view content_type);

/** True when the Host header value `host` (with or without a port; IPv6 in brackets) may reach
 *  the server. Always allowed: an empty header (HTTP/1.0), IP literals (a DNS-rebinding attack
 *  needs a name it controls), "localhost" and names under ".localhost". Otherwise the host name
 *  must equal (case-insensitive) an entry of `allowed`, or `allowed` contains "*". */
bool host_allowed(std::string_view host, const std::vector<std::string> & allowed);

}  // namespace lineage::server
