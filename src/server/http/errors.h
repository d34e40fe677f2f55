// server::errors: errors that reach a client, in OpenAI's shape
// {"error": {"message", "type", "param", "code"}}. A message says what was wrong and what to
// do about it.
// Thread safety: value types and pure functions.
#pragma once

#include "scheduler/request.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace lineage::server {

using json = nlohmann::ordered_json;

/** A string field that OpenAI's shapes send as null when it has no value: "" -> null. */
inline json string_or_null(const std::string & s) {
    return s.empty() ? json(nullptr) : json(s);
}

/** A map as a JSON object, in the map's key order (counter maps by kind, cause or tier). */
template <class M>
json map_json(const M & m) {
    json j = json::object();
    for (const auto & [k, v] : m) {
        j[k] = v;
    }
    return j;
}

struct api_error {
    int status = 400;                          ///< HTTP status
    std::string type = "invalid_request_error";
    std::string message;
    std::string param;                         ///< "" -> null
    std::string code;                          ///< "" -> null
};

/** 400 invalid_request_error about `param`. */
api_error invalid_request(std::string message, std::string param = "", std::string code = "");

/** 413 request_too_large: a body over --max-body-bytes (`max_body_bytes`, bytes). */
api_error body_too_large(uint64_t max_body_bytes);

/** 500 server_error. */
api_error server_error(std::string message);

/** The one mapping of a scheduler failure to an HTTP status and error fields, for every API
 *  dialect (endpoints.h `error_json` renders it in the dialect's shape):
 *  prompt_too_long 400 invalid_request_error; no_free_sequence, kv_full, shutting_down 503
 *  server_error; decode_failed 500 server_error. The message is the scheduler's. */
api_error to_api_error(const scheduler::request_failure & f);

/** {"error": {...}} */
json to_json(const api_error & e);

/** JSON text of `j`; invalid UTF-8 is replaced (U+FFFD) instead of throwing. */
std::string dump(const json & j);

/** True when `path` is `pattern`, where a ":id" in the pattern stands for one path segment
 *  (e.g. "/v1/responses/:id/cancel"). */
bool path_matches(std::string_view pattern, std::string_view path);


}  // namespace lineage::server
