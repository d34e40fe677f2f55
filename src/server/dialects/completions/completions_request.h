// server::completions_request: a POST /v1/completions body (OpenAI's legacy text completion,
// docs/prompt-cache.md "Completions (raw prompt)"): one raw prompt, a string or an array of token
// ids, with no chat template.
// Parsed and validated into a native struct; unknown fields are ignored, known fields with a
// wrong type or value get a 400 naming them. Refused with a 400 that says what to send instead:
// several prompts (an array of strings or of token arrays), `echo: true`, `suffix`, `n` != 1,
// `best_of` != 1, `logprobs`.
// Thread safety: pure function over its input.
#pragma once

#include "scheduler/request.h"
#include "server/http/errors.h"
#include "server/prepare/lora_registry.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lineage::server {

struct completions_request {
    std::string prompt;                 ///< when !prompt_is_tokens
    std::vector<int32_t> prompt_tokens; ///< when prompt_is_tokens
    bool prompt_is_tokens = false;
    bool stream = false;
    bool include_usage = false;         ///< stream_options.include_usage
    scheduler::sampling_params sampling;  ///< max_tokens defaults to 16 as in OpenAI's API
    std::vector<std::string> stop;
    std::string user;
    std::string prompt_cache_key;
    bool cache_prompt = true;
    std::vector<lora_scale> lora;       ///< llama-server's per-request `lora` (chat_request::lora)
    std::string model;
};

/** Parses `body` into `out`. Returns the error to send when the body is malformed or invalid. */
std::optional<api_error> parse_completions_request(std::string_view body, completions_request & out);

}  // namespace lineage::server
