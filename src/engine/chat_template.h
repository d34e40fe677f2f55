// engine::chat_template: renders an OpenAI-style conversation (messages, tools, tool_choice,
// chat_template_kwargs) to a prompt with the model's Jinja template, and parses generated text
// back into {content, reasoning_content, tool_calls}, final or partial (streaming), through
// llama.cpp's common chat library, as llama-server does. Why here: only src/engine may include
// llama.h / common headers; this header is free of both.
// Thread safety: a chat_template is immutable after construction; render() may run on many
// HTTP threads at once. A chat_output_parser belongs to one request (one thread).
// Ownership: move-only owners of the library objects (pimpl).
#pragma once

#include "engine/sampler.h"
#include "util/status.h"

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lineage::engine {

class model;

/** A function call made by the assistant. `arguments` is JSON text (OpenAI's wire format). */
struct chat_tool_call {
    std::string id;
    std::string name;
    std::string arguments;

    bool operator==(const chat_tool_call &) const = default;
};

/** One input message, already validated by the HTTP layer. */
struct chat_message {
    std::string role;                      ///< system | developer | user | assistant | tool
    std::string content;                   ///< used when `parts` is empty
    std::vector<std::string> parts;        ///< text parts when content came as an array
    bool content_is_parts = false;         ///< content came as an array of text parts
    std::vector<chat_tool_call> tool_calls;  ///< assistant only
    std::string reasoning_content;         ///< assistant only (kept for preserve_reasoning templates)
    std::string name;                      ///< optional participant/tool name
    std::string tool_call_id;              ///< tool only
};

/** A function tool the model may call. `parameters` is a JSON Schema as JSON text. */
struct chat_tool {
    std::string name;
    std::string description;
    std::string parameters = "{}";
};

struct chat_render_inputs {
    std::vector<chat_message> messages;
    std::vector<chat_tool> tools;
    std::string tool_choice = "auto";                ///< auto | none | required
    std::optional<bool> parallel_tool_calls;         ///< unset: what the template supports
    std::map<std::string, std::string> kwargs;       ///< chat_template_kwargs, values as JSON text
    bool add_generation_prompt = true;
    /** response_format's JSON Schema as JSON text ("" = free text): the library builds an
     *  output-format grammar from it (json-schema-to-grammar) that also parses the reply. */
    std::string json_schema;
    /** A client GBNF grammar ("" = none); REQUIRES: no tools unless tool_choice is none. */
    std::string grammar;
};

/** How to parse what the model generates for one rendered prompt (opaque; cheap to copy). */
class chat_parse_params {
public:
    chat_parse_params();  ///< plain content: no reasoning or tool-call extraction
    struct impl;
    std::shared_ptr<const impl> impl_;
};

struct chat_render_result {
    std::string prompt;                        ///< text to tokenize with parse_special = true
    std::vector<std::string> additional_stops; ///< stop strings the template format requires
    std::vector<std::string> preserved_tokens; ///< special tokens that must reach the parser as text
    /** The suffix add_generation_prompt appended (e.g. "<|im_start|>assistant\n"); "" when none
     *  or unknown. The prompt without it is the conversation history. */
    std::string generation_prompt;
    std::string format;                        ///< the library's format name (for logs)
    chat_parse_params parser;
    /** The library's grammar for this render ("" = none): response_format's schema, or the
     *  tool-call grammar (lazy under tool_choice auto: applied from a trigger on; whole under
     *  required / a named function). */
    std::string grammar;
    bool grammar_lazy = false;
    std::vector<grammar_trigger> grammar_triggers;
};

/** The parsed assistant message. */
struct chat_parsed {
    std::string content;
    std::string reasoning_content;
    std::vector<chat_tool_call> tool_calls;
};

/** One streaming delta (what changed since the previous parse). Exactly one of: a reasoning
 *  delta, a content delta, or a tool-call delta (tool_call_index != npos). */
struct chat_delta {
    std::string reasoning_content;
    std::string content;
    size_t tool_call_index = std::string::npos;
    std::string tool_call_id;        ///< set on the first delta of a tool call
    std::string tool_call_name;      ///< set on the first delta of a tool call
    std::string tool_call_arguments; ///< appended JSON text
};

/** Why chat_template::render() gave no prompt. `refused`: the request cannot be rendered (the
 *  template rejected the conversation, bad kwargs JSON, bad tool_choice), the client's to fix;
 *  `failed`: the chat library failed otherwise (its output parser does not load). */
struct render_error {
    enum class kind { refused, failed };
    kind why = kind::failed;
    std::string message;  ///< what was wrong (for a refusal, the template's own words)
};

class chat_template {
public:
    /** Uses `override_source` when non-empty, else the model's template (chatml when the GGUF
     *  has none). Throws std::runtime_error when the template does not parse. */
    chat_template(const model & m, const std::string & override_source);
    ~chat_template();
    chat_template(chat_template &&) noexcept;
    chat_template & operator=(chat_template &&) noexcept;
    chat_template(const chat_template &) = delete;
    chat_template & operator=(const chat_template &) = delete;

    /** The Jinja source that renders prompts: the default template, followed by the tool-use
     *  variant when the model has one (input to template_sig). */
    const std::string & source() const;

    /** True when the template renders an enable_thinking switch (llama-server's default for
     *  enable_thinking). */
    bool supports_thinking() const;

    /** Renders `in`; a render_error when it cannot (never throws: the chat library's exceptions
     *  are caught here and become the error). */
    util::expected<chat_render_result, render_error> render(const chat_render_inputs & in) const;

    struct impl;

private:
    std::unique_ptr<impl> impl_;
};

/** Per-request parser state: re-parses the whole text each time and reports deltas. Tool
 *  calls without an id from the model get a generated one, stable across updates. */
class chat_output_parser {
public:
    explicit chat_output_parser(chat_parse_params p);

    /** Parses `text` (everything generated so far). Partial: never fails; returns the deltas
     *  since the previous call. Final (is_partial = false): when the text does not match the
     *  template's format, falls back to the whole text as content (logged) instead of failing. */
    std::vector<chat_delta> update(const std::string & text, bool is_partial);

    /** The message as of the last update(). */
    const chat_parsed & message() const { return msg_; }

private:
    chat_parse_params params_;
    chat_parsed msg_;
    std::vector<std::string> ids_;  ///< tool call ids by index
};

}  // namespace lineage::engine
