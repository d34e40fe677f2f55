// server::message_checks: the dialects' shared checks of a conversation's messages.
#include "server/request/message_checks.h"

#include "server/http/json_fields.h"
#include "server/http/request_limits.h"

#include <algorithm>

namespace lineage::server {

using namespace fields;

const json & messages_array(const json & body, const std::string & what) {
    const json & messages = require(body, "messages", "messages", what);
    if (!messages.is_array()) {
        fail("messages", "'messages' must be an array, got " + std::string(type_name(messages)));
    }
    if (messages.empty()) {
        fail("messages", "'messages' must contain at least one message");
    }
    if (auto e = check_message_count(messages.size(), "messages")) {  // before any is converted
        throw bad_field{*e};
    }
    return messages;
}

std::string message_role(const json & msg, const std::string & p, std::initializer_list<std::string_view> accepted,
                         const std::string & named) {
    if (!msg.is_object()) {
        fail(p, "'" + p + "' must be an object with 'role' and 'content', got " + type_name(msg));
    }
    std::string role = get_string(require(msg, "role", p + ".role", named), p + ".role");
    if (std::find(accepted.begin(), accepted.end(), role) == accepted.end()) {
        fail(p + ".role", "'" + p + ".role' is '" + role + "'; expected " + named);
    }
    return role;
}

std::string content_part_type(const json & part, const std::string & p, const std::string & shape,
                              const std::string & missing) {
    if (!part.is_object()) {
        fail(p, "'" + p + "' must be " + shape + ", got " + type_name(part));
    }
    const json * type = field(part, "type");
    if (!type) {
        fail(p + ".type", "'" + p + ".type' is required" + missing);
    }
    return get_string(*type, p + ".type");
}

void check_arguments_nesting(const std::string & arguments, const std::string & param) {
    json parsed;
    if (auto err = parse_json_body(arguments, parsed, /*require_object=*/false, default_json_limits());
        err && err->code == "json_too_deep") {
        fail(param, "'" + param + "' " + err->message.substr(err->message.find("nests")));
    }
}

}  // namespace lineage::server
