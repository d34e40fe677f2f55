// server::thinking_signature: the `signature` of an Anthropic `thinking` block this server
// issues, and its check when a client sends the block back. Why: Claude Code and other clients
// echo the previous turn's thinking blocks (with display "omitted" even without the text); the
// server renders that thinking back as the template's reasoning_content, so the next prompt
// keeps the tokens the model generated and the cache restores it (docs/prompt-cache.md).
// Format: base64(mac[16] || thinking text), mac = HMAC-SHA256(key, text) truncated to 16 bytes.
// The text is carried, not encrypted: the signature proves the block came from this server and
// was not edited; it is not a secret (the client holds the conversation anyway).
// Thread safety: immutable after construction; sign/open may run on many threads.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace lineage::server {

class thinking_signer {
public:
    /** The key is SHA-256("lineage:thinking-signature:v1" || len-prefixed `model_id` ||
     *  len-prefixed `secret`): stable across restarts (a conversation continued after a restart
     *  keeps its signatures), different per model and per --api-key. */
    thinking_signer(std::string_view model_id, std::string_view secret);

    /** The signature of `thinking` (base64, no line breaks). */
    std::string sign(std::string_view thinking) const;

    /** The thinking text a signature carries; nullopt when it is not valid base64, too short, or
     *  its MAC does not match (not issued by this server for this model, or edited). */
    std::optional<std::string> open(std::string_view signature) const;

private:
    std::array<unsigned char, 32> key_{};
};

}  // namespace lineage::server
