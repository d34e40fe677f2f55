// libFuzzer target: the tier-2 index loader (cache/tier/disk/disk_index.h). Any input is a
// candidate index.sqlite: opening and scanning it must never crash or throw anything but
// index_damaged (the tier then moves it aside), and every row it accepts must satisfy the
// checks the tier relies on (tokens, history, checkpoints within the file, ids in range).
// Build and run: docs/prompt-cache.md "Security and failure model" (LINEAGE_FUZZ=ON).
// With LINEAGE_FUZZ_SEEDS=DIR set, writes the seed corpus to DIR and exits.
#include "cache/tier/disk/disk_index.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <sqlite3.h>
#include <unistd.h>

using namespace lineage::cache;

namespace {

void remove_index(const std::string & path) {
    std::error_code ec;
    for (const char * ext : {"", "-wal", "-shm", "-journal"}) {
        std::filesystem::remove(path + ext, ec);
    }
}

/** An index with a sound row, a row of another model, one of an older format, and (without
 *  the schema's constraints) one with NULLs. */
void write_seed(const std::string & path, bool damaged) {
    remove_index(path);
    {
        disk_index idx(path);
        copy_record r;
        r.model = "model-a";
        r.bucket = "bucket-1";
        r.session = "s1";
        r.tenant = "alice";
        r.toks = {1, 2, 3, 4, 5, 6, 7, 8};
        r.history = 6;
        r.checkpoints = {{3, point_kind::turn, nullptr}, {7, point_kind::guard, nullptr}};
        idx.insert(1, r, 4096, 1.5);
        r.model = "model-b";
        idx.insert(2, r, 4096, 2.5);
    }
    sqlite3 * db = nullptr;
    sqlite3_open(path.c_str(), &db);
    const char * sql = damaged ? "INSERT INTO files SELECT 3, model, 1, bucket, session, n_tokens, history, anchor, "
                                 "checkpoints, bytes, last_use, created, tokens, tenant FROM files WHERE id = 1; "
                                 "PRAGMA wal_checkpoint(TRUNCATE);"
                               : "PRAGMA wal_checkpoint(TRUNCATE);";
    sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
    sqlite3_exec(db, "PRAGMA journal_mode=DELETE;", nullptr, nullptr, nullptr);
    sqlite3_close(db);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    if (const char * dir = std::getenv("LINEAGE_FUZZ_SEEDS")) {
        write_seed(std::string(dir) + "/seed-0", false);
        write_seed(std::string(dir) + "/seed-1", true);
        std::exit(0);
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    static const std::string path = "/tmp/lineage-fuzz-index-" + std::to_string(::getpid()) + ".sqlite";
    remove_index(path);
    {
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        f.write(reinterpret_cast<const char *>(data), static_cast<std::streamsize>(size));
    }
    try {
        disk_index idx(path);
        const index_scan sc = idx.scan("model-a");
        for (const auto & f : sc.files) {
            const auto n = static_cast<int32_t>(f.toks.size());
            if (f.id < 1 || f.id > max_copy_id || n < 1 || f.history < -1 || f.history > n || f.bytes == 0) {
                __builtin_trap();
            }
            for (size_t i = 0; i < f.checkpoints.size(); ++i) {
                const auto & c = f.checkpoints[i];
                if (c.n_tokens < 1 || c.n_tokens >= n || (i > 0 && c.n_tokens <= f.checkpoints[i - 1].n_tokens)) {
                    __builtin_trap();
                }
            }
        }
    } catch (const index_damaged &) {
        // the tier moves such an index aside and rebuilds it
    }
    remove_index(path);
    return 0;
}
