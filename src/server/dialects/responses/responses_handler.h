// server::responses_handler: POST /v1/responses, GET and DELETE /v1/responses/{id}, POST
// /v1/responses/{id}/cancel and GET /v1/responses/{id}/input_items (OpenAI Responses API,
// docs/prompt-cache.md "Other API dialects: Responses and completions"). A request is parsed
// (responses_request), continued from its stored predecessor when it names a previous_response_id
// (response_store), turned into the native chat_request and run through the same preparer,
// scheduler and cache as /v1/chat/completions (server::generation); a stored response (store: true,
// the default) keeps its body and its whole conversation, each item with an id.
// Thread safety: runs on the requests' threads; the store locks itself. Ownership: borrows ctx.
#pragma once

#include "server/http/http_message.h"
#include "server/run/generation.h"

namespace lineage::server {

struct server_context;

/** The Responses dialect (POST /v1/responses): OpenAI's error shape, log name "responses". */
extern const dialect responses_dialect;

/** GET /v1/responses/{id}: the stored response object; 404 (OpenAI error shape) when missing. */
void handle_get_response(const http_request & req, http_response & res, server_context & ctx);

/** DELETE /v1/responses/{id}: {id, object: "response", deleted: true}; 404 when missing. */
void handle_delete_response(const http_request & req, http_response & res, server_context & ctx);

/** POST /v1/responses/{id}/cancel (no body needed): only background responses can be cancelled,
 *  and this server runs none, so a stored response is a 400 saying so (as OpenAI answers for a
 *  synchronous one); 404 when missing. */
void handle_cancel_response(const http_request & req, http_response & res, server_context & ctx);

/** GET /v1/responses/{id}/input_items?limit=&order=&after=: the input items the response was
 *  generated from (the previous responses' conversation, then its own input), as a list object
 *  {object: "list", data, first_id, last_id, has_more}; limit 1..100 (default 20), order asc or
 *  desc (default, newest first), after an item id. 400 for a bad parameter, 404 when missing. */
void handle_list_input_items(const http_request & req, http_response & res, server_context & ctx);

}  // namespace lineage::server
