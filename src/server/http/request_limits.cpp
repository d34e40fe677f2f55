// server::request_limits: the per-request work limits (request_limits.h).
#include "server/http/request_limits.h"

#include "server/dialects/chat/chat_request.h"

#include <cstdio>

namespace lineage::server {

namespace {

// "this request has 10000 tools; this server accepts at most 1024 (--max-tools): ..."
api_error over(uint64_t n, const char * noun, uint64_t max, const char * flag, std::string param, std::string code) {
    return invalid_request("this request has " + std::to_string(n) + " " + noun + "; this server accepts at most " +
                               std::to_string(max) + " (" + flag + "): send fewer, or start the server with a larger " +
                               flag,
                           std::move(param), std::move(code));
}

}  // namespace

request_limits & default_request_limits() {
    static request_limits lim;
    return lim;
}

std::optional<api_error> check_message_count(size_t n, const std::string & param, const request_limits & lim) {
    if (n > static_cast<uint64_t>(lim.max_messages)) {
        return over(n, "messages", static_cast<uint64_t>(lim.max_messages), "--max-messages", param, "too_many_messages");
    }
    return std::nullopt;
}

std::optional<api_error> check_tool_count(size_t n, const std::string & param, const request_limits & lim) {
    if (n > static_cast<uint64_t>(lim.max_tools)) {
        return over(n, "tools", static_cast<uint64_t>(lim.max_tools), "--max-tools", param, "too_many_tools");
    }
    return std::nullopt;
}

std::optional<api_error> check_chat_limits(const chat_request & r, const request_limits & lim) {
    // A constraint's alternatives, before the chat template turns a schema into a grammar and the
    // cost probe runs it (both take time that grows with them).
    const auto max_alt = static_cast<uint64_t>(lim.max_grammar_alternatives);
    if (const uint64_t n = count_grammar_alternatives(r.grammar); n > max_alt) {
        return over(n, "alternatives in its grammar ('|')", max_alt, "--max-grammar-alternatives", "grammar",
                    "grammar_too_large");
    }
    if (!r.json_schema.empty()) {
        const json schema = json::parse(r.json_schema, nullptr, /*allow_exceptions=*/false);
        if (const uint64_t n = count_schema_alternatives(schema); n > max_alt) {
            return over(n, "alternatives in its JSON Schema (enum values, properties, anyOf/oneOf branches)", max_alt,
                        "--max-grammar-alternatives", "response_format", "grammar_too_large");
        }
    }
    if (auto err = check_tool_count(r.tools.size(), "tools", lim)) {
        return err;
    }
    uint64_t tool_bytes = 0;
    for (const auto & t : r.tools) {
        tool_bytes += t.name.size() + t.description.size() + t.parameters.size();
    }
    if (tool_bytes > lim.max_tools_bytes) {
        return over(tool_bytes, "bytes of tool definitions (names, descriptions, parameters)", lim.max_tools_bytes, "--max-tools-bytes", "tools",
                    "tools_too_large");
    }
    if (auto err = check_message_count(r.messages.size(), "messages", lim)) {
        return err;
    }
    uint64_t parts = 0;
    for (const auto & m : r.messages) {
        parts += (m.parts.empty() ? 1 : m.parts.size()) + m.tool_calls.size();
    }
    if (parts > static_cast<uint64_t>(lim.max_content_parts)) {
        return over(parts, "content parts (text parts, images, tool calls)", static_cast<uint64_t>(lim.max_content_parts), "--max-content-parts", "messages",
                    "too_many_content_parts");
    }
    // The text every template renders verbatim (contents, text parts, tool call arguments; not a
    // past reasoning, which some templates drop): over the prompt bound, the rendered prompt is
    // too, and the refusal comes before a render that takes time in proportion (seconds for
    // tens of MiB) rather than after it.
    uint64_t text_bytes = 0;
    for (const auto & m : r.messages) {
        text_bytes += m.content.size();
        for (const auto & p : m.parts) {
            text_bytes += p.size();
        }
        for (const auto & c : m.tool_calls) {
            text_bytes += c.arguments.size();
        }
    }
    return check_prompt_bytes(text_bytes, "the messages' text", "messages", lim);
}

std::optional<api_error> check_prompt_bytes(uint64_t bytes, const std::string & what, const std::string & param,
                                            const request_limits & lim) {
    if (bytes > lim.max_prompt_bytes) {
        return invalid_request(what + " is " + std::to_string(bytes) + " bytes; this server tokenizes at most " +
                                   std::to_string(lim.max_prompt_bytes) +
                                   " (--max-prompt-bytes): send a shorter prompt, or start the server with a larger "
                                   "--max-prompt-bytes",
                               param, "prompt_too_large");
    }
    return std::nullopt;
}

std::optional<api_error> check_logit_bias_count(size_t n, const request_limits & lim) {
    if (n > static_cast<uint64_t>(lim.max_logit_bias)) {
        return over(n, "logit_bias entries", static_cast<uint64_t>(lim.max_logit_bias), "--max-logit-bias", "logit_bias",
                    "too_many_logit_bias");
    }
    return std::nullopt;
}

bool prepare_at_low_priority(std::string_view body) {
    return body.size() > low_priority_body_bytes || body.find("\"grammar\"") != std::string_view::npos ||
           body.find("\"json_schema\"") != std::string_view::npos;
}

uint64_t count_grammar_alternatives(std::string_view gbnf) {
    uint64_t n = 0;
    for (size_t i = 0; i < gbnf.size(); ++i) {
        const char c = gbnf[i];
        if (c == '"' || c == '[') {
            const char close = c == '"' ? '"' : ']';
            for (++i; i < gbnf.size() && gbnf[i] != close; ++i) {
                if (gbnf[i] == '\\') {
                    ++i;  // an escaped character
                }
            }
        } else if (c == '#') {
            while (i < gbnf.size() && gbnf[i] != '\n') {
                ++i;
            }
        } else if (c == '|') {
            ++n;
        }
    }
    return n;
}

uint64_t count_schema_alternatives(const json & schema) {
    uint64_t n = 0;
    if (schema.is_object()) {
        for (const char * key : {"enum", "anyOf", "oneOf"}) {
            if (const auto it = schema.find(key); it != schema.end() && it->is_array()) {
                n += it->size();
            }
        }
        if (const auto it = schema.find("properties"); it != schema.end() && it->is_object()) {
            n += it->size();
        }
    }
    if (schema.is_object() || schema.is_array()) {
        for (const auto & v : schema) {
            n += count_schema_alternatives(v);
        }
    }
    return n;
}

std::optional<api_error> check_grammar_cost(double ms, const std::string & param, const request_limits & lim) {
    if (ms > lim.max_grammar_ms) {
        char cost[32];
        char bound[32];
        std::snprintf(cost, sizeof cost, "%.1f", ms);
        std::snprintf(bound, sizeof bound, "%g", lim.max_grammar_ms);
        return invalid_request("'" + param + "' costs " + cost + " ms a generated token to enforce (its grammar applied "
                                   "to the vocabulary); this server allows at most " + bound +
                                   " ms (--max-grammar-ms), as the other requests wait while it runs: send a smaller "
                                   "constraint (fewer alternatives), or start the server with a larger --max-grammar-ms",
                               param, "grammar_too_costly");
    }
    return std::nullopt;
}

}  // namespace lineage::server
