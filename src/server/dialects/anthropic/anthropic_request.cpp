// server::anthropic_request: validation of a Messages API body (the conversation itself is
// converted in anthropic_messages). A failed check throws a bad_field carrying the api_error;
// parse_anthropic_request returns it.
#include "server/dialects/anthropic/anthropic_request.h"

#include "server/dialects/anthropic/anthropic_messages.h"
#include "server/http/json_fields.h"
#include "server/http/request_limits.h"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace lineage::server {

namespace {

using namespace fields;

void parse_tools(const json & tools, anthropic_request & r) {
    if (!tools.is_array()) {
        fail("tools", "'tools' must be an array, got " + std::string(type_name(tools)));
    }
    if (auto e = check_tool_count(tools.size(), "tools")) {
        throw bad_field{*e};
    }
    for (size_t i = 0; i < tools.size(); ++i) {
        const std::string p = "tools[" + std::to_string(i) + "]";
        const json & t = tools[i];
        if (!t.is_object()) {
            fail(p, "'" + p + "' must be an object like {\"name\", \"description\", \"input_schema\"}, got " +
                        type_name(t));
        }
        const json * name = field(t, "name");
        if (!name) {
            fail(p + ".name", "'" + p + ".name' is required");
        }
        const std::string n = get_string(*name, p + ".name");
        if (n.empty()) {
            fail(p + ".name", "'" + p + ".name' must not be empty");
        }
        if (const json * type = field(t, "type")) {
            const std::string ty = get_string(*type, p + ".type");
            if (ty != "custom") {
                // A server tool (web_search_..., code_execution_...) or an Anthropic-defined
                // client tool: this server cannot run it and has no schema for it.
                r.ignored_tools.push_back(n + " (" + ty + ")");
                continue;
            }
        }
        engine::chat_tool tool;
        tool.name = n;
        if (const json * d = field(t, "description")) {
            tool.description = get_string(*d, p + ".description");
        }
        const json * schema = field(t, "input_schema");
        if (!schema) {
            fail(p + ".input_schema", "'" + p + ".input_schema' is required: the JSON Schema of the tool's input");
        }
        tool.parameters = dump(get_object(*schema, p + ".input_schema"));
        r.chat.tools.push_back(std::move(tool));
    }
}

void parse_tool_choice(const json & tc, anthropic_request & r) {
    get_object(tc, "tool_choice");
    const json * type = field(tc, "type");
    if (!type) {
        fail("tool_choice.type", "'tool_choice.type' is required: \"auto\", \"any\", \"tool\" or \"none\"");
    }
    const std::string t = get_string(*type, "tool_choice.type");
    if (const json * d = field(tc, "disable_parallel_tool_use")) {
        if (get_bool(*d, "tool_choice.disable_parallel_tool_use")) {
            r.chat.parallel_tool_calls = false;
        }
    }
    if (t == "auto" || t == "none") {
        r.chat.tool_choice = t;
        r.chat.tool_choice_key = t;
    } else if (t == "any") {
        r.chat.tool_choice = "required";
        r.chat.tool_choice_key = "required";
    } else if (t == "tool") {
        const json * name = field(tc, "name");
        if (!name) {
            fail("tool_choice.name", "'tool_choice.name' is required when 'tool_choice.type' is \"tool\"");
        }
        const std::string n = get_string(*name, "tool_choice.name");
        std::vector<engine::chat_tool> only;
        for (const auto & tool : r.chat.tools) {
            if (tool.name == n) {
                only.push_back(tool);
            }
        }
        if (only.empty()) {
            fail("tool_choice.name", "'tool_choice.name' is '" + n + "', which is not in 'tools'");
        }
        r.chat.tools = std::move(only);
        r.chat.tool_choice = "required";
        r.chat.tool_choice_key = "function:" + n;
    } else {
        fail("tool_choice.type", "'tool_choice.type' is '" + t + "'; expected \"auto\", \"any\", \"tool\" or \"none\"");
    }
    if (r.chat.tool_choice == "required" && r.chat.tools.empty()) {
        fail("tool_choice", "'tool_choice' asks for a tool call but no 'tools' were given");
    }
}

void parse_thinking(const json & th, anthropic_request & r) {
    get_object(th, "thinking");
    const json * type = field(th, "type");
    if (!type) {
        fail("thinking.type", "'thinking.type' is required: \"enabled\", \"adaptive\" or \"disabled\"");
    }
    const std::string t = get_string(*type, "thinking.type");
    if (t == "disabled") {
        // The handler drops it where the template has no switch: there the kwarg would change
        // the cache key (template_sig) without changing a token.
        r.chat.chat_template_kwargs["enable_thinking"] = "false";
    } else if (t == "enabled" || t == "adaptive") {
        if (const json * b = field(th, "budget_tokens")) {
            if (get_int(*b, "thinking.budget_tokens") < 1) {
                fail("thinking.budget_tokens", "'thinking.budget_tokens' must be a positive integer");
            }
        }
    } else {
        fail("thinking.type", "'thinking.type' is '" + t + "'; expected \"enabled\", \"adaptive\" or \"disabled\"");
    }
    if (const json * d = field(th, "display")) {
        const std::string disp = get_string(*d, "thinking.display");
        if (disp != "omitted" && disp != "summarized") {
            fail("thinking.display", "'thinking.display' is '" + disp + "'; expected \"summarized\" or \"omitted\"");
        }
        r.thinking_omitted = disp == "omitted";
    }
}

void parse_body(const json & body, bool count_tokens, const thinking_signer & signer, anthropic_request & r) {
    if (!body.is_object()) {
        fail("", std::string("the request body must be a JSON object, got ") + type_name(body));
    }
    r.chat.sampling.temperature = 1.0f;  // Anthropic's default
    convert_conversation(body, signer, r);

    if (const json * tools = field(body, "tools")) {
        parse_tools(*tools, r);
    }
    if (const json * tc = field(body, "tool_choice")) {
        parse_tool_choice(*tc, r);
    }
    if (const json * th = field(body, "thinking")) {
        parse_thinking(*th, r);
    }

    const json * max_tokens = field(body, "max_tokens");
    if (!max_tokens && !count_tokens) {
        fail("max_tokens", "'max_tokens' is required: the most tokens to generate (an integer >= 1)");
    }
    if (max_tokens) {
        r.chat.sampling.max_tokens = get_token_limit(*max_tokens, "max_tokens");
    }
    if (const json * t = field(body, "temperature")) {
        r.chat.sampling.temperature = static_cast<float>(get_number(*t, "temperature", 0.0, 1.0));
    }
    if (const json * t = field(body, "top_p")) {
        r.chat.sampling.top_p = static_cast<float>(get_number(*t, "top_p", 0.0, 1.0));
    }
    if (const json * t = field(body, "top_k")) {
        const int64_t v = get_int(*t, "top_k");
        if (v < 0 || v > std::numeric_limits<int32_t>::max()) {
            fail("top_k", "'top_k' is " + std::to_string(v) + "; it must be an integer >= 0 (0: no top-k cut)");
        }
        r.chat.sampling.top_k = static_cast<int32_t>(v);
    }
    if (const json * s = field(body, "stop_sequences")) {
        if (!s->is_array()) {
            fail("stop_sequences", "'stop_sequences' must be an array of strings, got " + std::string(type_name(*s)));
        }
        for (size_t i = 0; i < s->size(); ++i) {
            const std::string p = "stop_sequences[" + std::to_string(i) + "]";
            const std::string v = get_string((*s)[i], p);
            if (v.empty()) {
                fail(p, "'" + p + "' must not be an empty string");
            }
            r.stop_sequences.push_back(v);
        }
        r.chat.stop = r.stop_sequences;
    }
    if (const json * s = field(body, "stream")) {
        r.chat.stream = get_bool(*s, "stream");
    }
    if (const json * m = field(body, "model")) {
        r.chat.model = get_string(*m, "model");
    }
    if (const json * l = field(body, "lora")) {  // llama-server's extension, as on chat completions
        r.chat.lora = parse_lora_list(*l, "lora");
    }
    if (const json * md = field(body, "metadata")) {
        get_object(*md, "metadata");
        if (const json * u = field(*md, "user_id")) {
            r.chat.user = get_string(*u, "metadata.user_id");  // the session key (as OpenAI's user)
        }
    }
}

}  // namespace

chat_request breakpoint_conversation(const anthropic_request & r, const cache_breakpoint & b) {
    chat_request cut = r.chat;
    cut.messages.resize(std::min(b.n_before, cut.messages.size()));
    cut.messages.push_back(b.last);
    engine::chat_message & last = cut.messages.back();
    if (last.content_is_parts && !last.parts.empty()) {
        last.parts.back() += '\x01';
    } else if (!last.content.empty()) {
        last.content += '\x01';
    }
    return cut;
}

std::optional<api_error> parse_anthropic_request(std::string_view body, const thinking_signer & signer, bool count_tokens,
                                                 anthropic_request & out) {
    return parse_request(body, out,
                         [&](const json & j, anthropic_request & r) {
                             parse_body(j, count_tokens, signer, r);
                             if (auto e = check_chat_limits(r.chat)) {
                                 throw bad_field{*e};
                             }
                         });
}

}  // namespace lineage::server
