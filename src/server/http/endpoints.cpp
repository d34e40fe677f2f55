// server::endpoints: lookups over the endpoint table (endpoints.h); the table itself is the
// composition root's (server/app/endpoint_table.cpp).
#include "server/http/endpoints.h"

#include "server/http/errors.h"

namespace lineage::server {

namespace {

bool serves(const endpoint & e, std::string_view path) {
    return path_matches(e.path, path) || (!e.alias.empty() && path_matches(e.alias, path));
}

}  // namespace

const endpoint * find_endpoint(std::string_view method, std::string_view path) {
    for (const auto & e : endpoint_table()) {
        if (e.method == method && serves(e, path)) {
            return &e;
        }
    }
    return nullptr;
}

const endpoint * find_path(std::string_view path) {
    for (const auto & e : endpoint_table()) {
        if (serves(e, path)) {
            return &e;
        }
    }
    return nullptr;
}

std::string allowed_methods(std::string_view path, std::string_view separator) {
    std::string allowed;
    for (const auto & e : endpoint_table()) {
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
    for (const auto & e : endpoint_table()) {
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
