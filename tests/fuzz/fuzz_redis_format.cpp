// libFuzzer target: what tier 3 reads back from Redis (cache/tier/redis/redis_format.h), where
// anyone with write access to Redis can put any bytes (docs/prompt-cache.md "What Redis is trusted
// with"). The first input byte picks the reader, the rest is its input:
//   0  an index entry ("meta"): decode_redis_meta must never crash, throw or allocate before a
//      size check; an entry it accepts has a chunk count and size some writer makes
//      (check_redis_geometry) and re-encodes byte for byte;
//   1  a set of chunks: u64 payload size, u32 chunk count, then chunks each as u16 length + bytes
//      (the count of chunks given need not be the declared one): join_chunks must never crash or
//      read out of bounds; a set it accepts is exactly what split_chunks makes of the payload it
//      returned, with chunk 0's data length as the chunk size;
//   2  an index score and member: parse_redis_sequence accepts only whole numbers in
//      [1, 2^53], valid_redis_entry_key only 32 lowercase hex digits.
// Build and run: scripts/fuzz (docs/prompt-cache.md "Fuzzing"). With LINEAGE_FUZZ_SEEDS=DIR set,
// writes the seed corpus (a sound meta and a sound chunk set of this build's format) and exits.
#include "cache/tier/redis/redis_format.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

using namespace lineage::cache;

namespace {

const std::string ek = "0123456789abcdef0123456789abcdef";

copy_record seed_record() {
    copy_record r;
    r.id = 1;
    r.model = "model-a";
    r.bucket = "bucket-1";
    r.session = "s1";
    for (int i = 0; i < 24; ++i) {
        r.toks.push_back(i * 17 + 3);
    }
    r.history = 20;
    r.full = make_blob(blob(3000, 0xab));
    r.checkpoints.push_back({12, point_kind::turn, make_blob(blob(40, 0x11))});
    return r;
}

template <typename T> void put(std::string & out, T v) {
    out.append(reinterpret_cast<const char *>(&v), sizeof v);
}

template <typename T> bool get(std::string_view & s, T & v) {
    if (s.size() < sizeof v) {
        return false;
    }
    std::memcpy(&v, s.data(), sizeof v);
    s.remove_prefix(sizeof v);
    return true;
}

void write_seed(const std::string & path, const std::string & bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!f) {
        std::fprintf(stderr, "seed: cannot write %s\n", path.c_str());
        std::exit(1);
    }
}

void fuzz_meta(std::string_view in) {
    redis_meta m;
    const tier_load_result r = decode_redis_meta(in, "model-a", m);
    if (r.error != tier_load_error::none) {
        return;
    }
    if (!check_redis_geometry(m.payload_bytes, m.n_chunks).empty()) {
        __builtin_trap();  // accepted a count or size no writer makes
    }
    m.rec.model = "model-a";
    if (encode_redis_meta(m.payload_bytes, m.n_chunks, m.rec) != in) {
        __builtin_trap();  // accepted, but not what the writer makes of it: a misread
    }
}

void fuzz_chunks(std::string_view in) {
    uint64_t payload_bytes = 0;
    uint32_t n_chunks = 0;
    if (!get(in, payload_bytes) || !get(in, n_chunks)) {
        return;
    }
    std::vector<std::optional<std::string>> chunks;
    uint16_t len = 0;
    while (get(in, len)) {
        const size_t n = std::min<size_t>(len, in.size());
        if (n == 0) {
            chunks.emplace_back(std::nullopt);  // an absent key
        } else {
            chunks.emplace_back(std::string(in.substr(0, n)));
        }
        in.remove_prefix(n);
    }
    std::string payload;
    const tier_load_result r = join_chunks(ek, payload_bytes, n_chunks, chunks, payload);
    if (r.error != tier_load_error::none) {
        return;
    }
    if (payload.size() != payload_bytes || chunks.size() != n_chunks) {
        __builtin_trap();
    }
    // Chunk 0's data length (its header: 44 + |ek| bytes before the data end) is the chunk size.
    const uint64_t chunk_size = n_chunks == 1 ? payload.size() : chunks[0]->size() - redis_chunk_overhead(ek);
    const auto again = split_chunks(ek, payload, std::max<uint64_t>(1, chunk_size));
    if (again.size() != chunks.size()) {
        __builtin_trap();
    }
    for (size_t i = 0; i < again.size(); ++i) {
        if (again[i] != *chunks[i]) {
            __builtin_trap();  // accepted, but not what the writer makes of the payload
        }
    }
}

void fuzz_index(std::string_view in) {
    const auto n = parse_redis_sequence(in);
    if (n && (*n < 1 || *n > redis_max_sequence)) {
        __builtin_trap();
    }
    if (valid_redis_entry_key(in)) {
        if (in.size() != 32 || in.find_first_not_of("0123456789abcdef") != std::string_view::npos) {
            __builtin_trap();
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    if (const char * dir = std::getenv("LINEAGE_FUZZ_SEEDS")) {
        copy_record rec = seed_record();
        const std::string payload = encode_copy_record(rec);
        const auto chunks = split_chunks(ek, payload, 1024);
        write_seed(std::string(dir) + "/seed-meta",
                   std::string(1, '\0') + encode_redis_meta(payload.size(), static_cast<uint32_t>(chunks.size()), rec));
        std::string set(1, '\1');
        put(set, static_cast<uint64_t>(payload.size()));
        put(set, static_cast<uint32_t>(chunks.size()));
        for (const auto & c : chunks) {
            put(set, static_cast<uint16_t>(c.size()));
            set += c;
        }
        write_seed(std::string(dir) + "/seed-chunks", set);
        write_seed(std::string(dir) + "/seed-sequence", std::string(1, '\2') + "9007199254740992");
        write_seed(std::string(dir) + "/seed-key", std::string(1, '\2') + ek);
        std::exit(0);
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    if (size == 0) {
        return 0;
    }
    const std::string_view in(reinterpret_cast<const char *>(data) + 1, size - 1);
    switch (data[0] % 3) {
        case 0: fuzz_meta(in); break;
        case 1: fuzz_chunks(in); break;
        default: fuzz_index(in); break;
    }
    return 0;
}
