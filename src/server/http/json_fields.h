// server::fields: reading one JSON request body field by field, each failure a 400 that names
// the field (`param`) and says what is accepted. Shared by the request parsers of the chat
// completion body (chat_request.cpp, chat_request_options.cpp), of the Responses and
// completions bodies (responses_request.cpp, response_items.cpp, completions_request.cpp), of
// the Anthropic Messages body (anthropic_request.cpp, anthropic_messages.cpp), and by the checks
// of a conversation's messages that they share (request/message_checks.cpp).
// Internally a failed check throws bad_field; the parser's entry point (parse_request) catches
// it and returns the api_error. Thread safety: pure functions.
#pragma once

#include "server/http/errors.h"
#include "server/http/json_body.h"

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace lineage::server::fields {

/** Thrown by fail(): the error to answer with. */
struct bad_field {
    api_error err;
};

/** Throws bad_field with a 400 invalid_request_error naming `param`. */
[[noreturn]] void fail(const std::string & param, const std::string & message);

/** "a string", "an integer", ... for messages. */
const char * type_name(const json & j);

/** A present, non-null field of `obj`, or nullptr (OpenAI clients send null for "unset"). */
const json * field(const json & obj, const char * key);

/** The value as the type, or fail(param) saying what it is. */
std::string get_string(const json & v, const std::string & param);
bool get_bool(const json & v, const std::string & param);
/** `v` itself when it is an object, or fail(param) saying what it is. */
const json & get_object(const json & v, const std::string & param);
int64_t get_int(const json & v, const std::string & param);

/** A token limit (max_tokens, max_completion_tokens, max_output_tokens): an integer >= 1.
 *  Values above INT32_MAX are clamped to it (generation ends at the context length anyway, as
 *  Anthropic's clients expect a large limit to be accepted). Throws request_error otherwise. */
int32_t get_token_limit(const json & v, const std::string & param);
double get_number(const json & v, const std::string & param);

/** A number in [lo, hi], or fail(param) with the range. */
double number_in(const json & v, const std::string & param, double lo, double hi);
inline double get_number(const json & v, const std::string & param, double lo, double hi) {
    return number_in(v, param, lo, hi);
}

/** The field `key` of `obj`; fails "'param' is required[: what]" when absent or null. */
const json & require(const json & obj, const char * key, const std::string & param, const std::string & what);

/** A number as JSON writes it (3.0, -2.5). */
std::string fmt_number(double v);

/** A body read by `steps` in turn, each filling `r` from its fields or failing, once the body is
 *  known to be an object: the order of the steps is the order of the checks, so the first
 *  problem found is the one answered. */
template <class T>
void read_body(const json & body, T & r,
               std::initializer_list<std::type_identity_t<void (*)(const json &, T &)>> steps) {
    if (!body.is_object()) {
        fail("", std::string("the request body must be a JSON object, got ") + type_name(body));
    }
    for (const auto step : steps) {
        step(body, r);
    }
}

/** A request parser's entry point: `body` parsed as JSON (parse_json_body, the process-wide
 *  limits; any JSON value, `read` checks the shape), then `read(j, r)` fills a fresh T, throwing
 *  bad_field on a bad field. Returns the first error (JSON or field); `out` is assigned only
 *  on success. */
template <class T, class Read>
std::optional<api_error> parse_request(std::string_view body, T & out, Read && read) {
    json j;
    if (auto err = parse_json_body(body, j, /*require_object=*/false, default_json_limits())) {
        return err;
    }
    T r;
    try {
        read(j, r);
    } catch (const bad_field & b) {
        return b.err;
    }
    out = std::move(r);
    return std::nullopt;
}

}  // namespace lineage::server::fields
