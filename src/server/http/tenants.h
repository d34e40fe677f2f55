// server::tenants: who is calling, from the API key it presents (docs/prompt-cache.md "Tenants and
// access"). A key file maps keys to tenant names; --api-key is one more key, of tenant
// "default"; --admin-api-key opens the global endpoints (all stats, reset of everything,
// /metrics). The tenant is a dimension of the prompt cache's bucket (cache_key.h), so no state
// is shared across tenants, and it scopes GET /v1/cache/stats and POST /v1/cache/reset.
// Thread safety: access_table is immutable after construction; identify() may run on many
// threads at once. parse_key_file is a pure function.
#pragma once

#include "util/status.h"

#include <string>
#include <string_view>
#include <vector>

namespace lineage::server {

/** One line of a key file. */
struct tenant_key {
    std::string key;
    std::string tenant;
};

/** The tenant of requests made with --api-key. */
inline constexpr const char * default_tenant = "default";
/** The tenant of generating requests made with --admin-api-key (a name a key file cannot use). */
inline constexpr const char * admin_tenant = "(admin)";

/** Parses the text of a key file (--api-key-file): one "KEY TENANT" per line, separated by
 *  spaces or tabs; blank lines and lines whose first non-blank character is '#' are skipped.
 *  KEY: any run of printable ASCII without spaces; TENANT: 1-64 characters of [A-Za-z0-9._-].
 *  Appends to `out` and returns ok when every line is valid; otherwise returns the first error
 *  as "line N: what was wrong (what is expected)" and leaves `out` as it was (no key is ever
 *  quoted back). Errors: a line with other than two fields, a bad tenant name, a key given
 *  twice, a file with no key at all. */
util::status parse_key_file(const std::string & text, std::vector<tenant_key> & out);

/** The keys of a server: reads the key file at `path` ("" = none) into `out` (parse_key_file)
 *  and checks that `admin_key` is no tenant's key and `api_key` not in the file. Returns ok or
 *  the error, naming the flag: "--api-key-file 'PATH': line 3: ...", "--api-key-file 'PATH':
 *  cannot read the file", "--admin-api-key is also a tenant's key ...", "--api-key is also in
 *  --api-key-file ...". */
util::status load_tenant_keys(const std::string & path, const std::string & api_key, const std::string & admin_key,
                              std::vector<tenant_key> & out);

/** The caller a request's key identifies. */
struct caller {
    bool known = false;   ///< the key matched (always true when no key is configured)
    bool admin = false;   ///< may read and reset everything, and read /metrics
    std::string tenant;   ///< "" when no key is configured; admin_tenant for the admin key
};

class access_table {
public:
    /** `api_key` (""= none) is tenant "default"; `keys` from a key file; `admin_key` ("" =
     *  none). When `api_key` is the only key (no file, no admin key) it is also the admin key:
     *  with one tenant there is nobody to isolate (the behaviour before tenants existed). */
    access_table(const std::string & api_key, std::vector<tenant_key> keys, const std::string & admin_key);

    /** True when no key is configured: every request is known, admin, tenant "". */
    bool open() const { return keys_.empty() && admin_key_.empty(); }

    /** The caller presenting `given` (nullptr: no key presented). Compares `given` with every
     *  configured key in constant time (http_guard.h api_key_matches), all of them whatever
     *  matches, so the time taken does not tell which key or tenant matched. */
    caller identify(const std::string_view * given) const;

    /** The tenant names configured ("default" for --api-key), sorted, without duplicates. */
    const std::vector<std::string> & tenants() const { return tenants_; }

private:
    std::vector<tenant_key> keys_;
    std::string admin_key_;
    bool api_key_is_admin_ = false;
    std::vector<std::string> tenants_;
};

}  // namespace lineage::server
