// server::responses_request: a POST /v1/responses body (OpenAI Responses API),
// parsed and validated into native structs, and turned into the native chat_request that
// /v1/chat/completions uses (the items by response_items' mapping), so the same chat_preparer
// renders, tokenizes and keys it: one cache whatever the dialect (a conversation started on
// /v1/chat/completions and continued here restores when the rendered tokens agree).
// Unknown fields are ignored as the official API ignores them; a known field of the wrong type
// gets a 400 naming it.
// Thread safety: pure functions over their inputs.
#pragma once

#include "server/request/chat_request.h"
#include "server/http/errors.h"
#include "server/dialects/responses/response_items.h"

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lineage::server {

class reasoning_seal;

struct responses_request {
    chat_request chat;                     ///< tools, tool_choice, sampling, stream, session key, kwargs
    std::vector<response_item> input;      ///< this request's input items
    std::string instructions;
    bool has_instructions = false;
    std::string previous_response_id;
    bool store = true;
    bool include_encrypted_reasoning = false;  ///< include: ["reasoning.encrypted_content"]
    std::optional<int32_t> max_output_tokens;
    std::string reasoning_effort;          ///< "" when unset
    std::optional<double> temperature;     ///< as sent (echoed)
    std::optional<double> top_p;
    std::map<std::string, std::string> metadata;
    std::map<std::string, std::string> tool_namespaces;  ///< function name -> its namespace tool
    std::vector<std::string> ignored_tools;              ///< hosted tool types not served (logged)
    std::string tool_choice_echo = "auto";               ///< "auto" | "none" | "required" | function name
    bool tool_choice_is_function = false;
};

/** Parses `body` into `out` (items validated, not yet converted). Returns the error to send
 *  when the body is malformed or invalid (OpenAI error shape, `param` named). */
std::optional<api_error> parse_responses_request(std::string_view body, responses_request & out);

/** Fills `r.chat.messages` from `prior` (a stored conversation, already flat) followed by
 *  `r.input`, with `r.instructions` first. Sealed reasoning is opened with `seal` (a seal that
 *  does not open, e.g. from another server, drops that reasoning: logged, the prompt then
 *  differs from the cached one). Errors: 400 for a conversation that cannot be a chat
 *  (a function_call_output without text, an empty conversation). */
std::optional<api_error> build_chat_messages(responses_request & r, const std::vector<response_item> & prior,
                                             const reasoning_seal * seal);

}  // namespace lineage::server
