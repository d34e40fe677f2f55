// server::completions_handler: POST /v1/completions (docs/prompt-cache.md "Completions (raw
// prompt)"): a raw prompt (text or token ids, no chat template) through the same scheduler and
// cache as chat completions, answered as OpenAI's text_completion (one JSON body or an SSE stream
// ending with "data: [DONE]"), usage with prompt_tokens_details.cached_tokens. The cache key of a
// raw prompt is the bucket of a chat request without tools under the server's default template
// kwargs (chat_preparer::prepare_raw), so a raw prompt equal token for token to such a rendered
// conversation restores it.
// Thread safety: the descriptor is immutable; its prepare step runs on the request's thread.
#pragma once

#include "server/run/generation.h"

namespace lineage::server {

/** The text completions dialect: OpenAI's error shape, log name "completions". */
extern const dialect completions_dialect;

}  // namespace lineage::server
