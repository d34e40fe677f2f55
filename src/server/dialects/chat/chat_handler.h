// server::chat_handler: POST /v1/chat/completions. Parses and prepares the request, submits it
// to the scheduler and turns the request's events into one chat.completion or an SSE stream of
// chat.completion.chunk objects. A client that goes away cancels its request.
// Thread safety: runs on an httplib worker thread; the streaming state lives in the response's
// content provider (same thread). Ownership: the generation_request is shared with the scheduler.
#pragma once

#include "server/http/http_fwd.h"

namespace lineage::server {

struct server_context;

void handle_chat_completions(const httplib::Request & req, httplib::Response & res, server_context & ctx);

}  // namespace lineage::server
