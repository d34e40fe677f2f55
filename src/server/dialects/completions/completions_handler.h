// server::completions_handler: POST /v1/completions (docs/prompt-cache.md "Completions (raw
// prompt)"): a raw prompt (text or token ids, no chat template) through the same scheduler and
// cache as chat completions, answered as OpenAI's text_completion (one JSON body or an SSE stream
// ending with "data: [DONE]"), usage with prompt_tokens_details.cached_tokens. The cache key of a
// raw prompt is the bucket of a chat request without tools under the server's default template
// kwargs (chat_preparer::prepare_raw), so a raw prompt equal token for token to such a rendered
// conversation restores it.
// Thread safety: runs on an httplib worker thread. Ownership: borrows ctx.
#pragma once

#include "server/http/http_fwd.h"

namespace lineage::server {

struct server_context;

void handle_completions(const httplib::Request & req, httplib::Response & res, server_context & ctx);

}  // namespace lineage::server
