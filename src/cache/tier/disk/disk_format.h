// cache::disk_format: the tier-2 (disk) file of one cache entry (docs/prompt-cache.md "Disk
// tier"): the bytes of its copy_record (cache/tier/copy_record.h). A file is written under a
// temporary name, fsync'd and renamed, so a crash leaves either the old file, no file, or a
// *.tmp the disk tier deletes at startup. Readers open regular files only (O_NOFOLLOW,
// O_NONBLOCK, fstat) and check every declared size against the file's size before allocating.
// Thread safety: pure functions on their arguments (the disk thread calls them).
#pragma once

#include "cache/tier/copy_record.h"
#include "util/status.h"

#include <string>

namespace lineage::cache {

/** Writes `r` to `path` (creating or truncating it; a symlink there is refused) and fsyncs it.
 *  On failure the status says why (errno text); a partial file is left for the caller to remove. */
util::status write_disk_file(const std::string & path, const copy_record & r);

/** Reads and verifies the file at `path`: a regular file (not followed through a symlink, not
 *  blocking on a FIFO), then as read_copy_record(): magic, format version, model fingerprint equal to `model`, declared
 *  section sizes adding up to the file's size (checked before any allocation), the token
 *  digest, the checksum. On any failure `record` is empty and `error` says why; never throws
 *  for what the file holds. Keeps in `record` only the checkpoints `keep` names. */
tier_load_result read_disk_file(const std::string & path, const std::string & model,
                                const checkpoint_filter & keep = {});

/** Reads and checks the header only (read_copy_header() on a regular file; `record` holds the
 *  identity, the header fields and the checkpoints' lengths and kinds, no states; `n_tokens`,
 *  `digest` are set), for the startup scan; `with_tokens` also reads the tokens and checks them
 *  against the digest. */
tier_load_result read_disk_header(const std::string & path, bool with_tokens = false);

}  // namespace lineage::cache
