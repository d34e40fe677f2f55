// server::parse_chat_request: a POST /v1/chat/completions body, parsed and validated into the
// request every dialect converts to (server/request/chat_request.h). Every field of OpenAI's
// request is either honoured or refused with a 400 that names it (`param`), apart from
// documented no-ops (docs/api-fields.md); fields unknown to OpenAI are ignored (clients send
// vendor extras). Known fields with a wrong type or an out-of-range value are rejected with a
// 400 that names the field and says what is accepted.
// Thread safety: pure function over its input.
#pragma once

#include "server/http/errors.h"
#include "server/request/chat_request.h"

#include <optional>
#include <string_view>

namespace lineage::server {

/** Parses `body` into `out`. Returns the error to send when the body is malformed or invalid. */
std::optional<api_error> parse_chat_request(std::string_view body, chat_request & out);

}  // namespace lineage::server
