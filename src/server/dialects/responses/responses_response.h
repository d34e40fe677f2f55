// server::responses_response: the Responses API's output (docs/prompt-cache.md "Responses: usage
// and streaming"): the `response` object (output items: reasoning, message with output_text,
// function_call; status; usage with input_tokens_details.cached_tokens and
// output_tokens_details.reasoning_tokens) and its
// streaming events, named as the official `openai` client's types name them, each with a
// sequence_number: response.created, response.in_progress, then per item
// response.output_item.added, (content_part.added, reasoning_text.delta | output_text.delta
// ..., *.done, content_part.done | function_call_arguments.delta ..., .done),
// response.output_item.done, and last response.completed (response.incomplete when
// max_output_tokens or the context ended it).
// responses_output turns parser deltas (engine::chat_output_parser over server::text_stream,
// as chat_output does) into those events; apply() takes deltas directly (unit tests).
// Thread safety: one per request, used by its HTTP thread.
#pragma once

#include "engine/chat_template.h"
#include "scheduler/request.h"
#include "server/http/errors.h"
#include "server/dialects/responses/responses_request.h"
#include "server/run/delta_pump.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace lineage::server {

class reasoning_seal;

/** What a response object echoes of its request, and how its output is shaped. */
struct responses_meta {
    std::string id;             ///< "resp_..."
    std::string model;
    int64_t created_at = 0;     ///< unix seconds
    json echo = json::object(); ///< request fields echoed in every response object (instructions, tools, ...)
    bool include_encrypted_reasoning = false;
    const reasoning_seal * seal = nullptr;       ///< required when include_encrypted_reasoning
    std::map<std::string, std::string> tool_namespaces;  ///< function name -> namespace
    std::function<int32_t(const std::string &)> count_tokens;  ///< reasoning_tokens; nullptr: 0
};

/** `usage` of a response: {input_tokens, input_tokens_details: {cached_tokens}, output_tokens,
 *  output_tokens_details: {reasoning_tokens}, total_tokens}. */
json responses_usage_json(const scheduler::request_stats & s, int32_t prompt_tokens, int32_t reasoning_tokens);

/** One SSE event: "event: <type>\ndata: <json>\n\n". */
std::string sse_named_event(const json & ev);

class responses_output {
public:
    responses_output(responses_meta meta, engine::chat_parse_params parser, std::vector<std::string> stops,
                     int32_t prompt_tokens);

    /** Adds a generated piece; true when a stop string matched with it (see text_stream). */
    bool add(std::string_view piece);

    /** Streaming: the events for what became stable since the last call; the first call starts
     *  with response.created and response.in_progress. */
    std::vector<json> take_events();

    /** Streaming: the remaining deltas, the open item's closing events and response.completed
     *  (or response.incomplete). */
    std::vector<json> final_events(const scheduler::generation_event & done);

    /** Non-streaming: the response object. */
    json final_response(const scheduler::generation_event & done);

    /** Applies parser deltas (events are queued for take_events); public for tests. */
    void apply(const std::vector<engine::chat_delta> & deltas);

    /** The finish reason of the log line: stop, length or tool_calls. */
    std::string finish_reason(const scheduler::generation_event & done) const;

    /** The reply as parsed (the warm-up's past assistant turn); final after final_*(). */
    const engine::chat_parsed & message() const { return pump_.message(); }

    /** The output items of the finished response (for the store); valid after final_*(). */
    const std::vector<response_item> & output_items() const { return items_; }

    /** The response object as of now (status "in_progress" until final_*()). */
    json response_object() const;

    /** The error event of a stream that fails after it started. */
    json error_event(const api_error & e);

private:
    enum class open_kind { none, reasoning, message, function_call };

    json event(const char * type);  // {type, sequence_number}
    void start();
    void close_open();
    void open_item(open_kind k, size_t tool_index, const engine::chat_delta * d);
    json item_json(size_t i, const char * status) const;
    void finish(const scheduler::generation_event & done);

    responses_meta meta_;
    delta_pump pump_;  ///< the text, its stop strings and the parser's deltas
    int32_t prompt_tokens_;
    int64_t seq_ = 0;
    bool started_ = false;
    std::vector<json> events_;
    std::vector<response_item> items_;   ///< output items so far (index = output_index)
    std::vector<std::string> item_status_;  ///< in_progress | completed | incomplete, per item
    open_kind open_ = open_kind::none;
    std::map<size_t, size_t> tool_items_;  ///< parser tool-call index -> output_index
    std::string status_ = "in_progress";
    json usage_ = nullptr;
    bool length_ = false;
};

}  // namespace lineage::server
