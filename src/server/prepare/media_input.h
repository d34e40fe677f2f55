// server::media_input: an image a request carries, as the API dialects send it: a data: URI
// (chat completions' image_url, Responses' input_image) or a base64 source (Anthropic image
// blocks). The server fetches nothing, so an http(s) URL is refused with a message that says
// how to send the image instead. Decoding the file to pixels is the engine's (multimodal.h).
// Thread safety: pure functions.
#pragma once

#include "server/http/base64.h"  // base64_decode: Anthropic image blocks' data

#include <optional>
#include <string>
#include <string_view>

namespace lineage::server {

/** One image of a request: its file bytes and the request field it came from (for errors). */
struct image_input {
    std::string bytes;
    std::string param;  ///< e.g. "messages[1].content[0].image_url"
};

/** The file bytes of an image URL: "data:image/<type>;base64,<data>". Otherwise sets `why` to
 *  what is wrong and what to send instead (an http(s) URL: the server fetches nothing; another
 *  media type; not base64) and returns nullopt. */
std::optional<std::string> image_from_url(std::string_view url, std::string & why);

}  // namespace lineage::server
