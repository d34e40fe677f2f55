// libFuzzer target: the request body reader (server/http/json_body.h), which every JSON
// endpoint runs before anything else. Any input is a body, read with small limits (depth 16,
// 512 values) and with the server's defaults, as an object and as any value: it must never
// crash, throw or recurse past its limits; a body it accepts is JSON the library accepts, within
// the limits; a body the library accepts within the limits it never refuses; a refusal is a
// 400 error value with a code (invalid_json, json_too_deep, json_too_large).
// Build and run: docs/prompt-cache.md "Security and failure model" > "Fuzzing".
#include "fuzz_request.h"

using namespace lineage;

namespace {

// The text's deepest nesting and its number of values (every scalar, array and object, those
// of a repeated key included: the tree keeps only one), measured without limits. The reader
// must refuse exactly the bodies beyond its limits by this measure.
class measure final : public nlohmann::json_sax<server::json> {
public:
    size_t depth = 0, deepest = 0, values = 0;

    bool null() override { return ++values; }
    bool boolean(bool) override { return ++values; }
    bool number_integer(number_integer_t) override { return ++values; }
    bool number_unsigned(number_unsigned_t) override { return ++values; }
    bool number_float(number_float_t, const string_t &) override { return ++values; }
    bool string(string_t &) override { return ++values; }
    bool binary(binary_t &) override { return ++values; }
    bool start_object(std::size_t) override { return open(); }
    bool key(string_t &) override { return true; }
    bool end_object() override { return --depth, true; }
    bool start_array(std::size_t) override { return open(); }
    bool end_array() override { return --depth, true; }
    bool parse_error(std::size_t, const std::string &, const nlohmann::detail::exception &) override { return false; }

private:
    bool open() {
        deepest = std::max(deepest, ++depth);
        return ++values;
    }
};

void read_with(std::string_view body, const server::json_limits & lim, bool require_object) {
    server::json j;
    const auto err = fuzz::no_throw("parse_json_body", [&] { return server::parse_json_body(body, j, require_object, lim); });
    // The library's own verdict, without limits (its parser is iterative, so a deep body is safe
    // here, and is destroyed iteratively).
    const server::json ref = server::json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
    const bool valid = !ref.is_discarded();
    measure m;
    if (valid != server::json::sax_parse(body.begin(), body.end(), &m)) {
        fuzz::finding("the library's DOM and SAX parsers disagree");
    }
    const bool within = valid && m.deepest <= lim.max_depth && m.values <= lim.max_values;
    if (!err) {
        if (!valid || !within) {
            fuzz::finding("accepted a body the library refuses or one beyond the limits");
        }
        if (require_object && !j.is_object()) {
            fuzz::finding("accepted a non-object where an object is required");
        }
        if (j != ref) {
            fuzz::finding("the body read differs from the library's parse");
        }
        return;
    }
    fuzz::check_rejection(*err);
    if (err->code != "invalid_json" && err->code != "json_too_deep" && err->code != "json_too_large") {
        fuzz::finding("a refusal with code '" + err->code + "'");
    }
    if (within && (!require_object || ref.is_object())) {
        fuzz::finding("refused a valid body within the limits: " + err->message);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    const std::string_view body(reinterpret_cast<const char *>(data), size);
    if (auto e = fuzz::body_limit(body, "/tokenize")) {
        fuzz::check_rejection(*e);
        return 0;
    }
    const server::json_limits small{.max_depth = 16, .max_values = 512};
    for (const bool require_object : {true, false}) {
        read_with(body, small, require_object);
        read_with(body, server::default_json_limits(), require_object);
    }
    return 0;
}
