// server::anthropic_request: validation and conversion of a Messages API body. Internally a
// failed check throws a bad_field carrying the api_error; parse_anthropic_request returns it.
#include "server/anthropic_request.h"

#include <cstdint>
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

const json & get_object(const json & v, const std::string & param) {
    if (!v.is_object()) {
        fail(param, "'" + param + "' must be an object, got " + type_name(v));
    }
    return v;
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

std::string block_type(const json & b, const std::string & p) {
    if (!b.is_object()) {
        fail(p, "'" + p + "' must be a content block object like {\"type\": \"text\", \"text\": \"...\"}, got " +
                    type_name(b));
    }
    const json * t = field(b, "type");
    if (!t) {
        fail(p + ".type", "'" + p + ".type' is required");
    }
    return get_string(*t, p + ".type");
}

// A system text block made by Claude Code for Anthropic's billing ("x-anthropic-billing-header:
// cc_version=...; cc_entrypoint=...;"): routing metadata, not an instruction, and its version
// suffix changes with the user's first message, which would cut every prompt's shared prefix
// at its first tokens. Dropped (docs/prompt-cache.md).
bool is_billing_header(const std::string & text) {
    return text.rfind("x-anthropic-billing-header:", 0) == 0;
}

// One text part; a single part becomes plain content (templates render both the same, and a
// client that echoes a string gets the same tokens).
void set_parts(engine::chat_message & m, std::vector<std::string> parts) {
    m.parts.clear();
    m.content.clear();
    m.content_is_parts = false;
    if (parts.size() == 1) {
        m.content = std::move(parts[0]);
    } else if (!parts.empty()) {
        m.parts = std::move(parts);
        m.content_is_parts = true;
    }
}

bool has_cache_control(const json & block, const std::string & p) {
    const json * cc = field(block, "cache_control");
    if (!cc) {
        return false;
    }
    get_object(*cc, p + ".cache_control");
    return true;
}

std::string text_of(const json & block, const std::string & p) {
    const json * t = field(block, "text");
    if (!t) {
        fail(p + ".text", "'" + p + ".text' is required for a text block");
    }
    return get_string(*t, p + ".text");
}

[[noreturn]] void refuse_block(const std::string & type, const std::string & p, const std::string & role) {
    if (type == "image" || type == "document") {
        fail(p + ".type", "'" + p + "' is an " + type +
                              " block; this server serves text-only models and does not accept images or documents yet");
    }
    fail(p + ".type", "'" + p + ".type' is '" + type + "', which a " + role +
                          " message cannot hold here; send text, tool_use, tool_result, thinking or redacted_thinking "
                          "blocks");
}

class converter {
public:
    converter(const thinking_signer & s, anthropic_request & r) : signer_(s), r_(r) {}

    void system(const json & sys) {
        const std::string p = "system";
        if (sys.is_string()) {
            sys_parts_.push_back(sys.get<std::string>());
            return;
        }
        if (!sys.is_array()) {
            fail(p, "'system' must be a string or an array of text blocks, got " + std::string(type_name(sys)));
        }
        for (size_t i = 0; i < sys.size(); ++i) {
            const std::string bp = p + "[" + std::to_string(i) + "]";
            const std::string t = block_type(sys[i], bp);
            if (t != "text") {
                fail(bp + ".type", "'" + bp + ".type' is '" + t + "'; system blocks must be text blocks");
            }
            const std::string text = text_of(sys[i], bp);
            if (!is_billing_header(text)) {
                sys_parts_.push_back(text);
            }
            if (has_cache_control(sys[i], bp)) {
                system_marks_.push_back(sys_parts_.size());
            }
        }
    }

    void message(const json & msg, size_t index) {
        const std::string p = "messages[" + std::to_string(index) + "]";
        if (!msg.is_object()) {
            fail(p, "'" + p + "' must be an object with 'role' and 'content', got " + type_name(msg));
        }
        const json * role = field(msg, "role");
        if (!role) {
            fail(p + ".role", "'" + p + ".role' is required: \"user\" or \"assistant\"");
        }
        const std::string rl = get_string(*role, p + ".role");
        if (rl != "user" && rl != "assistant" && rl != "system") {
            fail(p + ".role", "'" + p + ".role' is '" + rl + "'; expected \"user\" or \"assistant\"");
        }
        const json * content = field(msg, "content");
        if (!content) {
            fail(p + ".content", "'" + p + ".content' is required: a string or an array of content blocks");
        }
        if (!content->is_string() && !content->is_array()) {
            fail(p + ".content", "'" + p + ".content' must be a string or an array of content blocks, got " +
                                     type_name(*content));
        }
        if (rl == "system") {
            system_message(*content, p);
        } else if (rl == "user") {
            user(*content, p);
        } else {
            assistant(*content, p);
        }
        seen_turn_ = true;
    }

    void finish() {
        std::vector<engine::chat_message> out;
        if (!sys_parts_.empty()) {
            engine::chat_message sys;
            sys.role = "system";
            set_parts(sys, sys_parts_);
            out.push_back(std::move(sys));
            for (const size_t n : system_marks_) {
                if (n == 0) {
                    continue;
                }
                cache_breakpoint b;
                b.last.role = "system";
                set_parts(b.last, std::vector<std::string>(sys_parts_.begin(), sys_parts_.begin() + static_cast<long>(n)));
                r_.breakpoints.push_back(std::move(b));
            }
        }
        const size_t shift = out.size();
        for (auto & m : msgs_) {
            out.push_back(std::move(m));
        }
        for (auto & b : marks_) {
            b.n_before += shift;
            r_.breakpoints.push_back(std::move(b));
        }
        r_.chat.messages = std::move(out);
    }

private:
    // A role "system" message: leading ones (before any user/assistant turn) extend the system
    // prompt; later ones become a user message wrapped in <system>...</system>.
    void system_message(const json & content, const std::string & p) {
        std::vector<std::string> parts;
        bool marked = false;
        if (content.is_string()) {
            parts.push_back(content.get<std::string>());
        } else {
            for (size_t i = 0; i < content.size(); ++i) {
                const std::string bp = p + ".content[" + std::to_string(i) + "]";
                const std::string t = block_type(content[i], bp);
                if (t != "text") {
                    fail(bp + ".type", "'" + bp + ".type' is '" + t + "'; a system message holds text blocks only");
                }
                parts.push_back(text_of(content[i], bp));
                marked = has_cache_control(content[i], bp) || marked;
            }
        }
        if (!seen_turn_) {
            for (auto & s : parts) {
                sys_parts_.push_back(std::move(s));
            }
            if (marked) {
                system_marks_.push_back(sys_parts_.size());
            }
            return;
        }
        std::string text;
        for (const auto & s : parts) {
            text += (text.empty() ? "" : "\n") + s;
        }
        if (!msgs_.empty()) {
            // A restore point where the conversation before this block ends: a client that adds
            // to that message (a retry, a continued session) re-sends this block after it.
            marks_.push_back(cache_breakpoint{msgs_.size() - 1, msgs_.back(), /*implicit=*/true});
        }
        engine::chat_message m;
        m.role = "user";
        m.content = std::string(mid_system_open) + text + std::string(mid_system_close);
        msgs_.push_back(std::move(m));
        if (marked) {
            mark_last();
        }
    }

    void user(const json & content, const std::string & p) {
        if (content.is_string()) {
            engine::chat_message m;
            m.role = "user";
            m.content = content.get<std::string>();
            msgs_.push_back(std::move(m));
            return;
        }
        // Consecutive text blocks form one user message; each tool_result is a tool message.
        std::vector<std::string> texts;
        auto flush = [&] {
            if (!texts.empty()) {
                engine::chat_message m;
                m.role = "user";
                set_parts(m, std::move(texts));
                msgs_.push_back(std::move(m));
                texts.clear();
            }
        };
        for (size_t i = 0; i < content.size(); ++i) {
            const std::string bp = p + ".content[" + std::to_string(i) + "]";
            const std::string t = block_type(content[i], bp);
            const bool marked = has_cache_control(content[i], bp);
            if (t == "text") {
                texts.push_back(text_of(content[i], bp));
                if (marked) {
                    engine::chat_message cut;
                    cut.role = "user";
                    set_parts(cut, texts);
                    marks_.push_back(cache_breakpoint{msgs_.size(), std::move(cut)});
                }
            } else if (t == "tool_result") {
                flush();
                msgs_.push_back(tool_result(content[i], bp));
                if (marked) {
                    mark_last();
                }
            } else {
                refuse_block(t, bp, "user");
            }
        }
        flush();
        if (content.empty()) {
            fail(p + ".content", "'" + p + ".content' must hold at least one content block");
        }
    }

    engine::chat_message tool_result(const json & b, const std::string & p) {
        engine::chat_message m;
        m.role = "tool";
        const json * id = field(b, "tool_use_id");
        if (!id) {
            fail(p + ".tool_use_id", "'" + p + ".tool_use_id' is required: the id of the tool_use block it answers");
        }
        m.tool_call_id = get_string(*id, p + ".tool_use_id");
        bool is_error = false;
        if (const json * e = field(b, "is_error")) {
            is_error = get_bool(*e, p + ".is_error");
        }
        std::vector<std::string> parts;
        if (const json * c = field(b, "content")) {
            if (c->is_string()) {
                parts.push_back(c->get<std::string>());
            } else if (c->is_array()) {
                for (size_t i = 0; i < c->size(); ++i) {
                    const std::string cp = p + ".content[" + std::to_string(i) + "]";
                    const std::string t = block_type((*c)[i], cp);
                    if (t != "text") {
                        refuse_block(t, cp, "tool_result");
                    }
                    parts.push_back(text_of((*c)[i], cp));
                }
            } else {
                fail(p + ".content", "'" + p + ".content' must be a string or an array of text blocks, got " +
                                         type_name(*c));
            }
        }
        // The templates have no error flag: an error result is rendered with an "Error: " prefix.
        if (is_error) {
            if (parts.empty()) {
                parts.emplace_back("Error");
            } else {
                parts[0] = "Error: " + parts[0];
            }
        }
        set_parts(m, std::move(parts));
        return m;
    }

    void assistant(const json & content, const std::string & p) {
        engine::chat_message m;
        m.role = "assistant";
        if (content.is_string()) {
            m.content = content.get<std::string>();
            msgs_.push_back(std::move(m));
            return;
        }
        std::vector<std::string> texts;
        for (size_t i = 0; i < content.size(); ++i) {
            const std::string bp = p + ".content[" + std::to_string(i) + "]";
            const std::string t = block_type(content[i], bp);
            const bool marked = has_cache_control(content[i], bp);
            if (t == "text") {
                texts.push_back(text_of(content[i], bp));
            } else if (t == "thinking" || t == "redacted_thinking") {
                m.reasoning_content += thinking(content[i], bp, t);
            } else if (t == "tool_use") {
                m.tool_calls.push_back(tool_use(content[i], bp));
            } else {
                refuse_block(t, bp, "assistant");
            }
            if (marked) {
                engine::chat_message cut = m;
                set_parts(cut, texts);
                marks_.push_back(cache_breakpoint{msgs_.size(), std::move(cut)});
            }
        }
        set_parts(m, std::move(texts));
        msgs_.push_back(std::move(m));
    }

    std::string thinking(const json & b, const std::string & p, const std::string & type) {
        const char * sig_field = type == "thinking" ? "signature" : "data";
        const json * sig = field(b, sig_field);
        if (!sig) {
            fail(p + "." + sig_field, "'" + p + "." + sig_field + "' is required: send " + type +
                                          " blocks back exactly as this server returned them");
        }
        const std::string s = get_string(*sig, p + "." + sig_field);
        const auto text = signer_.open(s);
        if (!text) {
            fail(p + "." + sig_field, "'" + p + "." + sig_field + "' is not a signature this server issued for this model "
                                          "(edited, or from another server or model); send " + type +
                                          " blocks back unchanged, or leave them out");
        }
        if (type == "thinking") {
            const json * th = field(b, "thinking");
            const std::string given = th ? get_string(*th, p + ".thinking") : std::string();
            if (!given.empty() && given != *text) {
                fail(p + ".thinking", "'" + p + ".thinking' differs from the text its signature was issued for; send "
                                          "thinking blocks back unchanged");
            }
        }
        return *text;
    }

    engine::chat_tool_call tool_use(const json & b, const std::string & p) {
        engine::chat_tool_call c;
        const json * id = field(b, "id");
        if (!id) {
            fail(p + ".id", "'" + p + ".id' is required for a tool_use block");
        }
        c.id = get_string(*id, p + ".id");
        const json * name = field(b, "name");
        if (!name) {
            fail(p + ".name", "'" + p + ".name' is required for a tool_use block");
        }
        c.name = get_string(*name, p + ".name");
        const json * input = field(b, "input");
        c.arguments = input ? dump(get_object(*input, p + ".input")) : "{}";
        return c;
    }

    void mark_last() {
        marks_.push_back(cache_breakpoint{msgs_.size() - 1, msgs_.back()});
    }

    const thinking_signer & signer_;
    anthropic_request & r_;
    std::vector<std::string> sys_parts_;
    std::vector<size_t> system_marks_;  ///< system parts before each marked system block
    std::vector<engine::chat_message> msgs_;
    std::vector<cache_breakpoint> marks_;  ///< n_before counts msgs_ (the system message is added last)
    bool seen_turn_ = false;
};

void parse_tools(const json & tools, anthropic_request & r) {
    if (!tools.is_array()) {
        fail("tools", "'tools' must be an array, got " + std::string(type_name(tools)));
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
    converter conv(signer, r);
    if (const json * sys = field(body, "system")) {
        conv.system(*sys);
    }
    const json * messages = field(body, "messages");
    if (!messages) {
        fail("messages", "'messages' is required: a non-empty array of {\"role\", \"content\"} objects");
    }
    if (!messages->is_array()) {
        fail("messages", "'messages' must be an array, got " + std::string(type_name(*messages)));
    }
    if (messages->empty()) {
        fail("messages", "'messages' must contain at least one message");
    }
    for (size_t i = 0; i < messages->size(); ++i) {
        conv.message((*messages)[i], i);
    }
    conv.finish();

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
        const int64_t v = get_int(*max_tokens, "max_tokens");
        if (v < 1) {
            fail("max_tokens", "'max_tokens' is " + std::to_string(v) + "; it must be at least 1");
        }
        r.chat.sampling.max_tokens = static_cast<int32_t>(std::min<int64_t>(v, std::numeric_limits<int32_t>::max()));
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
    if (const json * md = field(body, "metadata")) {
        get_object(*md, "metadata");
        if (const json * u = field(*md, "user_id")) {
            r.chat.user = get_string(*u, "metadata.user_id");  // the session key (seed 001: user)
        }
    }
}

}  // namespace

std::optional<api_error> parse_anthropic_request(std::string_view body, const thinking_signer & signer, bool count_tokens,
                                                 anthropic_request & out) {
    json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
        api_error e = invalid_request("the request body is not valid JSON; send a JSON object");
        e.code = "invalid_json";
        return e;
    }
    anthropic_request r;
    try {
        parse_body(j, count_tokens, signer, r);
    } catch (const bad_field & b) {
        return b.err;
    }
    out = std::move(r);
    return std::nullopt;
}

}  // namespace lineage::server
