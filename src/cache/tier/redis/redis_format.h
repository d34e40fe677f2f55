// cache::redis_format: how tier 3 (Redis, shared by replicas; docs/prompt-cache.md "Tier 3")
// lays an entry out in Redis. The entry's bytes are the disk format's (disk_format.h: header
// with identity, sections, XXH3-64 checksum), split into chunks under a size limit; each chunk
// has its own header (magic, version, index, count, total size, entry key) and checksum. An
// index entry ("meta") describes an entry without its states, so that a replica finds the
// longest restore point for a prompt without fetching blobs. Key names live under a namespace.
// Thread safety: pure functions on their arguments.
#pragma once

#include "cache/tier/disk/disk_format.h"
#include "cache/types.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lineage::cache {

/** Chunk magic (8 bytes) and meta magic; the version covers both layouts. */
inline constexpr char redis_chunk_magic[8] = {'L', 'N', 'G', 'C', 'H', 'U', 'N', 'K'};
inline constexpr char redis_meta_magic[8] = {'L', 'N', 'G', 'R', 'M', 'E', 'T', 'A'};
inline constexpr uint32_t redis_format_version = 1;
/** Most index entries kept (the index sorted set is trimmed to it by every writer, and each
 *  replica's mirror of it likewise): a bound on the index's and the mirrors' memory. */
inline constexpr int64_t redis_max_index = 65536;

/** Adds entry key ARGV[1] to the index KEYS[2] scored by the next sequence number (INCR KEYS[1])
 *  and trims the index to the newest ARGV[2] entries, atomically (a script runs alone in Redis):
 *  a replica that reads sequence n finds every index entry scored up to n. Returns n. */
inline constexpr const char * redis_index_script =
    "local n = redis.call('INCR', KEYS[1]) "
    "redis.call('ZADD', KEYS[2], n, ARGV[1]) "
    "redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(tonumber(ARGV[2]) + 1)) "
    "return n";

/** Key names of one namespace (--cache-redis-namespace). Shapes:
 *  `<ns>:seq` (INCR counter), `<ns>:index` (sorted set: entry key scored by write sequence, both
 *  written by redis_index_script),
 *  `<ns>:meta:<ek>` (string: encode_redis_meta), `<ns>:chunk:<ek>:<i>` (string: a chunk). */
struct redis_keys {
    std::string ns;
    std::string seq() const { return ns + ":seq"; }
    std::string index() const { return ns + ":index"; }
    std::string meta(std::string_view ek) const { return ns + ":meta:" + std::string(ek); }
    std::string chunk(std::string_view ek, uint32_t i) const {
        return ns + ":chunk:" + std::string(ek) + ":" + std::to_string(i);
    }
};

/** The entry key: hex XXH3-128 (32 characters) of the model fingerprint, the bucket digest and
 *  the tokens. Content-addressed: two replicas writing the same entry write the same keys. */
std::string redis_entry_key(const std::string & model, const std::string & bucket, const tokens & toks);

/** An index entry: the entry's payload size and chunk count, and its record without states
 *  (identity, tokens, restore points' lengths and kinds). */
struct redis_meta {
    uint64_t payload_bytes = 0;
    uint32_t n_chunks = 0;
    disk_record rec;  ///< full and checkpoints' states empty
};

/** Layout: magic[8] u32 version u64 payload_bytes u32 n_chunks, then encode_disk_record() of
 *  `rec` with its states left out. */
std::string encode_redis_meta(uint64_t payload_bytes, uint32_t n_chunks, const disk_record & rec);
/** Reads a meta; `model` must be the record's (else error other_model). Errors as
 *  decode_disk_record's (bad_magic, other_format, truncated, corrupt). */
tier_load_result decode_redis_meta(std::string_view bytes, const std::string & model, redis_meta & out);

/** Splits `payload` into chunks of at most `chunk_bytes` payload bytes each (REQUIRES:
 *  chunk_bytes > 0; an empty payload gives one empty chunk). Chunk layout (little-endian):
 *  magic[8] u32 version u32 index u32 count u64 total_bytes u32 len + entry key u32 data_len
 *  data, then u64 XXH3-64 of everything before it: 40 + |ek| + data_len bytes. */
std::vector<std::string> split_chunks(std::string_view ek, std::string_view payload, uint64_t chunk_bytes);

/** Joins chunks read back (nullopt: the key was missing) into the payload, checking each
 *  chunk's checksum, then that its index, count, total size and entry key are those expected.
 *  Errors: missing (a chunk absent: evicted or flushed), bad_magic / truncated / corrupt (a
 *  chunk's bytes), identity (a sound chunk of another entry, index or size). */
tier_load_result join_chunks(std::string_view ek, uint64_t payload_bytes, uint32_t n_chunks,
                             const std::vector<std::optional<std::string>> & chunks, std::string & payload);

}  // namespace lineage::cache
