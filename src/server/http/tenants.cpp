// server::tenants: the key file parser and the constant-time key lookup.
#include "server/http/tenants.h"

#include "server/http/http_guard.h"
#include "util/files.h"

#include <algorithm>
#include <set>
#include <sstream>

namespace lineage::server {

namespace {

bool valid_tenant(const std::string & t) {
    if (t.empty() || t.size() > 64) {
        return false;
    }
    return std::all_of(t.begin(), t.end(), [](unsigned char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
               c == '-';
    });
}

bool printable(const std::string & s) {
    return std::all_of(s.begin(), s.end(), [](unsigned char c) { return c > 0x20 && c < 0x7f; });
}

}  // namespace

util::status parse_key_file(const std::string & text, std::vector<tenant_key> & out) {
    std::vector<tenant_key> found;
    std::set<std::string> keys;
    std::istringstream in(text);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
        ++n;
        if (!line.empty() && line.back() == '\r') {
            line.pop_back();
        }
        std::istringstream fields(line);
        std::vector<std::string> f;
        for (std::string w; fields >> w;) {
            f.push_back(w);
        }
        if (f.empty() || f[0][0] == '#') {
            continue;
        }
        const std::string where = "line " + std::to_string(n) + ": ";
        if (f.size() != 2) {
            return util::status::error(where + "expected 'KEY TENANT' (two fields separated by spaces), got " +
                                       std::to_string(f.size()) + " field" + (f.size() == 1 ? "" : "s"));
        }
        if (!printable(f[0])) {
            return util::status::error(where + "the key has a non-printable or non-ASCII character");
        }
        if (!valid_tenant(f[1])) {
            return util::status::error(where + "tenant name '" + f[1] +
                                       "' is not 1-64 characters of A-Z a-z 0-9 . _ -");
        }
        if (!keys.insert(f[0]).second) {
            return util::status::error(where +
                                       "this key is already given on an earlier line (each key names one tenant)");
        }
        found.push_back({f[0], f[1]});
    }
    if (found.empty()) {
        return util::status::error("no key in the file: add lines 'KEY TENANT'");
    }
    out.insert(out.end(), found.begin(), found.end());
    return util::status::ok();
}

util::status load_tenant_keys(const std::string & path, const std::string & api_key, const std::string & admin_key,
                              std::vector<tenant_key> & out) {
    if (!path.empty()) {
        const std::optional<std::string> text = util::read_whole_file(path);
        if (!text) {
            return util::status::error("--api-key-file '" + path + "': cannot read the file");
        }
        if (const util::status err = parse_key_file(*text, out); !err.is_ok()) {
            return util::status::error("--api-key-file '" + path + "': " + err.message());
        }
    }
    auto in_file = [&](const std::string & key) {
        return std::any_of(out.begin(), out.end(), [&](const tenant_key & k) { return k.key == key; });
    };
    if (!admin_key.empty() && (admin_key == api_key || in_file(admin_key))) {
        return util::status::error(
            "--admin-api-key is also a tenant's key (--api-key or --api-key-file): give the admin a key of its own");
    }
    if (!api_key.empty() && in_file(api_key)) {
        return util::status::error("--api-key is also in --api-key-file: give each key once");
    }
    return util::status::ok();
}

access_table::access_table(const std::string & api_key, std::vector<tenant_key> keys, const std::string & admin_key)
    : keys_(std::move(keys)), admin_key_(admin_key) {
    if (!api_key.empty()) {
        api_key_is_admin_ = keys_.empty() && admin_key_.empty();
        keys_.insert(keys_.begin(), tenant_key{api_key, default_tenant});
    }
    for (const auto & k : keys_) {
        tenants_.push_back(k.tenant);
    }
    std::sort(tenants_.begin(), tenants_.end());
    tenants_.erase(std::unique(tenants_.begin(), tenants_.end()), tenants_.end());
}

caller access_table::identify(const std::string_view * given) const {
    caller c;
    if (open()) {
        c.known = true;
        c.admin = true;
        return c;
    }
    if (given == nullptr) {
        return c;
    }
    // Every key is compared, whichever matches (no early exit).
    const tenant_key * match = nullptr;
    for (const auto & k : keys_) {
        const bool m = api_key_matches(*given, k.key);
        if (m && match == nullptr) {
            match = &k;
        }
    }
    const bool admin = !admin_key_.empty() && api_key_matches(*given, admin_key_);
    if (admin) {
        c.known = true;
        c.admin = true;
        c.tenant = admin_tenant;
    } else if (match != nullptr) {
        c.known = true;
        c.admin = api_key_is_admin_;
        c.tenant = match->tenant;
    }
    return c;
}

}  // namespace lineage::server
