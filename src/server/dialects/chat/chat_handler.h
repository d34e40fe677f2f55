// server::chat_handler: the chat completions dialect (POST /v1/chat/completions). Its prepare
// step parses the body into the native chat_request, prepares the prompt and makes a writer of
// one chat.completion or an SSE stream of chat.completion.chunk objects; the generation handler
// runs it (server/run/generation.h).
// Thread safety: the descriptor is immutable; its prepare step runs on the request's thread.
#pragma once

#include "server/run/generation.h"

namespace lineage::server {

/** The chat completions dialect: OpenAI's error shape, log name "chat". */
extern const dialect chat_dialect;

}  // namespace lineage::server
