// server::generation: one prepared request run through the scheduler, whatever the API dialect.
// Every generating endpoint (chat completions, Anthropic messages, responses, completions)
// turns its body into a prepared prompt + sampling settings, then calls run_generation() with a
// response_writer of its dialect: the writer turns generated text into that dialect's JSON body
// or SSE events; everything else (submission, the event loop, client-disconnect cancellation,
// the log line) is here, once. Why: one request path, one cache, the same metrics and trace for
// every dialect (docs/architecture.md "Layers").
// Thread safety: runs on the request's httplib worker thread; the streaming state lives in the
// response's content provider (same thread). Ownership: the generation_request is shared with
// the scheduler; the writer is owned by the run.
#pragma once

#include "engine/chat_template.h"
#include "scheduler/request.h"
#include "server/http/errors.h"
#include "server/http/http_fwd.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>

namespace lineage::server {

struct server_context;
struct prepared_chat;
struct chat_request;

/** A dialect's view of one request's output. Called on the request's thread only. */
class response_writer {
public:
    virtual ~response_writer() = default;

    /** A generated piece of text (end-of-generation tokens are never passed; preserved special
     *  tokens arrive as their text). `ev` is the token event it came from. Returns true when a
     *  stop string matched with this piece: generation is then asked to stop. */
    virtual bool add(const scheduler::generation_event & ev, std::string_view piece) = 0;

    /** Streaming: the bytes to write for what became stable since the last call ("" when
     *  nothing). The first call may open the stream (role chunk, message_start, ...). */
    virtual std::string take_stream() = 0;

    /** Streaming: the bytes that end a successful stream (remaining deltas, the finish event,
     *  usage, and the dialect's terminator). */
    virtual std::string end_stream(const scheduler::generation_event & done) = 0;

    /** Streaming: the bytes of an error after the stream started (status already sent). */
    virtual std::string stream_error(const api_error & e) = 0;

    /** Non-streaming: the body of a successful response. */
    virtual json body(const scheduler::generation_event & done) = 0;

    /** The body of an error sent with its HTTP status (before any output). Default: OpenAI's
     *  {"error": {...}}. */
    virtual json error_body(const api_error & e) const { return to_json(e); }

    /** The finish reason written in the log line (stop, length, tool_calls, end_turn, ...). */
    virtual std::string finish_reason(const scheduler::generation_event & done) const = 0;

    /** After the final body or end_stream(): the reply as parsed (content, reasoning, tool
     *  calls), which the warm-up renders as the next turn's past assistant turn; nullptr when the
     *  dialect has no chat message (raw completions). */
    virtual const engine::chat_parsed * reply() const { return nullptr; }
};

/** A scheduler request for a prepared prompt: a fresh id from `ctx`, the prompt tokens, cache
 *  hints and grammar of `prep`, and `sampling` (its own grammar is replaced by prep's). */
std::shared_ptr<scheduler::generation_request> make_generation_request(server_context & ctx, const prepared_chat & prep,
                                                                       const scheduler::sampling_params & sampling);

/** Submits `gr` and answers `res` through `writer`: one JSON body (`stream` false) or an SSE
 *  stream (`stream` true; the HTTP status waits for the first event, so an error before any
 *  output still gets its status). A client that goes away cancels the request. `dialect` names
 *  the API in the log line ("chat", "messages", "responses", "completions").
 *  `preserved_tokens`: special tokens passed to the writer as their text. `conversation`: the
 *  chat request `gr` was rendered from; when set, a reply that finishes (stop or length) queues
 *  the warm-up of the conversation's next turn (server/run/warmup.h) once it has been sent.
 *  While it runs, the request answers the scheduler's liveness probe (the retry hold). */
void run_generation(const httplib::Request & req, httplib::Response & res, server_context & ctx,
                    std::shared_ptr<scheduler::generation_request> gr, std::unordered_set<int32_t> preserved_tokens,
                    bool stream, std::unique_ptr<response_writer> writer, const char * dialect,
                    std::shared_ptr<const chat_request> conversation = nullptr);

/** A random id: `prefix` followed by `n` characters of [0-9A-Za-z]. */
std::string random_id(std::string_view prefix, int n = 29);

/** Sends `body` with `status` as application/json. */
void send_json_body(httplib::Response & res, const json & body, int status);

}  // namespace lineage::server
