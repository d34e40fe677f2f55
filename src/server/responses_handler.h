// server::responses_handler: POST /v1/responses, GET /v1/responses/{id} and DELETE
// /v1/responses/{id} (OpenAI Responses API, issue 11). A request is parsed
// (responses_request), continued from its stored predecessor when it names a
// previous_response_id (response_store), turned into the native chat_request and run through the
// same preparer, scheduler and cache as /v1/chat/completions (server::generation); a stored
// response (store: true, the default) keeps its body and its whole conversation.
// Thread safety: runs on httplib worker threads; the store locks itself. Ownership: borrows ctx.
#pragma once

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace lineage::server {

struct server_context;

void handle_responses(const httplib::Request & req, httplib::Response & res, server_context & ctx);

/** GET /v1/responses/{id}: the stored response object; 404 (OpenAI error shape) when missing. */
void handle_get_response(const httplib::Request & req, httplib::Response & res, server_context & ctx);

/** DELETE /v1/responses/{id}: {id, object: "response", deleted: true}; 404 when missing. */
void handle_delete_response(const httplib::Request & req, httplib::Response & res, server_context & ctx);

}  // namespace lineage::server
