// The native request that crosses from the HTTP threads to the engine thread, and the events
// that flow back. Why: routes validate JSON and render/tokenize on HTTP threads; below this
// line nothing sees JSON (docs/architecture.md "Layers").
// Thread safety: a generation_request is built by one HTTP thread and then owned by the
// scheduler; its `events` channel is the only shared part (internally locked); `cancel()` may
// be called from any thread.
#pragma once

#include "cache/rule/key.h"
#include "cache/rule/media.h"
#include "engine/multimodal.h"
#include "engine/sampler.h"
#include "util/thread_annotations.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <string_view>
#include <vector>

namespace lineage::scheduler {

using token = int32_t;

/** Sampling settings (OpenAI names; llama-server's for its extensions). Greedy when
 *  temperature <= 0. Every dialect maps its request fields here; docs/api-fields.md lists them. */
struct sampling_params {
    float temperature = 1.0f;   ///< OpenAI default 1.0; <= 0 means greedy (argmax)
    float top_p = 1.0f;         ///< nucleus mass in (0, 1]
    int64_t seed = -1;          ///< -1: random seed per request
    int32_t max_tokens = -1;    ///< -1: until EOG or the context is full
    int32_t top_k = 0;          ///< keep the k most likely tokens; 0 = off (Anthropic's top_k; llama-server's)
    float min_p = 0.0f;         ///< llama-server extension; 0 = off
    float presence_penalty = 0.0f;   ///< [-2, 2]
    float frequency_penalty = 0.0f;  ///< [-2, 2]
    float repeat_penalty = 1.0f;     ///< llama-server extension; 1 = off
    std::vector<std::pair<token, float>> logit_bias;  ///< token id -> bias in [-100, 100]
    bool logprobs = false;      ///< report each sampled token's log-probability
    int32_t top_logprobs = 0;   ///< and this many alternatives per token (0-20)
    engine::grammar_spec grammar;  ///< response_format / tool-call / user grammar; none by default
    /** A scripted reply's tokens (--test-reply-script, a test instrument): sampled in this order
     *  whatever the logits (engine::sampler_params::forced); empty: sampled. */
    std::vector<token> forced;
    /** Seconds one sampling step may take (the grammar's work on the engine thread, which every
     *  other request waits for: --max-grammar-ms); a step over it ends the request with
     *  failure_kind::grammar_too_costly. 0: no bound. The server sets it with a grammar. */
    double max_step_s = 0;

    /** The engine's sampler settings for these, with the seed to use. */
    engine::sampler_params engine_params(uint32_t seed_value) const {
        engine::sampler_params p;
        p.temperature = temperature;
        p.top_p = top_p;
        p.top_k = top_k;
        p.min_p = min_p;
        p.seed = seed_value;
        p.presence_penalty = presence_penalty;
        p.frequency_penalty = frequency_penalty;
        p.repeat_penalty = repeat_penalty;
        p.logit_bias = logit_bias;
        p.n_probs = logprobs ? top_logprobs : 0;
        p.grammar = grammar;
        p.forced = forced;
        return p;
    }
};

/** What the cache needs to know about a request besides its tokens (docs/prompt-cache.md
 *  "Lookup"): its key's parts and the prompt's hints (cache::prompt_hints, which this struct
 *  carries on to the plan and the commit). Digests are hex strings computed on the HTTP thread. */
struct cache_hints : cache::prompt_hints {
    bool cache_prompt = true;          ///< false: neither read nor write the cache
    std::string bucket;                ///< digest of model, lora, template_sig, rope, mm, tenant
    std::string tenant;                ///< the API key's tenant ("" without keys): per-tenant stats and reset
    cache::key_dims dims;              ///< the bucket's dimensions; filled only with --cache-trace
    std::string session_key;           ///< prompt_cache_key > user > "" (anonymous)
    /** scheduler::reset_epoch() when the request arrived (a warm-up: when the reply it warms
     *  arrived); unset: stamped by scheduler::submit(). A request a POST /v1/cache/reset of its
     *  scope ran after reads the cache as it is now but stores nothing it computed (the reset is a
     *  barrier: nothing computed before it is committed after it); such a warm-up is dropped. */
    std::optional<uint64_t> reset_epoch;
};

/** The work the HTTP thread did to prepare a request's prompt (server::chat_preparer; what
 *  counts: server::prepared_chat::work): chat-template renders and tokenizer passes over the
 *  conversation or a prefix of it. Reported in the decision trace and counted in the metrics;
 *  0 and 0 for a raw prompt (POST /v1/completions). */
struct prepare_work {
    int32_t renders = 0;
    int32_t tokenizations = 0;
};

/** Why the scheduler could not serve a request (an error event). src/server/http/errors.cpp maps it
 *  to an HTTP status and error shape, in one function, for every API dialect. */
enum class failure_kind {
    prompt_too_long,   ///< the prompt does not fit one sequence (the client's to fix)
    bad_grammar,       ///< the request's grammar cannot be sampled with (the client's to fix)
    grammar_too_costly,  ///< a sampling step took over sampling_params::max_step_s (the client's to fix)
    no_free_sequence,  ///< every sequence id is busy (retry shortly)
    kv_full,           ///< the KV cache is full with the requests in flight (retry)
    decode_failed,     ///< the engine failed to decode the batch
    shutting_down,     ///< the server is stopping (retry on another instance)
};
std::string_view to_string(failure_kind k);

/** A typed failure with the message a client reads (what was wrong, what to do). */
struct request_failure {
    failure_kind kind = failure_kind::decode_failed;
    std::string message;
};

/** Why generation stopped (OpenAI finish_reason). */
enum class finish_reason { none, stop, length, cancelled, error };
const char * to_string(finish_reason r);

/** Per-request timings and cache outcome, reported with the final event. */
struct request_stats {
    int32_t prompt_tokens = 0;
    int32_t cached_tokens = 0;       ///< prompt tokens restored from the cache
    int32_t prefilled_tokens = 0;    ///< prompt tokens computed (prompt - cached, fewer when it ended early)
    int32_t completion_tokens = 0;
    double queue_s = 0;              ///< seconds waiting for admission
    double lookup_s = 0, restore_s = 0, prefill_s = 0, capture_s = 0, commit_s = 0;
    double ttft_s = 0;               ///< seconds from submission to the first sampled token
    double decode_s = 0;             ///< seconds from the first to the last sampled token
    /** Forward passes (llama_decode calls) the prompt's prefill took part in, images included. */
    int32_t prefill_passes = 0;
    /** Of those, the passes cut short at a restore point the cache captures (the chunk ended
     *  there, not at --batch-size, an image or the prompt end): each is one more read of all the
     *  weights. By capture kind ("turn", "guard", "anchor", "divergence", "ladder", "message",
     *  ...); prefill_splits is their sum. */
    int32_t prefill_splits = 0;
    std::map<std::string, int32_t> prefill_splits_by_kind;
    std::string hit_kind;            ///< "miss", "full", "turn", "guard", "anchor", "divergence"
    /** Why a miss restored nothing, or a short hit much less than the prompt shares with what the
     *  server has seen (cache::miss_cause: "no_shared_prefix", "below_min_prefix",
     *  "before_first_restore_point", "evicted", "bypassed", or "key_differs:DIMENSION"); "" for a
     *  hit that restored what was shared. */
    std::string miss_cause;
    /** Where the restored tokens came from: "device" (a parked sequence), "running_request" (a
     *  running request's sequence), "ram", "disk" or "redis"; "" for a miss. */
    std::string restored_from;
    /** How the restore point was put in place, for the log: cache::to_string(restore_op)
     *  ("take_device", "share_device", "load_ram", "load_tier"); "" for a miss. */
    std::string restore_op;
    /** Tokens of the sequence moved to an id next to a running request's before the prefill
     *  (scheduler: "One micro-batch per step"); -1 when it stayed where it was. Its copy counts
     *  in restore_s. */
    int32_t moved_tokens = -1;
    /** The renders and tokenizations its preparation took (generation_request::prepared). */
    prepare_work prepared;
};

/** One event on a request's channel. A request emits zero or more `token` events, then
 *  exactly one `done` or `error` event. */
struct generation_event {
    enum class kind { token, done, error } type = kind::token;
    token tok = -1;                  ///< kind::token: the sampled token
    std::string piece;               ///< kind::token: its text (bytes; may split a UTF-8 char)
    /** kind::token, when the request asked for logprobs: the token's log-probability and the
     *  top_logprobs most likely tokens (descending). */
    std::optional<float> logprob;
    std::vector<engine::token_logprob> top_logprobs;
    finish_reason finish = finish_reason::none;  ///< kind::done
    request_stats stats;             ///< kind::done (and kind::error where known)
    request_failure failure;         ///< kind::error
};

/** Single-producer (engine thread) / single-consumer (HTTP thread) event queue. */
class event_channel {
public:
    void push(generation_event e);
    /** Waits up to `timeout` for the next event; nullopt on timeout. */
    std::optional<generation_event> pop(std::chrono::milliseconds timeout);

private:
    util::mutex mu_;
    std::condition_variable cv_;
    std::deque<generation_event> q_ GUARDED_BY(mu_);
};

/** The liveness probe of a running request (the retry race, docs/architecture.md "Retries"):
 *  the engine thread asks when a new request repeats this one's prompt; the request's HTTP
 *  thread answers `alive`, or cancels the request when its client has gone. */
enum class probe_state : int { none, asked, alive };

/** One image of a prompt: the positions it fills (its pseudo-tokens in `prompt`, cache/rule/media.h)
 *  and the chunk the engine encodes and decodes there as one unit. */
struct media_span {
    cache::token_span span;
    std::shared_ptr<const engine::image_chunk> chunk;
};

/** A tokenized, validated request. */
struct generation_request {
    uint64_t id = 0;
    std::vector<token> prompt;          ///< REQUIRES: non-empty, < context size
    /** The prompt's images, ascending and disjoint, none at its last position (the routes put
     *  the generation prompt after them); `prompt` holds their pseudo-tokens. Empty for text. */
    std::vector<media_span> media;
    sampling_params sampling;
    cache_hints cache;
    /** What preparing `prompt` took on the HTTP thread (a warm-up: its next-turn renders). */
    prepare_work prepared;
    std::chrono::steady_clock::time_point submitted = std::chrono::steady_clock::now();
    std::shared_ptr<event_channel> events = std::make_shared<event_channel>();
    /** LoRA scales in force for this request, one per loaded adapter in id order (the server's
     *  global scales, or the request's own `lora`); empty = the base model (also when every
     *  scale is 0). Slots with different sets never share a llama_decode. */
    std::vector<float> lora;
    /** The adapter generation the request's key was computed under (server::lora_registry): a
     *  request with adapters admitted after a reload of a changed adapter file bypasses the
     *  cache, since its lora_id named the old file. */
    uint64_t lora_epoch = 0;
    /** Set by any thread to stop the request: checked between prefill chunks and decode steps. */
    std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
    /** Set by the HTTP thread when a stop string matched: ends with finish_reason::stop. */
    std::shared_ptr<std::atomic<bool>> stop_requested = std::make_shared<std::atomic<bool>>(false);
    /** A background warm-up of the conversation's next turn (docs/prompt-cache.md "Warm-up"):
     *  `prompt` is the prefix the next request will render; the scheduler prefills it when
     *  nothing else runs, samples nothing, stores it, and pushes no events. */
    bool warmup = false;
    /** A ladder job (cache::config::ladder_defer; docs/architecture.md "Ladder jobs"; `warmup`
     *  is set too): the scheduler makes it after a request pinned an anchor whose near and
     *  volatile rungs were deferred. `ladder_anchor`: the anchor's tokens; `ladder_rungs`: the
     *  rungs still to make (ascending, tokens, inside it). Each run prefills one stretch of them
     *  (`prompt` is then a prefix of the anchor's tokens ending at the stretch's last rung). */
    std::shared_ptr<const std::vector<token>> ladder_anchor;
    std::vector<int32_t> ladder_rungs;
    bool ladder() const { return ladder_anchor != nullptr; }
    /** Set by the HTTP thread that serves the request: it answers `probe`. */
    bool answers_probe = false;
    std::shared_ptr<std::atomic<probe_state>> probe = std::make_shared<std::atomic<probe_state>>(probe_state::none);

    // --- engine thread only ---
    /** Queued: when the retry hold started (admission.h); unset while not held. */
    std::optional<std::chrono::steady_clock::time_point> held_since;
    /** Queued: when the prefix hold started (admission.h prefix_hold); unset while not held. */
    std::optional<std::chrono::steady_clock::time_point> prefix_held_since;
    int32_t preemptions = 0;  ///< warm-up: times a foreground request interrupted it
    /** Queued: requests that arrived after it and were admitted before it (admission.h
     *  admission_order); at max_passed_over it goes first. */
    int32_t passed_over = 0;
};

}  // namespace lineage::scheduler
