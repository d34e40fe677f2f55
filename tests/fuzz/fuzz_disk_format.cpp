// libFuzzer target: the tier-2 blob file reader (cache/tier/disk/disk_format.h). Any input is a
// candidate blob file: the reader must never crash, hang, allocate before checking a declared
// size, or throw; and a file it accepts must be exactly what the writer makes of the record it
// returned (re-written byte for byte), so nothing the checks let through is misread.
// Build and run: docs/prompt-cache.md "Security and failure model" (LINEAGE_FUZZ=ON).
// With LINEAGE_FUZZ_SEEDS=DIR set, writes the seed corpus to DIR and exits.
#include "cache/tier/disk/disk_format.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include <unistd.h>

using namespace lineage::cache;

namespace {

std::string tmp_path(const char * what) {
    return "/tmp/lineage-fuzz-" + std::to_string(::getpid()) + "-" + what;
}

std::string read_all(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

copy_record seed_record(int n, size_t full, int n_cps) {
    copy_record r;
    r.id = 7;
    r.model = "model-a";
    r.bucket = "bucket-1";
    r.session = n % 2 ? "s1" : "";
    r.tenant = n > 20 ? "tenant-b" : "";
    for (int i = 0; i < n; ++i) {
        r.toks.push_back(i * 31 + 5);
    }
    r.history = n - 2;
    r.anchor = n_cps == 0;
    r.full = make_blob(blob(full, 0xab));
    for (int i = 0; i < n_cps; ++i) {
        r.checkpoints.push_back({(i + 1) * n / (n_cps + 1), point_kind::turn, make_blob(blob(16 + i, 0x11))});
    }
    return r;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    if (const char * dir = std::getenv("LINEAGE_FUZZ_SEEDS")) {
        int i = 0;
        for (auto [n, full, cps] : {std::tuple{4, 32, 0}, std::tuple{12, 64, 1}, std::tuple{40, 100, 3}}) {
            const auto st = write_disk_file(std::string(dir) + "/seed-" + std::to_string(i++), seed_record(n, full, cps));
            if (!st) {
                std::fprintf(stderr, "seed: %s\n", st.message().c_str());
                std::exit(1);
            }
        }
        std::exit(0);
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    static const std::string in = tmp_path("blob"), out = tmp_path("rewrite");
    {
        std::ofstream f(in, std::ios::binary | std::ios::trunc);
        f.write(reinterpret_cast<const char *>(data), static_cast<std::streamsize>(size));
    }
    const tier_load_result h = read_disk_header(in, /*with_tokens=*/true);
    const tier_load_result r = read_disk_file(in, "model-a");
    if (r.error == tier_load_error::none) {
        if (!r.record || h.error != tier_load_error::none || copy_record_size(*r.record) != size) {
            __builtin_trap();
        }
        if (!write_disk_file(out, *r.record) || read_all(out) != std::string(reinterpret_cast<const char *>(data), size)) {
            __builtin_trap();  // accepted, but not what the writer makes of it: a misread
        }
    } else if (r.record) {
        __builtin_trap();
    }
    return 0;
}
