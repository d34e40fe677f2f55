// server::anthropic_messages: the conversation of a Messages API body (`system` and
// `messages`) converted into chat_request messages, following the rules of docs/prompt-cache.md
// "Anthropic Messages API": system blocks as parts (Claude Code's billing header dropped), a
// role "system" message inside `messages`, text / tool_use / tool_result / thinking blocks, and
// the cache_control marks as cache_breakpoints. Internal to anthropic_request.
// Thread safety: pure function over its input (the signer is immutable).
#pragma once

#include "server/dialects/anthropic/anthropic_request.h"

namespace lineage::server {

/** Converts `body`'s `system` and `messages` into `r.chat.messages` and `r.breakpoints`.
 *  Throws fields::bad_field (a 400 naming the field) when they are invalid. */
void convert_conversation(const json & body, const thinking_signer & signer, anthropic_request & r);

}  // namespace lineage::server
