// server::chat_response: the JSON a chat completion answers with, in OpenAI's shapes
// (chat.completion, chat.completion.chunk), plus usage (with prompt_tokens_details.cached_tokens)
// and lineage's non-standard `timings`. Also chat_output: one request's generated text turned
// into those objects, for streaming (deltas as they become stable) and non-streaming use.
// Thread safety: chat_output belongs to one request (its HTTP thread).
#pragma once

#include "engine/chat_template.h"
#include "scheduler/request.h"
#include "server/http/errors.h"
#include "server/run/delta_pump.h"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace lineage::server {

struct completion_meta {
    std::string id;       ///< "chatcmpl-..."
    std::string model;    ///< model id echoed in every object
    int64_t created = 0;  ///< unix seconds
};

/** {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details: {cached_tokens}}.
 *  `prompt_tokens` is used when the stats carry none (error before admission). */
json usage_json(const scheduler::request_stats & s, int32_t prompt_tokens);

/** {prompt_n (tokens prefilled), cached_n, prompt_ms, ttft_ms, predicted_n, predicted_ms,
 *  predicted_per_second, cache_hit}. */
json timings_json(const scheduler::request_stats & s, int32_t prompt_tokens);

/** The `delta` object of one streaming diff. */
json delta_json(const engine::chat_delta & d);

/** The assistant `message` object of a final response. */
json message_json(const engine::chat_parsed & m);

/** A chat.completion.chunk with one choice holding `delta` and `finish_reason` (null when
 *  nullptr). */
json chunk_json(const completion_meta & meta, json delta, const char * finish_reason);

/** Token id -> its text (raw bytes), for the alternatives in `top_logprobs`. */
using token_text_fn = std::function<std::string(int32_t)>;

/** One `logprobs.content[]` entry in OpenAI's shape: {token, logprob, bytes, top_logprobs:
 *  [{token, logprob, bytes}]}. `token` is the text with invalid UTF-8 replaced (a token may hold
 *  part of a character); `bytes` are the raw bytes. */
json logprob_entry_json(std::string_view piece, const scheduler::generation_event & ev, const token_text_fn & text_of);

class chat_output {
public:
    /** `stops`: the request's stop strings plus the template's additional stops.
     *  `prompt_tokens`: the tokenized prompt length (fallback for usage). `token_text`: set when
     *  the request asked for logprobs (each token's entry then comes with its text). */
    chat_output(completion_meta meta, engine::chat_parse_params parser, std::vector<std::string> stops,
                bool include_usage, int32_t prompt_tokens, token_text_fn token_text = nullptr);

    /** Adds a generated piece (`ev`: the token event it came from, for logprobs). Returns true
     *  when a stop string matched with this piece: the caller then asks the scheduler to stop;
     *  later pieces are ignored. A token whose text the stop string cut away entirely has no
     *  logprobs entry. */
    bool add(std::string_view piece, const scheduler::generation_event * ev = nullptr);

    /** Streaming: the chunks for what became stable since the last call (the first call starts
     *  with the role chunk). */
    std::vector<json> take_chunks();

    /** Streaming: the last chunks: remaining deltas, the finish_reason chunk (with timings),
     *  and, when include_usage, a last chunk with `choices: []` and the usage (every other chunk
     *  then carries `usage: null`, as OpenAI documents stream_options.include_usage; without it
     *  no chunk carries usage). The caller writes "data: [DONE]" after them. */
    std::vector<json> final_chunks(const scheduler::generation_event & done);

    /** Non-streaming: the chat.completion object. */
    json final_response(const scheduler::generation_event & done);

    /** OpenAI finish_reason for a done event: stop, length or tool_calls. */
    std::string finish_reason(const scheduler::generation_event & done) const;

    const text_stream & text() const { return pump_.text(); }
    const engine::chat_parsed & message() const { return pump_.message(); }

private:
    void push_deltas(std::vector<json> & out, const std::vector<engine::chat_delta> & deltas);
    /** A chunk of this stream (usage: null when include_usage). */
    json chunk(json delta, const char * finish_reason) const;
    /** Puts the logprobs entries of the tokens whose text ends within the first `upto` bytes
     *  on out[from] (or on out.back() when out has no chunk from `from`, if `force`). */
    void attach_logprobs(std::vector<json> & out, size_t from, size_t upto, bool force);

    completion_meta meta_;
    delta_pump pump_;  ///< the text, its stop strings and the parser's deltas
    bool include_usage_;
    int32_t prompt_tokens_;
    bool role_sent_ = false;
    token_text_fn token_text_;            ///< set: logprobs requested
    std::vector<json> lp_entries_;        ///< one per token kept in the text
    std::vector<size_t> lp_starts_;       ///< byte offset where each entry's text starts
    std::vector<size_t> lp_ends_;         ///< byte offset where each entry's text ends
    size_t lp_sent_ = 0;                  ///< entries already streamed
};

}  // namespace lineage::server
