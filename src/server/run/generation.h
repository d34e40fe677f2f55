// server::generation: the one generation handler, and one prepared request run through the
// scheduler whatever the API dialect. An API dialect is a `dialect` descriptor: its name, its
// error shape, and one prepare step that turns the request into the native prepared prompt,
// sampling settings and a response_writer of its dialect (the writer turns generated text into
// that dialect's JSON body or SSE events). handle_generation() does the rest, once for every
// dialect: the error answer, the scheduler request, submission, the event loop, client-disconnect
// cancellation, the log line and the warm-up. Why: one request path, one cache, the same metrics
// and trace for every dialect (docs/architecture.md "Layers", "Dialects").
// Thread safety: runs on the request's HTTP worker thread; the streaming state lives in the
// response's `next` (same thread). Ownership: the generation_request is shared with the
// scheduler; the writer is owned by the run.
#pragma once

#include "engine/chat_template.h"
#include "scheduler/request.h"
#include "server/http/endpoints.h"
#include "server/http/errors.h"
#include "server/http/http_message.h"
#include "server/prepare/chat_prepare.h"

#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace lineage::server {

struct server_context;
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

    /** The finish reason written in the log line (stop, length, tool_calls, end_turn, ...). */
    virtual std::string finish_reason(const scheduler::generation_event & done) const = 0;

    /** After the final body or end_stream(): the reply as parsed (content, reasoning, tool
     *  calls), which the warm-up renders as the next turn's past assistant turn; nullptr when the
     *  dialect has no chat message (raw completions). */
    virtual const engine::chat_parsed * reply() const { return nullptr; }
};

/** What a dialect's prepare step hands the generation handler. */
struct generation_job {
    /** The prompt as the model sees it, its cache hints, grammar, stops and reply parser; its
     *  `preserved_tokens` are passed to the writer as their text. */
    prepared_chat prep;
    scheduler::sampling_params sampling;  ///< its grammar is replaced by prep's
    std::unique_ptr<response_writer> writer;
    bool stream = false;  ///< an SSE stream; false: one JSON body
    /** The chat request `prep` was rendered from; when set, a reply that finishes (stop or
     *  length) queues the warm-up of the conversation's next turn (server/run/warmup.h) once it
     *  has been sent. Null for raw completions. */
    std::shared_ptr<const chat_request> conversation;

    /** The tail of every chat dialect's prepare step: `writer`, and the sampling, stream flag and
     *  conversation of `chat` (moved from). */
    void finish(std::unique_ptr<response_writer> w, chat_request && chat);
};

/** One API dialect that generates: a row of the endpoint table names it (endpoint::generates),
 *  and its folder (server/dialects/<name>/) defines it. */
struct dialect {
    std::string_view name = {};                ///< in the log line: "chat", "messages", "responses", "completions"
    error_shape errors = error_shape::openai;  ///< the shape of every error body it answers
    /** Parses `req` into the native request, prepares the prompt and makes the writer, into
     *  `job`. An error (bad body, unknown model field, a prompt over the context) is answered
     *  with its status in the `errors` shape, before anything is submitted. */
    std::optional<api_error> (*prepare)(const http_request & req, server_context & ctx, generation_job & job) = nullptr;
};

/** The generating endpoints' one handler: `d.prepare`, then the scheduler request, then the
 *  answer through the job's writer: one JSON body (`job.stream` false) or an SSE stream (the HTTP
 *  status waits for the first event, so an error before any output still gets its status). A
 *  client that goes away (req.closed()) cancels the request. While it runs, the request answers
 *  the scheduler's liveness probe (the retry hold). */
void handle_generation(const dialect & d, const http_request & req, http_response & res, server_context & ctx);

/** A scheduler request for a prepared prompt: a fresh id from `ctx`, the prompt tokens, cache
 *  hints and grammar of `prep`, and `sampling` (its own grammar is replaced by prep's). */
std::shared_ptr<scheduler::generation_request> make_generation_request(server_context & ctx, const prepared_chat & prep,
                                                                       const scheduler::sampling_params & sampling);

/** A random id: `prefix` followed by `n` characters of [0-9A-Za-z]. */
std::string random_id(std::string_view prefix, int n = 29);

}  // namespace lineage::server
