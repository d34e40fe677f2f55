// server::reply_script: the script file, the choice of a reply, and its text and tokens.
#include "server/prepare/reply_script.h"

#include "engine/model.h"
#include "server/request/chat_request.h"
#include "server/prepare/chat_prepare.h"
#include "util/files.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <stdexcept>

namespace lineage::server {

namespace {

std::string message_text(const engine::chat_message & m) {
    if (!m.content_is_parts) {
        return m.content;
    }
    std::string s;
    for (const auto & p : m.parts) {
        s += p;
        s += '\n';
    }
    return s;
}

// A string field of `j`, or an error naming it.
std::optional<std::string> string_field(const json & j, const char * key, const std::string & where,
                                        std::string & out) {
    if (!j.contains(key)) {
        return std::nullopt;
    }
    if (!j.at(key).is_string()) {
        return where + "." + key + " must be a string";
    }
    out = j.at(key).get<std::string>();
    return std::nullopt;
}

std::optional<std::string> parse_when(const json & w, const std::string & where, scripted_reply & r) {
    if (!w.is_object()) {
        return where + " must be an object";
    }
    for (const auto & [k, v] : w.items()) {
        if (k != "input" && k != "system" && k != "tools" && k != "tool") {
            return where + "." + k + " is not a condition (input, system, tools, tool)";
        }
    }
    if (auto e = string_field(w, "input", where, r.input)) {
        return e;
    }
    if (auto e = string_field(w, "system", where, r.system)) {
        return e;
    }
    if (auto e = string_field(w, "tool", where, r.tool)) {
        return e;
    }
    if (w.contains("tools")) {
        if (!w.at("tools").is_boolean()) {
            return where + ".tools must be true or false";
        }
        r.tools = w.at("tools").get<bool>();
    }
    return std::nullopt;
}

std::optional<std::string> parse_tool_calls(const json & calls, const std::string & where, scripted_reply & r) {
    if (!calls.is_array()) {
        return where + " must be an array";
    }
    for (size_t i = 0; i < calls.size(); ++i) {
        const std::string w = where + "[" + std::to_string(i) + "]";
        const json & c = calls[i];
        if (!c.is_object() || !c.contains("name") || !c.at("name").is_string()) {
            return w + " must be an object with a string \"name\"";
        }
        engine::chat_tool_call tc;
        tc.name = c.at("name").get<std::string>();
        tc.id = "call_script_" + std::to_string(i);
        if (c.contains("arguments")) {
            const json & a = c.at("arguments");
            if (a.is_string()) {
                tc.arguments = a.get<std::string>();
            } else if (a.is_object()) {
                tc.arguments = a.dump();
            } else {
                return w + ".arguments must be an object or its JSON text";
            }
        } else {
            tc.arguments = "{}";
        }
        r.tool_calls.push_back(std::move(tc));
    }
    return std::nullopt;
}

std::optional<std::string> parse_reply(const json & j, const std::string & where, scripted_reply & r) {
    if (!j.is_object()) {
        return where + " must be an object";
    }
    static const char * const known[] = {"label", "when", "repeat", "text", "content", "reasoning", "tool_calls"};
    for (const auto & [k, v] : j.items()) {
        if (std::find(std::begin(known), std::end(known), k) == std::end(known)) {
            return where + "." + k +
                   " is not a field of a reply (label, when, repeat, text, content, reasoning, "
                   "tool_calls)";
        }
    }
    if (auto e = string_field(j, "label", where, r.label)) {
        return e;
    }
    if (j.contains("when")) {
        if (auto e = parse_when(j.at("when"), where + ".when", r)) {
            return e;
        }
    }
    if (j.contains("repeat")) {
        if (!j.at("repeat").is_boolean()) {
            return where + ".repeat must be true or false";
        }
        r.repeat = j.at("repeat").get<bool>();
    }
    if (j.contains("text")) {
        std::string t;
        if (auto e = string_field(j, "text", where, t)) {
            return e;
        }
        if (j.contains("content") || j.contains("reasoning") || j.contains("tool_calls")) {
            return where + " gives text and content/reasoning/tool_calls: give one or the other";
        }
        r.text = std::move(t);
        return std::nullopt;
    }
    if (auto e = string_field(j, "content", where, r.content)) {
        return e;
    }
    if (auto e = string_field(j, "reasoning", where, r.reasoning)) {
        return e;
    }
    if (j.contains("tool_calls")) {
        if (auto e = parse_tool_calls(j.at("tool_calls"), where + ".tool_calls", r)) {
            return e;
        }
    }
    return std::nullopt;
}

std::string label_of(const std::vector<scripted_reply> & replies, int32_t i) {
    const auto & l = replies[static_cast<size_t>(i)].label;
    return l.empty() ? "#" + std::to_string(i) : l;
}

}  // namespace

std::optional<std::string> parse_reply_script(const std::string & json_text, std::vector<scripted_reply> & out) {
    out.clear();
    json j;
    try {
        j = json::parse(json_text);
    } catch (const std::exception & e) {
        return std::string("not JSON: ") + e.what();
    }
    const json * list = &j;
    if (j.is_object()) {
        if (!j.contains("replies")) {
            return "an object without \"replies\"";
        }
        list = &j.at("replies");
    }
    if (!list->is_array()) {
        return "\"replies\" must be an array of replies";
    }
    for (size_t i = 0; i < list->size(); ++i) {
        scripted_reply r;
        if (auto e = parse_reply((*list)[i], "replies[" + std::to_string(i) + "]", r)) {
            out.clear();
            return e;
        }
        out.push_back(std::move(r));
    }
    return std::nullopt;
}

script_view view_of(const chat_request & r) {
    script_view v;
    size_t i = 0;
    for (; i < r.messages.size() && (r.messages[i].role == "system" || r.messages[i].role == "developer"); ++i) {
        v.system += message_text(r.messages[i]);
        v.system += '\n';
    }
    size_t from = 0;
    for (size_t k = r.messages.size(); k > 0; --k) {
        if (r.messages[k - 1].role == "assistant") {
            from = k;
            break;
        }
    }
    for (size_t k = from; k < r.messages.size(); ++k) {
        v.input += message_text(r.messages[k]);
        v.input += '\n';
    }
    for (const auto & t : r.tools) {
        v.tools.push_back(t.name);
    }
    return v;
}

int32_t match_reply(const std::vector<scripted_reply> & replies, const std::vector<bool> & used,
                    const script_view & v) {
    for (size_t i = 0; i < replies.size(); ++i) {
        const scripted_reply & r = replies[i];
        if (i < used.size() && used[i] && !r.repeat) {
            continue;
        }
        if (!r.input.empty() && v.input.find(r.input) == std::string::npos) {
            continue;
        }
        if (!r.system.empty() && v.system.find(r.system) == std::string::npos) {
            continue;
        }
        if (r.tools && *r.tools != !v.tools.empty()) {
            continue;
        }
        if (!r.tool.empty() && std::find(v.tools.begin(), v.tools.end(), r.tool) == v.tools.end()) {
            continue;
        }
        return static_cast<int32_t>(i);
    }
    return -1;
}

std::optional<api_error> reply_text(const chat_preparer & p, const chat_request & r, const scripted_reply & reply,
                                    std::string & out) {
    if (reply.text) {
        out = *reply.text;
        return std::nullopt;
    }
    chat_request prompt = r;
    prompt.add_generation_prompt = true;
    std::string before;
    if (auto err = p.render_prompt(prompt, before)) {
        return err;
    }
    chat_request after = r;
    after.add_generation_prompt = false;
    engine::chat_message m;
    m.role = "assistant";
    m.content = reply.content;
    m.reasoning_content = reply.reasoning;
    m.tool_calls = reply.tool_calls;
    after.messages.push_back(std::move(m));
    std::string rendered;
    if (auto err = p.render_prompt(after, rendered)) {
        err->message = "the scripted reply cannot be rendered after this conversation: " + err->message;
        return err;
    }
    if (rendered.compare(0, before.size(), before) != 0) {
        return invalid_request(
            "the chat template renders the scripted reply without this request's generation "
            "prompt in front of it (reasoning with thinking off?); give the reply as \"text\"",
            "", "no_scripted_reply");
    }
    out = rendered.substr(before.size());
    return std::nullopt;
}

reply_script::reply_script(std::string path, const engine::model & m, const chat_preparer & p)
    : path_(std::move(path)), model_(m), preparer_(p) {
    util::lock_guard lock(mu_);
    if (auto err = refresh()) {
        throw std::runtime_error("--test-reply-script " + path_ + ": " + err->message);
    }
    spdlog::warn(
        "TEST INSTRUMENT: --test-reply-script {}: every reply is forced from the script ({} replies), not "
        "sampled from the model; a request no reply matches gets HTTP 400 no_scripted_reply",
        path_, replies_.size());
}

std::optional<api_error> reply_script::refresh() {
    struct stat st {};
    if (::stat(path_.c_str(), &st) != 0) {
        return server_error("the reply script " + path_ + " cannot be read");
    }
    if (size_ == st.st_size && mtime_.tv_sec == st.st_mtim.tv_sec && mtime_.tv_nsec == st.st_mtim.tv_nsec) {
        return load_error_.empty() ? std::nullopt : std::optional<api_error>(server_error(load_error_));
    }
    mtime_ = st.st_mtim;
    size_ = st.st_size;
    const std::optional<std::string> text = util::read_whole_file(path_);
    std::vector<scripted_reply> replies;
    if (!text) {
        load_error_ = "the reply script " + path_ + " cannot be read";
    } else if (auto e = parse_reply_script(*text, replies)) {
        load_error_ = "the reply script " + path_ + " does not parse: " + *e;
    } else {
        load_error_.clear();
        replies_ = std::move(replies);
        used_.assign(replies_.size(), false);
        spdlog::info("reply script {}: {} replies (loaded)", path_, replies_.size());
        return std::nullopt;
    }
    spdlog::error("{}", load_error_);
    return server_error(load_error_);
}

std::optional<api_error> reply_script::choose(const script_view & v, scripted_reply & reply, std::string & label) {
    if (auto err = refresh()) {
        return err;
    }
    const int32_t i = match_reply(replies_, used_, v);
    if (i < 0) {
        int64_t n_used = 0;
        for (const bool u : used_) {
            n_used += u ? 1 : 0;
        }
        return invalid_request("the reply script " + path_ + " (a test instrument) has no reply for this request: " +
                                   std::to_string(replies_.size()) + " replies, " + std::to_string(n_used) +
                                   " used, none of the others matches its input, system text and tools",
                               "", "no_scripted_reply");
    }
    used_[static_cast<size_t>(i)] = true;
    reply = replies_[static_cast<size_t>(i)];
    label = label_of(replies_, i);
    return std::nullopt;
}

std::optional<api_error> reply_script::forced_tokens(const std::string & text, std::vector<int32_t> & out) const {
    auto tokens = model_.tokenize(text, /*parse_special=*/true, /*add_special=*/false);
    if (!tokens) {
        return server_error("internal error: " + tokens.error().message());
    }
    out = std::move(*tokens);
    for (size_t i = 0; i < out.size(); ++i) {
        if (model_.is_eog(out[i])) {
            out.resize(i + 1);  // the turn ends there (a template's "<|im_end|>\n": the newline is not generated)
            return std::nullopt;
        }
    }
    out.push_back(model_.end_of_turn());
    return std::nullopt;
}

std::optional<api_error> reply_script::pick(const chat_request & r, script_pick & out) {
    scripted_reply reply;
    {
        util::lock_guard lock(mu_);
        if (auto err = choose(view_of(r), reply, out.label)) {
            return err;
        }
    }
    std::string text;
    if (auto err = reply_text(preparer_, r, reply, text)) {
        return err;
    }
    return forced_tokens(text, out.tokens);
}

std::optional<api_error> reply_script::pick_raw(const std::vector<int32_t> & prompt, script_pick & out) {
    script_view v;
    auto input = model_.detokenize(prompt, /*special=*/true);
    if (!input) {
        return server_error("internal error: " + input.error().message());
    }
    v.input = std::move(*input);
    scripted_reply reply;
    {
        util::lock_guard lock(mu_);
        if (auto err = choose(v, reply, out.label)) {
            return err;
        }
    }
    if (!reply.text) {
        return invalid_request("the scripted reply " + out.label +
                                   " has no \"text\": a raw prompt (POST "
                                   "/v1/completions) has no chat template to render content and tool calls with",
                               "", "no_scripted_reply");
    }
    return forced_tokens(*reply.text, out.tokens);
}

}  // namespace lineage::server
