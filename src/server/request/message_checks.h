// server::message_checks: the checks of a conversation's messages that the dialects share, so
// that a chat completion, an Anthropic Messages and a Responses body refuse the same problem in
// the same words: the `messages` array itself (present, an array, not empty, within
// --max-messages), a message's object and role, a content part's object and type, and a tool
// call's arguments' nesting. What a dialect says differently (the roles it names, the part it
// shows, what it asks for when `messages` is missing) is passed in. Each check fails as the
// request parsers' field readers do (fields::fail: a bad_field the parser's entry catches,
// json_fields.h).
// Thread safety: pure functions.
#pragma once

#include "server/http/json_body.h"

#include <initializer_list>
#include <string>
#include <string_view>

namespace lineage::server {

/** The body's `messages`, checked before any message is converted: present ("'messages' is
 *  required: " + `what`), an array, holding at least one message and at most --max-messages
 *  (check_message_count). Fails with param "messages". */
const json & messages_array(const json & body, const std::string & what);

/** The role of the message `msg` at `p` ("messages[3]"): `msg` an object ("'p' must be an object
 *  with 'role' and 'content', got ..."), its `role` present ("'p.role' is required: " + `named`),
 *  a string, and one of `accepted` ("'p.role' is 'X'; expected " + `named`). `named`: how the
 *  dialect names its roles ("one of system, developer, user, assistant, tool"). */
std::string message_role(const json & msg, const std::string & p, std::initializer_list<std::string_view> accepted,
                         const std::string & named);

/** The type of the content part (or block) `part` at `p` ("messages[0].content[1]"): `part` an
 *  object ("'p' must be " + `shape` + ", got ..."), its `type` present ("'p.type' is required" +
 *  `missing`) and a string. `shape`: the part the dialect shows ("an object like {\"type\":
 *  \"text\", \"text\": \"...\"}"); `missing`: what follows when `type` is absent ("" or
 *  "; this server accepts ..."). */
std::string content_part_type(const json & part, const std::string & p, const std::string & shape,
                              const std::string & missing);

/** A tool call's `arguments` (JSON text) at `param`: the template library parses them and
 *  renders them recursively, so they nest no deeper than a body may ("'param' nests ..."; 58k
 *  '[' in arguments crashed the template code). Text that is no JSON passes. */
void check_arguments_nesting(const std::string & arguments, const std::string & param);

}  // namespace lineage::server
