// Unit tests of cache::digest (SHA-256 and XXH3-128 known vectors, field framing) and
// cache::block_chain (chaining, partial blocks, the lockstep walk).
#include "cache/rule/block_chain.h"
#include "cache/rule/digest.h"

#include <gtest/gtest.h>

#include <numeric>

namespace lineage::cache {
namespace {

std::string digest_hex(hash_algo a, std::string_view s) {
    hasher h(a);
    h.raw(s);
    return h.hex();
}

TEST(Digest, KnownVectors) {
    EXPECT_EQ(digest_hex(hash_algo::sha256, "abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    // XXH3-128 of the empty input, canonical (big-endian high then low half) as in xxhsum -H2.
    EXPECT_EQ(digest_hex(hash_algo::xxh3, ""), "99aa06d3014798d86001c324468d497f");
    EXPECT_EQ(digest_hex(hash_algo::xxh3, "abc").size(), 32u);
}

TEST(Digest, FieldsAreLengthPrefixed) {
    hasher a(hash_algo::xxh3);
    a.field("ab");
    a.field("c");
    hasher b(hash_algo::xxh3);
    b.field("a");
    b.field("bc");
    EXPECT_NE(a.bytes(), b.bytes());
}

TEST(Digest, NamesParse) {
    EXPECT_EQ(parse_hash_algo("sha256"), hash_algo::sha256);
    EXPECT_EQ(parse_hash_algo("xxh3"), hash_algo::xxh3);
    EXPECT_EQ(parse_hash_algo("blake3"), std::nullopt);
    EXPECT_EQ(to_string(hash_algo::xxh3), "xxh3");
}

TEST(BlockChain, WholeBlocksChainedToTheRoot) {
    tokens t(50);
    std::iota(t.begin(), t.end(), 0);
    const auto c = block_chain("bucket", t, 16, static_cast<size_t>(-1), hash_algo::sha256);
    ASSERT_EQ(c.size(), 3u);  // 48 tokens in whole blocks; the last 2 are not hashed
    EXPECT_EQ(c[0].size(), 32u);
    // Another root, or one changed token, changes that block and every later one.
    EXPECT_EQ(agreeing_blocks(c, block_chain("other", t, 16, 100, hash_algo::sha256), 100), 0u);
    tokens u = t;
    u[20] = 999;
    const auto d = block_chain("bucket", u, 16, 100, hash_algo::sha256);
    EXPECT_EQ(agreeing_blocks(c, d, 100), 1u);
    EXPECT_NE(c[2], d[2]);
    // Tokens past the compared blocks do not matter; the walk stops at `limit` and at the end.
    u = t;
    u[49] = 999;
    EXPECT_EQ(agreeing_blocks(c, block_chain("bucket", u, 16, 100, hash_algo::sha256), 100), 3u);
    EXPECT_EQ(agreeing_blocks(c, c, 2), 2u);
    EXPECT_EQ(block_chain("bucket", t, 16, 2, hash_algo::xxh3).size(), 2u);
}

}  // namespace
}  // namespace lineage::cache
