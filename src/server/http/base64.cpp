// server::base64: the strict check, then OpenSSL's block codec (see base64.h).
#include "server/http/base64.h"

#include <openssl/evp.h>

namespace lineage::server {

namespace {

constexpr size_t max_text = size_t{1} << 30;  // EVP_*Block take int lengths

bool in_alphabet(char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/';
}

}  // namespace

std::string base64_encode(std::string_view raw) {
    std::string out(4 * ((raw.size() + 2) / 3) + 1, '\0');
    const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char *>(out.data()),
                                  reinterpret_cast<const unsigned char *>(raw.data()), static_cast<int>(raw.size()));
    out.resize(static_cast<size_t>(n));
    return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
    if (text.empty() || text.size() % 4 != 0 || text.size() > max_text) {
        return std::nullopt;
    }
    size_t pad = 0;
    if (text.back() == '=') {
        pad = text[text.size() - 2] == '=' ? 2 : 1;
    }
    for (size_t i = 0; i < text.size() - pad; ++i) {
        if (!in_alphabet(text[i])) {
            return std::nullopt;
        }
    }
    std::string out(3 * (text.size() / 4) + 1, '\0');
    const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char *>(out.data()),
                                  reinterpret_cast<const unsigned char *>(text.data()), static_cast<int>(text.size()));
    if (n < 0) {
        return std::nullopt;
    }
    // EVP_DecodeBlock decodes the padding as zero bytes: 3 per 4 characters.
    out.resize(static_cast<size_t>(n) - pad);
    return out;
}

}  // namespace lineage::server
