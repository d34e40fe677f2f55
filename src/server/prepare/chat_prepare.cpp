// server::chat_prepare: render -> tokenize -> cache hints, on the HTTP thread.
#include "server/prepare/chat_prepare.h"

#include "cache/rule/media.h"
#include "engine/model.h"
#include "engine/multimodal.h"
#include "engine/sampler.h"
#include "server/prepare/cache_key.h"
#include "server/http/request_limits.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <limits>
#include <stdexcept>

namespace lineage::server {

std::vector<size_t> volatile_text_starts(std::string_view text, size_t max_count) {
    std::vector<size_t> out;
    auto digit = [&](size_t i) { return i < text.size() && text[i] >= '0' && text[i] <= '9'; };
    auto name_char = [&](size_t i) {
        if (i >= text.size()) {
            return false;
        }
        const unsigned char c = static_cast<unsigned char>(text[i]);
        return std::isalnum(c) != 0 || c == '_' || c == '.' || c == '-' || c == '@' || c == '+' || c >= 0x80;
    };
    for (size_t i = 0; i < text.size() && out.size() < max_count; ++i) {
        const char c = text[i];
        const char prev = i == 0 ? ' ' : text[i - 1];
        if (c == '/' || (c == '~' && i + 1 < text.size() && text[i + 1] == '/')) {
            if (std::string_view(" \t\n\r\"'(`=:<[{,").find(prev) == std::string_view::npos) {
                continue;
            }
            size_t j = i + (c == '~' ? 2 : 1);
            const size_t first = j;
            while (name_char(j)) {
                ++j;
            }
            if (j > first && j < text.size() && text[j] == '/' && name_char(j + 1)) {
                out.push_back(i);
                i = j;  // the rest of this path is the same path
            }
        } else if (digit(i) && (i == 0 || !digit(i - 1)) && digit(i + 1) &&
                   digit(i + 2) && digit(i + 3) && i + 10 <= text.size() && text[i + 4] == '-' && digit(i + 5) &&
                   digit(i + 6) && text[i + 7] == '-' && digit(i + 8) && digit(i + 9) && !digit(i + 10)) {
            out.push_back(i);
            i += 9;
        }
    }
    return out;
}

namespace {

bool is_system(const engine::chat_message & m) {
    return m.role == "system" || m.role == "developer";
}

// Every field of the messages that the template reads.
std::string messages_digest(const std::vector<engine::chat_message> & msgs) {
    std::string buf;
    for (const auto & m : msgs) {
        buf += m.role;
        buf += '\0';
        buf += m.content;
        buf += '\0';
        for (const auto & p : m.parts) {
            buf += p;
            buf += '\1';
        }
        buf += m.content_is_parts ? '\2' : '\3';
        buf += m.name;
        buf += '\0';
        for (const auto & tc : m.tool_calls) {
            buf += tc.id + '\1' + tc.name + '\1' + tc.arguments + '\1';
        }
        buf += '\0';
        buf += m.reasoning_content;
        buf += '\0';
        buf += m.tool_call_id;
        buf += '\0';
    }
    return sha256_hex(buf);
}

}  // namespace

std::map<std::string, std::string> default_template_kwargs(const std::string & template_source, bool cache_enabled) {
    std::map<std::string, std::string> kw = {{"preserve_reasoning", "true"}};
    if (cache_enabled && template_source.find("preserve_thinking") != std::string::npos) {
        kw["preserve_thinking"] = "true";
    }
    return kw;
}

chat_preparer::chat_preparer(const engine::model & m, const engine::chat_template & t, prepare_options o)
    : model_(m), tmpl_(t), opt_(std::move(o)) {}

std::shared_ptr<const std::vector<int32_t>> chat_preparer::anchor_render(const engine::chat_render_inputs & full,
                                                                         bool with_system,
                                                                         scheduler::prepare_work & work) const {
    engine::chat_render_inputs in = full;
    in.messages.clear();
    for (const auto & m : full.messages) {
        if (!with_system || !is_system(m)) {
            break;
        }
        in.messages.push_back(m);
    }
    if (in.messages.empty() && in.tools.empty()) {
        return nullptr;
    }
    in.add_generation_prompt = false;
    const std::string key =
        template_sig(tmpl_.source(), in.kwargs, in.tool_choice, in.tools) + ":" + messages_digest(in.messages);
    {
        util::lock_guard lock(mu_);
        if (auto it = memo_.find(key); it != memo_.end()) {
            return it->second;
        }
    }
    std::shared_ptr<const std::vector<int32_t>> tokens = render_tokens_or_placeholder(std::move(in), "anchor", work);
    util::lock_guard lock(mu_);
    if (memo_.size() >= max_memo_) {
        memo_.clear();
    }
    memo_.emplace(key, tokens);
    return tokens;
}

util::expected<std::vector<int32_t>> chat_preparer::render_tokens(const engine::chat_render_inputs & in,
                                                                  scheduler::prepare_work & work) const {
    // Counted as they are attempted: a render the template refuses has run up to its refusal.
    work.renders++;
    auto rendered = tmpl_.render(in);
    if (!rendered) {
        return util::status::error(rendered.error().message);
    }
    work.tokenizations++;
    return model_.tokenize(rendered->prompt, true);
}

std::shared_ptr<const std::vector<int32_t>> chat_preparer::render_tokens_or_placeholder(
    engine::chat_render_inputs in, const char * what, scheduler::prepare_work & work) const {
    auto tokens = render_tokens(in, work);
    if (!tokens) {
        // Some templates refuse a conversation without a user turn: render one with a
        // placeholder; the common prefix with the real prompt still ends at the user turn.
        spdlog::debug("{} render failed ({}); retrying with a placeholder user turn", what, tokens.error().message());
        engine::chat_message placeholder;
        placeholder.role = "user";
        placeholder.content = "\x01";
        in.messages.push_back(std::move(placeholder));
        tokens = render_tokens(in, work);
    }
    if (!tokens) {
        spdlog::debug("{} render failed: {}", what, tokens.error().message());
        return nullptr;
    }
    return std::make_shared<const std::vector<int32_t>>(std::move(*tokens));
}

util::expected<std::vector<int32_t>> chat_preparer::tokenize_prompt(const std::string & text,
                                                                    const std::string & tenant, int64_t max_tokens,
                                                                    size_t * reused) const {
    recent_prompt best;
    {
        size_t best_lcp = 0;
        util::lock_guard lk(mu_);
        for (const auto & p : recent_prompts_) {
            if (p.tenant != tenant) {
                continue;
            }
            const size_t n = std::min(text.size(), p.text->size());
            const auto lcp = static_cast<size_t>(
                std::mismatch(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(n), p.text->begin()).first -
                text.begin());
            if (lcp > best_lcp) {
                best_lcp = lcp;
                best = p;
            }
        }
    }
    if (best.text && *best.text == text) {
        if (reused) {
            *reused = best.tokens->size();
        }
        return *best.tokens;  // a resend: kept once
    }
    auto fresh_tokens =
        best.text ? model_.tokenize_reusing(text, *best.text, *best.tokens, reused) : model_.tokenize(text, true);
    if (!fresh_tokens) {
        return fresh_tokens;
    }
    auto tokens = std::make_shared<const std::vector<int32_t>>(std::move(*fresh_tokens));
    if (!best.text && reused) {
        *reused = 0;
    }
    if (static_cast<int64_t>(tokens->size()) >= max_tokens) {
        return *tokens;  // refused as longer than a sequence: nothing will extend it
    }
    recent_prompt fresh{tenant, std::make_shared<const std::string>(text), tokens};
    const auto bytes_of = [](const recent_prompt & p) {
        return p.tenant.size() + p.text->size() + p.tokens->size() * sizeof(int32_t);
    };
    util::lock_guard lk(mu_);
    recent_bytes_ += bytes_of(fresh);
    recent_prompts_.push_front(std::move(fresh));
    while (recent_prompts_.size() > max_recent_prompts_ ||
           (recent_prompts_.size() > 1 && recent_bytes_ > max_recent_bytes_)) {
        recent_bytes_ -= bytes_of(recent_prompts_.back());
        recent_prompts_.pop_back();
    }
    return *tokens;
}

engine::chat_render_inputs chat_preparer::render_inputs(const chat_request & r) const {
    engine::chat_render_inputs in;
    in.messages = r.messages;
    in.tools = r.tools;
    in.tool_choice = r.tool_choice;
    in.parallel_tool_calls = r.parallel_tool_calls;
    in.kwargs = opt_.default_kwargs;
    for (const auto & [k, v] : r.chat_template_kwargs) {
        in.kwargs[k] = v;
    }
    in.add_generation_prompt = true;
    in.json_schema = r.json_schema;
    in.grammar = r.grammar;
    // reasoning_effort (as llama-server): "none" turns thinking off unless the request's own
    // kwargs say otherwise; another level goes to the template, which prepare() checks reads it.
    if (r.reasoning_effort == "none") {
        in.kwargs.emplace("enable_thinking", "false");
    } else if (!r.reasoning_effort.empty()) {
        in.kwargs["reasoning_effort"] = dump(json(r.reasoning_effort));
    }
    return in;
}

std::optional<api_error> chat_preparer::render(const engine::chat_render_inputs & in,
                                               engine::chat_render_result & out) const {
    auto rendered = tmpl_.render(in);
    if (!rendered) {
        const engine::render_error e = rendered.error();
        if (e.why == engine::render_error::kind::refused) {
            return invalid_request(e.message + "; check the order and roles of 'messages'", "messages");
        }
        return server_error("chat template failed: " + e.message);
    }
    out = std::move(*rendered);
    return std::nullopt;
}

std::optional<api_error> chat_preparer::render_prompt(const chat_request & r, std::string & prompt) const {
    engine::chat_render_result rendered;
    engine::chat_render_inputs in = render_inputs(r);
    in.add_generation_prompt = r.add_generation_prompt;
    if (auto err = render(in, rendered)) {
        return err;
    }
    if (auto err = check_prompt_bytes(rendered.prompt.size(), "the rendered prompt", "messages")) {
        return err;
    }
    prompt = std::move(rendered.prompt);
    return std::nullopt;
}

int32_t chat_preparer::prefix_tokens(const chat_request & prefix, const std::vector<int32_t> & prompt,
                                     scheduler::prepare_work & work) const {
    engine::chat_render_inputs in = render_inputs(prefix);
    in.add_generation_prompt = false;
    // A client marks the same cut again on later turns (its system prompt, an earlier message):
    // its tokens depend only on the template inputs, so they are kept by content.
    const std::string key = template_sig(tmpl_.source(), in.kwargs, in.tool_choice, in.tools) + ":" +
                            messages_digest(in.messages) + ":" +
                            sha256_hex(in.json_schema + '\0' + in.grammar + '\0' +
                                       (in.parallel_tool_calls ? (*in.parallel_tool_calls ? "1" : "0") : "-"));
    std::shared_ptr<const std::vector<int32_t>> tokens;
    {
        util::lock_guard lock(mu_);
        if (auto it = breakpoint_memo_.find(key); it != breakpoint_memo_.end()) {
            tokens = it->second;
        }
    }
    if (!tokens) {
        tokens = render_tokens_or_placeholder(std::move(in), "cache breakpoint", work);
        if (!tokens) {
            return -1;
        }
        util::lock_guard lock(mu_);
        if (breakpoint_memo_.size() >= max_memo_) {
            breakpoint_memo_.clear();
        }
        breakpoint_memo_.emplace(key, tokens);
    }
    return anchor_tokens(prompt, *tokens);
}

std::vector<int32_t> chat_preparer::next_turn_prefix(const chat_request & r, const engine::chat_parsed & reply,
                                                     std::vector<scheduler::media_span> & media,
                                                     scheduler::prepare_work & work) const {
    media.clear();
    work = {};
    engine::chat_render_inputs in = render_inputs(r);
    engine::chat_message assistant;
    assistant.role = "assistant";
    assistant.content = reply.content;
    assistant.reasoning_content = reply.reasoning_content;
    assistant.tool_calls = reply.tool_calls;
    in.messages.push_back(std::move(assistant));
    // The conversation's images, decoded once for both renders: the same pseudo-tokens and
    // chunks as the request that carried them (prepare() placed them the same way).
    decoded_images images;
    if (!r.images.empty()) {
        if (auto err = decode_images(r, images)) {
            spdlog::debug("warm-up: the next turn's images cannot be decoded: {}", err->message);
            return {};
        }
    }
    auto tokens_with = [&](const char * text, prepared_chat & out) -> util::status {
        engine::chat_render_inputs x = in;
        engine::chat_message next;
        if (reply.tool_calls.empty()) {
            next.role = "user";
        } else {
            next.role = "tool";
            next.tool_call_id = reply.tool_calls.front().id;
            next.name = reply.tool_calls.front().name;
        }
        next.content = text;
        x.messages.push_back(std::move(next));
        work.renders++;
        const auto rendered = tmpl_.render(x);
        if (!rendered) {
            return util::status::error(rendered.error().message);
        }
        work.tokenizations++;
        if (!r.images.empty()) {
            const auto err = place_images(images, rendered->prompt, out);
            return err ? util::status::error(err->message) : util::status::ok();
        }
        auto tokens = tokenize_prompt(rendered->prompt, r.tenant, std::numeric_limits<int64_t>::max());
        if (!tokens) {
            return tokens.error();
        }
        out.prompt = std::move(*tokens);
        return util::status::ok();
    };
    // Two texts that differ in their first character: the renders part where the text starts.
    prepared_chat a;
    prepared_chat b;
    util::status made = tokens_with("Alpha", a);
    if (made.is_ok()) {
        made = tokens_with("Bravo", b);
    }
    if (!made.is_ok()) {
        spdlog::debug("warm-up: the next turn cannot be rendered: {}", made.message());
        return {};
    }
    const size_t n = std::min(a.prompt.size(), b.prompt.size());
    size_t i = 0;
    while (i < n && a.prompt[i] == b.prompt[i]) {
        ++i;
    }
    // The images before the cut (all of them: they precede the placeholder). The prefix
    // never ends inside or right after an image (the engine decodes an image as a unit and
    // a prompt's last position is text): cut before such an image instead.
    for (auto & m : a.media) {
        if (m.span.end < static_cast<int32_t>(i)) {
            media.push_back(std::move(m));
        } else {
            i = std::min(i, static_cast<size_t>(m.span.begin));
            break;
        }
    }
    return std::vector<int32_t>(a.prompt.begin(), a.prompt.begin() + static_cast<std::ptrdiff_t>(i));
}

bool chat_preparer::supports_thinking() const {
    return tmpl_.supports_thinking();
}

std::optional<api_error> chat_preparer::grammar_of(const chat_request & r, const engine::chat_render_result & rendered,
                                                   prepared_chat & out) const {
    using kind = engine::grammar_spec::kind;
    engine::grammar_spec g;
    const char * param = "grammar";
    if (!rendered.grammar.empty()) {
        // As llama-server maps common_chat_params (tools/server/server-common.cpp): the chat
        // library's grammar starts at the generation prompt; a trigger word that is one
        // preserved token becomes a token trigger.
        g.type = r.json_schema.empty() ? kind::tool_calls : kind::output_format;
        param = r.json_schema.empty() ? "tool_choice" : "response_format";
        g.gbnf = rendered.grammar;
        g.lazy = rendered.grammar_lazy;
        g.generation_prompt = rendered.generation_prompt;
        g.preserved_tokens.assign(out.preserved_tokens.begin(), out.preserved_tokens.end());
        for (const auto & t : rendered.grammar_triggers) {
            engine::grammar_trigger gt = t;
            if (t.type == engine::grammar_trigger::kind::word) {
                const auto ids = model_.tokenize(t.value, true);
                if (ids && ids->size() == 1 && out.preserved_tokens.count(ids->front()) > 0) {
                    gt.type = engine::grammar_trigger::kind::token;
                    gt.tok = ids->front();
                }
            }
            g.triggers.push_back(std::move(gt));
        }
    } else if (!r.grammar.empty()) {
        g.type = kind::user;
        g.gbnf = r.grammar;
    } else if (!r.json_schema.empty()) {
        return server_error("the chat template gave no grammar for 'response_format'; the reply cannot be constrained");
    }
    if (!g.empty()) {
        if (const util::status why = engine::check_grammar(model_, g); !why.is_ok()) {
            return invalid_request("'" + std::string(param) + "' cannot be enforced: " + why.message(), param);
        }
        double ms = 0;
        try {
            ms = engine::grammar_step_seconds(model_, g, default_request_limits().max_grammar_ms / 1e3) * 1e3;
        } catch (const std::invalid_argument & e) {
            return invalid_request("'" + std::string(param) + "' cannot be enforced: " + e.what(), param);
        }
        spdlog::debug("grammar: {:.2f} ms a step over the vocabulary", ms);
        if (auto err = check_grammar_cost(ms, param)) {
            return err;
        }
    }
    spdlog::debug("grammar: kind {} ({} bytes, lazy {}, {} triggers), format {}", static_cast<int>(g.type), g.gbnf.size(),
                  g.lazy, g.triggers.size(), out.format);
    out.grammar = std::move(g);
    return std::nullopt;
}

int32_t chat_preparer::last_user_start(const engine::chat_message & last, const engine::chat_render_result & rendered,
                                       const std::vector<int32_t> & prompt) const {
    // The template renders the message's text verbatim in the usual case; the end-of-turn markup
    // after it is short. Found exactly once within that tail, its first token is where an edit
    // of the message parts from this prompt; else -1 (the caller renders again).
    constexpr size_t max_markup = 64;  // bytes between the text and the generation prompt
    const std::string & p = rendered.prompt;
    const std::string & gen = rendered.generation_prompt;
    if (gen.size() > p.size() || p.compare(p.size() - gen.size(), gen.size(), gen) != 0) {
        return -1;
    }
    const size_t conv_end = p.size() - gen.size();
    auto start_of = [&](const std::string & text) -> int32_t {
        if (text.empty() || text.size() > conv_end) {
            return -1;
        }
        const size_t at = p.rfind(text, conv_end - text.size());
        if (at == std::string::npos || conv_end - (at + text.size()) > max_markup) {
            return -1;
        }
        const size_t window = conv_end >= text.size() + max_markup ? conv_end - text.size() - max_markup : 0;
        if (at > 0) {
            if (const size_t again = p.rfind(text, at - 1); again != std::string::npos && again >= window) {
                return -1;  // more than once near the end (a short text inside the markup): ambiguous
            }
        }
        const int32_t n = model_.tokens_before_byte(prompt, at, p.size());
        return n >= 1 ? n : -1;
    };
    if (!last.content_is_parts) {
        return start_of(last.content);
    }
    // Text parts (Responses input_text, several Anthropic text blocks, an OpenAI content array):
    // templates that take typed content write the parts' texts one after the other (Qwen3.5),
    // llama.cpp's chat library joins them with '\n' for those that take a string. The message
    // is the text found as either. An image's part (a marker) puts pseudo-tokens in `prompt`,
    // which tokens_before_byte refuses: the caller renders again.
    std::string joined;
    std::string by_line;
    for (size_t i = 0; i < last.parts.size(); ++i) {
        joined += last.parts[i];
        by_line += (i > 0 ? "\n" : "") + last.parts[i];
    }
    const int32_t n = start_of(joined);
    return n >= 1 || by_line == joined ? n : start_of(by_line);
}

namespace {

// What the request asks that this model or its template cannot give, before any render: a JSON
// Schema the engine cannot enforce, a reasoning level the template does not read, a logit_bias
// token past the vocabulary.
std::optional<api_error> unusable_option(const chat_request & r, const engine::model & model,
                                         const engine::chat_template & tmpl) {
    if (!r.json_schema.empty()) {
        if (const util::status why = engine::check_json_schema(r.json_schema); !why.is_ok()) {
            return invalid_request("'response_format' has a JSON Schema this server cannot enforce (" + why.message() +
                                       "); simplify the schema",
                                   "response_format");
        }
    }
    if (!r.reasoning_effort.empty() && r.reasoning_effort != "none" &&
        tmpl.source().find("reasoning_effort") == std::string::npos) {
        return invalid_request("'reasoning_effort' is '" + r.reasoning_effort +
                                   "', but this model's chat template has no reasoning levels; send \"none\" to turn "
                                   "thinking off, or leave it out",
                               "reasoning_effort");
    }
    const int32_t n_vocab = model.n_vocab();
    for (const auto & [tok, bias] : r.sampling.logit_bias) {
        if (tok >= n_vocab) {
            return invalid_request("'logit_bias' names token " + std::to_string(tok) + ", but this model's vocabulary has " +
                                       std::to_string(n_vocab) + " tokens (ids 0 to " + std::to_string(n_vocab - 1) + ")",
                                   "logit_bias");
        }
    }
    return std::nullopt;
}

}  // namespace

std::optional<api_error> chat_preparer::tokenize_rendered(const chat_request & r, const std::string & rendered,
                                                          int32_t max_sequence_tokens, prepared_chat & out,
                                                          size_t & reused_tokens) const {
    out.media.clear();
    out.work.tokenizations++;
    if (!r.images.empty()) {
        if (auto err = tokenize_with_images(r, rendered, out)) {
            return err;
        }
    } else {
        auto tokens = tokenize_prompt(rendered, r.tenant, max_sequence_tokens, &reused_tokens);
        if (!tokens) {
            return server_error("tokenization failed: " + tokens.error().message());
        }
        out.prompt = std::move(*tokens);
    }
    if (out.prompt.empty()) {
        return invalid_request("the rendered prompt is empty; send at least one message with content", "messages");
    }
    const auto n_prompt = static_cast<int64_t>(out.prompt.size());
    if (n_prompt >= max_sequence_tokens) {
        api_error e = invalid_request(
            "This model's maximum context length is " + std::to_string(max_sequence_tokens) +
                " tokens. However, your messages resulted in " + std::to_string(n_prompt) +
                " tokens. Please reduce the length of the messages (or start the server with a larger --ctx-size).",
            "messages", "context_length_exceeded");
        return e;
    }
    return std::nullopt;
}

void chat_preparer::hint_restore_points(const chat_request & r, const engine::chat_render_inputs & in,
                                        const engine::chat_render_result & rendered, prepared_chat & out) const {
    if (model_.family() != engine::memory_family::dense) {
        out.cache.line_starts = model_.line_starts(out.prompt);
    }
    if (auto anchor = anchor_render(in, /*with_system=*/true, out.work)) {
        out.cache.anchor_tokens = anchor_tokens(out.prompt, *anchor);
    }
    // Per-session content inside the system region (hybrid: a ladder rung before each on a
    // new system prompt): each start's token position, while before the anchor.
    out.cache.volatile_starts.clear();
    if (model_.family() != engine::memory_family::dense && out.cache.anchor_tokens > 0) {
        constexpr size_t max_starts = 64;
        for (const size_t at : volatile_text_starts(rendered.prompt, max_starts)) {
            const int32_t n = model_.tokens_before_byte(out.prompt, at, rendered.prompt.size());
            if (n < 0 || n >= out.cache.anchor_tokens) {
                break;  // the tokens do not spell the text byte for byte, or past the system region
            }
            if (n > 0 && (out.cache.volatile_starts.empty() || out.cache.volatile_starts.back() != n)) {
                out.cache.volatile_starts.push_back(n);
            }
        }
    }
    // The tools anchor: where the prompt leaves the tools rendered alone. Where the template
    // puts the tool block first (Qwen3.5, GLM), that is the end of the tool block, shared by
    // every system text that comes after it; a template that renders the system text first
    // leaves the tools-only render within a few tokens, and the store skips a point that
    // short (--prompt-cache-min-prefix) or one that is the anchor itself.
    const bool has_system = !r.messages.empty() && is_system(r.messages.front());
    if (has_system && !in.tools.empty()) {
        if (auto tools_only = anchor_render(in, /*with_system=*/false, out.work)) {
            out.cache.tools_anchor_tokens = anchor_tokens(out.prompt, *tools_only);
        }
    }
    hint_last_user(r, in, rendered, out);
    // The history boundary matters where the next request can leave this prompt: after a
    // user message. After a tool result the next request either extends the whole prompt
    // (the loop goes on) or is a user message, which the template re-renders from the first
    // assistant turn after the previous user message: an earlier boundary. So none here.
    const bool ends_with_tool = !r.messages.empty() && r.messages.back().role == "tool";
    if (!rendered.generation_prompt.empty() && !ends_with_tool) {
        const auto generation_prompt = model_.tokenize(rendered.generation_prompt, true);
        out.cache.history_tokens = generation_prompt ? history_tokens(out.prompt, *generation_prompt) : -1;
    }
}

void chat_preparer::hint_last_user(const chat_request & r, const engine::chat_render_inputs & in,
                                   const engine::chat_render_result & rendered, prepared_chat & out) const {
    // Where the last user message's content starts (hybrid: an edit of it then restores up
    // to it): the conversation with a placeholder in its place, so that every earlier
    // message renders as in the prompt (templates render an assistant turn after the last
    // user query differently, e.g. with its thinking); the prompt parts from it there.
    out.cache.last_user_tokens = -1;
    if (model_.family() != engine::memory_family::dense && r.messages.size() >= 2 && r.messages.back().role == "user") {
        out.cache.last_user_tokens = last_user_start(r.messages.back(), rendered, out.prompt);
        if (out.cache.last_user_tokens < 0) {
            // The message's text is not found once at the end of the render: render the
            // conversation again with a placeholder in its place.
            engine::chat_render_inputs head = in;
            head.messages.back() = engine::chat_message{};
            head.messages.back().role = "user";
            head.messages.back().content = "\x01";
            head.add_generation_prompt = false;
            if (const auto tokens = render_tokens(head, out.work)) {
                out.cache.last_user_tokens = anchor_tokens(out.prompt, *tokens);
            } else {  // a template that needs a user query: no such point
                spdlog::debug("last user message start not rendered: {}", tokens.error().message());
            }
        }
    }
}

void chat_preparer::take_render_outputs(const chat_request & r, const engine::chat_render_result & rendered,
                                        prepared_chat & out) const {
    out.stops = r.stop;
    for (const auto & s : rendered.additional_stops) {
        if (!s.empty() && std::find(out.stops.begin(), out.stops.end(), s) == out.stops.end()) {
            out.stops.push_back(s);
        }
    }
    out.preserved_tokens.clear();
    for (const auto & s : rendered.preserved_tokens) {
        const auto ids = model_.tokenize(s, true);
        if (ids && ids->size() == 1) {  // else not a single token: nothing to preserve
            out.preserved_tokens.insert(ids->front());
        }
    }
    out.parser = rendered.parser;
    out.format = rendered.format;
}

std::optional<api_error> chat_preparer::prepare(const chat_request & r, int32_t max_sequence_tokens,
                                                prepared_chat & out) const {
    if (auto err = unusable_option(r, model_, tmpl_)) {
        return err;
    }
    using clock = std::chrono::steady_clock;
    const auto ms_since = [](clock::time_point t) {
        return std::chrono::duration<double, std::milli>(clock::now() - t).count();
    };
    const auto t_render = clock::now();
    const engine::chat_render_inputs in = render_inputs(r);
    engine::chat_render_result rendered;
    out.work = {};
    out.work.renders++;
    if (auto err = render(in, rendered)) {
        return err;
    }
    const double render_ms = ms_since(t_render);
    const auto t_tokenize = clock::now();
    if (auto err = check_prompt_bytes(rendered.prompt.size(), "the rendered prompt", "messages")) {
        return err;  // before the tokenizer and the hint renders, which take time in proportion
    }

    size_t reused_tokens = 0;
    if (auto err = tokenize_rendered(r, rendered.prompt, max_sequence_tokens, out, reused_tokens)) {
        return err;
    }

    const double tokenize_ms = ms_since(t_tokenize);
    const auto t_hints = clock::now();
    if (auto err = key_request(in.kwargs, r.tool_choice_key, r.tools, r.tenant, r.lora, r.cache_prompt, out)) {
        return err;
    }
    out.cache.session_key = session_key(r.prompt_cache_key, r.user);
    // An earlier reply sent back: the conversation has come back (its entry's reuse class, value.h).
    out.cache.multi_turn =
        std::any_of(r.messages.begin(), r.messages.end(), [](const auto & m) { return m.role == "assistant"; });
    out.cache.anchor_tokens = -1;
    out.cache.history_tokens = -1;
    out.cache.tools_anchor_tokens = -1;
    // Also with the cache bypassed: a hybrid prefill splits at these points either way.
    hint_restore_points(r, in, rendered, out);

    spdlog::debug(
        "chat prepared: {} tokens; render {:.1f} ms, tokenize {:.1f} ms ({} tokens reused from a recent prompt), "
        "cache key and restore-point hints {:.1f} ms; renders {}, tokenizations {}",
        out.prompt.size(), render_ms, tokenize_ms, reused_tokens, ms_since(t_hints), out.work.renders,
        out.work.tokenizations);
    take_render_outputs(r, rendered, out);
    if (auto err = grammar_of(r, rendered, out)) {
        return err;
    }
    return std::nullopt;
}

std::optional<api_error> chat_preparer::decode_images(const chat_request & r, decoded_images & out) const {
    const std::string & first = r.images.front().param;
    if (opt_.projector == nullptr) {
        return invalid_request("'" + first + "' holds an image, but this server has no multimodal projector (start it "
                                   "with --mmproj FILE), so it accepts text only",
                               first);
    }
    out.images.clear();
    out.digests.clear();
    for (const auto & in : r.images) {
        try {
            out.images.push_back(opt_.projector->decode_image(in.bytes));
        } catch (const std::invalid_argument & e) {
            return invalid_request("'" + in.param + "': " + e.what(), in.param);
        }
        // The image as the model sees it: its decoded pixels (PNG and JPEG of the same pixels
        // are one image) under this projector.
        const engine::image & im = out.images.back();
        cache::hasher h(opt_.key_hash);
        h.field("lineage:prompt-cache:image:v1");
        h.field(opt_.projector_digest);
        h.u64(im.nx());
        h.u64(im.ny());
        const auto px = im.pixels();
        h.field(std::string_view(reinterpret_cast<const char *>(px.data()), px.size()));
        out.digests.push_back(h.bytes());
    }
    return std::nullopt;
}

std::optional<api_error> chat_preparer::place_images(const decoded_images & d, const std::string & rendered,
                                                     prepared_chat & out) const {
    engine::multimodal_prompt mp;
    try {
        mp = opt_.projector->tokenize(rendered, d.images);
    } catch (const std::invalid_argument & e) {
        return invalid_request(std::string("the images cannot be placed in the prompt: ") + e.what(), "messages");
    }
    out.prompt.clear();
    out.media.clear();
    size_t img = 0;
    for (const auto & piece : mp.pieces) {
        if (!piece.chunk) {
            out.prompt.insert(out.prompt.end(), piece.text.begin(), piece.text.end());
            continue;
        }
        if (img >= d.digests.size()) {
            return server_error("the projector made more image chunks than the request has images");
        }
        const auto begin = static_cast<int32_t>(out.prompt.size());
        for (int32_t i = 0; i < piece.n_tokens; ++i) {
            out.prompt.push_back(cache::media_token(d.digests[img], i));
        }
        out.media.push_back({{begin, begin + piece.n_tokens}, piece.chunk});
        ++img;
    }
    if (!out.media.empty() && out.media.back().span.end >= static_cast<int32_t>(out.prompt.size())) {
        return invalid_request("the prompt ends with an image; the chat template must put text after it", "messages");
    }
    return std::nullopt;
}

std::optional<api_error> chat_preparer::tokenize_with_images(const chat_request & r, const std::string & rendered,
                                                              prepared_chat & out) const {
    decoded_images d;
    if (auto err = decode_images(r, d)) {
        return err;
    }
    return place_images(d, rendered, out);
}

std::optional<api_error> chat_preparer::select_lora(const std::vector<lora_scale> & requested, prepared_chat & out,
                                                    bucket_inputs & b) const {
    out.lora = lora_selection{};
    if (opt_.loras == nullptr) {
        if (!requested.empty()) {
            return invalid_request("'lora' names adapter " + std::to_string(requested.front().id) +
                                       " but this server has no LoRA adapters (start it with --lora FILE)",
                                   "lora");
        }
        return std::nullopt;
    }
    if (auto err = opt_.loras->select(requested, out.lora)) {
        return err;
    }
    b.lora_id = out.lora.lora_id;
    return std::nullopt;
}

std::optional<api_error> chat_preparer::key_request(const std::map<std::string, std::string> & kwargs,
                                                    const std::string & tool_choice_key,
                                                    const std::vector<engine::chat_tool> & tools,
                                                    const std::string & tenant, const std::vector<lora_scale> & lora,
                                                    bool cache_prompt, prepared_chat & out) const {
    out.template_sig = template_sig(tmpl_.source(), kwargs, tool_choice_key, tools, opt_.key_hash);
    bucket_inputs b;
    b.model_id = opt_.model_id;
    b.kv_type = opt_.kv_type;
    b.template_sig = out.template_sig;
    b.tenant = tenant;
    if (auto err = select_lora(lora, out, b)) {
        return err;
    }
    out.cache.bucket = bucket_digest(b, opt_.key_hash);
    out.cache.tenant = tenant;
    out.cache.cache_prompt = opt_.cache_enabled && cache_prompt;
    // The dimensions one by one: the decision trace and the key_differs miss cause name them.
    if (out.cache.cache_prompt) {
        out.cache.dims = key_dims_of(b, tmpl_.source(), kwargs, tool_choice_key, tools);
    }
    return std::nullopt;
}

std::optional<api_error> chat_preparer::prepare_raw(raw_prompt p, int32_t max_sequence_tokens,
                                                    prepared_chat & out) const {
    if (p.tokens.empty()) {
        return invalid_request("'prompt' is empty; send at least one token", "prompt");
    }
    const auto n_prompt = static_cast<int64_t>(p.tokens.size());
    if (n_prompt >= max_sequence_tokens) {
        return invalid_request("This model's maximum context length is " + std::to_string(max_sequence_tokens) +
                                   " tokens. However, your prompt has " + std::to_string(n_prompt) +
                                   " tokens. Please reduce the prompt (or start the server with a larger --ctx-size).",
                               "prompt", "context_length_exceeded");
    }
    out.prompt = std::move(p.tokens);
    out.work = {};  // no template, and the caller tokenized any text
    if (auto err = key_request(opt_.default_kwargs, "auto", {}, p.tenant, p.lora, p.cache_prompt, out)) {
        return err;
    }
    out.cache.session_key = session_key(p.prompt_cache_key, p.user);
    out.cache.anchor_tokens = -1;
    out.cache.history_tokens = -1;
    out.cache.tools_anchor_tokens = -1;
    if (model_.family() != engine::memory_family::dense) {
        out.cache.line_starts = model_.line_starts(out.prompt);
    }
    out.stops = std::move(p.stops);
    out.preserved_tokens.clear();
    out.parser = engine::chat_parse_params();
    out.format = "raw";
    return std::nullopt;
}

}  // namespace lineage::server
