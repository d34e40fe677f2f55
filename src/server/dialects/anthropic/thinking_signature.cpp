// server::thinking_signature: HMAC-SHA256 signatures over thinking text (OpenSSL).
#include "server/dialects/anthropic/thinking_signature.h"

#include "server/http/base64.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdint>
#include <stdexcept>

namespace lineage::server {

namespace {

constexpr size_t mac_bytes = 16;

void append_len_prefixed(std::string & buf, std::string_view s) {
    uint64_t n = s.size();
    for (int i = 0; i < 8; ++i) {
        buf += static_cast<char>((n >> (8 * i)) & 0xff);
    }
    buf.append(s);
}

std::array<unsigned char, 32> mac_of(const std::array<unsigned char, 32> & key, std::string_view text) {
    std::array<unsigned char, 32> out{};
    unsigned int n = 0;
    if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char *>(text.data()),
             text.size(), out.data(), &n) == nullptr ||
        n != out.size()) {
        throw std::runtime_error("HMAC-SHA256 failed");
    }
    return out;
}

}  // namespace

thinking_signer::thinking_signer(std::string_view model_id, std::string_view secret) {
    std::string buf = "lineage:thinking-signature:v1";
    append_len_prefixed(buf, model_id);
    append_len_prefixed(buf, secret);
    unsigned int n = 0;
    if (EVP_Digest(buf.data(), buf.size(), key_.data(), &n, EVP_sha256(), nullptr) != 1 || n != key_.size()) {
        throw std::runtime_error("SHA-256 failed");
    }
}

std::string thinking_signer::sign(std::string_view thinking) const {
    const auto mac = mac_of(key_, thinking);
    std::string raw(reinterpret_cast<const char *>(mac.data()), mac_bytes);
    raw.append(thinking);
    return base64_encode(raw);
}

std::optional<std::string> thinking_signer::open(std::string_view signature) const {
    const auto raw = base64_decode(signature);
    if (!raw || raw->size() < mac_bytes) {
        return std::nullopt;
    }
    std::string text = raw->substr(mac_bytes);
    const auto mac = mac_of(key_, text);
    if (CRYPTO_memcmp(mac.data(), raw->data(), mac_bytes) != 0) {
        return std::nullopt;
    }
    return text;
}

}  // namespace lineage::server
