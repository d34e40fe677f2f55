// cache::disk_format: the tier-2 (disk) blob file of one cache entry (docs/prompt-cache.md "Disk
// tier"): a header (magic, format version, its identity: file id, model fingerprint, key digest,
// session, tenant, token count and token digest; then section sizes), the sections (tokens, whole
// state, checkpoints) and an XXH3-64 checksum of everything before it. A file is written under a
// temporary name, fsync'd and renamed, so a crash leaves either the old file, no file, or a
// *.tmp the disk tier deletes at startup. Readers open regular files only (O_NOFOLLOW,
// O_NONBLOCK, fstat) and check every declared size against the file's size before allocating.
// Thread safety: pure functions on their arguments (the disk thread calls them).
#pragma once

#include "cache/types.h"
#include "util/status.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lineage::cache {

/** File magic, 8 bytes. */
inline constexpr char disk_magic[8] = {'L', 'N', 'G', 'C', 'A', 'C', 'H', 'E'};
/** Format version of the file layout and of the engine's state blobs inside it (the engine
 *  pin: llama.cpp 80fb11ac). Bump it when either changes: older files are then discarded
 *  (counted), newer ones left alone. 2: the header carries the file id and a token digest.
 *  3: and the key's tenant (a tenant's reset deletes its files). */
inline constexpr uint32_t disk_format_version = 3;

/** One entry as stored on disk. */
struct disk_record {
    copy_id id = 0;             ///< the file's id in the index (its name is <id>.lcache)
    std::string model;          ///< model fingerprint (model_fingerprint())
    std::string bucket;         ///< the key's bucket digest (hex)
    std::string session;        ///< the key's session ("" = anonymous)
    std::string tenant;         ///< the key's tenant ("" without API keys); also inside `bucket`
    tokens toks;                ///< the tokens whose state `full` holds
    int32_t history = -1;       ///< history boundary of the prompt that made it (-1: unknown)
    bool anchor = false;        ///< a pinned anchor (system prompt + tools)
    blob_ptr full;              ///< whole sequence state at toks.size() (KV + recurrent)
    std::vector<checkpoint> checkpoints;  ///< recurrent-only states at earlier lengths, ascending
};

/** XXH3-64 of the tokens' bytes (the header's token digest). */
uint64_t tokens_digest(const tokens & t);

/** Bytes the file of `r` takes: header + sections + 8-byte checksum. */
uint64_t disk_file_size(const disk_record & r);

/** Writes `r` to `path` (creating or truncating it; a symlink there is refused) and fsyncs it.
 *  On failure the status says why (errno text); a partial file is left for the caller to remove. */
util::status write_disk_file(const std::string & path, const disk_record & r);

/** Why a file was not loaded. `identity`: a sound file that is not the one its index row or the
 *  request names (another id, bucket, session or tokens: e.g. files swapped); `not_regular`: a
 *  symlink, FIFO, directory or device in place of a file. */
enum class tier_load_error {
    none, missing, truncated, bad_magic, other_format, other_model, corrupt, io, identity, not_regular
};

const char * to_string(tier_load_error e);

struct tier_load_result {
    tier_load_error error = tier_load_error::none;
    std::string detail;              ///< one line for the log
    std::optional<disk_record> record;
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

/** Reads and verifies the file at `path`: a regular file (not followed through a symlink, not
 *  blocking on a FIFO), magic, format version, model fingerprint equal to `model`, declared
 *  section sizes adding up to the file's size (checked before any allocation), the token
 *  digest, the checksum. On any failure `record` is empty and `error` says why; never throws
 *  for what the file holds. Keeps in `record` only the checkpoints `keep` names. */
tier_load_result read_disk_file(const std::string & path, const std::string & model,
                                const checkpoint_filter & keep = {});

/** Reads and checks the header only (the checks above up to the sizes; `record` holds the
 *  identity, the header fields and the checkpoints' lengths and kinds, no states; `n_tokens`,
 *  `digest` are set), for the startup scan; `with_tokens` also reads the tokens and checks them
 *  against the digest. */
tier_load_result read_disk_header(const std::string & path, bool with_tokens = false);

/** The bytes write_disk_file() writes for `r` (tier 3 stores them in Redis, chunked:
 *  redis_format.h). Throws std::bad_alloc when memory runs out. */
std::string encode_disk_record(const disk_record & r);

/** Reads and verifies `bytes` as read_disk_file() reads a file (same checks, same errors; a
 *  record encoded without states, as tier 3's index entries are, reads back with empty ones). */
tier_load_result decode_disk_record(std::string_view bytes, const std::string & model);

/** Fingerprint of a model file: XXH3-128 over its size and its first and last 16 MiB, hex
 *  (32 characters). Cheap on multi-GiB files; a different GGUF (weights, vocab, metadata)
 *  changes it. Throws std::runtime_error when the file cannot be read. */
std::string model_fingerprint(const std::string & path);

}  // namespace lineage::cache
