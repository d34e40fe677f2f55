// server::json_fields: the checks every request parser of the HTTP layer makes on JSON fields
// (type, presence, range), each failing with a 400 that names the field (`param`) and says what
// is accepted (STYLE.md "Errors"). A failed check throws field_error; a parser's public entry
// point catches it and returns the api_error.
// Thread safety: pure functions.
#pragma once

#include "server/errors.h"

#include <cstdint>
#include <string>

namespace lineage::server::json_fields {

/** What a failed check throws. */
struct field_error {
    api_error err;
};

/** Throws field_error{invalid_request(message, param)}. */
[[noreturn]] void fail(const std::string & param, const std::string & message);

/** "a string", "an integer", ... for messages. */
const char * type_name(const json & j);

/** A present, non-null field of `obj`, or nullptr (clients send null for "unset"). */
const json * field(const json & obj, const char * key);

/** The field `key` of `obj`; throws "'param' is required[: what]" when absent or null. */
const json & require(const json & obj, const char * key, const std::string & param, const std::string & what);

std::string get_string(const json & v, const std::string & param);
bool get_bool(const json & v, const std::string & param);
/** An integer that fits int64_t. */
int64_t get_int(const json & v, const std::string & param);
/** A number in [lo, hi]. */
double get_number(const json & v, const std::string & param, double lo, double hi);

}  // namespace lineage::server::json_fields
