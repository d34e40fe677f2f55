// server::reasoning_seal: AES-256-GCM with OpenSSL EVP, base64 framing.
#include "server/dialects/responses/reasoning_seal.h"

#include "server/http/base64.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <memory>
#include <stdexcept>
#include <vector>

namespace lineage::server {

namespace {

constexpr std::string_view prefix = "lnr1:";
constexpr int nonce_len = 12;
constexpr int tag_len = 16;

using ctx_ptr = std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)>;

}  // namespace

reasoning_seal::reasoning_seal(std::string key) : key_(std::move(key)) {
    if (key_.size() != 32) {
        throw std::invalid_argument("reasoning_seal: the key must be 32 bytes");
    }
}

std::string reasoning_seal::random_key() {
    std::string k(32, '\0');
    if (RAND_bytes(reinterpret_cast<unsigned char *>(k.data()), static_cast<int>(k.size())) != 1) {
        throw std::runtime_error("RAND_bytes failed");
    }
    return k;
}

std::string reasoning_seal::seal(std::string_view text) const {
    unsigned char nonce[nonce_len];
    if (RAND_bytes(nonce, nonce_len) != 1) {
        throw std::runtime_error("RAND_bytes failed");
    }
    ctx_ptr ctx(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free);
    std::string out(reinterpret_cast<const char *>(nonce), nonce_len);
    out.resize(nonce_len + text.size() + tag_len);
    auto * ct = reinterpret_cast<unsigned char *>(out.data()) + nonce_len;
    int len = 0;
    int fin = 0;
    if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, nonce_len, nullptr) != 1 ||
        EVP_EncryptInit_ex(ctx.get(), nullptr, nullptr, reinterpret_cast<const unsigned char *>(key_.data()), nonce) != 1 ||
        EVP_EncryptUpdate(ctx.get(), ct, &len, reinterpret_cast<const unsigned char *>(text.data()),
                          static_cast<int>(text.size())) != 1 ||
        EVP_EncryptFinal_ex(ctx.get(), ct + len, &fin) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, tag_len, ct + text.size()) != 1) {
        throw std::runtime_error("AES-256-GCM encryption failed");
    }
    return std::string(prefix) + base64_encode(out);
}

std::optional<std::string> reasoning_seal::open(std::string_view sealed) const {
    if (sealed.substr(0, prefix.size()) != prefix) {
        return std::nullopt;
    }
    const auto raw = base64_decode(sealed.substr(prefix.size()));
    if (!raw || raw->size() < static_cast<size_t>(nonce_len + tag_len)) {
        return std::nullopt;
    }
    const auto * data = reinterpret_cast<const unsigned char *>(raw->data());
    const size_t n = raw->size() - nonce_len - tag_len;
    std::string text(n, '\0');
    ctx_ptr ctx(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free);
    int len = 0;
    int fin = 0;
    std::vector<unsigned char> tag(data + nonce_len + n, data + raw->size());
    if (!ctx || EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, nonce_len, nullptr) != 1 ||
        EVP_DecryptInit_ex(ctx.get(), nullptr, nullptr, reinterpret_cast<const unsigned char *>(key_.data()), data) != 1 ||
        EVP_DecryptUpdate(ctx.get(), reinterpret_cast<unsigned char *>(text.data()), &len, data + nonce_len,
                          static_cast<int>(n)) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, tag_len, tag.data()) != 1 ||
        EVP_DecryptFinal_ex(ctx.get(), reinterpret_cast<unsigned char *>(text.data()) + len, &fin) != 1) {
        return std::nullopt;
    }
    return text;
}

}  // namespace lineage::server
