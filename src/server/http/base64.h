// server::base64: standard base64 (RFC 4648 section 4: A-Z a-z 0-9 + /, padded with '='), the
// one codec of the server: image bytes in data URIs and Anthropic image blocks, the Responses
// reasoning seal and the Anthropic thinking signature. Over OpenSSL's EVP_EncodeBlock /
// EVP_DecodeBlock, with the strict input check that EVP_DecodeBlock lacks (it skips leading and
// trailing whitespace and decodes '=' in the middle of the text as zero bits).
// Thread safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace lineage::server {

/** `raw` in base64, padded; "" for "". */
std::string base64_encode(std::string_view raw);

/** The bytes of base64 `text`: standard alphabet, a multiple of 4 characters, '=' only as the
 *  last one or two (padding), no whitespace or line breaks, at most 1 GiB of text. nullopt when
 *  it is anything else, the empty text included (no data is not an encoding of anything a
 *  caller expects). */
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace lineage::server
