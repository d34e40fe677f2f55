// server::anthropic_fields: the field readers of the Messages API parser (anthropic_request,
// anthropic_messages): each reads one JSON value or throws a bad_field carrying the 400 that
// names the field and says what is accepted. Internal to those two files.
// Thread safety: pure functions.
#pragma once

#include "server/errors.h"

#include <cstdint>
#include <string>

namespace lineage::server::anthropic_fields {

/** Thrown by the readers; parse_anthropic_request returns its error. */
struct bad_field {
    api_error err;
};

/** Throws bad_field{invalid_request(message, param)}. */
[[noreturn]] void fail(const std::string & param, const std::string & message);

/** "a string", "an object", ... for messages. */
const char * type_name(const json & j);

/** A present, non-null member of `obj`, or nullptr. */
const json * field(const json & obj, const char * key);

std::string get_string(const json & v, const std::string & param);
const json & get_object(const json & v, const std::string & param);
bool get_bool(const json & v, const std::string & param);
int64_t get_int(const json & v, const std::string & param);
/** A number in [lo, hi]. */
double get_number(const json & v, const std::string & param, double lo, double hi);

}  // namespace lineage::server::anthropic_fields
