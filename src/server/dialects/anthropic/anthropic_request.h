// server::anthropic_request: a POST /v1/messages (or /v1/messages/count_tokens) body, the
// Anthropic Messages API, parsed and validated into the native chat_request, so that the same
// chat_preparer renders, tokenizes and keys it: one cache for every dialect. Unknown
// fields are ignored as the official API ignores them; a known field with a wrong type or value
// gets a 400 that names it. The conversion rules (system blocks, a role "system" message inside
// `messages`, tool results, thinking blocks, cache_control) are in docs/prompt-cache.md
// "Anthropic Messages API".
// Thread safety: pure functions over their input (the signer is immutable).
#pragma once

#include "engine/chat_template.h"
#include "server/request/chat_request.h"
#include "server/http/errors.h"
#include "server/dialects/anthropic/thinking_signature.h"

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lineage::server {

/** A `cache_control` mark: the conversation up to and including the marked block, as the first
 *  `n_before` messages of chat_request::messages followed by `last` (the message the block
 *  belongs to, cut after that block). `implicit`: not marked by the client but the end of the
 *  message before a role "system" message inside `messages` (the seam where Claude Code adds to
 *  its first user message while its environment block stays after it). */
struct cache_breakpoint {
    size_t n_before = 0;
    engine::chat_message last;
    bool implicit = false;
};

struct anthropic_request {
    chat_request chat;                        ///< messages, tools, tool_choice, sampling, stop, session
    std::vector<std::string> stop_sequences;  ///< the client's (tells "stop_sequence" from template stops)
    bool thinking_omitted = false;            ///< thinking.display == "omitted": blocks carry no text
    std::vector<cache_breakpoint> breakpoints;  ///< in request order (system first)
    std::vector<std::string> ignored_tools;   ///< names of server tools skipped (logged once)
};

/** Marker that wraps a role "system" message found after the first non-system message: it is
 *  sent to the template as a user message "<system>\n" + text + "\n</system>", since templates
 *  such as Qwen3.5's refuse a system message after the first. */
inline constexpr std::string_view mid_system_open = "<system>\n";
inline constexpr std::string_view mid_system_close = "\n</system>";

/** The conversation up to breakpoint `b` of `r` (same tools and settings), its last text followed
 *  by a sentinel character (U+0001): rendered without a generation prompt, its common prefix
 *  with the whole prompt ends where the marked text ends, before the message's closing tokens
 *  (a later prompt may add to the message) and before a last token that text appended after it
 *  could merge with. */
chat_request breakpoint_conversation(const anthropic_request & r, const cache_breakpoint & b);

/** Parses `body` into `out`. `count_tokens`: the count_tokens body (max_tokens not required).
 *  Thinking blocks must carry a signature `signer` issued. Returns the error to send (a 400
 *  invalid_request_error naming the field) when the body is malformed or invalid. */
std::optional<api_error> parse_anthropic_request(std::string_view body, const thinking_signer & signer, bool count_tokens,
                                                 anthropic_request & out);

}  // namespace lineage::server
