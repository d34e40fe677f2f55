// server::anthropic_response: Messages API bodies, SSE events, usage and errors.
#include "server/dialects/anthropic/anthropic_response.h"

#include "server/http/json_body.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace lineage::server {

namespace {

std::string event(const char * name, const json & data) {
    std::string s = "event: ";
    s += name;
    s += "\ndata: ";
    s += dump(data);
    s += "\n\n";
    return s;
}

// A tool call's arguments as the `input` object; {} when the model wrote no JSON object.
json input_of(const std::string & arguments) {
    json j;
    if (parse_json_body(arguments, j, /*require_object=*/true, default_json_limits())) {
        spdlog::debug("tool call arguments are not a JSON object; sent as {{}}: {}", arguments);
        return json::object();
    }
    return j;
}

}  // namespace

std::string anthropic_error_type(const api_error & e) {
    switch (e.status) {
        case 400: return "invalid_request_error";
        case 401: return "authentication_error";
        case 403: return "permission_error";
        case 404: return "not_found_error";
        case 413: return "request_too_large";
        case 429: return "rate_limit_error";
        case 503:
        case 529: return "overloaded_error";
        default:  break;
    }
    return e.status >= 500 ? "api_error" : "invalid_request_error";
}

json anthropic_error_json(const api_error & e) {
    json err = json::object();
    err["type"] = anthropic_error_type(e);
    err["message"] = e.message;
    json out = json::object();
    out["type"] = "error";
    out["error"] = std::move(err);
    return out;
}

json anthropic_usage_json(const scheduler::request_stats & s, int32_t prompt_tokens, int32_t breakpoint_tokens,
                          bool cache_prompt) {
    const int32_t prompt = s.prompt_tokens > 0 ? s.prompt_tokens : prompt_tokens;
    const int32_t read = std::clamp(s.cached_tokens, 0, prompt);
    const int32_t created =
        cache_prompt && breakpoint_tokens > read ? std::min(breakpoint_tokens, prompt) - read : 0;
    json u = json::object();
    u["input_tokens"] = prompt - read - created;
    u["cache_creation_input_tokens"] = created;
    u["cache_read_input_tokens"] = read;
    u["output_tokens"] = s.completion_tokens;
    return u;
}

messages_writer::messages_writer(messages_meta meta, engine::chat_parse_params parser, std::vector<std::string> stops,
                                 const thinking_signer & signer)
    : meta_(std::move(meta)), pump_(std::move(stops), std::move(parser)), signer_(signer) {}

bool messages_writer::add(const scheduler::generation_event &, std::string_view piece) {
    return pump_.add(piece);
}

json messages_writer::usage(const scheduler::generation_event & done) const {
    return anthropic_usage_json(done.stats, meta_.prompt_tokens, meta_.breakpoint_tokens, meta_.cache_prompt);
}

std::string messages_writer::start_events() {
    started_ = true;
    json u = json::object();
    u["input_tokens"] = meta_.prompt_tokens;  // the final counts come with message_delta
    u["cache_creation_input_tokens"] = 0;
    u["cache_read_input_tokens"] = 0;
    u["output_tokens"] = 0;
    json msg = json::object();
    msg["id"] = meta_.id;
    msg["type"] = "message";
    msg["role"] = "assistant";
    msg["model"] = meta_.model;
    msg["content"] = json::array();
    msg["stop_reason"] = nullptr;
    msg["stop_sequence"] = nullptr;
    msg["usage"] = std::move(u);
    json start = json::object();
    start["type"] = "message_start";
    start["message"] = std::move(msg);
    json ping = json::object();
    ping["type"] = "ping";
    return event("message_start", start) + event("ping", ping);
}

std::string messages_writer::close_block() {
    std::string out;
    if (open_ == block::none) {
        return out;
    }
    if (open_ == block::thinking) {
        json d = json::object();
        d["type"] = "signature_delta";
        d["signature"] = signer_.sign(thinking_);
        json e = json::object();
        e["type"] = "content_block_delta";
        e["index"] = index_;
        e["delta"] = std::move(d);
        out += event("content_block_delta", e);
        thinking_.clear();
    }
    json stop = json::object();
    stop["type"] = "content_block_stop";
    stop["index"] = index_;
    out += event("content_block_stop", stop);
    open_ = block::none;
    return out;
}

std::string messages_writer::open_block(block b, const engine::chat_delta & d) {
    std::string out = close_block();
    ++index_;
    open_ = b;
    json cb = json::object();
    if (b == block::thinking) {
        cb["type"] = "thinking";
        cb["thinking"] = "";
        cb["signature"] = "";
    } else if (b == block::text) {
        cb["type"] = "text";
        cb["text"] = "";
    } else {
        tool_index_ = d.tool_call_index;
        cb["type"] = "tool_use";
        cb["id"] = d.tool_call_id;
        cb["name"] = d.tool_call_name;
        cb["input"] = json::object();
    }
    json e = json::object();
    e["type"] = "content_block_start";
    e["index"] = index_;
    e["content_block"] = std::move(cb);
    out += event("content_block_start", e);
    return out;
}

std::string messages_writer::delta_events(const std::vector<engine::chat_delta> & deltas) {
    std::string out;
    for (const auto & d : deltas) {
        json delta = json::object();
        if (d.tool_call_index != std::string::npos) {
            if (open_ != block::tool || d.tool_call_index != tool_index_) {
                out += open_block(block::tool, d);
            }
            if (d.tool_call_arguments.empty()) {
                continue;
            }
            delta["type"] = "input_json_delta";
            delta["partial_json"] = d.tool_call_arguments;
        } else if (!d.reasoning_content.empty()) {
            if (open_ != block::thinking) {
                out += open_block(block::thinking, d);
            }
            thinking_ += d.reasoning_content;
            if (meta_.thinking_omitted) {
                continue;
            }
            delta["type"] = "thinking_delta";
            delta["thinking"] = d.reasoning_content;
        } else if (!d.content.empty()) {
            if (open_ != block::text) {
                out += open_block(block::text, d);
            }
            delta["type"] = "text_delta";
            delta["text"] = d.content;
        } else {
            continue;
        }
        json e = json::object();
        e["type"] = "content_block_delta";
        e["index"] = index_;
        e["delta"] = std::move(delta);
        out += event("content_block_delta", e);
    }
    return out;
}

std::string messages_writer::take_stream() {
    std::string out;
    if (!started_) {
        out += start_events();
    }
    out += delta_events(pump_.take());
    return out;
}

std::string messages_writer::end_stream(const scheduler::generation_event & done) {
    std::string out;
    if (!started_) {
        out += start_events();
    }
    out += delta_events(pump_.finish());
    out += close_block();
    const std::string reason = finish_reason(done);
    json d = json::object();
    d["stop_reason"] = reason;
    d["stop_sequence"] = reason == "stop_sequence" ? json(pump_.text().matched_stop()) : json(nullptr);
    json md = json::object();
    md["type"] = "message_delta";
    md["delta"] = std::move(d);
    md["usage"] = usage(done);
    json stop = json::object();
    stop["type"] = "message_stop";
    out += event("message_delta", md);
    out += event("message_stop", stop);
    return out;
}

std::string messages_writer::stream_error(const api_error & e) {
    return event("error", anthropic_error_json(e));
}

json messages_writer::body(const scheduler::generation_event & done) {
    (void) pump_.finish();
    const engine::chat_parsed & m = pump_.message();
    json content = json::array();
    if (!m.reasoning_content.empty()) {
        json b = json::object();
        b["type"] = "thinking";
        b["thinking"] = meta_.thinking_omitted ? std::string() : m.reasoning_content;
        b["signature"] = signer_.sign(m.reasoning_content);
        content.push_back(std::move(b));
    }
    if (!m.content.empty()) {
        json b = json::object();
        b["type"] = "text";
        b["text"] = m.content;
        content.push_back(std::move(b));
    }
    for (const auto & tc : m.tool_calls) {
        json b = json::object();
        b["type"] = "tool_use";
        b["id"] = tc.id;
        b["name"] = tc.name;
        b["input"] = input_of(tc.arguments);
        content.push_back(std::move(b));
    }
    const std::string reason = finish_reason(done);
    json r = json::object();
    r["id"] = meta_.id;
    r["type"] = "message";
    r["role"] = "assistant";
    r["model"] = meta_.model;
    r["content"] = std::move(content);
    r["stop_reason"] = reason;
    r["stop_sequence"] = reason == "stop_sequence" ? json(pump_.text().matched_stop()) : json(nullptr);
    r["usage"] = usage(done);
    return r;
}

std::string messages_writer::finish_reason(const scheduler::generation_event & done) const {
    if (pump_.text().stopped()) {
        const auto & s = meta_.stop_sequences;
        if (std::find(s.begin(), s.end(), pump_.text().matched_stop()) != s.end()) {
            return "stop_sequence";
        }
    } else if (done.finish == scheduler::finish_reason::length) {
        return "max_tokens";
    }
    if (!pump_.message().tool_calls.empty()) {
        return "tool_use";
    }
    return "end_turn";
}

}  // namespace lineage::server
