// server::chat_request: the work limits of the generic request (chat_request.h).
#include "server/request/chat_request.h"

namespace lineage::server {

std::optional<api_error> check_chat_limits(const chat_request & r, const request_limits & lim) {
    // A constraint's alternatives, before the chat template turns a schema into a grammar and the
    // cost probe runs it (both take time that grows with them).
    const auto max_alt = static_cast<uint64_t>(lim.max_grammar_alternatives);
    if (const uint64_t n = count_grammar_alternatives(r.grammar); n > max_alt) {
        return limit_exceeded(n, "alternatives in its grammar ('|')", max_alt, "--max-grammar-alternatives", "grammar",
                    "grammar_too_large");
    }
    if (!r.json_schema.empty()) {
        const json schema = json::parse(r.json_schema, nullptr, /*allow_exceptions=*/false);
        if (const uint64_t n = count_schema_alternatives(schema); n > max_alt) {
            return limit_exceeded(n, "alternatives in its JSON Schema (enum values, properties, anyOf/oneOf branches)", max_alt,
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
        return limit_exceeded(tool_bytes, "bytes of tool definitions (names, descriptions, parameters)", lim.max_tools_bytes, "--max-tools-bytes", "tools",
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
        return limit_exceeded(parts, "content parts (text parts, images, tool calls)", static_cast<uint64_t>(lim.max_content_parts), "--max-content-parts", "messages",
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

}  // namespace lineage::server
