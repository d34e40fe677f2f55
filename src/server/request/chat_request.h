// server::chat_request: the request every API dialect converts to (chat completions, Anthropic
// messages, Responses; completions keep a raw prompt beside it) and the preparer, the warm-up and
// the generation handler take: messages, tools, sampling, cache options, images, as native
// types (docs/architecture.md "Layers": no raw JSON below the routes). Each dialect's parser
// fills it (dialects/*/..._request.h) and then checks it against the per-request work limits
// (check_chat_limits).
// Thread safety: plain data; check_chat_limits is a pure function.
#pragma once

#include "engine/chat_template.h"
#include "scheduler/request.h"
#include "server/http/errors.h"
#include "server/http/request_limits.h"
#include "server/prepare/lora_registry.h"
#include "server/prepare/media_input.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lineage::server {

struct chat_request {
    std::vector<engine::chat_message> messages;  ///< developer kept as "developer" (the template maps it)
    std::vector<engine::chat_tool> tools;        ///< only the forced function when tool_choice names one
    std::string tool_choice = "auto";            ///< auto | none | required (rendering mode)
    std::string tool_choice_key = "auto";        ///< for template_sig: auto | none | required | function:NAME
    std::optional<bool> parallel_tool_calls;
    bool stream = false;
    bool include_usage = false;                  ///< stream_options.include_usage
    scheduler::sampling_params sampling;
    std::vector<std::string> stop;               ///< up to 4, non-empty
    std::string user;
    std::string prompt_cache_key;                ///< root, else extra_body
    /** The caller's tenant, from its API key (server_context::tenant_of); never read from the
     *  body. A bucket dimension: "" without API keys. */
    std::string tenant;
    bool cache_prompt = true;                    ///< root, else extra_body
    std::map<std::string, std::string> chat_template_kwargs;  ///< values as JSON text
    std::string model;                           ///< as sent (informational)
    /** llama-server's add_generation_prompt: false renders the conversation without the
     *  assistant header (POST /apply-template only; chat completions refuse false). */
    bool add_generation_prompt = true;
    /** response_format json_object / json_schema: the JSON Schema the reply must validate
     *  against, as JSON text ({"type":"object"} for json_object); "" = free text. */
    std::string json_schema;
    std::string grammar;                         ///< llama-server's `grammar` extension (GBNF); "" = none
    std::string reasoning_effort;                ///< "" = unset; none|minimal|low|medium|high|xhigh
    /** llama-server's per-request `lora` (root, else extra_body): adapters and scales for this
     *  request, the others at 0; empty = the global scales (POST /lora-adapters). Ids are
     *  checked against the loaded adapters when the request is prepared. */
    std::vector<lora_scale> lora;
    /** The images of the messages' image_url parts (data URIs, decoded from base64), in the
     *  order of the parts; each such part is a text part holding the engine's image marker
     *  (engine::projector::marker()), so the rendered prompt marks where each image goes. */
    std::vector<image_input> images;
};

/** Max stop strings per request (OpenAI). */
inline constexpr size_t max_stop_strings = 4;
/** Max top_logprobs (OpenAI: 0-20). */
inline constexpr int32_t max_top_logprobs = 20;

/** Checks `r`'s tools, messages and content parts against `lim`, and the bytes of its messages'
 *  text (contents, text parts, tool call arguments) against lim.max_prompt_bytes before any
 *  render. Returns a 400 invalid_request_error that names the count, the limit and its flag,
 *  with param "tools" or "messages" and code "too_many_tools", "tools_too_large",
 *  "too_many_messages", "too_many_content_parts" or "prompt_too_large"; nullopt when within
 *  every limit. */
std::optional<api_error> check_chat_limits(const chat_request & r, const request_limits & lim = default_request_limits());

}  // namespace lineage::server
