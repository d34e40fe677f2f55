// server::chat_request options: the fields of a chat completion body that shape the output
// rather than the conversation: sampling (penalties, logit_bias, top_k, min_p), logprobs,
// response_format, grammar, reasoning_effort, and the OpenAI fields this server refuses
// (docs/api-fields.md). Split from chat_request.cpp by concept.
// Thread safety: pure function over its input.
#pragma once

#include "server/request/chat_request.h"

namespace lineage::server {

/** Reads the output-shaping fields of `body` into `r` (after messages, tools and tool_choice
 *  were read). Throws fields::bad_field naming the field on a bad or refused one. */
void parse_output_options(const json & body, chat_request & r);

}  // namespace lineage::server
