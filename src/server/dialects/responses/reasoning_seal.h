// server::reasoning_seal: the opaque `encrypted_content` of a Responses API reasoning item
// (`include: ["reasoning.encrypted_content"]`). A client that keeps no server state
// (Codex sends `store: false`) gets its reasoning back sealed and returns it next turn; the
// server opens it and renders the thinking exactly as it was generated, so the re-rendered
// prompt is token for token what the cache holds.
// Format: "lnr1:" + base64(nonce[12] || AES-256-GCM ciphertext || tag[16]) (OpenSSL EVP), the
// key 32 random bytes per store (persisted with the stored responses, so sealed reasoning
// survives a restart when the store does).
// Thread safety: immutable after construction; seal()/open() may run on many threads.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace lineage::server {

class reasoning_seal {
public:
    /** `key`: 32 bytes (AES-256). Throws std::invalid_argument on another length. */
    explicit reasoning_seal(std::string key);

    /** 32 fresh random bytes (OpenSSL RAND_bytes); throws std::runtime_error when the CSPRNG fails. */
    static std::string random_key();

    /** The sealed form of `text` (a fresh random nonce each call). */
    std::string seal(std::string_view text) const;

    /** The text sealed by seal() with the same key; nullopt when `sealed` is not in the format,
     *  was made with another key, or was altered. */
    std::optional<std::string> open(std::string_view sealed) const;

private:
    std::string key_;
};

}  // namespace lineage::server
