// libFuzzer target: the chat completion body (server/dialects/chat/chat_request.h: POST /v1/chat/completions
// and POST /apply-template). Any input is a raw body taken through the body limit and
// parse_chat_request as the routes take it: a rejection must be a 400/413 error value, never an
// exception, crash or UB; an accepted request must keep what the parser promises (at most 4
// stop strings, every JSON text it hands to the engine's template code parses and nests no
// deeper than --max-json-depth, tool-call arguments when they are JSON, tools, messages and
// content parts within the work limits of fuzz_request.h).
// Build and run: docs/prompt-cache.md "Security and failure model" > "Fuzzing".
#include "fuzz_request.h"

#include "server/dialects/chat/chat_request.h"

using namespace lineage;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    const std::string_view body(reinterpret_cast<const char *>(data), size);
    if (auto e = fuzz::body_limit(body, "/v1/chat/completions")) {
        fuzz::check_rejection(*e);
        return 0;
    }
    server::chat_request r;
    const auto err = fuzz::no_throw("parse_chat_request", [&] { return server::parse_chat_request(body, r); });
    if (err) {
        fuzz::check_rejection(*err);
        return 0;
    }
    if (r.stop.size() > server::max_stop_strings) {
        fuzz::finding("accepted " + std::to_string(r.stop.size()) + " stop strings");
    }
    for (const auto & s : r.stop) {
        if (s.empty()) {
            fuzz::finding("accepted an empty stop string");
        }
    }
    for (const auto & t : r.tools) {
        fuzz::check_json_text(t.parameters, "tools[].function.parameters");
    }
    for (const auto & [k, v] : r.chat_template_kwargs) {
        fuzz::check_json_text(v, "chat_template_kwargs value");
    }
    fuzz::check_json_text(r.json_schema, "response_format schema");
    for (const auto & m : r.messages) {
        for (const auto & c : m.tool_calls) {
            const auto j = server::json::parse(c.arguments, nullptr, /*allow_exceptions=*/false);
            if (!j.is_discarded() && fuzz::depth_of(j) > server::default_json_limits().max_depth) {
                fuzz::finding("tool call arguments nest deeper than the body limit");
            }
        }
    }
    fuzz::check_sampling(r.sampling);
    fuzz::check_work_limits(r);
    return 0;
}
