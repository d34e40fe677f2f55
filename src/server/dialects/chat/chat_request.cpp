// server::chat_request: validation of a chat completion body. Internally a failed check throws
// a bad_field carrying the api_error; parse_chat_request turns it into a return value.
#include "server/dialects/chat/chat_request.h"

#include "engine/multimodal.h"
#include "server/dialects/chat/chat_request_options.h"
#include "server/http/json_body.h"
#include "server/http/json_fields.h"
#include "server/http/request_limits.h"
#include "server/request/message_checks.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>

namespace lineage::server {

namespace {

using namespace fields;

// Content: a string, or an array of {"type": "text", "text": "..."} and {"type": "image_url",
// "image_url": {"url": "data:image/png;base64,..."}} parts (an image part becomes a text part
// holding the image marker; its bytes join `images`).
void parse_content(const json & c, const std::string & param, engine::chat_message & m,
                   std::vector<image_input> & images) {
    if (c.is_string()) {
        m.content = c.get<std::string>();
        return;
    }
    if (!c.is_array()) {
        fail(param, "'" + param + "' must be a string or an array of text and image_url parts, got " + type_name(c));
    }
    m.content_is_parts = true;
    for (size_t i = 0; i < c.size(); ++i) {
        const json & part = c[i];
        const std::string pp = param + "[" + std::to_string(i) + "]";
        const std::string t = content_part_type(part, pp, "an object like {\"type\": \"text\", \"text\": \"...\"}",
                                                "; this server accepts \"text\" and \"image_url\" parts");
        if (t == "image_url") {
            const json * iu = field(part, "image_url");
            if (!iu) {
                fail(pp + ".image_url", "'" + pp + ".image_url' is required: {\"url\": \"data:image/png;base64,...\"}");
            }
            const json * url = iu->is_object() ? field(*iu, "url") : iu;
            const std::string up = iu->is_object() ? pp + ".image_url.url" : pp + ".image_url";
            if (!url) {
                fail(up, "'" + up + "' is required: a data URI (data:image/png;base64,...)");
            }
            std::string why;
            auto bytes = image_from_url(get_string(*url, up), why);
            if (!bytes) {
                fail(up, "'" + up + "' " + why);
            }
            images.push_back({std::move(*bytes), pp + ".image_url"});
            m.parts.push_back(engine::projector::marker());
            continue;
        }
        if (t != "text") {
            fail(pp + ".type", "'" + pp + ".type' is '" + t + "'; this server accepts \"text\" and \"image_url\" parts");
        }
        const json * text = field(part, "text");
        if (!text) {
            fail(pp + ".text", "'" + pp + ".text' is required");
        }
        m.parts.push_back(get_string(*text, pp + ".text"));
    }
}

void parse_tool_calls(const json & tcs, const std::string & param, engine::chat_message & m) {
    if (!tcs.is_array()) {
        fail(param, "'" + param + "' must be an array, got " + type_name(tcs));
    }
    for (size_t i = 0; i < tcs.size(); ++i) {
        const json & tc = tcs[i];
        const std::string p = param + "[" + std::to_string(i) + "]";
        if (!tc.is_object()) {
            fail(p, "'" + p + "' must be an object, got " + type_name(tc));
        }
        engine::chat_tool_call call;
        if (const json * id = field(tc, "id")) {
            call.id = get_string(*id, p + ".id");
        }
        if (const json * type = field(tc, "type")) {
            const std::string t = get_string(*type, p + ".type");
            if (t != "function") {
                fail(p + ".type", "'" + p + ".type' is '" + t + "'; only \"function\" tool calls are supported");
            }
        }
        const json * fn = field(tc, "function");
        if (!fn) {
            fail(p + ".function", "'" + p + ".function' is required: {\"name\": ..., \"arguments\": \"<JSON text>\"}");
        }
        if (!fn->is_object()) {
            fail(p + ".function", "'" + p + ".function' must be an object, got " + type_name(*fn));
        }
        const json * name = field(*fn, "name");
        if (!name) {
            fail(p + ".function.name", "'" + p + ".function.name' is required");
        }
        call.name = get_string(*name, p + ".function.name");
        if (const json * args = field(*fn, "arguments")) {
            if (!args->is_string()) {
                fail(p + ".function.arguments", "'" + p + ".function.arguments' must be a string of JSON text, got " +
                                                    std::string(type_name(*args)));
            }
            call.arguments = args->get<std::string>();
            check_arguments_nesting(call.arguments, p + ".function.arguments");
        } else {
            call.arguments = "{}";
        }
        m.tool_calls.push_back(std::move(call));
    }
}

engine::chat_message parse_message(const json & msg, size_t index, std::vector<image_input> & images) {
    const std::string p = "messages[" + std::to_string(index) + "]";
    engine::chat_message m;
    m.role = message_role(msg, p, {"system", "developer", "user", "assistant", "tool"},
                          "one of system, developer, user, assistant, tool");
    const json * content = field(msg, "content");
    if (content) {
        parse_content(*content, p + ".content", m, images);
    }
    if (const json * name = field(msg, "name")) {
        m.name = get_string(*name, p + ".name");
    }
    if (m.role == "assistant") {
        if (const json * tcs = field(msg, "tool_calls")) {
            parse_tool_calls(*tcs, p + ".tool_calls", m);
        }
        if (const json * rc = field(msg, "reasoning_content")) {
            m.reasoning_content = get_string(*rc, p + ".reasoning_content");
        }
        if (!content && m.tool_calls.empty()) {
            fail(p + ".content", "'" + p + "' is an assistant message without 'content' or 'tool_calls'; send one of them");
        }
    } else if (!content) {
        fail(p + ".content", "'" + p + ".content' is required for a " + m.role + " message");
    }
    if (m.role == "tool") {
        const json * id = field(msg, "tool_call_id");
        if (!id) {
            fail(p + ".tool_call_id",
                 "'" + p + ".tool_call_id' is required for a tool message: the id of the tool call it answers");
        }
        m.tool_call_id = get_string(*id, p + ".tool_call_id");
    }
    return m;
}

engine::chat_tool parse_tool(const json & t, size_t index) {
    const std::string p = "tools[" + std::to_string(index) + "]";
    if (!t.is_object()) {
        fail(p, "'" + p + "' must be an object like {\"type\": \"function\", \"function\": {...}}, got " + type_name(t));
    }
    if (const json * type = field(t, "type")) {
        const std::string ty = get_string(*type, p + ".type");
        if (ty != "function") {
            fail(p + ".type", "'" + p + ".type' is '" + ty + "'; only \"function\" tools are supported");
        }
    } else {
        fail(p + ".type", "'" + p + ".type' is required and must be \"function\"");
    }
    const json * fn = field(t, "function");
    if (!fn) {
        fail(p + ".function", "'" + p + ".function' is required: {\"name\": ..., \"description\": ..., \"parameters\": {...}}");
    }
    if (!fn->is_object()) {
        fail(p + ".function", "'" + p + ".function' must be an object, got " + type_name(*fn));
    }
    engine::chat_tool tool;
    const json * name = field(*fn, "name");
    if (!name) {
        fail(p + ".function.name", "'" + p + ".function.name' is required");
    }
    tool.name = get_string(*name, p + ".function.name");
    if (tool.name.empty()) {
        fail(p + ".function.name", "'" + p + ".function.name' must not be empty");
    }
    if (const json * d = field(*fn, "description")) {
        tool.description = get_string(*d, p + ".function.description");
    }
    if (const json * params = field(*fn, "parameters")) {
        if (!params->is_object()) {
            fail(p + ".function.parameters",
                 "'" + p + ".function.parameters' must be a JSON Schema object, got " + type_name(*params));
        }
        tool.parameters = dump(*params);  // key order as sent: it is part of the prompt
    }
    return tool;
}

void parse_tool_choice(const json & tc, chat_request & r) {
    if (tc.is_string()) {
        const std::string s = tc.get<std::string>();
        if (s != "auto" && s != "none" && s != "required") {
            fail("tool_choice", "'tool_choice' is '" + s +
                                    "'; expected \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                                    "\"function\": {\"name\": ...}}");
        }
        r.tool_choice = s;
        r.tool_choice_key = s;
        return;
    }
    if (!tc.is_object()) {
        fail("tool_choice", "'tool_choice' must be a string or an object, got " + std::string(type_name(tc)));
    }
    const json * fn = field(tc, "function");
    const json * name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
    if (!name || !name->is_string()) {
        fail("tool_choice", "'tool_choice' as an object must be {\"type\": \"function\", \"function\": {\"name\": \"...\"}}");
    }
    const std::string n = name->get<std::string>();
    r.tool_choice = "required";
    r.tool_choice_key = "function:" + n;
}

void parse_stop(const json & s, chat_request & r) {
    if (s.is_string()) {
        if (s.get<std::string>().empty()) {
            fail("stop", "'stop' must not be an empty string");
        }
        r.stop.push_back(s.get<std::string>());
        return;
    }
    if (!s.is_array()) {
        fail("stop", "'stop' must be a string or an array of strings, got " + std::string(type_name(s)));
    }
    if (s.size() > max_stop_strings) {
        fail("stop", "'stop' has " + std::to_string(s.size()) + " strings; at most " + std::to_string(max_stop_strings) +
                         " are allowed");
    }
    for (size_t i = 0; i < s.size(); ++i) {
        const std::string p = "stop[" + std::to_string(i) + "]";
        const std::string v = get_string(s[i], p);
        if (v.empty()) {
            fail(p, "'" + p + "' must not be an empty string");
        }
        r.stop.push_back(v);
    }
}

// 'messages': required, non-empty, counted before any is converted.
void parse_messages(const json & body, chat_request & r) {
    const json & messages = messages_array(body, "send a non-empty array of {\"role\", \"content\"} objects");
    for (size_t i = 0; i < messages.size(); ++i) {
        r.messages.push_back(parse_message(messages[i], i, r.images));
    }
}

// 'tools', 'tool_choice' (a named function leaves only that tool) and 'parallel_tool_calls'.
void parse_tool_fields(const json & body, chat_request & r) {
    if (const json * tools = field(body, "tools")) {
        if (!tools->is_array()) {
            fail("tools", "'tools' must be an array, got " + std::string(type_name(*tools)));
        }
        if (auto e = check_tool_count(tools->size(), "tools")) {
            throw bad_field{*e};
        }
        for (size_t i = 0; i < tools->size(); ++i) {
            r.tools.push_back(parse_tool((*tools)[i], i));
        }
    }
    if (const json * tc = field(body, "tool_choice")) {
        parse_tool_choice(*tc, r);
    }
    if (r.tool_choice != "auto" && r.tool_choice != "none" && r.tools.empty()) {
        fail("tool_choice", "'tool_choice' asks for a tool call but no 'tools' were given");
    }
    if (r.tool_choice_key.rfind("function:", 0) == 0) {
        const std::string name = r.tool_choice_key.substr(9);
        std::vector<engine::chat_tool> only;
        for (const auto & t : r.tools) {
            if (t.name == name) {
                only.push_back(t);
            }
        }
        if (only.empty()) {
            fail("tool_choice", "'tool_choice' names function '" + name + "', which is not in 'tools'");
        }
        r.tools = std::move(only);
    }
    if (const json * ptc = field(body, "parallel_tool_calls")) {
        r.parallel_tool_calls = get_bool(*ptc, "parallel_tool_calls");
    }
}

// 'stream' and its 'stream_options'.
void parse_streaming(const json & body, chat_request & r) {
    if (const json * s = field(body, "stream")) {
        r.stream = get_bool(*s, "stream");
    }
    if (const json * so = field(body, "stream_options")) {
        if (!so->is_object()) {
            fail("stream_options", "'stream_options' must be an object, got " + std::string(type_name(*so)));
        }
        if (!r.stream) {  // as OpenAI answers it: an option of a stream that was not asked for
            fail("stream_options", "'stream_options' is only allowed with \"stream\": true");
        }
        if (const json * iu = field(*so, "include_usage")) {
            r.include_usage = get_bool(*iu, "stream_options.include_usage");
        }
    }
}

// The token limit, the sampling parameters, 'n' and 'stop'.
void parse_sampling(const json & body, chat_request & r) {
    const json * max_tokens = field(body, "max_completion_tokens");
    std::string max_param = "max_completion_tokens";
    if (!max_tokens) {
        max_tokens = field(body, "max_tokens");
        max_param = "max_tokens";
    }
    if (max_tokens) {
        r.sampling.max_tokens = get_token_limit(*max_tokens, max_param);
    }
    if (const json * t = field(body, "temperature")) {
        const double v = get_number(*t, "temperature");
        if (!(v >= 0.0 && v <= 2.0)) {
            fail("temperature", "'temperature' is " + fmt_number(v) + "; it must be between 0 and 2");
        }
        r.sampling.temperature = static_cast<float>(v);
    }
    if (const json * t = field(body, "top_p")) {
        const double v = get_number(*t, "top_p");
        if (!(v >= 0.0 && v <= 1.0)) {
            fail("top_p", "'top_p' is " + fmt_number(v) + "; it must be between 0 and 1");
        }
        r.sampling.top_p = static_cast<float>(v);
    }
    if (const json * s = field(body, "seed")) {
        r.sampling.seed = get_int(*s, "seed");
    }
    if (const json * n = field(body, "n")) {
        const int64_t v = get_int(*n, "n");
        if (v != 1) {
            fail("n", "'n' is " + std::to_string(v) + "; this server generates one choice per request, so 'n' must be 1");
        }
    }
    if (const json * s = field(body, "stop")) {
        parse_stop(*s, r);
    }
}

// 'model', 'user', the cache options (also under 'extra_body') and the template's inputs.
void parse_identity(const json & body, chat_request & r) {
    if (const json * m = field(body, "model")) {
        r.model = get_string(*m, "model");
    }
    if (const json * u = field(body, "user")) {
        r.user = get_string(*u, "user");
    }
    const json * extra = field(body, "extra_body");
    if (extra && !extra->is_object()) {
        fail("extra_body", "'extra_body' must be an object, got " + std::string(type_name(*extra)));
    }
    if (const json * k = field(body, "prompt_cache_key")) {
        r.prompt_cache_key = get_string(*k, "prompt_cache_key");
    }
    if (r.prompt_cache_key.empty() && extra) {
        if (const json * k = field(*extra, "prompt_cache_key")) {
            r.prompt_cache_key = get_string(*k, "extra_body.prompt_cache_key");
        }
    }
    if (const json * c = field(body, "cache_prompt")) {
        r.cache_prompt = get_bool(*c, "cache_prompt");
    } else if (extra) {
        if (const json * c2 = field(*extra, "cache_prompt")) {
            r.cache_prompt = get_bool(*c2, "extra_body.cache_prompt");
        }
    }
    if (const json * l = field(body, "lora")) {
        r.lora = parse_lora_list(*l, "lora");
    } else if (extra) {
        if (const json * l2 = field(*extra, "lora")) {
            r.lora = parse_lora_list(*l2, "extra_body.lora");
        }
    }
    if (const json * g = field(body, "add_generation_prompt")) {
        r.add_generation_prompt = get_bool(*g, "add_generation_prompt");
    }
    if (const json * kw = field(body, "chat_template_kwargs")) {
        if (!kw->is_object()) {
            fail("chat_template_kwargs", "'chat_template_kwargs' must be an object, got " + std::string(type_name(*kw)));
        }
        for (auto it = kw->begin(); it != kw->end(); ++it) {
            if (it.key() == "enable_thinking" && !it.value().is_boolean()) {
                fail("chat_template_kwargs.enable_thinking",
                     "'chat_template_kwargs.enable_thinking' must be a boolean, got " + std::string(type_name(it.value())));
            }
            r.chat_template_kwargs[it.key()] = dump(it.value());
        }
    }
}

void parse_body(const json & body, chat_request & r) {
    read_body(
        body, r,
        {parse_messages, parse_tool_fields, parse_streaming, parse_sampling, parse_output_options, parse_identity});
}

}  // namespace

std::optional<api_error> parse_chat_request(std::string_view body, chat_request & out) {
    return parse_request(body, out, [](const json & j, chat_request & r) {
        parse_body(j, r);
        if (auto e = check_chat_limits(r)) {
            throw bad_field{*e};
        }
    });
}

}  // namespace lineage::server
