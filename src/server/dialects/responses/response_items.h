// server::response_items: the conversation items of the Responses API (docs/prompt-cache.md
// "Responses: how a request becomes a prompt"): `message` (input_text/output_text parts;
// input_image parts with a data URI), `function_call`, `function_call_output`, `reasoning`, parsed
// into native items, written back as JSON (the stored form of a conversation), and turned into
// the chat messages the chat preparer renders, so the same conversation renders the same tokens
// whichever dialect sent it (docs/prompt-cache.md "Responses: how a request becomes a prompt"):
// `instructions` and the leading developer/system items become the one leading system message
// (joined by a blank line when several; a single leading item without instructions is kept as
// sent); a developer/system item later on becomes a user message (templates such as Qwen3.5's
// refuse a system message after the first); reasoning + assistant message + function_call items
// in a row become one assistant message; function_call_output becomes a tool message.
// Thread safety: pure functions over their inputs.
#pragma once

#include "engine/chat_template.h"
#include "server/http/errors.h"
#include "server/prepare/media_input.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lineage::server {

class reasoning_seal;

/** An input_image part of a message item: the part it is in `parts` (which holds the image
 *  marker there, engine::projector::marker()), its data URI as sent (the stored form keeps it,
 *  so a continuation re-renders the same image) and the decoded file bytes. */
struct response_image {
    size_t part = 0;           ///< index in response_item::parts
    std::string url;           ///< "data:image/...;base64,..."
    std::string detail;        ///< as sent ("" when absent); ignored
    image_input input;         ///< decoded bytes + the field they came from
};

/** One conversation item (input or output), native. */
struct response_item {
    enum class kind { message, function_call, function_call_output, reasoning };
    kind type = kind::message;
    std::string id;                        ///< item id when sent ("" otherwise)
    // message
    std::string role;                      ///< user | assistant | system | developer
    std::string text;                      ///< content as a string (content_is_parts false)
    std::vector<std::string> parts;        ///< content as text parts (input_text/output_text)
    bool content_is_parts = false;
    std::vector<response_image> images;    ///< input_image parts (user/system/developer), in order
    // function_call / function_call_output
    std::string call_id;
    std::string name;
    std::string ns;                        ///< namespace of a namespaced function ("" when none)
    std::string arguments;                 ///< JSON text
    std::string output;                    ///< function_call_output text
    // reasoning
    std::string reasoning_text;            ///< content[].text joined (or the opened seal)
    std::string encrypted_content;         ///< as sent; opened when converting
};

/** Parses one item at `param` (e.g. "input[3]"). Throws fields::bad_field naming the
 *  bad field: an unknown item type, files or audio, an input_image that is not a data URI of an
 *  image (an http(s) URL: the server fetches nothing; a file_id: it has no Files API) or that
 *  is in an assistant message, item references. */
response_item parse_response_item(const json & j, const std::string & param);

/** The chat messages of `instructions` (when `has_instructions`) + `items`, by the mapping in
 *  the header comment, and in `images` the items' input_image bytes in the order their markers
 *  appear in the messages (the chat dialect's chat_request::images). Sealed reasoning is opened
 *  with `seal` (a seal that does not open, e.g. from another server, drops that reasoning: WARN,
 *  the prompt then differs from the cached one). Errors: 400 (param "input") for an empty
 *  conversation. */
std::optional<api_error> chat_messages_of(const std::string & instructions, bool has_instructions,
                                          const std::vector<const response_item *> & items, const reasoning_seal * seal,
                                          std::vector<engine::chat_message> & out, std::vector<image_input> & images);

/** An item as JSON: the stored form of a conversation (reasoning as its text, never sealed;
 *  images as their data URI). */
json item_to_json(const response_item & it);

/** Items from their stored JSON form; nullopt when the text is not such a list. */
std::optional<std::vector<response_item>> items_from_json_text(std::string_view text);

/** The query of GET /v1/responses/{id}/input_items. */
struct input_items_query {
    int64_t limit = 20;      ///< items per page, 1..100
    bool ascending = false;  ///< order=asc: the conversation's order; desc (default): newest first
    std::string after;       ///< an item id: the page starts after it ("" = from the start)
};

/** One page of a stored response's input items (`items`, in conversation order, each with its
 *  id set) as OpenAI's list object: {object: "list", data: [item, ...], first_id, last_id
 *  (null when data is empty), has_more}. Items are in their API shape: a message's content is
 *  always an array of parts, and messages, function calls and their outputs carry status
 *  "completed". Errors: 400 (param "after") when no item has the id `q.after`. */
std::optional<api_error> input_items_page(const std::vector<response_item> & items, const input_items_query & q,
                                          json & out);

}  // namespace lineage::server
