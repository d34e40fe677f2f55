// Shared checks of the request-parser fuzz targets (docs/prompt-cache.md "Fuzzing"): a fuzz input
// is a raw POST body taken through what the routes do with one (the body limit httplib applies,
// then the dialect's parser with the server's default JSON limits), and what comes out must be an
// accepted request or an error value, never an exception, a crash or UB. Thread safety: libFuzzer
// calls a target from one thread; these are pure functions.
#pragma once

#include "server/request/chat_request.h"
#include "server/http/errors.h"
#include "server/http/json_body.h"
#include "server/http/request_limits.h"

#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <cmath>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lineage::fuzz {

using server::json;

/** The body limit the targets apply (--max-body-bytes' role). Small, so that inputs of
 *  -max_len 8192 reach both sides of it. */
inline constexpr uint64_t max_body_bytes = 6 * 1024;

/** The work limits the targets apply (request_limits.h), small so that inputs of
 *  -max_len 8192 reach both sides of each; set before the first input. */
inline const server::request_limits & small_request_limits() {
    static const server::request_limits lim = [] {
        server::request_limits l;
        l.max_tools = 4;
        l.max_tools_bytes = 512;
        l.max_messages = 8;
        l.max_content_parts = 12;
        l.max_prompt_bytes = 2048;
        server::default_request_limits() = l;
        return l;
    }();
    return lim;
}
inline const bool small_request_limits_set = (small_request_limits(), true);

/** Stops the run with `what` on stderr: libFuzzer saves the input as a crash. */
[[noreturn]] inline void finding(const std::string & what) {
    std::fprintf(stderr, "fuzz finding: %s\n", what.c_str());
    std::fflush(stderr);
    __builtin_trap();
}

/** The answer httplib gives a body over the limit before any handler runs; nullopt when the
 *  body is within it. */
inline std::optional<server::api_error> body_limit(std::string_view body, const char * path) {
    if (body.size() > max_body_bytes) {
        (void) path;
        return server::body_too_large(max_body_bytes);
    }
    return std::nullopt;
}

/** A rejection as a client gets it: 400 or 413, a type and a message, and its JSON shape
 *  renders (dump never throws, whatever bytes the message quotes). */
inline void check_rejection(const server::api_error & e) {
    if (e.status != 400 && e.status != 413) {
        finding("a request parser answered status " + std::to_string(e.status) + ": " + e.message);
    }
    if (e.type.empty() || e.message.empty()) {
        finding("a rejection without a type or a message");
    }
    (void)server::dump(server::to_json(e));
}

/** Nesting depth of `j` (a scalar is 0), without recursion. */
inline size_t depth_of(const json & j) {
    size_t deepest = 0;
    std::vector<std::pair<const json *, size_t>> todo{{&j, 0}};
    while (!todo.empty()) {
        auto [v, d] = todo.back();
        todo.pop_back();
        if (v->is_structured()) {
            ++d;
            for (const auto & c : *v) {
                todo.emplace_back(&c, d);
            }
        }
        deepest = std::max(deepest, d);
    }
    return deepest;
}

/** A JSON text an accepted request hands on (tool parameters, template kwargs, a schema): it
 *  must parse and nest no deeper than the body limit allows, since the engine's template code
 *  and dump() recurse over it. "" is allowed (absent). */
inline void check_json_text(const std::string & text, const char * what) {
    if (text.empty()) {
        return;
    }
    const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
        finding(std::string(what) + " is not JSON: " + text.substr(0, 200));
    }
    if (depth_of(j) > server::default_json_limits().max_depth) {
        finding(std::string(what) + " nests deeper than the body limit");
    }
}

/** Sampling settings an accepted request passes to the engine: every number finite and in the
 *  range the parsers document (temperature 0-2, top_p 0-1, penalties, top_k >= 0, logprobs
 *  0-20, biases -100..100, max_tokens >= 1 or -1 for "unset"). */
inline void check_sampling(const scheduler::sampling_params & s) {
    auto in = [](double v, double lo, double hi) { return std::isfinite(v) && v >= lo && v <= hi; };
    if (!in(s.temperature, 0, 2) || !in(s.top_p, 0, 1) || !in(s.min_p, 0, 1) || !in(s.presence_penalty, -2, 2) ||
        !in(s.frequency_penalty, -2, 2) || !(in(s.repeat_penalty, 0, 10) && s.repeat_penalty > 0)) {
        finding("accepted sampling numbers out of range");
    }
    if (s.top_k < 0 || s.top_logprobs < 0 || s.top_logprobs > 20 || (s.max_tokens < 1 && s.max_tokens != -1)) {
        finding("accepted sampling integers out of range");
    }
    for (const auto & [tok, bias] : s.logit_bias) {
        if (tok < 0 || !in(bias, -100, 100)) {
            finding("accepted a logit_bias out of range");
        }
    }
}

/** An accepted request within the work limits, counted here independently of the parser:
 *  tools, bytes of their names + descriptions + parameters, messages, and content parts (a
 *  message's parts, or 1 for string content, plus its tool calls). */
inline void check_work_limits(const server::chat_request & r) {
    const server::request_limits & lim = small_request_limits();
    uint64_t tool_bytes = 0;
    for (const auto & t : r.tools) {
        tool_bytes += t.name.size() + t.description.size() + t.parameters.size();
    }
    uint64_t parts = 0;
    for (const auto & m : r.messages) {
        parts += std::max<uint64_t>(1, m.parts.size()) + m.tool_calls.size();
    }
    if (r.tools.size() > static_cast<uint64_t>(lim.max_tools) || tool_bytes > lim.max_tools_bytes) {
        finding("accepted " + std::to_string(r.tools.size()) + " tools of " + std::to_string(tool_bytes) + " bytes");
    }
    if (r.messages.size() > static_cast<uint64_t>(lim.max_messages) ||
        parts > static_cast<uint64_t>(lim.max_content_parts)) {
        finding("accepted " + std::to_string(r.messages.size()) + " messages of " + std::to_string(parts) + " parts");
    }
}

/** Runs `parse` (returns std::optional<api_error>); an exception escaping it is a finding. */
template <class F>
std::optional<server::api_error> no_throw(const char * what, F && parse) {
    try {
        return parse();
    } catch (const std::exception & ex) {
        finding(std::string(what) + " threw " + ex.what());
    } catch (...) {
        finding(std::string(what) + " threw a non-std exception");
    }
}

}  // namespace lineage::fuzz
