// server::json_body: SAX pre-pass (depth, value count, parse errors) then the DOM parse.
#include "server/http/json_body.h"

#include <string>
#include <vector>

namespace lineage::server {

namespace {

// Counts nesting and values; stops at the first limit or parse error (returning false from a
// SAX callback ends the parse).
class limit_checker final : public nlohmann::json_sax<json> {
public:
    explicit limit_checker(const json_limits & lim) : lim_(lim) {}

    bool null() override { return value(); }
    bool boolean(bool) override { return value(); }
    bool number_integer(number_integer_t) override { return value(); }
    bool number_unsigned(number_unsigned_t) override { return value(); }
    bool number_float(number_float_t, const string_t &) override { return value(); }
    bool string(string_t &) override { return value(); }
    bool binary(binary_t &) override { return value(); }
    bool start_object(std::size_t) override {
        keys_.push_back(0);
        return open();
    }
    bool key(string_t &) override {
        if (++keys_.back() > lim_.max_object_keys) {
            error_ = invalid_request("an object in the request body has more than " +
                                         std::to_string(lim_.max_object_keys) + " keys; send a smaller request",
                                     "", "json_too_large");
            return false;
        }
        return true;
    }
    bool end_object() override {
        keys_.pop_back();
        return close();
    }
    bool start_array(std::size_t) override { return open(); }
    bool end_array() override { return close(); }
    bool parse_error(std::size_t, const std::string &, const nlohmann::detail::exception & ex) override {
        if (!error_) {
            api_error e = invalid_request(std::string("the request body is not valid JSON (") + ex.what() +
                                          "); send a JSON object");
            e.code = "invalid_json";
            error_ = std::move(e);
        }
        return false;
    }

    std::optional<api_error> & error() { return error_; }

private:
    bool value() {
        if (++values_ > lim_.max_values) {
            error_ = invalid_request("the request body has more than " + std::to_string(lim_.max_values) +
                                         " JSON values; send a smaller request",
                                     "", "json_too_large");
            return false;
        }
        return true;
    }
    bool open() {
        if (++depth_ > lim_.max_depth) {
            error_ = invalid_request("the request body nests arrays/objects deeper than " +
                                         std::to_string(lim_.max_depth) +
                                         " levels; flatten it (or raise --max-json-depth)",
                                     "", "json_too_deep");
            return false;
        }
        return value();
    }
    bool close() {
        --depth_;
        return true;
    }

    const json_limits & lim_;
    size_t depth_ = 0;
    size_t values_ = 0;
    std::vector<size_t> keys_;  // keys so far of each open object, innermost last
    std::optional<api_error> error_;
};

}  // namespace

json_limits & default_json_limits() {
    static json_limits lim;
    return lim;
}

std::optional<api_error> parse_json_body(std::string_view body, json & out, bool require_object,
                                         const json_limits & lim) {
    limit_checker check(lim);
    bool ok = false;
    try {
        ok = json::sax_parse(body.begin(), body.end(), &check);
    } catch (const std::exception & ex) {  // the library's own limits; never past this function
        api_error e = invalid_request(std::string("the request body is not valid JSON (") + ex.what() + ")");
        e.code = "invalid_json";
        return e;
    }
    if (!ok || check.error()) {
        if (check.error()) {
            return check.error();
        }
        api_error e = invalid_request("the request body is not valid JSON; send a JSON object");
        e.code = "invalid_json";
        return e;
    }
    json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
        api_error e = invalid_request("the request body is not valid JSON; send a JSON object");
        e.code = "invalid_json";
        return e;
    }
    if (require_object && !j.is_object()) {
        api_error e = invalid_request("the request body must be a JSON object");
        e.code = "invalid_json";
        return e;
    }
    out = std::move(j);
    return std::nullopt;
}

}  // namespace lineage::server
