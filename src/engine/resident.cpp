#include "engine/resident.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#if defined(__SANITIZE_THREAD__)
#define LINEAGE_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LINEAGE_UNDER_TSAN 1
#endif
#endif
#ifndef LINEAGE_UNDER_TSAN
#define LINEAGE_UNDER_TSAN 0
#endif

namespace lineage::engine {

namespace {

// Not instrumented by the sanitizers: the pages scanned may lie in an allocator's region that
// ASan keeps poisoned (redzones, freed chunks), which is memory of this process all the same.
__attribute__((no_sanitize("address", "thread"), noinline)) bool all_zero(const unsigned char * p, size_t n) {
    // 8 bytes at a time; page-aligned p and n a multiple of the page size.
    const auto * w = reinterpret_cast<const uint64_t *>(p);
    uint64_t acc = 0;
    for (size_t i = 0; i < n / sizeof(uint64_t); ++i) {
        acc |= w[i];
        if ((i & 63) == 63 && acc != 0) {
            return false;
        }
    }
    return acc == 0;
}

/** The mappings of /proc/self/maps (lines "start-end perms offset dev inode [name]", the name
 *  running to the end of the line) that `keep(perms, inode, name)` accepts; empty where /proc is
 *  not readable. */
template <class Keep>
std::vector<mapping> mappings_where(Keep keep) {
    std::vector<mapping> out;
    std::ifstream in("/proc/self/maps");
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream ls(line);
        std::string range, perms, offset, dev, inode, name;
        if (!(ls >> range >> perms >> offset >> dev >> inode)) {
            continue;
        }
        std::getline(ls >> std::ws, name);
        const size_t dash = range.find('-');
        if (dash == std::string::npos || !keep(perms, inode, name)) {
            continue;
        }
        out.push_back({static_cast<uintptr_t>(std::stoull(range.substr(0, dash), nullptr, 16)),
                       static_cast<uintptr_t>(std::stoull(range.substr(dash + 1), nullptr, 16)),
                       static_cast<uint64_t>(std::stoull(offset, nullptr, 16))});
    }
    return out;
}

/** The read-only shared mappings of the file at `path` (/proc/self/maps lines "r--s" naming it, as
 *  llama.cpp maps a model); empty when the path does not resolve or nothing maps it. */
std::vector<mapping> file_mappings(const std::string & path) {
    std::error_code ec;
    const std::string want = std::filesystem::canonical(path, ec).string();
    if (ec) {
        return {};
    }
    return mappings_where([&want](const std::string & perms, const std::string &, const std::string & name) {
        return perms == "r--s" && name == want;
    });
}

}  // namespace

std::vector<mapping> anonymous_mappings() {
    return mappings_where([](const std::string & perms, const std::string & inode, const std::string & name) {
        return perms == "rw-p" && inode == "0" && name.empty();
    });
}

std::vector<mapping> new_mappings(const std::vector<mapping> & before, const std::vector<mapping> & after,
                                  size_t min_bytes) {
    std::vector<mapping> out;
    for (const auto & m : after) {
        if (m.end - m.start < min_bytes) {
            continue;
        }
        bool seen = false;
        for (const auto & b : before) {
            seen = seen || b == m;
        }
        if (!seen) {
            out.push_back(m);
        }
    }
    return out;
}

uint64_t release_zero_pages(uintptr_t start, uintptr_t end) {
#if LINEAGE_UNDER_TSAN
    // TSan's runtime has a thread of its own that writes to its internal mappings, some of which
    // may be new since the caller's snapshot: no page is given back under it.
    (void)start;
    (void)end;
    return 0;
#endif
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    start = (start + page - 1) / page * page;
    end = end / page * page;
    if (end <= start) {
        return 0;
    }
    // Which pages are resident, before the scan reads them (reading an untouched page maps the
    // kernel's zero page, which mincore would then report as resident).
    std::vector<unsigned char> in_core((end - start) / page);
    if (mincore(reinterpret_cast<void *>(start), end - start, in_core.data()) != 0) {
        return 0;
    }
    uint64_t released = 0;
    uintptr_t run = 0;  // start of the current run of resident zero pages; 0 = none
    const auto flush = [&](uintptr_t upto) {
        if (run != 0 && upto > run && madvise(reinterpret_cast<void *>(run), upto - run, MADV_DONTNEED) == 0) {
            released += upto - run;
        }
        run = 0;
    };
    for (uintptr_t p = start; p < end; p += page) {
        // A page that is not resident is neither read nor given back: reading it would fault in
        // the zero page (or a swapped-out page: its bytes are not known to be zero), and there is
        // no RSS to give back. Reading them was ~2 s of bench-qwen35's start on the 2-core machine
        // (perf: the scan and its page faults, ~30% of the start's samples): ready in 2.7-2.8 s
        // instead of 4.8-5.3 s, llama-server in 2.6-2.7 s (3 sequences of 16,384 tokens).
        if ((in_core[(p - start) / page] & 1) == 0) {
            flush(p);
            continue;
        }
        if (all_zero(reinterpret_cast<const unsigned char *>(p), page)) {
            if (run == 0) {
                run = p;
            }
        } else {
            flush(p);
        }
    }
    flush(end);
    return released;
}

uint64_t resident_bytes() {
    std::ifstream in("/proc/self/statm");
    uint64_t size = 0, resident = 0;
    if (!(in >> size >> resident)) {
        return 0;
    }
    return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

uint64_t unmap_file_pages(const std::string & path) {
    const std::vector<mapping> maps = file_mappings(path);
    if (maps.empty()) {
        return 0;
    }
    const uint64_t before = resident_bytes();
    for (const auto & m : maps) {
        (void) madvise(reinterpret_cast<void *>(m.start), m.end - m.start, MADV_DONTNEED);
    }
    const uint64_t after = resident_bytes();
    return before > after ? before - after : 0;
}

uint64_t map_file_ranges(const std::string & path, const std::vector<file_range> & ranges) {
    const std::vector<mapping> maps = file_mappings(path);
#ifndef MADV_POPULATE_READ
    constexpr int MADV_POPULATE_READ = 22;  // Linux 5.14 (include/uapi/asm-generic/mman-common.h)
#endif
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uint64_t before = resident_bytes();
    for (const auto & m : maps) {
        for (const auto & r : ranges) {
            // The part of [r.begin, r.end) this mapping holds, as addresses, widened to whole pages.
            const uint64_t lo = std::max(r.begin, m.offset);
            const uint64_t hi = std::min(r.end, m.offset + (m.end - m.start));
            if (lo >= hi) {
                continue;
            }
            const uintptr_t a = (m.start + (lo - m.offset)) / page * page;
            const uintptr_t b = std::min<uintptr_t>(m.end, (m.start + (hi - m.offset) + page - 1) / page * page);
            if (madvise(reinterpret_cast<void *>(a), b - a, MADV_POPULATE_READ) == 0) {
                continue;
            }
            // An older kernel (EINVAL): one read a page maps the same pages, a fault each.
            unsigned char sum = 0;
            for (uintptr_t p = a; p < b; p += page) {
                sum ^= *reinterpret_cast<const volatile unsigned char *>(p);
            }
            (void)sum;
        }
    }
    const uint64_t after = resident_bytes();
    return after > before ? after - before : 0;
}

}  // namespace lineage::engine
