// engine::chat_template over llama.cpp's common chat library (common/chat.h). Mirrors what
// llama-server does in oaicompat_chat_params_parse (tools/server/server-common.cpp) and
// task_result_state::update_chat_msg (tools/server/server-task.cpp), through the library.
#include "engine/chat_template.h"

#include "engine/model.h"

#include <chat.h>
#include <common.h>
#include <llama.h>
#include <spdlog/spdlog.h>

#include <random>
#include <stdexcept>

namespace lineage::engine {

struct chat_parse_params::impl {
    common_chat_parser_params params;
};

chat_parse_params::chat_parse_params() : impl_(std::make_shared<const impl>()) {}

struct chat_template::impl {
    common_chat_templates_ptr tmpls;
    std::string source;
    bool supports_thinking = false;
    bool supports_parallel_tool_calls = false;
    std::string bos_text;  ///< prepended when the vocab adds BOS (the library strips it)
    const model * mdl = nullptr;
};

namespace {

common_chat_msg to_common(const chat_message & m) {
    common_chat_msg out;
    out.role = m.role;
    if (m.content_is_parts) {
        for (const auto & p : m.parts) {
            common_chat_msg_content_part part;
            part.type = "text";
            part.text = p;
            out.content_parts.push_back(std::move(part));
        }
    } else {
        out.content = m.content;
    }
    for (const auto & tc : m.tool_calls) {
        out.tool_calls.push_back({tc.name, tc.arguments, tc.id});
    }
    out.reasoning_content = m.reasoning_content;
    out.tool_name = m.name;
    out.tool_call_id = m.tool_call_id;
    return out;
}

common_chat_msg to_common(const chat_parsed & p) {
    common_chat_msg out;
    out.role = "assistant";
    out.content = p.content;
    out.reasoning_content = p.reasoning_content;
    for (const auto & tc : p.tool_calls) {
        out.tool_calls.push_back({tc.name, tc.arguments, tc.id});
    }
    return out;
}

chat_parsed from_common(const common_chat_msg & m) {
    chat_parsed out;
    out.content = m.content;
    out.reasoning_content = m.reasoning_content;
    for (const auto & tc : m.tool_calls) {
        out.tool_calls.push_back({tc.id, tc.name, tc.arguments});
    }
    return out;
}

std::string gen_tool_call_id() {
    static const char alphabet[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    thread_local std::mt19937 rng{std::random_device{}()};
    std::uniform_int_distribution<size_t> pick(0, sizeof(alphabet) - 2);
    std::string id = "call_";
    for (int i = 0; i < 24; ++i) {
        id += alphabet[pick(rng)];
    }
    return id;
}

render_error refused(std::string message) {
    return render_error{render_error::kind::refused, std::move(message)};
}

// common_chat_templates_apply; what it throws becomes a refusal in the template's own words.
util::expected<common_chat_params, render_error> apply_template(const chat_template::impl & im,
                                                                const common_chat_templates_inputs & inputs) {
    try {
        return common_chat_templates_apply(im.tmpls.get(), inputs);
    } catch (const std::invalid_argument & e) {
        return refused(e.what());
    } catch (const std::exception & e) {
        // The Jinja engine's text is the template lines it was executing, then "Error: <what>":
        // the client gets the what (e.g. the template's raise_exception text), the log the rest.
        const std::string what = e.what();
        spdlog::debug("chat template render failed: {}", what);
        std::string reason = what;
        if (const auto at = what.rfind("Error: "); at != std::string::npos) {
            reason = what.substr(at + 7);
            const std::string jinja = "Jinja Exception: ";
            if (reason.rfind(jinja, 0) == 0) {
                reason = reason.substr(jinja.size());
            }
        }
        reason = reason.substr(0, reason.find('\n'));
        return refused(std::string("the chat template could not render this conversation: ") + reason);
    }
}

// tool_choice required / a named function: some formats' grammars (Qwen3-Coder XML, used by
// Qwen3.5) let free text come before the first call, which a model may never end. The word that
// starts a call (the lazy grammar's trigger under tool_choice auto) is put at the end of the
// generation prompt, as llama.cpp does for a continued message: the grammar sampler and the
// parser both start after it, so the reply is the call. Kept only when the forced grammar
// accepts the longer generation prompt, and not when the generation prompt opens a reasoning
// block (Qwen3.5's "<think>\n" with thinking on): the word would land inside the reasoning,
// where the parser never looks for a call; the library's grammar (reasoning, then the call)
// stays, as in llama-server.
void force_tool_call_start(const chat_template::impl & im, common_chat_templates_inputs inputs, common_chat_params & cp) {
    if (cp.grammar.empty()) {
        return;
    }
    if (!cp.thinking_start_tag.empty()) {
        const auto end = cp.generation_prompt.find_last_not_of(" \t\r\n");
        const std::string head = end == std::string::npos ? std::string() : cp.generation_prompt.substr(0, end + 1);
        if (head.size() >= cp.thinking_start_tag.size() &&
            head.compare(head.size() - cp.thinking_start_tag.size(), std::string::npos, cp.thinking_start_tag) == 0) {
            return;
        }
    }
    inputs.tool_choice = COMMON_CHAT_TOOL_CHOICE_AUTO;
    const auto lazy = apply_template(im, inputs);
    if (!lazy) {
        return;
    }
    std::string start;
    for (const auto & t : lazy->grammar_triggers) {
        if (t.type == COMMON_GRAMMAR_TRIGGER_TYPE_WORD || t.type == COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN) {
            start = t.value;
            break;
        }
    }
    if (start.empty() || cp.generation_prompt.empty() ||
        cp.prompt.size() < cp.generation_prompt.size() ||
        cp.prompt.compare(cp.prompt.size() - cp.generation_prompt.size(), std::string::npos, cp.generation_prompt) != 0) {
        return;
    }
    grammar_spec g;
    g.type = grammar_spec::kind::tool_calls;
    g.gbnf = cp.grammar;
    g.generation_prompt = cp.generation_prompt + start;
    if (im.mdl == nullptr || !check_grammar(*im.mdl, g).is_ok()) {
        return;
    }
    cp.prompt += start;
    cp.generation_prompt += start;
}

}  // namespace

chat_template::chat_template(const model & m, const std::string & override_source) : impl_(std::make_unique<impl>()) {
    impl_->mdl = &m;
    try {
        impl_->tmpls = common_chat_templates_init(m.raw(), override_source);
    } catch (const std::exception & e) {
        throw std::runtime_error(std::string("chat template does not parse: ") + e.what());
    }
    if (!impl_->tmpls) {
        throw std::runtime_error("chat template could not be initialised");
    }
    impl_->source = common_chat_templates_source(impl_->tmpls.get());
    const std::string tool_use = common_chat_templates_source(impl_->tmpls.get(), "tool_use");
    if (!tool_use.empty()) {
        impl_->source += "\n{# lineage: tool_use variant #}\n" + tool_use;
    }
    impl_->supports_thinking = common_chat_templates_support_enable_thinking(impl_->tmpls.get());
    const auto caps = common_chat_templates_get_caps(impl_->tmpls.get());
    if (auto it = caps.find("supports_parallel_tool_calls"); it != caps.end()) {
        impl_->supports_parallel_tool_calls = it->second;
    }
    const llama_vocab * vocab = llama_model_get_vocab(m.raw());
    if (vocab && llama_vocab_get_add_bos(vocab) && llama_vocab_bos(vocab) != LLAMA_TOKEN_NULL) {
        impl_->bos_text = common_token_to_piece(vocab, llama_vocab_bos(vocab), true);
    }
}

chat_template::~chat_template() = default;
chat_template::chat_template(chat_template &&) noexcept = default;
chat_template & chat_template::operator=(chat_template &&) noexcept = default;

const std::string & chat_template::source() const {
    return impl_->source;
}

bool chat_template::supports_thinking() const {
    return impl_->supports_thinking;
}

namespace {

// The library's inputs for `in`; a refusal for an enable_thinking that is no boolean. Throws
// std::invalid_argument for a bad tool_choice (the library's parser).
util::expected<common_chat_templates_inputs, render_error> library_inputs(const chat_template::impl & im,
                                                                          const chat_render_inputs & in) {
    common_chat_templates_inputs inputs;
    inputs.messages.reserve(in.messages.size());
    for (const auto & m : in.messages) {
        inputs.messages.push_back(to_common(m));
    }
    for (const auto & t : in.tools) {
        inputs.tools.push_back({t.name, t.description, t.parameters});
    }
    inputs.tool_choice = common_chat_tool_choice_parse_oaicompat(in.tool_choice);  // throws invalid_argument
    inputs.parallel_tool_calls = in.parallel_tool_calls.value_or(im.supports_parallel_tool_calls);
    inputs.add_generation_prompt = in.add_generation_prompt;
    inputs.use_jinja = true;
    inputs.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;  // llama-server's default
    inputs.chat_template_kwargs = in.kwargs;
    inputs.json_schema = in.json_schema;
    inputs.grammar = in.grammar;

    // enable_thinking: the template's capability, overridden by the kwarg (llama-server).
    inputs.enable_thinking = im.supports_thinking;
    if (auto it = in.kwargs.find("enable_thinking"); it != in.kwargs.end()) {
        if (it->second == "true") {
            inputs.enable_thinking = true;
        } else if (it->second == "false") {
            inputs.enable_thinking = false;
        } else {
            return refused("chat_template_kwargs.enable_thinking must be a boolean");
        }
    }
    return inputs;
}

// The result of a render the library made; `failed` when its output parser does not load.
util::expected<chat_render_result, render_error> to_result(const chat_template::impl & im,
                                                           const common_chat_templates_inputs & inputs,
                                                           common_chat_params & cp) {
    chat_render_result out;
    out.prompt = std::move(cp.prompt);
    if (!im.bos_text.empty() && out.prompt.rfind(im.bos_text, 0) != 0) {
        out.prompt.insert(0, im.bos_text);
    }
    out.generation_prompt = cp.generation_prompt;
    out.additional_stops = cp.additional_stops;
    out.preserved_tokens = cp.preserved_tokens;
    out.format = common_chat_format_name(cp.format);
    out.grammar = cp.grammar;
    out.grammar_lazy = cp.grammar_lazy;
    for (const auto & t : cp.grammar_triggers) {
        grammar_trigger g;
        switch (t.type) {
            case COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN:        g.type = grammar_trigger::kind::token; break;
            case COMMON_GRAMMAR_TRIGGER_TYPE_WORD:         g.type = grammar_trigger::kind::word; break;
            case COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN:      g.type = grammar_trigger::kind::pattern; break;
            case COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN_FULL: g.type = grammar_trigger::kind::pattern_full; break;
        }
        g.value = t.value;
        g.tok = t.token;
        out.grammar_triggers.push_back(std::move(g));
    }

    auto pp = std::make_shared<chat_parse_params::impl>();
    pp->params = common_chat_parser_params(cp);
    pp->params.reasoning_format = inputs.reasoning_format;
    pp->params.reasoning_in_content = false;
    if (!cp.parser.empty()) {
        try {
            pp->params.parser.load(cp.parser);
        } catch (const std::exception & e) {
            return render_error{render_error::kind::failed,
                                std::string("chat output parser does not load: ") + e.what()};
        }
    }
    out.parser.impl_ = std::move(pp);
    return out;
}

util::expected<chat_render_result, render_error> render_with_library(const chat_template::impl & im,
                                                                     const chat_render_inputs & in) {
    auto inputs = library_inputs(im, in);
    if (!inputs) {
        return inputs.error();
    }
    auto cp = apply_template(im, *inputs);
    if (!cp) {
        return cp.error();
    }
    if (inputs->tool_choice == COMMON_CHAT_TOOL_CHOICE_REQUIRED && !inputs->tools.empty() &&
        inputs->json_schema.empty()) {
        force_tool_call_start(im, *inputs, *cp);
    }
    return to_result(im, *inputs, *cp);
}

}  // namespace

util::expected<chat_render_result, render_error> chat_template::render(const chat_render_inputs & in) const {
    // The engine's boundary: what the chat library throws past the steps above (a bad
    // tool_choice, its allocations) becomes the error here, as a refusal or a failure by type.
    try {
        return render_with_library(*impl_, in);
    } catch (const std::invalid_argument & e) {
        return refused(e.what());
    } catch (const std::exception & e) {
        return render_error{render_error::kind::failed, e.what()};
    }
}

chat_output_parser::chat_output_parser(chat_parse_params p) : params_(std::move(p)) {}

std::vector<chat_delta> chat_output_parser::update(const std::string & text, bool is_partial) {
    const common_chat_parser_params & pp = params_.impl_->params;
    common_chat_msg parsed;
    bool parsed_ok = false;
    try {
        parsed = common_chat_parse(text, is_partial, pp);
        parsed_ok = true;
    } catch (const std::exception & e) {
        if (is_partial) {
            return {};  // wait for more text
        }
        spdlog::debug("final parse failed: {}", e.what());
    }
    if (!is_partial && !text.empty() && (!parsed_ok || parsed.empty())) {
        // The final text does not complete the format (e.g. max_tokens cut a reasoning block or
        // a tool call short): keep what the partial parser makes of it, which is also what was
        // streamed; failing that, the whole text is content.
        try {
            parsed = common_chat_parse(text, /*is_partial=*/true, pp);
        } catch (const std::exception & e) {
            spdlog::warn("generated text does not match the chat format ({}); returning it as content", e.what());
            parsed = common_chat_msg();
        }
        if (parsed.empty()) {
            parsed.role = "assistant";
            parsed.content = text;
        }
    }
    if (parsed.empty()) {
        return {};
    }
    for (size_t i = 0; i < parsed.tool_calls.size(); ++i) {
        if (ids_.size() <= i) {
            ids_.push_back(parsed.tool_calls[i].id.empty() ? gen_tool_call_id() : parsed.tool_calls[i].id);
        }
        parsed.tool_calls[i].id = ids_[i];
    }

    std::vector<common_chat_msg_diff> diffs;
    try {
        diffs = common_chat_msg_diff::compute_diffs(to_common(msg_), parsed);
    } catch (const std::exception & e) {
        // The new parse is not an extension of what was streamed (should not happen with the
        // library's partial parsers); keep the message, emit nothing for this step.
        spdlog::debug("chat output diff skipped: {}", e.what());
        if (!is_partial) {
            msg_ = from_common(parsed);
        }
        return {};
    }
    msg_ = from_common(parsed);

    std::vector<chat_delta> out;
    out.reserve(diffs.size());
    for (auto & d : diffs) {
        chat_delta cd;
        cd.reasoning_content = std::move(d.reasoning_content_delta);
        cd.content = std::move(d.content_delta);
        cd.tool_call_index = d.tool_call_index;
        cd.tool_call_id = std::move(d.tool_call_delta.id);
        cd.tool_call_name = std::move(d.tool_call_delta.name);
        cd.tool_call_arguments = std::move(d.tool_call_delta.arguments);
        out.push_back(std::move(cd));
    }
    return out;
}

}  // namespace lineage::engine
