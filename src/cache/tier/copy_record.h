// cache::copy_record: one cache entry as every tier below RAM stores it (docs/prompt-cache.md
// "Tiers"): a header (magic, format version, its identity: copy id, model fingerprint, key digest,
// session, tenant, token count and token digest; then section sizes), the sections (tokens, whole
// state, checkpoints) and an XXH3-64 checksum of everything before it. The disk tier writes it as
// one file (disk/disk_format.h), tier 3 as checksummed chunks in Redis (redis/redis_format.h).
// Readers check every declared size against the bytes there are before allocating, and say why a
// copy was not loaded (tier_load_error) without throwing for what the bytes hold.
// Thread safety: pure functions on their arguments (a tier's worker thread calls them).
#pragma once

#include "cache/types.h"

#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lineage::cache {

/** Record magic, 8 bytes. */
inline constexpr char copy_magic[8] = {'L', 'N', 'G', 'C', 'A', 'C', 'H', 'E'};
/** Format version of the record layout and of the engine's state blobs inside it (the engine
 *  pin: llama.cpp 80fb11ac). Bump it when either changes: older copies are then discarded
 *  (counted), newer ones left alone. 2: the header carries the file id and a token digest.
 *  3: and the key's tenant (a tenant's reset deletes its files). */
inline constexpr uint32_t copy_format_version = 3;

/** One entry as a tier below RAM stores it (a disk file, a Redis entry's chunks). */
struct copy_record {
    copy_id id = 0;             ///< the copy's id in its tier's index (a disk file's name: <id>.lcache)
    std::string model;          ///< model fingerprint (model_fingerprint())
    std::string bucket;         ///< the key's bucket digest (hex)
    std::string session;        ///< the key's session ("" = anonymous)
    std::string tenant;         ///< the key's tenant ("" without API keys); also inside `bucket`
    tokens toks;                ///< the tokens whose state `full` holds
    int32_t history = -1;       ///< history boundary of the prompt that made it (-1: unknown)
    bool anchor = false;        ///< a pinned anchor (system prompt + tools)
    blob_ptr full;              ///< whole sequence state at toks.size() (KV + recurrent)
    /** When set, `full` is a patch over it (cache/blob_patch.h: a RAM entry held over its
     *  anchor's state); the copy written holds the whole state. Never set on a record read. */
    blob_ptr base;
    std::vector<checkpoint> checkpoints;  ///< recurrent-only states at earlier lengths, ascending
};

/** XXH3-64 of the tokens' bytes (the header's token digest). */
uint64_t tokens_digest(const tokens & t);

/** Why a copy was not loaded. `identity`: a sound copy that is not the one its index row or the
 *  request names (another id, bucket, session or tokens: e.g. files swapped); `not_regular` (disk): a
 *  symlink, FIFO, directory or device in place of a file. */
enum class tier_load_error {
    none, missing, truncated, bad_magic, other_format, other_model, corrupt, io, identity, not_regular
};

const char * to_string(tier_load_error e);

struct tier_load_result {
    tier_load_error error = tier_load_error::none;
    std::string detail;              ///< one line for the log
    std::optional<copy_record> record;
    uint32_t version = 0;            ///< the header's format version (0: not read)
    int32_t n_tokens = 0;            ///< the header's token count
    double seconds = 0;              ///< the tier worker's time for the read and its checks (tier_worker sets it)
    uint64_t digest = 0;             ///< the header's token digest
};

/** The checkpoints a read keeps: those of at most `up_to` tokens and the one at `at`. The others
 *  are read and checked all the same (the checksum covers every byte) through a small reused
 *  buffer, not into a new blob each: a restore of one ladder rung from an anchor's file then
 *  does not allocate the anchor's every rung (fresh memory costs a page fault per page: 91.9 MB
 *  read into fresh memory took 250-470 ms on the 2-core dev VM, through a reused 1 MiB buffer
 *  6-11 ms; docs/benchmarks/README.md "A file load keeps only the checkpoints its restore
 *  uses"). Default: all. */
struct checkpoint_filter {
    int32_t up_to = std::numeric_limits<int32_t>::max();
    int32_t at = -1;
    bool keeps(int32_t n_tokens) const { return n_tokens <= up_to || n_tokens == at; }
};

/** Bytes the encoding of `r` takes: header + sections + 8-byte checksum. */
uint64_t copy_record_size(const copy_record & r);

/** Writes the encoding of `r` to `f` (a file, a memory stream); false on a write error. */
bool write_copy_record(FILE * f, const copy_record & r);

/** Reads and verifies the `size` bytes readable from `f` as one record: magic, format version,
 *  model fingerprint equal to `model`, declared section sizes adding up to `size` (checked
 *  before any allocation), the token digest, the checksum. On any failure `record` is empty and
 *  `error` says why; never throws for what the bytes hold. Keeps in `record` only the
 *  checkpoints `keep` names. */
tier_load_result read_copy_record(FILE * f, uint64_t size, const std::string & model,
                                  const checkpoint_filter & keep = {});

/** Reads and checks the header only (the checks above up to the sizes; `record` holds the
 *  identity, the header fields and the checkpoints' lengths and kinds, no states; `n_tokens`,
 *  `digest` are set); `with_tokens` also reads the tokens and checks them against the digest. */
tier_load_result read_copy_header(FILE * f, uint64_t size, bool with_tokens = false);

/** The bytes write_copy_record() writes for `r` (tier 3 stores them in Redis, chunked:
 *  redis_format.h). Throws std::bad_alloc when memory runs out. */
std::string encode_copy_record(const copy_record & r);

/** Reads and verifies `bytes` as read_copy_record() reads a stream (same checks, same errors; a
 *  record encoded without states, as tier 3's index entries are, reads back with empty ones). */
tier_load_result decode_copy_record(std::string_view bytes, const std::string & model);

/** Fingerprint of a model file: XXH3-128 over its size and its first and last 16 MiB, hex
 *  (32 characters). Cheap on multi-GiB files; a different GGUF (weights, vocab, metadata)
 *  changes it. Throws std::runtime_error when the file cannot be read. */
std::string model_fingerprint(const std::string & path);

}  // namespace lineage::cache
