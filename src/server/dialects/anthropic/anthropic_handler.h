// server::anthropic_handler: POST /v1/messages and POST /v1/messages/count_tokens (the
// Anthropic Messages API, with or without Claude Code's ?beta=true). A messages body is
// converted into the native chat_request (anthropic_request), prepared by the same
// chat_preparer as chat completions (one cache for every dialect), its cache_control marks
// measured in tokens and passed to the cache as breakpoints, and run by the generation handler
// (server/run/generation.h) with a messages_writer. Errors are in Anthropic's shape.
// Thread safety: runs on the request's thread. Ownership: borrows the server context.
#pragma once

#include "server/http/http_message.h"
#include "server/run/generation.h"

namespace lineage::server {

struct server_context;

/** The Messages dialect (POST /v1/messages): Anthropic's error shape, log name "messages". */
extern const dialect messages_dialect;

/** {"input_tokens": N}: the prompt tokens the same body would have on /v1/messages. */
void handle_count_tokens(const http_request & req, http_response & res, server_context & ctx);

/** POST /apply-template?api=messages: {"prompt"}, the text /v1/messages tokenizes (with
 *  parse_special) for a Messages body (max_tokens not required). */
void handle_messages_apply_template(const http_request & req, http_response & res, server_context & ctx);

}  // namespace lineage::server
