// server::fields: typed reads of JSON request fields with 400s that name them.
#include "server/http/json_fields.h"

#include <algorithm>
#include <limits>

namespace lineage::server::fields {

[[noreturn]] void fail(const std::string & param, const std::string & message) {
    throw bad_field{invalid_request(message, param)};
}

const char * type_name(const json & j) {
    switch (j.type()) {
        case json::value_t::null:            return "null";
        case json::value_t::object:          return "an object";
        case json::value_t::array:           return "an array";
        case json::value_t::string:          return "a string";
        case json::value_t::boolean:         return "a boolean";
        case json::value_t::number_integer:
        case json::value_t::number_unsigned: return "an integer";
        case json::value_t::number_float:    return "a number";
        default:                             return "an unsupported value";
    }
}

const json * field(const json & obj, const char * key) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
        return nullptr;
    }
    return &*it;
}

std::string get_string(const json & v, const std::string & param) {
    if (!v.is_string()) {
        fail(param, "'" + param + "' must be a string, got " + type_name(v));
    }
    return v.get<std::string>();
}

bool get_bool(const json & v, const std::string & param) {
    if (!v.is_boolean()) {
        fail(param, "'" + param + "' must be a boolean (true or false), got " + type_name(v));
    }
    return v.get<bool>();
}

const json & get_object(const json & v, const std::string & param) {
    if (!v.is_object()) {
        fail(param, "'" + param + "' must be an object, got " + type_name(v));
    }
    return v;
}

int64_t get_int(const json & v, const std::string & param) {
    if (v.is_number_unsigned()) {
        const auto u = v.get<uint64_t>();
        if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
            fail(param, "'" + param + "' is too large");
        }
        return static_cast<int64_t>(u);
    }
    if (!v.is_number_integer()) {
        fail(param, "'" + param + "' must be an integer, got " + type_name(v));
    }
    return v.get<int64_t>();
}

int32_t get_token_limit(const json & v, const std::string & param) {
    constexpr auto max = static_cast<uint64_t>(std::numeric_limits<int32_t>::max());
    if (v.is_number_unsigned() && v.get<uint64_t>() > max) {
        return std::numeric_limits<int32_t>::max();
    }
    const int64_t n = get_int(v, param);
    if (n < 1) {
        fail(param, "'" + param + "' is " + std::to_string(n) + "; it must be at least 1");
    }
    return static_cast<int32_t>(std::min<int64_t>(n, std::numeric_limits<int32_t>::max()));
}

double get_number(const json & v, const std::string & param) {
    if (!v.is_number()) {
        fail(param, "'" + param + "' must be a number, got " + type_name(v));
    }
    return v.get<double>();
}

std::string fmt_number(double v) {
    std::string s = json(v).dump();
    return s;
}

double number_in(const json & v, const std::string & param, double lo, double hi) {
    const double x = get_number(v, param);
    if (!(x >= lo && x <= hi)) {
        fail(param, "'" + param + "' is " + fmt_number(x) + "; it must be between " + fmt_number(lo) + " and " +
                        fmt_number(hi));
    }
    return x;
}

const json & require(const json & obj, const char * key, const std::string & param, const std::string & what) {
    const json * v = field(obj, key);
    if (!v) {
        fail(param, "'" + param + "' is required" + (what.empty() ? "" : ": " + what));
    }
    return *v;
}

}  // namespace lineage::server::fields
