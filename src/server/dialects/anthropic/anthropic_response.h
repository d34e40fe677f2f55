// server::anthropic_response: the Messages API's answer to one request: the non-streaming
// `message` object and the SSE event sequence (message_start, ping, content_block_start /
// content_block_delta / content_block_stop per text, thinking and tool_use block,
// message_delta with stop_reason and usage, message_stop), built from the generated text with
// the template's output parser (engine::chat_output_parser) and server::text_stream, like
// chat_output; plus Anthropic's error shape and usage mapping (docs/prompt-cache.md).
// Thread safety: a messages_writer belongs to one request (its HTTP thread).
#pragma once

#include "engine/chat_template.h"
#include "scheduler/request.h"
#include "server/http/errors.h"
#include "server/run/generation.h"
#include "server/run/delta_pump.h"
#include "server/dialects/anthropic/thinking_signature.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lineage::server {

/** Anthropic's error type for an HTTP status / OpenAI type: 400 invalid_request_error, 401
 *  authentication_error, 403 permission_error, 404 not_found_error, 413 request_too_large, 429
 *  rate_limit_error, 503 and 529 overloaded_error, other 5xx api_error. */
std::string anthropic_error_type(const api_error & e);

/** {"type": "error", "error": {"type", "message"}} */
json anthropic_error_json(const api_error & e);

/** Usage in Anthropic's terms; the three input counts add up to the prompt, as in the official
 *  API: cache_read_input_tokens = tokens restored from the cache; cache_creation_input_tokens =
 *  tokens this request prefilled up to its last cache_control breakpoint (`breakpoint_tokens`,
 *  -1: none; 0 when the cache is off for the request); input_tokens = the other prefilled
 *  tokens; output_tokens = generated tokens. `prompt_tokens` is used when the stats carry
 *  none. */
json anthropic_usage_json(const scheduler::request_stats & s, int32_t prompt_tokens, int32_t breakpoint_tokens,
                          bool cache_prompt);

struct messages_meta {
    std::string id;                 ///< "msg_..."
    std::string model;              ///< echoed (the request's model name, else the served id)
    int32_t prompt_tokens = 0;      ///< tokenized prompt length
    int32_t breakpoint_tokens = -1; ///< prompt tokens up to the last cache_control mark (-1: none)
    bool cache_prompt = true;       ///< the request reads and writes the cache
    bool thinking_omitted = false;  ///< thinking blocks carry "" (the text rides in the signature)
    std::vector<std::string> stop_sequences;  ///< the client's, for stop_reason "stop_sequence"
};

class messages_writer final : public response_writer {
public:
    /** `stops`: the request's stop sequences plus the template's. `signer` must outlive this. */
    messages_writer(messages_meta meta, engine::chat_parse_params parser, std::vector<std::string> stops,
                    const thinking_signer & signer);

    bool add(const scheduler::generation_event & ev, std::string_view piece) override;
    std::string take_stream() override;
    std::string end_stream(const scheduler::generation_event & done) override;
    std::string stream_error(const api_error & e) override;
    json body(const scheduler::generation_event & done) override;
    /** end_turn, max_tokens, stop_sequence or tool_use. */
    std::string finish_reason(const scheduler::generation_event & done) const override;
    const engine::chat_parsed * reply() const override { return &pump_.message(); }

private:
    enum class block { none, thinking, text, tool };

    std::string start_events();
    /** Events for `deltas`, opening and closing blocks as the kind changes. */
    std::string delta_events(const std::vector<engine::chat_delta> & deltas);
    std::string close_block();
    std::string open_block(block b, const engine::chat_delta & d);
    json usage(const scheduler::generation_event & done) const;

    messages_meta meta_;
    delta_pump pump_;  ///< the text, its stop strings and the parser's deltas
    const thinking_signer & signer_;
    bool started_ = false;
    block open_ = block::none;
    int index_ = -1;               ///< index of the open (or last) content block
    size_t tool_index_ = 0;        ///< parser index of the open tool call
    std::string thinking_;         ///< text of the open thinking block (signed at its close)
};

}  // namespace lineage::server
