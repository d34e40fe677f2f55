// engine::resident: gives the all-zero pages of freshly allocated engine buffers back to the
// kernel, so that the KV cache and recurrent-state buffers count in RSS only as far as tokens are
// written into them.
// Why: llama.cpp allocates the KV buffer of every sequence at its whole context (--ctx-size
// tokens) and clears it with memset, which makes every page resident at startup: on bench-qwen35
// three sequences of 16,384 tokens are ~300 MiB of RSS before the first request, though an agent
// conversation of 4k tokens writes a quarter of its sequence's cells. A private anonymous page
// given back with madvise(MADV_DONTNEED) reads as zero again (madvise(2)), so giving back a page
// that is all zero changes no byte the program can read; the page is faulted in (zero-filled)
// when a token is first written to it.
// Only the CPU's own buffers: on a GPU the KV cache is device memory, and host buffers there may
// be pinned (mlock'd pages cannot be given back).
// Under ThreadSanitizer nothing is given back (its runtime's own thread writes to mappings that
// may be new).
// Thread safety: release_zero_pages() must not race with writers of the mappings it scans (a
// write between the zero check of a page and its madvise would be lost): call it right after the
// buffers are allocated, before any other thread has their addresses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lineage::engine {

/** One mapping of this process's address space: [start, end), bytes. */
struct mapping {
    uintptr_t start = 0;
    uintptr_t end = 0;
    uint64_t offset = 0;  ///< of a file mapping: the file offset mapped at `start`, bytes
    bool operator==(const mapping & o) const { return start == o.start && end == o.end; }
};

/** The private anonymous read-write mappings of this process now (/proc/self/maps lines with
 *  "rw-p", inode 0 and no name: malloc's large blocks, mmap(MAP_PRIVATE|MAP_ANONYMOUS)); empty
 *  where /proc is not readable. The main heap ("[heap]") and thread stacks are named or
 *  excluded. */
std::vector<mapping> anonymous_mappings();

/** Of `after`, the mappings not in `before` (by start and end) of at least `min_bytes`. */
std::vector<mapping> new_mappings(const std::vector<mapping> & before, const std::vector<mapping> & after,
                                  size_t min_bytes);

/** Gives back (madvise MADV_DONTNEED) every resident page of [start, end) whose bytes are all
 *  zero; the range is shrunk to whole pages. Pages that are not resident (mincore) are neither
 *  read (a read would fault each in) nor given back. Returns the bytes given back, i.e. what RSS
 *  fell by: a multiple of the page size; pages never touched count 0, and so do pages where
 *  madvise fails (e.g. locked ones). The range must be private anonymous memory (a
 *  shared or file mapping would not read as zero afterwards). */
uint64_t release_zero_pages(uintptr_t start, uintptr_t end);

/** This process's resident set size now, bytes (/proc/self/statm); 0 where it cannot be read. */
uint64_t resident_bytes();

/** Unmaps from this process the resident pages of its read-only shared mappings of the file at
 *  `path` (madvise MADV_DONTNEED on the /proc/self/maps lines "r--s" that name it: llama.cpp maps
 *  the model file PROT_READ, MAP_SHARED). The pages stay in the page cache and a later read maps
 *  them again with the same bytes (a shared file mapping repopulates from the file: madvise(2)),
 *  so only RSS changes, until the weights are read again. Returns by how much RSS fell, bytes (0
 *  when the file is not mapped: --no-mmap; or its pages are locked: --mlock).
 *  Why: the scheduler's probe decode reads every weight just before llama.cpp clears the main
 *  context's KV buffers (memset, every page resident until release_zero_pages gives the zero
 *  ones back); unmapped, the weights are not resident at that moment, as in llama-server, which
 *  creates its context before its first decode, and the process's peak RSS is not the two
 *  together. */
uint64_t unmap_file_pages(const std::string & path);

/** A byte range of a file: [begin, end). */
struct file_range {
    uint64_t begin = 0;
    uint64_t end = 0;
};

/** Maps into this process the pages of its read-only shared mappings of the file at `path` that
 *  hold `ranges` (widened to whole pages; the kernel may map neighbouring pages of the page cache
 *  with them): madvise MADV_POPULATE_READ (Linux 5.14), on an older kernel one read a page. Pages
 *  in the page cache are mapped without reading the file. Returns by how much RSS rose, bytes (0
 *  when the file is not mapped).
 *  Why: after unmap_file_pages the first request's first pass mapped the weights again, a minor
 *  fault per 4 KiB page (bench-qwen35's first request: 22.8k page faults, 15.3-16.0k with them
 *  mapped at the start in ~105 ms, the rest its KV and compute buffer pages written for the first
 *  time; docs/architecture.md "KV pages resident as used"); llama-server, whose
 *  warm-up decode runs after its context is created, pays that before it is ready. The ranges are
 *  the weights every pass reads (engine::model::pass_weight_ranges): the whole file would add the
 *  token embeddings' unread rows, 132 MiB more RSS than the first requests make resident on
 *  bench-qwen35. Called once the context's zero pages are given back, it does not raise the peak. */
uint64_t map_file_ranges(const std::string & path, const std::vector<file_range> & ranges);

}  // namespace lineage::engine
