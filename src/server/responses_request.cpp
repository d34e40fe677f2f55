// server::responses_request: validation of a Responses API body and its conversion to a
// chat_request. Internally a failed check throws a bad_field carrying the api_error; the public
// functions turn it into a return value.
#include "server/responses_request.h"

#include "server/reasoning_seal.h"

#include <spdlog/spdlog.h>

#include <limits>

namespace lineage::server {

namespace {

struct bad_field {
    api_error err;
};

[[noreturn]] void fail(const std::string & param, const std::string & message) {
    throw bad_field{invalid_request(message, param)};
}

const char * type_name(const json & j) {
    switch (j.type()) {
        case json::value_t::null:            return "null";
        case json::value_t::object:          return "an object";
        case json::value_t::array:           return "an array";
        case json::value_t::string:          return "a string";
        case json::value_t::boolean:         return "a boolean";
        case json::value_t::number_integer:
        case json::value_t::number_unsigned: return "an integer";
        case json::value_t::number_float:    return "a number";
        default:                             return "an unsupported value";
    }
}

// A present, non-null field of `obj`, or nullptr (clients send null for "unset").
const json * field(const json & obj, const char * key) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
        return nullptr;
    }
    return &*it;
}

std::string get_string(const json & v, const std::string & param) {
    if (!v.is_string()) {
        fail(param, "'" + param + "' must be a string, got " + type_name(v));
    }
    return v.get<std::string>();
}

bool get_bool(const json & v, const std::string & param) {
    if (!v.is_boolean()) {
        fail(param, "'" + param + "' must be a boolean (true or false), got " + type_name(v));
    }
    return v.get<bool>();
}

int64_t get_int(const json & v, const std::string & param) {
    if (v.is_number_unsigned()) {
        const auto u = v.get<uint64_t>();
        if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
            fail(param, "'" + param + "' is too large");
        }
        return static_cast<int64_t>(u);
    }
    if (!v.is_number_integer()) {
        fail(param, "'" + param + "' must be an integer, got " + type_name(v));
    }
    return v.get<int64_t>();
}

double get_number(const json & v, const std::string & param, double lo, double hi) {
    if (!v.is_number()) {
        fail(param, "'" + param + "' must be a number, got " + type_name(v));
    }
    const double d = v.get<double>();
    if (!(d >= lo && d <= hi)) {
        fail(param, "'" + param + "' is " + json(d).dump() + "; it must be between " + json(lo).dump() + " and " +
                        json(hi).dump());
    }
    return d;
}

const json & require(const json & obj, const char * key, const std::string & param, const std::string & what) {
    const json * v = field(obj, key);
    if (!v) {
        fail(param, "'" + param + "' is required" + (what.empty() ? "" : ": " + what));
    }
    return *v;
}

// Message content: a string, or an array of input_text / output_text parts.
void parse_content(const json & c, const std::string & p, response_item & it) {
    if (c.is_string()) {
        it.text = c.get<std::string>();
        return;
    }
    if (!c.is_array()) {
        fail(p, "'" + p + "' must be a string or an array of input_text/output_text parts, got " + type_name(c));
    }
    it.content_is_parts = true;
    for (size_t i = 0; i < c.size(); ++i) {
        const std::string pp = p + "[" + std::to_string(i) + "]";
        if (!c[i].is_object()) {
            fail(pp, "'" + pp + "' must be an object like {\"type\": \"input_text\", \"text\": \"...\"}, got " +
                         type_name(c[i]));
        }
        const std::string t = get_string(require(c[i], "type", pp + ".type", ""), pp + ".type");
        if (t == "input_text" || t == "output_text" || t == "text") {
            it.parts.push_back(get_string(require(c[i], "text", pp + ".text", ""), pp + ".text"));
        } else if (t == "refusal") {
            it.parts.push_back(get_string(require(c[i], "refusal", pp + ".refusal", ""), pp + ".refusal"));
        } else if (t == "input_image" || t == "input_file" || t == "input_audio") {
            fail(pp + ".type", "'" + pp + ".type' is '" + t + "'; this server serves text models: send input_text parts");
        } else {
            fail(pp + ".type", "'" + pp + ".type' is '" + t + "'; expected input_text or output_text");
        }
    }
}

// Text of a string or an array of {type, text} parts (function_call_output.output).
std::string text_of(const json & v, const std::string & p) {
    if (v.is_string()) {
        return v.get<std::string>();
    }
    if (!v.is_array()) {
        fail(p, "'" + p + "' must be a string or an array of input_text parts, got " + type_name(v));
    }
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) {
        const std::string pp = p + "[" + std::to_string(i) + "]";
        if (!v[i].is_object() || !field(v[i], "text")) {
            fail(pp, "'" + pp + "' must be an input_text part {\"type\": \"input_text\", \"text\": \"...\"}");
        }
        out += get_string(*field(v[i], "text"), pp + ".text");
    }
    return out;
}

response_item parse_item(const json & j, const std::string & p) {
    if (!j.is_object()) {
        fail(p, "'" + p + "' must be an object (a message, function_call, function_call_output or reasoning item), got " +
                    type_name(j));
    }
    response_item it;
    std::string type = "message";  // an EasyInputMessage has no type
    if (const json * t = field(j, "type")) {
        type = get_string(*t, p + ".type");
    }
    if (const json * id = field(j, "id")) {
        it.id = get_string(*id, p + ".id");
    }
    if (type == "message") {
        it.type = response_item::kind::message;
        it.role = get_string(require(j, "role", p + ".role", "one of user, assistant, system, developer"), p + ".role");
        if (it.role != "user" && it.role != "assistant" && it.role != "system" && it.role != "developer") {
            fail(p + ".role", "'" + p + ".role' is '" + it.role + "'; expected one of user, assistant, system, developer");
        }
        parse_content(require(j, "content", p + ".content", ""), p + ".content", it);
    } else if (type == "function_call") {
        it.type = response_item::kind::function_call;
        it.call_id = get_string(require(j, "call_id", p + ".call_id", "the id the function_call_output refers to"), p + ".call_id");
        it.name = get_string(require(j, "name", p + ".name", ""), p + ".name");
        it.arguments = get_string(require(j, "arguments", p + ".arguments", "JSON text"), p + ".arguments");
        if (const json * ns = field(j, "namespace")) {
            it.ns = get_string(*ns, p + ".namespace");
        }
    } else if (type == "function_call_output") {
        it.type = response_item::kind::function_call_output;
        it.call_id = get_string(require(j, "call_id", p + ".call_id", "the call_id of the function_call it answers"), p + ".call_id");
        it.output = text_of(require(j, "output", p + ".output", ""), p + ".output");
    } else if (type == "reasoning") {
        it.type = response_item::kind::reasoning;
        if (const json * c = field(j, "content")) {
            if (!c->is_array()) {
                fail(p + ".content", "'" + p + ".content' must be an array of reasoning_text parts, got " + type_name(*c));
            }
            for (size_t i = 0; i < c->size(); ++i) {
                const std::string pp = p + ".content[" + std::to_string(i) + "]";
                if (!(*c)[i].is_object()) {
                    fail(pp, "'" + pp + "' must be an object {\"type\": \"reasoning_text\", \"text\": \"...\"}");
                }
                it.reasoning_text += get_string(require((*c)[i], "text", pp + ".text", ""), pp + ".text");
            }
        }
        if (const json * e = field(j, "encrypted_content")) {
            it.encrypted_content = get_string(*e, p + ".encrypted_content");
        }
    } else if (type == "item_reference") {
        fail(p + ".type", "'" + p + ".type' is 'item_reference'; this server does not resolve item references: "
                          "send the items themselves or continue with 'previous_response_id'");
    } else {
        fail(p + ".type", "'" + p + ".type' is '" + type +
                              "'; this server accepts message, function_call, function_call_output and reasoning items");
    }
    return it;
}

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

void parse_body(const json & body, responses_request & r) {
    if (!body.is_object()) {
        fail("", std::string("the request body must be a JSON object, got ") + type_name(body));
    }
    chat_request & c = r.chat;
    // --- input ---
    const json * input = field(body, "input");
    if (input && input->is_string()) {
        response_item it;
        it.role = "user";
        it.text = input->get<std::string>();
        r.input.push_back(std::move(it));
    } else if (input && input->is_array()) {
        for (size_t i = 0; i < input->size(); ++i) {
            r.input.push_back(parse_item((*input)[i], "input[" + std::to_string(i) + "]"));
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

    // --- tools ---
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

    // --- output and sampling ---
    if (const json * s = field(body, "stream")) {
        c.stream = get_bool(*s, "stream");
    }
    if (const json * m = field(body, "max_output_tokens")) {
        const int64_t v = get_int(*m, "max_output_tokens");
        if (v < 1 || v > std::numeric_limits<int32_t>::max()) {
            fail("max_output_tokens", "'max_output_tokens' is " + std::to_string(v) + "; it must be at least 1");
        }
        r.max_output_tokens = static_cast<int32_t>(v);
        c.sampling.max_tokens = static_cast<int32_t>(v);
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
    if (const json * text = field(body, "text")) {
        if (!text->is_object()) {
            fail("text", "'text' must be an object like {\"format\": {\"type\": \"text\"}}, got " + std::string(type_name(*text)));
        }
        if (const json * fmt = field(*text, "format")) {
            if (!fmt->is_object()) {
                fail("text.format", "'text.format' must be an object, got " + std::string(type_name(*fmt)));
            }
            const std::string t = get_string(require(*fmt, "type", "text.format.type", ""), "text.format.type");
            if (t == "json_schema" || t == "json_object") {
                fail("text.format", "'text.format' of type '" + t +
                                        "' (structured output) is not supported on /v1/responses yet; send "
                                        "{\"type\": \"text\"} and describe the format in the instructions");
            }
            if (t != "text") {
                fail("text.format.type", "'text.format.type' is '" + t + "'; expected \"text\"");
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

    // --- identity, storage and cache ---
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
    if (r.input.empty() && r.previous_response_id.empty() && !r.has_instructions) {
        fail("input", "'input' is required: a string or a non-empty array of items");
    }
}

std::string joined(const response_item & it, const char * sep) {
    if (!it.content_is_parts) {
        return it.text;
    }
    std::string out;
    for (size_t i = 0; i < it.parts.size(); ++i) {
        out += (i ? sep : "") + it.parts[i];
    }
    return out;
}

engine::chat_message message_of(const response_item & it, const std::string & role) {
    engine::chat_message m;
    m.role = role;
    if (it.content_is_parts) {
        m.content_is_parts = true;
        m.parts = it.parts;
    } else {
        m.content = it.text;
    }
    return m;
}

bool is_system_item(const response_item & it) {
    return it.type == response_item::kind::message && (it.role == "system" || it.role == "developer");
}

}  // namespace

std::optional<api_error> parse_responses_request(std::string_view body, responses_request & out) {
    json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
        api_error e = invalid_request("the request body is not valid JSON; send a JSON object");
        e.code = "invalid_json";
        return e;
    }
    responses_request r;
    try {
        parse_body(j, r);
    } catch (const bad_field & b) {
        return b.err;
    }
    out = std::move(r);
    return std::nullopt;
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
    auto & msgs = r.chat.messages;
    msgs.clear();

    // The one leading system message: instructions, then the leading developer/system items.
    size_t i = 0;
    std::vector<const response_item *> lead;
    while (i < all.size() && is_system_item(*all[i])) {
        lead.push_back(all[i++]);
    }
    if (!r.has_instructions && lead.size() == 1) {
        msgs.push_back(message_of(*lead[0], lead[0]->role));  // as sent: same tokens as the chat dialect
    } else if (r.has_instructions || !lead.empty()) {
        engine::chat_message m;
        m.role = r.has_instructions ? "system" : lead[0]->role;
        m.content = r.instructions;
        for (const auto * it : lead) {
            m.content += (m.content.empty() ? "" : "\n\n") + joined(*it, "");
        }
        msgs.push_back(std::move(m));
    }

    // Assistant turn being assembled from reasoning / message / function_call items.
    engine::chat_message * turn = nullptr;
    auto open_turn = [&]() -> engine::chat_message & {
        engine::chat_message m;
        m.role = "assistant";
        msgs.push_back(std::move(m));
        turn = &msgs.back();
        return *turn;
    };
    for (; i < all.size(); ++i) {
        const response_item & it = *all[i];
        switch (it.type) {
            case response_item::kind::reasoning: {
                std::string text = it.reasoning_text;
                if (!it.encrypted_content.empty()) {
                    if (auto opened = seal ? seal->open(it.encrypted_content) : std::nullopt) {
                        text = std::move(*opened);
                    } else {
                        spdlog::warn("responses: a reasoning item's encrypted_content does not open with this server's "
                                     "key (another server, or its store was reset); its reasoning is left out");
                    }
                }
                if (!turn || !turn->content.empty() || !turn->tool_calls.empty()) {
                    open_turn();
                }
                turn->reasoning_content += text;
                break;
            }
            case response_item::kind::message:
                if (it.role == "assistant") {
                    if (!turn || !turn->content.empty() || !turn->tool_calls.empty()) {
                        open_turn();
                    }
                    turn->content = joined(it, "");
                } else {
                    turn = nullptr;
                    // A developer/system message after the start: templates accept one system
                    // message, first; it is given to the model as a user message.
                    msgs.push_back(message_of(it, "user"));
                }
                break;
            case response_item::kind::function_call: {
                if (!turn) {
                    open_turn();
                }
                engine::chat_tool_call call;
                call.id = it.call_id;
                call.name = it.name;
                call.arguments = it.arguments;
                turn->tool_calls.push_back(std::move(call));
                break;
            }
            case response_item::kind::function_call_output: {
                turn = nullptr;
                engine::chat_message m;
                m.role = "tool";
                m.tool_call_id = it.call_id;
                m.content = it.output;
                msgs.push_back(std::move(m));
                break;
            }
        }
    }
    if (msgs.empty()) {
        return invalid_request("the conversation is empty: send 'input' (a string or items)", "input");
    }
    return std::nullopt;
}

json item_to_json(const response_item & it) {
    json j = json::object();
    switch (it.type) {
        case response_item::kind::message: {
            j["type"] = "message";
            if (!it.id.empty()) {
                j["id"] = it.id;
            }
            j["role"] = it.role;
            if (it.content_is_parts) {
                json parts = json::array();
                for (const auto & p : it.parts) {
                    json part = json::object();
                    part["type"] = it.role == "assistant" ? "output_text" : "input_text";
                    part["text"] = p;
                    if (it.role == "assistant") {
                        part["annotations"] = json::array();
                        part["logprobs"] = json::array();
                    }
                    parts.push_back(std::move(part));
                }
                j["content"] = std::move(parts);
            } else {
                j["content"] = it.text;
            }
            break;
        }
        case response_item::kind::function_call:
            j["type"] = "function_call";
            if (!it.id.empty()) {
                j["id"] = it.id;
            }
            j["call_id"] = it.call_id;
            j["name"] = it.name;
            if (!it.ns.empty()) {
                j["namespace"] = it.ns;
            }
            j["arguments"] = it.arguments;
            break;
        case response_item::kind::function_call_output:
            j["type"] = "function_call_output";
            j["call_id"] = it.call_id;
            j["output"] = it.output;
            break;
        case response_item::kind::reasoning: {
            j["type"] = "reasoning";
            if (!it.id.empty()) {
                j["id"] = it.id;
            }
            j["summary"] = json::array();
            json part = json::object();
            part["type"] = "reasoning_text";
            part["text"] = it.reasoning_text;
            j["content"] = json::array({std::move(part)});
            break;
        }
    }
    return j;
}

std::optional<std::vector<response_item>> items_from_json_text(std::string_view text) {
    json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_array()) {
        return std::nullopt;
    }
    std::vector<response_item> out;
    try {
        for (size_t i = 0; i < j.size(); ++i) {
            out.push_back(parse_item(j[i], "items[" + std::to_string(i) + "]"));
        }
    } catch (const bad_field &) {
        return std::nullopt;
    }
    return out;
}

}  // namespace lineage::server
