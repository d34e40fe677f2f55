// server::chat_prepare: a validated chat_request turned into what the scheduler needs: the
// rendered and tokenized prompt, the cache hints (bucket, session key, anchor length;
// docs/prompt-cache.md "Lookup", "Restore points"), the stop strings and the output parser.
// Runs on HTTP threads (docs/architecture.md "Layers").
// Thread safety: prepare() may run on many threads at once (the memos are locked).
// Ownership: borrows the model and the template, which must outlive it.
#pragma once

#include "cache/rule/digest.h"
#include "engine/chat_template.h"
#include "engine/multimodal.h"
#include "scheduler/request.h"
#include "server/request/chat_request.h"
#include "server/prepare/cache_key.h"
#include "server/http/errors.h"
#include "server/prepare/lora_registry.h"

#include "util/status.h"
#include "util/thread_annotations.h"

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace lineage::engine {
class model;
}

namespace lineage::server {

struct prepare_options {
    std::string model_id;       ///< bucket dimension (docs/prompt-cache.md "Lookup")
    std::string kv_type = {};   ///< bucket dimension: the KV cache types "K/V"; "" = f16/f16 (bucket_inputs)
    bool cache_enabled = true;  ///< server-wide switch; false: hints say cache_prompt = false
    bool cache_trace = false;   ///< --cache-trace: also fill the hints' per-dimension key digests
    /** Server-side chat_template_kwargs under the request's (llama-server enables
     *  preserve_reasoning by default; it keeps earlier turns' reasoning in the prompt, so a
     *  conversation's tokens stay a prefix of the next turn's: docs/prompt-cache.md "Images",
     *  its "Prefix stability" paragraph). */
    std::map<std::string, std::string> default_kwargs = {{"preserve_reasoning", "true"}};
    /** Digest of the bucket and template_sig (--prompt-cache-hash). */
    cache::hash_algo key_hash = cache::hash_algo::sha256;
    /** The loaded LoRA adapters (the bucket's lora_id); nullptr = none. Borrowed. */
    const lora_registry * loras = nullptr;
    /** The multimodal projector (--mmproj); nullptr = none: requests with images get a 400.
     *  Borrowed; decode_image and tokenize are thread-safe. */
    const engine::projector * projector = nullptr;
    /** Digest of the projector file's contents (raw bytes): part of every image's digest, so
     *  that the same picture under another projector is another image to the cache. */
    std::string projector_digest = {};
};

/** The server-side chat_template_kwargs for a template: llama-server's preserve_reasoning, and
 *  preserve_thinking = true when the prompt cache is on and the template source mentions
 *  preserve_thinking (Qwen3.6 and derivatives): without it such a template drops earlier turns'
 *  thinking, so turn N's prompt is not a prefix of turn N+1's (docs/prompt-cache.md "Images", its
 *  "Prefix stability" paragraph). A request's own chat_template_kwargs override these, and the
 *  merged map is what template_sig digests. */
std::map<std::string, std::string> default_template_kwargs(const std::string & template_source, bool cache_enabled);

/** Byte offsets in `text` where per-session content starts, ascending, at most `max_count`: an
 *  absolute path of at least two components ("/home/dev/proj", "~/.qwen/QWEN.md") that begins the
 *  text or follows a space, a quote, a bracket, '=', ':', ',' or '`' (a URL's "//" and a path
 *  inside a word do not count), and an ISO date (YYYY-MM-DD, not inside a longer run of digits).
 *  Agents write the working folder, memory paths and the date into their system prompts and tool
 *  descriptions, per session; the cache puts a ladder rung before each
 *  (cache::plan_hints::volatile_starts; docs/architecture.md "The anchor ladder"). */
std::vector<size_t> volatile_text_starts(std::string_view text, size_t max_count);

struct prepared_chat {
    std::vector<int32_t> prompt;
    scheduler::cache_hints cache;
    std::string template_sig;
    engine::chat_parse_params parser;
    std::vector<std::string> stops;                 ///< request stops + the template's
    std::unordered_set<int32_t> preserved_tokens;   ///< render as text in the output
    std::string format;                             ///< chat format name (logs)
    /** The grammar the sampler enforces: response_format's schema, the tool-call grammar
     *  (tool_choice required / a named function; lazy under auto), or the client's `grammar`. */
    engine::grammar_spec grammar;
    lora_selection lora;                            ///< adapters and scales, lora_id, generation
    /** The prompt's images (their pseudo-tokens are in `prompt`; cache/rule/media.h). */
    std::vector<scheduler::media_span> media;
    /** What preparing `prompt` took (docs/prompt-cache.md "Work per request"), counted by the
     *  chat_preparer calls that fill this struct:
     *  - renders: chat-template calls on this conversation or a part of it: the main render;
     *    each anchor render on a memo miss (system messages + tools, the tools alone), where a
     *    render the template refuses counts and so does its retry with a placeholder user turn;
     *    the conversation with a placeholder in place of the last user message, when that
     *    message's start is not found in the main render (hybrid families); each cache
     *    breakpoint's cut on a memo miss (prefix_tokens). A memo hit renders nothing.
     *  - tokenizations: tokenizer passes over one of those renders: the prompt (the projector's
     *    pass when it has images) and each other render that succeeded.
     *  Not counted: pieces of a few tokens tokenized alone (the generation prompt for the history
     *  hint, preserved tokens, grammar trigger words) and walks over the token table (line
     *  starts, byte offsets). A user turn on a known system prompt and tools takes 1 and 1. */
    scheduler::prepare_work work;
};

/** A raw prompt (POST /v1/completions): tokens as they go to the model, no template. */
struct raw_prompt {
    std::vector<int32_t> tokens;
    std::vector<std::string> stops;
    std::string user;
    std::string prompt_cache_key;
    std::string tenant;  ///< the caller's tenant (chat_request::tenant)
    bool cache_prompt = true;
    std::vector<lora_scale> lora;  ///< chat_request::lora
};

class chat_preparer {
public:
    chat_preparer(const engine::model & m, const engine::chat_template & t, prepare_options o);

    /** Renders, tokenizes and keys `r`. Errors: 400 when the template rejects the
     *  conversation; 400 "context_length_exceeded" when the prompt has >= max_sequence_tokens
     *  tokens; 400 naming response_format / grammar / logit_bias when the schema, grammar or a
     *  token id cannot be used with this model; 500 when tokenization fails. */
    std::optional<api_error> prepare(const chat_request & r, int32_t max_sequence_tokens, prepared_chat & out) const;

    /** Keys a raw prompt: the bucket is that of a chat request without tools, tool_choice
     *  "auto" and the default kwargs (so a raw prompt equal token for token to such a rendered
     *  conversation restores its entry; one rendered with tools is in another bucket); no anchor
     *  or history hints; a plain-content parser; the request's stops only. Errors: 400 for an
     *  empty prompt (param "prompt") and "context_length_exceeded" as prepare(). */
    std::optional<api_error> prepare_raw(raw_prompt p, int32_t max_sequence_tokens, prepared_chat & out) const;

    /** The tokens of a rendered prompt (model::tokenize(text, true)): engine::model::
     *  tokenize_reusing over the recent prompt whose text shares the longest prefix with it, so
     *  that a conversation's next turn tokenizes only what follows the last special token the two
     *  texts share (on bench-qwen35's ~4k-token agent prompts a whole pass took 7-8 ms idle and
     *  15-30 ms beside the engine's threads on 2 cores). Only `tenant`'s own recent prompts are
     *  used: a faster tokenization must not tell a caller what another tenant sent (as the cache
     *  never restores across tenants). Remembers `text` for the next call unless it is already
     *  remembered (a resend) or comes to `max_tokens` or more (refused as longer than a sequence:
     *  nothing extends it, and a burst of such bodies must not stay in memory). `reused` (may be
     *  null): the tokens taken from the recent prompt. Fails as model::tokenize(). */
    util::expected<std::vector<int32_t>> tokenize_prompt(const std::string & text, const std::string & tenant,
                                                         int64_t max_tokens, size_t * reused = nullptr) const;

    /** The prompt text prepare() tokenizes for `r` (same template inputs and defaults; without
     *  the generation prompt when r.add_generation_prompt is false), for POST /apply-template. Errors: 400 when the template rejects the conversation, 500 when
     *  it fails. */
    std::optional<api_error> render_prompt(const chat_request & r, std::string & prompt) const;

    /** Tokens that `prefix` (a conversation cut at a client's cache breakpoint), rendered
     *  without a generation prompt (with a placeholder user turn when the template refuses it
     *  alone), shares with `prompt`, the tokens of the whole request: the breakpoint's length
     *  before BPE slack. -1 when the template cannot render it. The cut's tokens are memoised by
     *  content (a cut marked again on a later turn renders nothing); a miss adds its renders and
     *  tokenizations to `work` (the request's prepared_chat::work). */
    int32_t prefix_tokens(const chat_request & prefix, const std::vector<int32_t> & prompt,
                          scheduler::prepare_work & work) const;

    /** The tokens the next request of this conversation will start with, once `reply` (the
     *  parsed assistant message generated for `r`) comes back as a past assistant turn: `r`'s
     *  conversation + `reply` + a next message, rendered and tokenized twice with two different
     *  placeholder texts (a user message; the tool result of its first call when `reply` ends in
     *  tool calls), cut where the two part: up to the placeholder's text, its role header
     *  included. `r`'s images are placed as prepare() places them: their pseudo-tokens are in
     *  the result and their spans and chunks in `media` (ascending, all before the cut). Empty
     *  (and `media` empty) when the template cannot render it or the images cannot be decoded.
     *  `work`: the renders and tokenizations it took (2 and 2 when it gives a prefix; counted as
     *  prepared_chat::work counts them). Used by the warm-up (docs/prompt-cache.md "Warm-up");
     *  same thread rules as prepare(). */
    std::vector<int32_t> next_turn_prefix(const chat_request & r, const engine::chat_parsed & reply,
                                          std::vector<scheduler::media_span> & media,
                                          scheduler::prepare_work & work) const;

    /** True when the template has an enable_thinking switch. */
    bool supports_thinking() const;

private:
    /** The template inputs of `r`: its messages and tools, the default kwargs under its own,
     *  with the generation prompt. */
    engine::chat_render_inputs render_inputs(const chat_request & r) const;
    /** Where the last user message `last`'s text starts in `prompt` (the tokens of
     *  `rendered`), tokens: found in the render once, at its end, without rendering again (text
     *  parts: their texts joined as the templates join them, directly or by '\n'); -1 when it
     *  is not (an image, a template that rewrites the text, a text that recurs in the
     *  end-of-turn markup), and the caller renders the conversation with a placeholder instead. */
    int32_t last_user_start(const engine::chat_message & last, const engine::chat_render_result & rendered,
                            const std::vector<int32_t> & prompt) const;
    /** Renders `in` into `out`. Errors: 400 (param "messages") when the template refuses the
     *  conversation, 500 when the chat library fails. */
    std::optional<api_error> render(const engine::chat_render_inputs & in, engine::chat_render_result & out) const;
    /** `in` rendered and tokenized (parse_special), counted in `work` as they are attempted (a
     *  render the template refuses counts; its tokenization does not); the render's or the
     *  tokenizer's error otherwise. */
    util::expected<std::vector<int32_t>> render_tokens(const engine::chat_render_inputs & in,
                                                       scheduler::prepare_work & work) const;
    /** render_tokens(in), and when that fails, again with a placeholder user turn after the
     *  messages (templates that refuse a conversation without a user query); nullptr when both
     *  fail. `what` names the render in the debug log. */
    std::shared_ptr<const std::vector<int32_t>> render_tokens_or_placeholder(engine::chat_render_inputs in,
                                                                             const char * what,
                                                                             scheduler::prepare_work & work) const;
    /** Sets out.lora and b.lora_id from the request's `lora`; a 400 for an unknown id. */
    std::optional<api_error> select_lora(const std::vector<lora_scale> & requested, prepared_chat & out,
                                         bucket_inputs & b) const;
    /** The request's cache key, for a chat render and a raw prompt alike: out.template_sig (the
     *  template, `kwargs`, `tool_choice_key`, `tools`), out.lora (select_lora), out.cache.bucket,
     *  tenant and cache_prompt (the server switch and the request's), and, when the cache serves
     *  the request, out.cache.dims for the decision trace. A 400 for an unknown adapter. */
    std::optional<api_error> key_request(const std::map<std::string, std::string> & kwargs,
                                         const std::string & tool_choice_key,
                                         const std::vector<engine::chat_tool> & tools, const std::string & tenant,
                                         const std::vector<lora_scale> & lora, bool cache_prompt,
                                         prepared_chat & out) const;
    /** A request's images decoded to pixels, and each one's digest (pixels, size, projector). */
    struct decoded_images {
        std::vector<engine::image> images;
        std::vector<std::string> digests;
    };
    /** Decodes `r`'s images (REQUIRES: some). Errors: 400 naming the image when there is no
     *  projector or the bytes are no readable image. */
    std::optional<api_error> decode_images(const chat_request & r, decoded_images & out) const;
    /** Tokenizes `rendered` with the decoded images `d` into out.prompt and out.media (see
     *  tokenize_with_images). Errors: 400 when markers and images do not pair up or the prompt
     *  ends with an image. */
    std::optional<api_error> place_images(const decoded_images & d, const std::string & rendered,
                                          prepared_chat & out) const;
    /** Tokenizes a rendered prompt with `r`'s images: text tokens, and for each image its
     *  pseudo-tokens (digest of the decoded pixels and the projector, cache::media_token) and
     *  its chunk in out.media. Errors: 400 naming the image when there is no projector or the
     *  bytes are no readable image; 400 when markers and images do not pair up. */
    std::optional<api_error> tokenize_with_images(const chat_request & r, const std::string & rendered,
                                                  prepared_chat & out) const;
    /** Sets out.grammar from the render's grammar or the request's `grammar`; a 400 naming the
     *  field when the engine cannot use it. REQUIRES: out.preserved_tokens set. */
    std::optional<api_error> grammar_of(const chat_request & r, const engine::chat_render_result & rendered,
                                        prepared_chat & out) const;
    /** prepare()'s tokenization of `rendered` into out.prompt (and out.media with images);
     *  `reused_tokens`: those taken from a recent prompt. Errors as prepare()'s. */
    std::optional<api_error> tokenize_rendered(const chat_request & r, const std::string & rendered,
                                               int32_t max_sequence_tokens, prepared_chat & out,
                                               size_t & reused_tokens) const;
    /** prepare()'s restore-point hints in out.cache: line starts, the anchors, the volatile
     *  starts, the last user message's start and the history boundary. */
    void hint_restore_points(const chat_request & r, const engine::chat_render_inputs & in,
                             const engine::chat_render_result & rendered, prepared_chat & out) const;
    /** out.cache.last_user_tokens (hybrid families); -1 where there is no such point. */
    void hint_last_user(const chat_request & r, const engine::chat_render_inputs & in,
                        const engine::chat_render_result & rendered, prepared_chat & out) const;
    /** The render's stops (after the request's), preserved tokens, parser and format into `out`. */
    void take_render_outputs(const chat_request & r, const engine::chat_render_result & rendered,
                             prepared_chat & out) const;

    /** Tokens of the leading system messages + tools rendered without a generation prompt
     *  (memoised by content); nullptr when the template cannot render them alone. With
     *  `with_system` false, the tools alone (the tools anchor; nullptr without tools). A memo
     *  miss adds its renders and tokenizations to `work`. */
    std::shared_ptr<const std::vector<int32_t>> anchor_render(const engine::chat_render_inputs & full, bool with_system,
                                                              scheduler::prepare_work & work) const;


    const engine::model & model_;
    const engine::chat_template & tmpl_;
    prepare_options opt_;

    /** A prompt tokenized lately, for tokenize_prompt. */
    struct recent_prompt {
        std::string tenant;
        std::shared_ptr<const std::string> text;
        std::shared_ptr<const std::vector<int32_t>> tokens;
    };
    /** At most this many recent prompts (agents run a few conversations at once), and at most
     *  max_recent_bytes_ of their texts and tokens together: the oldest go first. */
    static constexpr size_t max_recent_prompts_ = 16;
    static constexpr size_t max_recent_bytes_ = 64ull << 20;

    static constexpr size_t max_memo_ = 64;
    mutable util::mutex mu_;
    mutable std::unordered_map<std::string, std::shared_ptr<const std::vector<int32_t>>> memo_ GUARDED_BY(mu_);
    /** prefix_tokens' renders by content, apart from the anchors: a client marks a new cut every
     *  turn (its last message), which would crowd the anchors out of one memo. */
    mutable std::unordered_map<std::string, std::shared_ptr<const std::vector<int32_t>>> breakpoint_memo_
        GUARDED_BY(mu_);
    mutable std::deque<recent_prompt> recent_prompts_ GUARDED_BY(mu_);  // newest first
    mutable size_t recent_bytes_ GUARDED_BY(mu_) = 0;
};

}  // namespace lineage::server
