// server::json_body: a request body parsed into JSON with limits checked BEFORE any tree is
// built. Why: a JSON tree nested tens of thousands of levels deep parses fine (the library's
// parser is iterative) but overflows the stack later, in dump() or in the engine's chat-template
// code; a number such as 1e400 made the library throw past our handlers (docs/prompt-cache.md "HTTP
// input"). A SAX pass over the text (no allocation) checks nesting depth and value count and
// turns every parse failure, number overflow included, into a 400 that says where.
// Thread safety: pure functions.
#pragma once

#include "server/http/errors.h"

#include <cstddef>
#include <optional>
#include <string_view>

namespace lineage::server {

struct json_limits {
    /** Deepest nesting of arrays/objects accepted (the body's top-level object is depth 1).
     *  Real requests nest a JSON Schema a few dozen levels at most. */
    size_t max_depth = 128;
    /** Most JSON values (scalars, arrays, objects) in one body. */
    size_t max_values = 4'000'000;
    /** Most keys in one object. The library's objects keep their keys in order and look each
     *  new key up among the earlier ones, so an object's parse takes time growing with the
     *  square of its keys: a logit_bias of 151,936 entries (2 MB) took 18 s before any field
     *  was read; 8,192 keys parse in ~0.1 s (2 shared cores). */
    size_t max_object_keys = 8192;
};

/** Parses `body` into `out` (an object is required when `require_object`). Errors (400,
 *  invalid_request_error): not JSON (the position and reason), nested deeper than
 *  `lim.max_depth` (code "json_too_deep"), more than `lim.max_values` values or an object of
 *  more than `lim.max_object_keys` keys (code "json_too_large"), a number out of range (e.g. 1e400), not an object. `out` is untouched on
 *  error. */
std::optional<api_error> parse_json_body(std::string_view body, json & out, bool require_object = true,
                                         const json_limits & lim = {});

/** The process-wide limits parse_json_body uses by default (set once at startup, before the
 *  server listens, from --max-json-depth). */
json_limits & default_json_limits();

}  // namespace lineage::server
