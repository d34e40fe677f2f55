// server::responses_request: validation of a Responses API body and its conversion to a
// chat_request. Internally a failed check throws a fields::bad_field; the public
// functions turn it into a return value.
#include "server/dialects/responses/responses_request.h"

#include "server/http/json_fields.h"
#include "server/http/request_limits.h"

#include <limits>

namespace lineage::server {

using namespace fields;

namespace {

engine::chat_tool parse_function_tool(const json & t, const std::string & p) {
    engine::chat_tool tool;
    tool.name = get_string(require(t, "name", p + ".name", ""), p + ".name");
    if (tool.name.empty()) {
        fail(p + ".name", "'" + p + ".name' must not be empty");
    }
    if (const json * d = field(t, "description")) {
        tool.description = get_string(*d, p + ".description");
    }
    if (const json * params = field(t, "parameters")) {
        if (!params->is_object()) {
            fail(p + ".parameters", "'" + p + ".parameters' must be a JSON Schema object, got " + type_name(*params));
        }
        tool.parameters = dump(*params);  // key order as sent: it is part of the prompt
    }
    return tool;
}

void parse_tools(const json & tools, responses_request & r) {
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
            fail(p, "'" + p + "' must be an object like {\"type\": \"function\", \"name\": ...}, got " + type_name(t));
        }
        const std::string type = get_string(require(t, "type", p + ".type", "\"function\""), p + ".type");
        if (type == "function") {
            r.chat.tools.push_back(parse_function_tool(t, p));
        } else if (type == "namespace") {
            // Flattened: each function of the namespace becomes a tool; its calls carry the
            // namespace back (function_call.namespace).
            const std::string ns = get_string(require(t, "name", p + ".name", ""), p + ".name");
            const json & inner = require(t, "tools", p + ".tools", "an array of function tools");
            if (!inner.is_array()) {
                fail(p + ".tools", "'" + p + ".tools' must be an array, got " + std::string(type_name(inner)));
            }
            for (size_t k = 0; k < inner.size(); ++k) {
                const std::string pk = p + ".tools[" + std::to_string(k) + "]";
                if (!inner[k].is_object()) {
                    fail(pk, "'" + pk + "' must be an object, got " + std::string(type_name(inner[k])));
                }
                const std::string it = get_string(require(inner[k], "type", pk + ".type", ""), pk + ".type");
                if (it != "function") {
                    r.ignored_tools.push_back(ns + "." + it);
                    continue;
                }
                engine::chat_tool tool = parse_function_tool(inner[k], pk);
                r.tool_namespaces[tool.name] = ns;
                r.chat.tools.push_back(std::move(tool));
            }
        } else {
            // Hosted tools (web_search, file_search, code_interpreter, ...) and custom tools:
            // this server cannot run them; the model is not told about them.
            r.ignored_tools.push_back(type);
        }
    }
}

void parse_tool_choice(const json & tc, responses_request & r) {
    chat_request & c = r.chat;
    if (tc.is_string()) {
        const std::string s = tc.get<std::string>();
        if (s != "auto" && s != "none" && s != "required") {
            fail("tool_choice", "'tool_choice' is '" + s +
                                    "'; expected \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}");
        }
        c.tool_choice = c.tool_choice_key = r.tool_choice_echo = s;
        return;
    }
    if (!tc.is_object()) {
        fail("tool_choice", "'tool_choice' must be a string or an object, got " + std::string(type_name(tc)));
    }
    const std::string type = get_string(require(tc, "type", "tool_choice.type", ""), "tool_choice.type");
    if (type == "function") {
        const std::string n = get_string(require(tc, "name", "tool_choice.name", ""), "tool_choice.name");
        c.tool_choice = "required";
        c.tool_choice_key = "function:" + n;
        r.tool_choice_echo = n;
        r.tool_choice_is_function = true;
    } else if (type == "allowed_tools") {
        const json * mode = field(tc, "mode");
        const std::string m = mode ? get_string(*mode, "tool_choice.mode") : "auto";
        if (m != "auto" && m != "required") {
            fail("tool_choice.mode", "'tool_choice.mode' is '" + m + "'; expected \"auto\" or \"required\"");
        }
        c.tool_choice = c.tool_choice_key = r.tool_choice_echo = m;
    } else {
        fail("tool_choice", "'tool_choice' selects the hosted tool '" + type +
                                "', which this server cannot run; use \"auto\", \"none\", \"required\" or a function");
    }
}

// The conversation: 'input' (a string or items), 'instructions', 'previous_response_id'; the
// ways of sending one that this server does not take are refused here.
void parse_input(const json & body, responses_request & r) {
    const json * input = field(body, "input");
    if (input && input->is_string()) {
        response_item it;
        it.role = "user";
        it.text = input->get<std::string>();
        r.input.push_back(std::move(it));
    } else if (input && input->is_array()) {
        if (auto e = check_message_count(input->size(), "input")) {  // before any item is converted
            throw bad_field{*e};
        }
        for (size_t i = 0; i < input->size(); ++i) {
            r.input.push_back(parse_response_item((*input)[i], "input[" + std::to_string(i) + "]"));
        }
    } else if (input) {
        fail("input", "'input' must be a string or an array of items, got " + std::string(type_name(*input)));
    }
    if (const json * ins = field(body, "instructions")) {
        r.instructions = get_string(*ins, "instructions");
        r.has_instructions = true;
    }
    if (const json * prev = field(body, "previous_response_id")) {
        r.previous_response_id = get_string(*prev, "previous_response_id");
    }
    for (const char * unsupported : {"conversation", "prompt"}) {
        if (field(body, unsupported)) {
            fail(unsupported, "'" + std::string(unsupported) +
                                  "' is not supported by this server; send the conversation as 'input' items "
                                  "(or continue one with 'previous_response_id')");
        }
    }
    if (const json * bg = field(body, "background"); bg && get_bool(*bg, "background")) {
        fail("background", "'background' responses are not supported; send the request without it (optionally streamed)");
    }
}

// 'tools', 'tool_choice' (a named function leaves only that tool) and 'parallel_tool_calls'.
void parse_tool_fields(const json & body, responses_request & r) {
    chat_request & c = r.chat;
    if (const json * tools = field(body, "tools")) {
        parse_tools(*tools, r);
    }
    if (const json * tc = field(body, "tool_choice")) {
        parse_tool_choice(*tc, r);
    }
    if (c.tool_choice != "auto" && c.tool_choice != "none" && c.tools.empty()) {
        fail("tool_choice", "'tool_choice' asks for a tool call but no function 'tools' were given");
    }
    if (r.tool_choice_is_function) {
        std::vector<engine::chat_tool> only;
        for (const auto & t : c.tools) {
            if (t.name == r.tool_choice_echo) {
                only.push_back(t);
            }
        }
        if (only.empty()) {
            fail("tool_choice", "'tool_choice' names function '" + r.tool_choice_echo + "', which is not in 'tools'");
        }
        c.tools = std::move(only);
    }
    if (const json * ptc = field(body, "parallel_tool_calls")) {
        c.parallel_tool_calls = get_bool(*ptc, "parallel_tool_calls");
    }
}

// 'stream', the token limit and the sampling parameters.
void parse_sampling(const json & body, responses_request & r) {
    chat_request & c = r.chat;
    if (const json * s = field(body, "stream")) {
        c.stream = get_bool(*s, "stream");
    }
    if (const json * m = field(body, "max_output_tokens")) {
        r.max_output_tokens = get_token_limit(*m, "max_output_tokens");
        c.sampling.max_tokens = *r.max_output_tokens;
    }
    if (const json * t = field(body, "temperature")) {
        r.temperature = get_number(*t, "temperature", 0.0, 2.0);
        c.sampling.temperature = static_cast<float>(*r.temperature);
    }
    if (const json * t = field(body, "top_p")) {
        r.top_p = get_number(*t, "top_p", 0.0, 1.0);
        c.sampling.top_p = static_cast<float>(*r.top_p);
    }
    if (const json * s = field(body, "seed")) {  // extension (llama-server accepts it too)
        c.sampling.seed = get_int(*s, "seed");
    }
}

// The output's shape: 'text.format' (structured output), 'reasoning.effort' and 'include'.
void parse_output_shape(const json & body, responses_request & r) {
    chat_request & c = r.chat;
    if (const json * text = field(body, "text")) {
        if (!text->is_object()) {
            fail("text", "'text' must be an object like {\"format\": {\"type\": \"text\"}}, got " + std::string(type_name(*text)));
        }
        if (const json * fmt = field(*text, "format")) {
            if (!fmt->is_object()) {
                fail("text.format", "'text.format' must be an object, got " + std::string(type_name(*fmt)));
            }
            const std::string t = get_string(require(*fmt, "type", "text.format.type", ""), "text.format.type");
            // Structured output as chat completions' response_format (a JSON Schema grammar),
            // with the Responses API's flat shape: {type, name, schema, strict}.
            if (t == "json_object") {
                c.json_schema = R"({"type":"object"})";
            } else if (t == "json_schema") {
                if (const json * n = field(*fmt, "name")) {
                    (void) get_string(*n, "text.format.name");
                }
                if (const json * st = field(*fmt, "strict")) {
                    (void) get_bool(*st, "text.format.strict");
                }
                const json * schema = field(*fmt, "schema");
                if (schema && !schema->is_object()) {
                    fail("text.format.schema", "'text.format.schema' must be a JSON Schema object, got " +
                                                   std::string(type_name(*schema)));
                }
                c.json_schema = !schema || schema->empty() ? R"({"type":"object"})" : dump(*schema);
            } else if (t != "text") {
                fail("text.format.type", "'text.format.type' is '" + t + "'; expected \"text\", \"json_object\" or "
                                         "\"json_schema\"");
            }
        }
    }
    if (const json * rs = field(body, "reasoning")) {
        if (!rs->is_object()) {
            fail("reasoning", "'reasoning' must be an object like {\"effort\": \"medium\"}, got " + std::string(type_name(*rs)));
        }
        if (const json * e = field(*rs, "effort")) {
            r.reasoning_effort = get_string(*e, "reasoning.effort");
            static const char * efforts[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
            bool known = false;
            for (const char * k : efforts) {
                known = known || r.reasoning_effort == k;
            }
            if (!known) {
                fail("reasoning.effort", "'reasoning.effort' is '" + r.reasoning_effort +
                                             "'; expected one of none, minimal, low, medium, high, xhigh");
            }
            // none/minimal: no thinking where the template has the switch. Other efforts keep the
            // template's default, so the key (template_sig) stays that of a chat request.
            if (r.reasoning_effort == "none" || r.reasoning_effort == "minimal") {
                c.chat_template_kwargs["enable_thinking"] = "false";
            }
        }
    }
    if (const json * inc = field(body, "include")) {
        if (!inc->is_array()) {
            fail("include", "'include' must be an array of strings, got " + std::string(type_name(*inc)));
        }
        for (size_t i = 0; i < inc->size(); ++i) {
            if (get_string((*inc)[i], "include[" + std::to_string(i) + "]") == "reasoning.encrypted_content") {
                r.include_encrypted_reasoning = true;
            }
        }
    }
}

// 'store', 'model', the user, 'metadata' and the cache and template extensions.
void parse_identity(const json & body, responses_request & r) {
    chat_request & c = r.chat;
    if (const json * s = field(body, "store")) {
        r.store = get_bool(*s, "store");
    }
    if (const json * m = field(body, "model")) {
        c.model = get_string(*m, "model");
    }
    if (const json * u = field(body, "user")) {
        c.user = get_string(*u, "user");
    }
    if (c.user.empty()) {
        if (const json * u = field(body, "safety_identifier")) {
            c.user = get_string(*u, "safety_identifier");
        }
    }
    if (const json * k = field(body, "prompt_cache_key")) {
        c.prompt_cache_key = get_string(*k, "prompt_cache_key");
    }
    if (const json * cp = field(body, "cache_prompt")) {  // extension, as on /v1/chat/completions
        c.cache_prompt = get_bool(*cp, "cache_prompt");
    }
    if (const json * l = field(body, "lora")) {  // extension, as on /v1/chat/completions
        c.lora = parse_lora_list(*l, "lora");
    }
    if (const json * md = field(body, "metadata")) {
        if (!md->is_object()) {
            fail("metadata", "'metadata' must be an object of strings, got " + std::string(type_name(*md)));
        }
        for (auto it = md->begin(); it != md->end(); ++it) {
            r.metadata[it.key()] = get_string(it.value(), "metadata." + it.key());
        }
    }
    if (const json * kw = field(body, "chat_template_kwargs")) {  // extension
        if (!kw->is_object()) {
            fail("chat_template_kwargs", "'chat_template_kwargs' must be an object, got " + std::string(type_name(*kw)));
        }
        for (auto it = kw->begin(); it != kw->end(); ++it) {
            c.chat_template_kwargs[it.key()] = dump(it.value());
        }
    }
}

void parse_body(const json & body, responses_request & r) {
    read_body(body, r, {parse_input, parse_tool_fields, parse_sampling, parse_output_shape, parse_identity});
    if (r.input.empty() && r.previous_response_id.empty() && !r.has_instructions) {
        fail("input", "'input' is required: a string or a non-empty array of items");
    }
}

}  // namespace

std::optional<api_error> parse_responses_request(std::string_view body, responses_request & out) {
    return parse_request(body, out, [](const json & j, responses_request & r) { parse_body(j, r); });
}

std::optional<api_error> build_chat_messages(responses_request & r, const std::vector<response_item> & prior,
                                             const reasoning_seal * seal) {
    std::vector<const response_item *> all;
    for (const auto & it : prior) {
        all.push_back(&it);
    }
    for (const auto & it : r.input) {
        all.push_back(&it);
    }
    if (auto err = chat_messages_of(r.instructions, r.has_instructions, all, seal, r.chat.messages, r.chat.images)) {
        return err;
    }
    return check_chat_limits(r.chat);
}

}  // namespace lineage::server
