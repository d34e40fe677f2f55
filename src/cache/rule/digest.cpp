// cache::digest: SHA-256 (OpenSSL EVP) and XXH3-128 (libxxhash) behind one incremental hasher.
#include "cache/rule/digest.h"

#include <openssl/evp.h>
#include <xxhash.h>

#include <stdexcept>

namespace lineage::cache {

std::string_view to_string(hash_algo a) {
    return a == hash_algo::sha256 ? "sha256" : "xxh3";
}

std::optional<hash_algo> parse_hash_algo(std::string_view s) {
    if (s == "sha256") {
        return hash_algo::sha256;
    }
    if (s == "xxh3") {
        return hash_algo::xxh3;
    }
    return std::nullopt;
}

struct hasher::state {
    EVP_MD_CTX * md = nullptr;
    XXH3_state_t * xx = nullptr;
    ~state() {
        if (md != nullptr) {
            EVP_MD_CTX_free(md);
        }
        if (xx != nullptr) {
            XXH3_freeState(xx);
        }
    }
};

hasher::hasher(hash_algo a) : algo_(a), st_(std::make_unique<state>()) {
    if (a == hash_algo::sha256) {
        st_->md = EVP_MD_CTX_new();
        if (st_->md == nullptr || EVP_DigestInit_ex(st_->md, EVP_sha256(), nullptr) != 1) {
            throw std::runtime_error("SHA-256 unavailable (OpenSSL EVP)");
        }
    } else {
        st_->xx = XXH3_createState();
        if (st_->xx == nullptr || XXH3_128bits_reset(st_->xx) != XXH_OK) {
            throw std::runtime_error("XXH3 state allocation failed");
        }
    }
}

hasher::~hasher() = default;

void hasher::raw(std::string_view s) {
    if (s.empty()) {
        return;
    }
    const bool ok = algo_ == hash_algo::sha256 ? EVP_DigestUpdate(st_->md, s.data(), s.size()) == 1
                                               : XXH3_128bits_update(st_->xx, s.data(), s.size()) == XXH_OK;
    if (!ok) {
        throw std::runtime_error(std::string(to_string(algo_)) + " update failed");
    }
}

void hasher::u64(uint64_t v) {
    char b[8];
    for (int i = 0; i < 8; ++i) {
        b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
    }
    raw(std::string_view(b, 8));
}

void hasher::field(std::string_view s) {
    u64(s.size());
    raw(s);
}

std::string hasher::bytes() {
    if (algo_ == hash_algo::sha256) {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int n = 0;
        if (EVP_DigestFinal_ex(st_->md, md, &n) != 1) {
            throw std::runtime_error("SHA-256 final failed");
        }
        return std::string(reinterpret_cast<const char *>(md), n);
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(st_->xx));
    return std::string(reinterpret_cast<const char *>(c.digest), sizeof(c.digest));
}

std::string hasher::hex() {
    return to_hex(bytes());
}

std::string to_hex(std::string_view b) {
    static const char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(b.size() * 2);
    for (unsigned char c : b) {
        out += digits[c >> 4];
        out += digits[c & 0xf];
    }
    return out;
}

}  // namespace lineage::cache
