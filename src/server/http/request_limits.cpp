// server::request_limits: the per-request work limits (request_limits.h).
#include "server/http/request_limits.h"

#include <cstdio>

namespace lineage::server {

api_error limit_exceeded(uint64_t n, const char * noun, uint64_t max, const char * flag, std::string param, std::string code) {
    return invalid_request("this request has " + std::to_string(n) + " " + noun + "; this server accepts at most " +
                               std::to_string(max) + " (" + flag + "): send fewer, or start the server with a larger " +
                               flag,
                           std::move(param), std::move(code));
}

request_limits & default_request_limits() {
    static request_limits lim;
    return lim;
}

std::optional<api_error> check_message_count(size_t n, const std::string & param, const request_limits & lim) {
    if (n > static_cast<uint64_t>(lim.max_messages)) {
        return limit_exceeded(n, "messages", static_cast<uint64_t>(lim.max_messages), "--max-messages", param, "too_many_messages");
    }
    return std::nullopt;
}

std::optional<api_error> check_tool_count(size_t n, const std::string & param, const request_limits & lim) {
    if (n > static_cast<uint64_t>(lim.max_tools)) {
        return limit_exceeded(n, "tools", static_cast<uint64_t>(lim.max_tools), "--max-tools", param, "too_many_tools");
    }
    return std::nullopt;
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
        return limit_exceeded(n, "logit_bias entries", static_cast<uint64_t>(lim.max_logit_bias), "--max-logit-bias", "logit_bias",
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
