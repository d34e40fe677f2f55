// server::errors: OpenAI-shaped error bodies.
#include "server/http/errors.h"

#include <string_view>

namespace lineage::server {

api_error invalid_request(std::string message, std::string param, std::string code) {
    api_error e;
    e.status = 400;
    e.type = "invalid_request_error";
    e.message = std::move(message);
    e.param = std::move(param);
    e.code = std::move(code);
    return e;
}

api_error body_too_large(uint64_t max_body_bytes) {
    api_error e;
    e.status = 413;
    e.message = "request body is larger than " + std::to_string(max_body_bytes) +
                " bytes; send a smaller request or raise --max-body-bytes";
    e.code = "request_too_large";
    return e;
}

api_error server_error(std::string message) {
    api_error e;
    e.status = 500;
    e.type = "server_error";
    e.message = std::move(message);
    return e;
}

api_error to_api_error(const scheduler::request_failure & f) {
    api_error e;
    e.message = f.message.empty() ? "generation failed" : f.message;
    switch (f.kind) {
        case scheduler::failure_kind::prompt_too_long:
        case scheduler::failure_kind::bad_grammar:
            e.status = 400;
            e.type = "invalid_request_error";
            break;
        case scheduler::failure_kind::grammar_too_costly:
            e.status = 400;
            e.type = "invalid_request_error";
            e.code = "grammar_too_costly";
            break;
        case scheduler::failure_kind::no_free_sequence:
        case scheduler::failure_kind::kv_full:
        case scheduler::failure_kind::shutting_down:
            e.status = 503;
            e.type = "server_error";
            break;
        case scheduler::failure_kind::decode_failed:
            e.status = 500;
            e.type = "server_error";
            break;
    }
    return e;
}

json to_json(const api_error & e) {
    json err = json::object();
    err["message"] = e.message;
    err["type"] = e.type;
    err["param"] = string_or_null(e.param);
    err["code"] = string_or_null(e.code);
    json out = json::object();
    out["error"] = std::move(err);
    return out;
}

std::string dump(const json & j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool path_matches(std::string_view pattern, std::string_view path) {
    const auto id = pattern.find(":id");
    if (id == std::string_view::npos) {
        return pattern == path;
    }
    const std::string_view rest = pattern.substr(id + 3);  // after ":id": "" or "/..."
    if (path.size() <= id + rest.size() || path.substr(0, id) != pattern.substr(0, id) ||
        path.substr(path.size() - rest.size()) != rest) {
        return false;
    }
    const std::string_view segment = path.substr(id, path.size() - id - rest.size());
    return segment.find('/') == std::string_view::npos;
}


}  // namespace lineage::server
