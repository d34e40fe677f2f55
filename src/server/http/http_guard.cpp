// server::http_guard: API key, content type and Host checks.
#include "server/http/http_guard.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cctype>

namespace lineage::server {

namespace {

std::string lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
    return out;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
        s.remove_prefix(1);
    }
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
        s.remove_suffix(1);
    }
    return s;
}

bool is_ip_literal(const std::string & name) {
    unsigned char buf[16];
    return inet_pton(AF_INET, name.c_str(), buf) == 1 || inet_pton(AF_INET6, name.c_str(), buf) == 1;
}

}  // namespace

bool api_key_matches(std::string_view given, std::string_view key) {
    unsigned char a[SHA256_DIGEST_LENGTH];
    unsigned char b[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char *>(given.data()), given.size(), a);
    SHA256(reinterpret_cast<const unsigned char *>(key.data()), key.size(), b);
    return CRYPTO_memcmp(a, b, sizeof(a)) == 0;
}

bool is_json_content_type(std::string_view content_type) {
    const std::string t = lower(trim(content_type.substr(0, content_type.find(';'))));
    if (t == "application/json") {
        return true;
    }
    const std::string prefix = "application/";
    const std::string suffix = "+json";
    return t.size() > prefix.size() + suffix.size() && t.compare(0, prefix.size(), prefix) == 0 &&
           t.compare(t.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool host_allowed(std::string_view host, const std::vector<std::string> & allowed) {
    host = trim(host);
    if (host.empty()) {
        return true;
    }
    std::string name;
    if (host.front() == '[') {  // [v6]:port
        const size_t close = host.find(']');
        if (close == std::string_view::npos) {
            return false;
        }
        name = std::string(host.substr(1, close - 1));
    } else {
        const size_t colon = host.rfind(':');
        name = lower(colon == std::string_view::npos ? host : host.substr(0, colon));
    }
    while (!name.empty() && name.back() == '.') {
        name.pop_back();  // "localhost." is localhost
    }
    if (is_ip_literal(name) || name == "localhost" ||
        (name.size() > 10 && name.compare(name.size() - 10, 10, ".localhost") == 0)) {
        return true;
    }
    return std::any_of(allowed.begin(), allowed.end(),
                       [&](const std::string & a) { return a == "*" || lower(a) == name; });
}

}  // namespace lineage::server
