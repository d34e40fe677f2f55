// server::http_message: header and parameter lookups of the handlers' request and response.
#include "server/http/http_message.h"

#include <strings.h>

namespace lineage::server {

namespace {

bool same_name(std::string_view a, std::string_view b) {
    return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

const std::string * find_header(const std::vector<std::pair<std::string, std::string>> & fields,
                                std::string_view name) {
    for (const auto & [k, v] : fields) {
        if (same_name(k, name)) {
            return &v;
        }
    }
    return nullptr;
}

}  // namespace

bool http_request::has_header(std::string_view name) const {
    return find_header(headers, name) != nullptr;
}

std::string http_request::header(std::string_view name) const {
    const std::string * v = find_header(headers, name);
    return v ? *v : std::string();
}

bool http_request::has_param(std::string_view name) const {
    for (const auto & [k, v] : query) {
        if (k == name) {
            return true;
        }
    }
    return false;
}

std::string http_request::param(std::string_view name) const {
    for (const auto & [k, v] : query) {
        if (k == name) {
            return v;
        }
    }
    return {};
}

std::string http_request::path_param(const std::string & name) const {
    const auto it = path_params.find(name);
    return it == path_params.end() ? std::string() : it->second;
}

std::string http_response::header(std::string_view name) const {
    const std::string * v = find_header(headers, name);
    return v ? *v : std::string();
}

void send_json_body(http_response & res, const json & body, int status) {
    res.status = status;
    res.set_content(dump(body), "application/json");
}

}  // namespace lineage::server
