// server::request_limits: how much work one request body may ask of the HTTP side before the
// engine: tools, messages, content parts, and the bytes of the prompt text that gets tokenized.
// Why: llama.cpp's jinja interpreter renders a chat template at ~0.3 ms a message and ~0.7 ms
// a tool on the tiny models (2 shared cores; docs/prompt-cache.md "Security and failure model"),
// cannot be interrupted, and builds a value tree hundreds of times the body's size: 10,000 tools
// (2.5 MB) took 27 s and 3.5 GB, 200,000 messages kept a thread busy for minutes, all below
// --max-body-bytes. Each limit is a flag; a request over one gets a 400 naming it.
// Thread safety: the limits are set once at startup, before the server listens; the checks
// are pure functions.
#pragma once

#include "server/http/errors.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace lineage::server {

struct request_limits {
    /** --max-tools: tools (function definitions) in one request. Real agents send 20-100
     *  (OpenAI's own API accepts at most 128 functions); 1,024 is 8 times that and renders in
     *  ~0.7 s. */
    int64_t max_tools = 1024;
    /** --max-tools-bytes: bytes of the tools' names, descriptions and parameter schemas
     *  together. A coding agent's ~20 tools are ~60 KB; 2 MiB leaves 30x that. */
    uint64_t max_tools_bytes = 2ull << 20;
    /** --max-messages: messages of one conversation (a Responses request: its input items and
     *  the stored conversation it continues, as messages). Agents send a few hundred; 4,096
     *  renders in ~1.2 s, and is more turns than a 256K-token context holds in practice. */
    int64_t max_messages = 4096;
    /** --max-content-parts: content parts over all messages (text parts, images, tool calls,
     *  each one part; a message with plain string content counts 1). Twice --max-messages'
     *  default: a turn rarely carries more than a text and a tool call. */
    int64_t max_content_parts = 8192;
    /** --max-prompt-bytes: bytes of the text given to the tokenizer (the rendered chat prompt,
     *  a /v1/completions text prompt, /tokenize's content). The tokenizer runs at ~3 MB/s on
     *  2 shared cores (measured), so 4 MiB (about 1M tokens of English, more than any context)
     *  tokenizes in ~1.3 s. */
    uint64_t max_prompt_bytes = 4ull << 20;
    /** --max-logit-bias: entries of one request's logit_bias. OpenAI's API accepts at most 300;
     *  llama.cpp's logit-bias sampler walks them every generated token (151,936 entries held
     *  the engine thread for 20 s of one request, every other request waiting). */
    int64_t max_logit_bias = 1024;
    /** --max-grammar-ms: milliseconds one sampling step may spend enforcing a request's
     *  constraint (`grammar`, a `json_schema` or `response_format` schema turned into one),
     *  measured before the request is queued by applying it to the whole vocabulary
     *  (engine::grammar_step_seconds): the engine thread pays that on a step where the model's
     *  choice breaks the grammar, and every other request waits for it. */
    double max_grammar_ms = 200;
    /** --max-grammar-alternatives: alternatives in a request's constraint: '|' in a `grammar`
     *  (GBNF), enum values, properties and anyOf/oneOf branches in a JSON Schema. llama.cpp's
     *  grammar sampler keeps one stack per live alternative and advances each with a duplicate
     *  check that grows with the square of their number; the cost probe itself
     *  (engine::grammar_step_seconds) would take seconds past a few thousand (a 20,000-value
     *  enum: 90 s), and json-schema-to-grammar turns optional properties into rules that grow
     *  with the square of their count (1,000 properties: 2.2 s of rendering). */
    int64_t max_grammar_alternatives = 512;
};

/** The process-wide limits the request parsers and the preparer use (set once at startup,
 *  before the server listens, from the flags above). */
request_limits & default_request_limits();

/** A 400 invalid_request_error for `n` `noun` over the limit `max` of flag `flag`: "this request
 *  has 10000 tools; this server accepts at most 1024 (--max-tools): send fewer, or start the
 *  server with a larger --max-tools", with `param` and `code`. */
api_error limit_exceeded(uint64_t n, const char * noun, uint64_t max, const char * flag, std::string param,
                         std::string code);

/** A 400 "too_many_messages" when an array of `n` conversation items (the body's messages or
 *  input, checked before they are converted) is over lim.max_messages; `param` names it. */
std::optional<api_error> check_message_count(size_t n, const std::string & param,
                                             const request_limits & lim = default_request_limits());

/** A 400 "too_many_tools" when a tools array of `n` entries is over lim.max_tools (checked
 *  before the tools are converted). */
std::optional<api_error> check_tool_count(size_t n, const std::string & param,
                                          const request_limits & lim = default_request_limits());

/** A 400 "too_many_logit_bias" (param "logit_bias") when a logit_bias of `n` entries is over
 *  lim.max_logit_bias. */
std::optional<api_error> check_logit_bias_count(size_t n, const request_limits & lim = default_request_limits());

/** Alternatives in GBNF text `gbnf`: its '|' outside string literals, character classes and
 *  comments. */
uint64_t count_grammar_alternatives(std::string_view gbnf);
/** Alternatives in the JSON Schema `schema`: enum values, properties and anyOf/oneOf branches,
 *  at every depth. */
uint64_t count_schema_alternatives(const json & schema);

/** Bytes over which a request body's preparation (parsing, rendering, tokenizing) runs below the
 *  engine's priority (--http-nice): 256 KiB, a conversation of ~60k tokens. */
inline constexpr size_t low_priority_body_bytes = 256 * 1024;

/** Whether a request with body `body` is prepared below the engine's priority: over
 *  low_priority_body_bytes, or carrying a constraint (the text "grammar" or "json_schema" as a
 *  key: its cost probe walks the vocabulary). The rest is prepared at the engine's priority, so
 *  that an agent's turn is not starved while the engine is busy. */
bool prepare_at_low_priority(std::string_view body);

/** A 400 "grammar_too_costly" (param `param`) when enforcing a constraint costs `ms`
 *  milliseconds a sampling step, over lim.max_grammar_ms. */
std::optional<api_error> check_grammar_cost(double ms, const std::string & param,
                                            const request_limits & lim = default_request_limits());

/** A 400 "prompt_too_large" (param `param`) when `bytes` of text to tokenize are over
 *  lim.max_prompt_bytes; `what` says which text ("the rendered prompt", "'content'"). */
std::optional<api_error> check_prompt_bytes(uint64_t bytes, const std::string & what, const std::string & param,
                                            const request_limits & lim = default_request_limits());

}  // namespace lineage::server
