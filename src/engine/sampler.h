// engine::sampler: the sampling chain of one request over llama.cpp's common_sampler (penalties,
// logit bias, top-k, top-p, min-p, temperature, seeded draw) with an optional grammar constraint
// (a user GBNF grammar, a JSON Schema turned into one, or the chat library's tool-call grammar),
// and the log-probabilities of what it sampled (OpenAI `logprobs` / `top_logprobs`).
// Why here: only src/engine may include llama.h / common headers; this header is free of both,
// so the scheduler and the routes can carry sampler_params without them.
// Thread safety: a sampler belongs to one request on the engine thread; check_grammar() may run
// on any thread (it reads the model only). Ownership: move-only owner of the common_sampler.
#pragma once

#include "util/status.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

struct common_sampler;

namespace lineage::engine {

class model;
class context;

/** What starts a lazy grammar (llama.cpp common_grammar_trigger): a word or regex pattern in the
 *  generated text, or one token. */
struct grammar_trigger {
    enum class kind { token, word, pattern, pattern_full };
    kind type = kind::word;
    std::string value;
    int32_t tok = -1;  ///< kind::token only
};

/** A grammar constraint on the generated text. */
struct grammar_spec {
    /** user: a GBNF grammar sent by the client (not advanced past the generation prompt);
     *  output_format: from response_format's JSON Schema; tool_calls: the chat library's
     *  tool-call grammar. The last two start at the template's generation prompt. */
    enum class kind { none, user, output_format, tool_calls };
    kind type = kind::none;
    std::string gbnf;                        ///< GBNF text; empty with kind::none
    bool lazy = false;                       ///< applied only after a trigger (tool_choice auto)
    std::vector<grammar_trigger> triggers;   ///< REQUIRES: non-empty when lazy
    std::vector<int32_t> preserved_tokens;   ///< special tokens the grammar may produce as text
    std::string generation_prompt;           ///< text the template put after the prompt's last turn

    bool empty() const { return type == kind::none || gbnf.empty(); }
};

/** Settings of one request's sampling chain (OpenAI names where OpenAI has the setting).
 *  Greedy when temperature <= 0. */
struct sampler_params {
    float temperature = 1.0f;
    float top_p = 1.0f;              ///< 1 = off
    int32_t top_k = 0;               ///< 0 = off (whole vocabulary)
    float min_p = 0.0f;              ///< 0 = off
    uint32_t seed = 0;
    float presence_penalty = 0.0f;   ///< [-2, 2]; subtracted once from a token already generated
    float frequency_penalty = 0.0f;  ///< [-2, 2]; subtracted per earlier occurrence
    float repeat_penalty = 1.0f;     ///< llama.cpp's multiplicative penalty; 1 = off
    int32_t penalty_last_n = 64;     ///< generated tokens the penalties look back over
    std::vector<std::pair<int32_t, float>> logit_bias;  ///< token id -> bias added to its logit
    /** Alternatives reported per sampled token (top_logprobs); 0 = only the sampled token's. */
    int32_t n_probs = 0;
    grammar_spec grammar;
    /** A scripted reply (--test-reply-script, a test instrument; server/prepare/reply_script.h):
     *  when non-empty, the i-th sampled token is forced[i] whatever the logits (the chain above,
     *  the grammar included, is not applied); the log-probabilities still come from the model's
     *  logits. Past its end the last token repeats (the script ends in an end-of-generation
     *  token, so the scheduler stops there). */
    std::vector<int32_t> forced;
};

/** One candidate token and its log-probability (natural log) under the model's distribution
 *  (softmax of the raw logits, before penalties, bias, grammar and truncation, as OpenAI and
 *  llama-server report it). */
struct token_logprob {
    int32_t tok = -1;
    float logprob = 0.0f;
};

/** A sampled token, its log-probability, and the n_probs most likely tokens (descending). */
struct sampled_token {
    int32_t tok = -1;
    float logprob = 0.0f;
    std::vector<token_logprob> top;
};

class sampler {
public:
    /** Throws std::invalid_argument when the grammar does not parse or cannot start at the
     *  generation prompt (the message says why). */
    sampler(const model & m, const sampler_params & p);
    ~sampler();
    sampler(const sampler &) = delete;
    sampler & operator=(const sampler &) = delete;

    /** Samples from the output row `idx` of ctx's last decode and accepts the token (with
     *  sampler_params::forced, takes the next forced token instead). With `with_probs`, fills
     *  logprob and top (n_probs entries). */
    sampled_token sample(context & ctx, int32_t idx, bool with_probs = false);

private:
    common_sampler * smpl_ = nullptr;
    int32_t n_probs_ = 0;
    std::vector<int32_t> forced_;
    size_t n_forced_ = 0;  ///< forced tokens given so far
};

/** ok when `g` parses for model `m` (and starts at its generation prompt); else what is wrong.
 *  For the routes, to answer a bad grammar with a 400 before the request is queued. */
util::status check_grammar(const model & m, const grammar_spec & g);

/** Seconds one sampling step can spend enforcing grammar `g` (`g` checked by check_grammar):
 *  llama.cpp's grammar sampler applied to every token of the vocabulary, estimated from
 *  grammar_probe_tokens of them (and 16), at the costliest of the first grammar_probe_steps + 1 places
 *  sampling reaches: where generation starts (an output-format or tool-call grammar advanced past
 *  the generation prompt, as common_sampler_init does), then after each of grammar_probe_steps
 *  one-byte tokens the grammar allows, each the costliest next place of grammar_probe_branches
 *  tried. common_sampler_sample pays that whenever the token the
 *  chain chose breaks the grammar (it then filters the whole vocabulary), and it grows with the
 *  grammar's live alternatives: a grammar of 5,000 alternatives took ~19 s a token on the engine
 *  thread, where every other request waits. The walk stops at the first place over
 *  `stop_above_s`. 0 for no grammar and for a
 *  lazy one (a tool-call grammar, inactive until its trigger; its size is bounded by
 *  --max-tools; the scheduler still bounds each step: sampling_params::max_step_s). Throws
 *  std::invalid_argument when the grammar does not parse or refuses the generation prompt. Any
 *  thread. */
double grammar_step_seconds(const model & m, const grammar_spec & g,
                            double stop_above_s = std::numeric_limits<double>::infinity());
/** Tokens grammar_step_seconds() applies the grammar to (every n_vocab / this-th id, and 16
 *  ids), its time extrapolated to the whole vocabulary. */
inline constexpr int32_t grammar_probe_tokens = 512;
/** One-byte steps grammar_step_seconds() walks past the start. */
inline constexpr int grammar_probe_steps = 8;
/** Allowed one-byte tokens grammar_step_seconds() tries at each step of its walk. */
inline constexpr size_t grammar_probe_branches = 16;

/** ok when llama.cpp's json-schema-to-grammar converts `schema_json` (a JSON Schema as JSON
 *  text); else why not (an unsupported keyword, an unresolvable $ref). Any thread. */
util::status check_json_schema(const std::string & schema_json);

}  // namespace lineage::engine
