// cache::digest: the named, swappable hash of the prompt cache (docs/architecture.md "Keys: one
// vocabulary"): SHA-256 (OpenSSL EVP; the default, a cryptographic digest, so that two different
// keys never collide in practice) or XXH3-128 (libxxhash; about an order of magnitude faster, not
// cryptographic). Used for the bucket digest and template_sig (--prompt-cache-hash) and for the APC
// block hash chains (--apc-hash). Fields are length-prefixed so that concatenations cannot collide.
// Thread safety: a hasher is a single-thread object; the free functions are reentrant.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace lineage::cache {

enum class hash_algo : uint8_t {
    sha256,  ///< 32-byte digest (OpenSSL EVP_sha256)
    xxh3,    ///< 16-byte digest (XXH3_128bits, libxxhash)
};

std::string_view to_string(hash_algo a);
/** "sha256" or "xxh3"; nullopt otherwise. */
std::optional<hash_algo> parse_hash_algo(std::string_view s);

/** Incremental digest. Throws std::runtime_error when the library fails (OpenSSL errors). */
class hasher {
public:
    explicit hasher(hash_algo a = hash_algo::sha256);
    ~hasher();
    hasher(const hasher &) = delete;
    hasher & operator=(const hasher &) = delete;

    /** Appends bytes as they are. */
    void raw(std::string_view s);
    /** Appends `v` as 8 bytes little-endian. */
    void u64(uint64_t v);
    /** Appends u64(size) then the bytes. */
    void field(std::string_view s);
    /** The digest (32 bytes for sha256, 16 for xxh3); the hasher is spent afterwards. */
    std::string bytes();
    /** bytes() as lowercase hex (64 or 32 characters). */
    std::string hex();

private:
    struct state;
    hash_algo algo_;
    std::unique_ptr<state> st_;
};

/** Lowercase hex of raw bytes. */
std::string to_hex(std::string_view b);

}  // namespace lineage::cache
