// cache::redis_format: how tier 3 (Redis, shared by replicas; docs/prompt-cache.md "Tier 3")
// lays an entry out in Redis. The entry's bytes are its copy_record (copy_record.h: header
// with identity, sections, XXH3-64 checksum), split into chunks under a size limit; each chunk
// has its own header (magic, version, index, count, total size, entry key) and checksum. An
// index entry ("meta") describes an entry without its states, so that a replica finds the
// longest restore point for a prompt without fetching blobs. Key names live under a namespace.
// Thread safety: pure functions on their arguments.
#pragma once

#include "cache/tier/copy_record.h"
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
/** Most tokens a replica's mirror holds (~4 bytes each: 1 GiB), oldest index entries dropped
 *  first past it: 65,536 index entries of up to 8 M tokens each (what anyone who can write to
 *  Redis could leave there) must not take a replica's memory. */
inline constexpr uint64_t redis_max_mirror_tokens = uint64_t{256} << 20;

/** Bounds on what a value read from Redis may declare, checked before it sizes anything (Redis
 *  is storage that anyone with write access can fill: docs/prompt-cache.md "Redis"):
 *  - a write sequence (the counter, an index score) is an integer in [1, 2^53] (a double, which
 *    a sorted set's score is, holds every such integer exactly);
 *  - a chunk holds at least --cache-redis-chunk-bytes' minimum (1 KiB) unless it is the last,
 *    and at most Redis's largest value (512 MiB);
 *  - an entry is at most 1 TiB and 1,048,576 chunks (a writer refuses to write more);
 *  - an index entry ("meta": ~4 bytes per token) is at most 32 MiB (8 M tokens). */
inline constexpr int64_t redis_max_sequence = int64_t{1} << 53;
inline constexpr uint64_t redis_min_chunk_bytes = 1024;
inline constexpr uint64_t redis_max_chunk_bytes = uint64_t{512} << 20;
inline constexpr uint64_t redis_max_payload_bytes = uint64_t{1} << 40;
inline constexpr uint32_t redis_max_chunks = 1u << 20;
inline constexpr uint64_t redis_max_meta_bytes = uint64_t{32} << 20;

/** The counter and index check and repair that both scripts below run first (KEYS[1] the
 *  counter, KEYS[2] the index, ARGV[1] redis_max_sequence), atomically: an index key of another
 *  type is deleted; a counter that is not a decimal integer in [0, ARGV[1]] (garbage, past 64
 *  bits, of another type) is set to the index's highest score within the bound plus 2^32 (so is
 *  a missing counter beside a non-empty index: evicted): past any sequence a replica can have
 *  read before the counter was lost, so that every replica reads what is written next (set to
 *  the highest score alone, the next writes took sequences that replicas had read already, and
 *  they never mirrored them); members scored above the counter (+inf, or past what was ever
 *  written) are removed. Leaves `n` (the counter), `fixed` (1: counter repaired,
 *  +2: index of another type deleted) and `removed` (members removed). So every member's score
 *  is at most the counter and a poll that reads (last, counter] never stops on a bad member. */
inline constexpr const char * redis_check_script =
    "local max = tonumber(ARGV[1]) "
    "local fixed = 0 "
    "local ty = redis.call('TYPE', KEYS[2]).ok "
    "if ty ~= 'zset' and ty ~= 'none' then redis.call('DEL', KEYS[2]) fixed = 2 end "
    "local raw = redis.pcall('GET', KEYS[1]) "
    "local n = nil "
    "if type(raw) == 'string' and #raw <= 16 and string.match(raw, '^%d+$') then "
    "  n = tonumber(raw) if n > max then n = nil end "
    "end "
    "if n == nil then "
    "  local t = redis.call('ZREVRANGEBYSCORE', KEYS[2], ARGV[1], '-inf', 'WITHSCORES', 'LIMIT', 0, 1) "
    "  n = 0 "
    "  local top = tonumber(t[2] or '') "
    "  if top ~= nil and top > 0 then n = math.floor(top) end "
    "  if raw ~= false or n > 0 then "
    "    n = math.min(n + 4294967296, max) "
    "    redis.call('DEL', KEYS[1]) redis.call('SET', KEYS[1], string.format('%.17g', n)) "
    "    if raw ~= false then fixed = fixed + 1 end "
    "  end "
    "end "
    "local removed = redis.call('ZREMRANGEBYSCORE', KEYS[2], '(' .. string.format('%.17g', n), '+inf') ";

/** Checks and repairs the counter and index (redis_check_script), then adds entry key ARGV[2]
 *  to the index scored by the next sequence number and trims the index to the newest ARGV[3]
 *  entries, atomically (a script runs alone in Redis): a replica that reads sequence n finds
 *  every index entry scored up to n. A counter at the bound starts the index over. Returns
 *  {n, fixed, removed}. */
inline const std::string redis_index_script = std::string(redis_check_script) +
    "if n >= max then redis.call('DEL', KEYS[2]) n = 0 fixed = fixed + 4 end "
    "n = n + 1 "
    "redis.call('SET', KEYS[1], string.format('%.17g', n)) "
    "redis.call('ZADD', KEYS[2], string.format('%.17g', n), ARGV[2]) "
    "redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(tonumber(ARGV[3]) + 1)) "
    "return {n, fixed, removed}";

/** A poll's first step: checks and repairs the counter and index (redis_check_script); returns
 *  {n, fixed, removed}, n the counter every index score is at most. */
inline const std::string redis_poll_script = std::string(redis_check_script) + "return {n, fixed, removed}";

/** A sorted-set score as Redis writes it ("5", "inf", "-inf", "1.5e+20"), if it is a write
 *  sequence: an integer in [1, redis_max_sequence]; nullopt for anything else. */
std::optional<int64_t> parse_redis_sequence(std::string_view score);

/** Whether `ek` has the shape of an entry key (redis_entry_key: 32 lowercase hex digits): an
 *  index member of another shape names no entry and is not looked up. */
bool valid_redis_entry_key(std::string_view ek);

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
    copy_record rec;  ///< full and checkpoints' states empty
};

/** Layout: magic[8] u32 version u64 payload_bytes u32 n_chunks, then encode_copy_record() of
 *  `rec` with its states left out. */
std::string encode_redis_meta(uint64_t payload_bytes, uint32_t n_chunks, const copy_record & rec);
/** Reads a meta; `model` must be the record's (else error other_model). Errors as
 *  decode_copy_record's (bad_magic, other_format, truncated, corrupt); corrupt too when the
 *  payload size and chunk count cannot describe a chunked entry (check_redis_geometry). */
tier_load_result decode_redis_meta(std::string_view bytes, const std::string & model, redis_meta & out);

/** Splits `payload` into chunks of at most `chunk_bytes` payload bytes each (REQUIRES:
 *  chunk_bytes > 0; an empty payload gives one empty chunk). Chunk layout (little-endian):
 *  magic[8] u32 version u32 index u32 count u64 total_bytes u32 len + entry key u32 data_len
 *  data, then u64 XXH3-64 of everything before it: 40 + |ek| + data_len bytes. */
std::vector<std::string> split_chunks(std::string_view ek, std::string_view payload, uint64_t chunk_bytes);

/** Whether `n_chunks` chunks can hold `payload_bytes` as split_chunks splits them with some
 *  chunk size in [redis_min_chunk_bytes, redis_max_chunk_bytes], within redis_max_chunks and
 *  redis_max_payload_bytes; "" when they can, else what is wrong. */
std::string check_redis_geometry(uint64_t payload_bytes, uint32_t n_chunks);

/** Checks chunk `i` read back (`raw`) of entry `ek`, described by its meta as `payload_bytes` in
 *  `n_chunks` chunks: its checksum, then its header (version, index i, count, total size, entry
 *  key), then its data length: chunk 0's sets the chunk size (split_chunks: every chunk but the
 *  last holds exactly as much, the last the rest), which must give exactly `n_chunks` for
 *  `payload_bytes`; a later chunk must hold `chunk_size` bytes (the rest, for the last).
 *  `chunk_size`: set from chunk 0 (i == 0), read for i > 0. On success `data` views the chunk's
 *  data inside `raw`. Errors: truncated, bad_magic, corrupt (checksum, sizes), other_format,
 *  identity (a sound chunk of another entry, index, count, size or chunk size). */
tier_load_result check_chunk(std::string_view ek, uint64_t payload_bytes, uint32_t n_chunks, uint32_t i,
                             std::string_view raw, uint64_t & chunk_size, std::string_view & data);

/** Bytes a chunk of entry `ek` holds besides its data (header, key, checksum): 44 + |ek|. */
inline uint64_t redis_chunk_overhead(std::string_view ek) {
    return 44 + ek.size();
}

/** Joins chunks read back (nullopt: the key was missing) into the payload, checking each with
 *  check_chunk. Errors: missing (a chunk absent: evicted or flushed), check_chunk's. */
tier_load_result join_chunks(std::string_view ek, uint64_t payload_bytes, uint32_t n_chunks,
                             const std::vector<std::optional<std::string>> & chunks, std::string & payload);

}  // namespace lineage::cache
