// cache::redis_format: tier 3's keys, metas and chunks; see redis_format.h.
#include "cache/tier/redis/redis_format.h"

#include "cache/rule/digest.h"

#include <xxhash.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace lineage::cache {

namespace {

template <typename T> void put(std::string & out, T v) {
    out.append(reinterpret_cast<const char *>(&v), sizeof v);
}

/** Reads PODs off the front of a byte string. */
struct cursor {
    std::string_view s;
    template <typename T> bool get(T & v) {
        if (s.size() < sizeof v) {
            return false;
        }
        std::memcpy(&v, s.data(), sizeof v);
        s.remove_prefix(sizeof v);
        return true;
    }
    bool take(std::string_view & v, size_t n) {
        if (s.size() < n) {
            return false;
        }
        v = s.substr(0, n);
        s.remove_prefix(n);
        return true;
    }
};

tier_load_result failed(tier_load_error e, std::string detail) {
    tier_load_result r;
    r.error = e;
    r.detail = std::move(detail);
    return r;
}

constexpr size_t chunk_fixed = 8 + 4 + 4 + 4 + 8 + 4 + 4 + 8;  // 44 bytes: all but the key and data

}  // namespace

std::string redis_entry_key(const std::string & model, const std::string & bucket, const tokens & toks) {
    hasher h(hash_algo::xxh3);  // each field length-prefixed (8 bytes little-endian)
    h.field(model);
    h.field(bucket);
    h.field(std::string_view(reinterpret_cast<const char *>(toks.data()), toks.size() * sizeof(token)));
    return h.hex();
}

std::optional<int64_t> parse_redis_sequence(std::string_view score) {
    // Redis writes a score as an integer ("5") or a double ("1.5", "1e+20", "inf"); only a
    // whole number in range is a sequence. strtod wants a terminated string, and a short one.
    if (score.empty() || score.size() > 32 || score.find_first_not_of("0123456789.eE+-") != std::string_view::npos ||
        !(score[0] >= '0' && score[0] <= '9')) {
        return std::nullopt;  // inf, nan, hex, spaces: strtod would take them
    }
    if (score.find_first_not_of("0123456789") == std::string_view::npos) {
        int64_t v = 0;
        const auto [end, ec] = std::from_chars(score.data(), score.data() + score.size(), v);
        if (ec != std::errc() || end != score.data() + score.size() || v < 1 || v > redis_max_sequence) {
            return std::nullopt;
        }
        return v;
    }
    const std::string text(score);
    char * end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size() || !std::isfinite(v) || v < 1 ||
        v > static_cast<double>(redis_max_sequence) || v != std::floor(v)) {
        return std::nullopt;
    }
    return static_cast<int64_t>(v);
}

bool valid_redis_entry_key(std::string_view ek) {
    return ek.size() == 32 &&
           std::all_of(ek.begin(), ek.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string check_redis_geometry(uint64_t payload_bytes, uint32_t n_chunks) {
    const std::string what = std::to_string(payload_bytes) + " bytes in " + std::to_string(n_chunks) + " chunks";
    if (n_chunks == 0 || n_chunks > redis_max_chunks) {
        return what + ": the count is not in [1, " + std::to_string(redis_max_chunks) + "]";
    }
    if (payload_bytes > redis_max_payload_bytes) {
        return what + ": more than " + std::to_string(redis_max_payload_bytes) + " bytes";
    }
    if (n_chunks == 1) {
        return payload_bytes <= redis_max_chunk_bytes ? std::string() : what + ": one chunk over 512 MiB";
    }
    // Chunks of c bytes but the last, which holds the rest (1..c): (n - 1) c < payload <= n c.
    const uint64_t n = n_chunks;
    const uint64_t lo = std::max(redis_min_chunk_bytes, (payload_bytes + n - 1) / n);
    const uint64_t hi = payload_bytes == 0 ? 0 : std::min(redis_max_chunk_bytes, (payload_bytes - 1) / (n - 1));
    return lo <= hi ? std::string() : what + ": no chunk size of 1 KiB to 512 MiB splits it so";
}

std::string encode_redis_meta(uint64_t payload_bytes, uint32_t n_chunks, const copy_record & rec) {
    copy_record bare;
    bare.id = rec.id;
    bare.model = rec.model;
    bare.bucket = rec.bucket;
    bare.session = rec.session;
    bare.tenant = rec.tenant;  // a tenant's reset finds its entries by it
    bare.toks = rec.toks;
    bare.history = rec.history;
    bare.anchor = rec.anchor;
    for (const auto & c : rec.checkpoints) {
        bare.checkpoints.push_back({c.n_tokens, c.kind, nullptr});
    }
    std::string out(redis_meta_magic, sizeof redis_meta_magic);
    put(out, redis_format_version);
    put(out, payload_bytes);
    put(out, n_chunks);
    out += encode_copy_record(bare);
    return out;
}

tier_load_result decode_redis_meta(std::string_view bytes, const std::string & model, redis_meta & out) {
    cursor c{bytes};
    std::string_view magic;
    uint32_t version = 0;
    if (!c.take(magic, sizeof redis_meta_magic) || magic != std::string_view(redis_meta_magic, 8)) {
        return failed(tier_load_error::bad_magic, "not a lineage tier-3 index entry");
    }
    if (!c.get(version) || !c.get(out.payload_bytes) || !c.get(out.n_chunks)) {
        return failed(tier_load_error::truncated, "index entry cut short");
    }
    if (version != redis_format_version) {
        return failed(tier_load_error::other_format, "tier-3 format version " + std::to_string(version));
    }
    if (std::string bad = check_redis_geometry(out.payload_bytes, out.n_chunks); !bad.empty()) {
        return failed(tier_load_error::corrupt, "index entry of " + bad);
    }
    tier_load_result r = decode_copy_record(c.s, model);
    if (r.error == tier_load_error::none) {
        out.rec = std::move(*r.record);
        r.record.reset();
    }
    return r;
}

std::vector<std::string> split_chunks(std::string_view ek, std::string_view payload, uint64_t chunk_bytes) {
    const uint64_t total = payload.size();
    const auto count = static_cast<uint32_t>(std::max<uint64_t>(1, (total + chunk_bytes - 1) / chunk_bytes));
    std::vector<std::string> out;
    out.reserve(count);
    for (uint32_t i = 0; i < count; ++i) {
        const std::string_view data = payload.substr(std::min<uint64_t>(total, i * chunk_bytes), chunk_bytes);
        std::string c(redis_chunk_magic, sizeof redis_chunk_magic);
        c.reserve(chunk_fixed + ek.size() + data.size());
        put(c, redis_format_version);
        put(c, i);
        put(c, count);
        put(c, total);
        put(c, static_cast<uint32_t>(ek.size()));
        c.append(ek);
        put(c, static_cast<uint32_t>(data.size()));
        c.append(data);
        put(c, static_cast<uint64_t>(XXH3_64bits(c.data(), c.size())));
        out.push_back(std::move(c));
    }
    return out;
}

tier_load_result check_chunk(std::string_view ek, uint64_t payload_bytes, uint32_t n_chunks, uint32_t i,
                             std::string_view raw, uint64_t & chunk_size, std::string_view & data) {
    const std::string where = "chunk " + std::to_string(i) + " of " + std::to_string(n_chunks);
    if (raw.size() < chunk_fixed) {
        return failed(tier_load_error::truncated, where + ": " + std::to_string(raw.size()) + " bytes");
    }
    if (std::memcmp(raw.data(), redis_chunk_magic, sizeof redis_chunk_magic) != 0) {
        return failed(tier_load_error::bad_magic, where + ": not a lineage chunk");
    }
    uint64_t stored = 0;
    std::memcpy(&stored, raw.data() + raw.size() - sizeof stored, sizeof stored);
    if (stored != XXH3_64bits(raw.data(), raw.size() - sizeof stored)) {
        return failed(tier_load_error::corrupt, where + ": checksum mismatch");
    }
    cursor c{raw.substr(8, raw.size() - 8 - sizeof stored)};
    uint32_t version = 0, index = 0, count = 0, ek_len = 0, data_len = 0;
    uint64_t total = 0;
    std::string_view key;
    if (!c.get(version) || !c.get(index) || !c.get(count) || !c.get(total) || !c.get(ek_len) ||
        !c.take(key, ek_len) || !c.get(data_len) || !c.take(data, data_len) || !c.s.empty()) {
        return failed(tier_load_error::corrupt, where + ": sizes do not add up");
    }
    if (version != redis_format_version) {
        return failed(tier_load_error::other_format, where + ": format version " + std::to_string(version));
    }
    if (index != i || count != n_chunks || total != payload_bytes || key != ek) {
        return failed(tier_load_error::identity, where + ": holds chunk " + std::to_string(index) + " of " +
                                                     std::to_string(count) + " of entry " + std::string(key));
    }
    // The chunk size: chunk 0's data, which must split the payload into exactly n_chunks.
    const uint64_t n = n_chunks;
    if (i == 0) {
        chunk_size = data_len;
        const bool fits = n == 1 ? data_len == payload_bytes
                                 : data_len > 0 && (n - 1) * data_len < payload_bytes &&  // n, data_len < 2^32
                                       payload_bytes <= n * data_len;
        if (!fits) {
            return failed(tier_load_error::identity, where + ": " + std::to_string(data_len) + " bytes do not split " +
                                                         std::to_string(payload_bytes) + " bytes into " +
                                                         std::to_string(n) + " chunks");
        }
    } else {
        const uint64_t want = i + 1 < n ? chunk_size : payload_bytes - (n - 1) * chunk_size;
        if (data_len != want) {
            return failed(tier_load_error::identity,
                          where + ": " + std::to_string(data_len) + " bytes, expected " + std::to_string(want));
        }
    }
    return {};
}

tier_load_result join_chunks(std::string_view ek, uint64_t payload_bytes, uint32_t n_chunks,
                             const std::vector<std::optional<std::string>> & chunks, std::string & payload) {
    payload.clear();
    if (n_chunks == 0) {
        return failed(tier_load_error::corrupt, "an entry of 0 chunks");  // split_chunks makes one at least
    }
    if (chunks.size() != n_chunks) {
        return failed(tier_load_error::identity, "read " + std::to_string(chunks.size()) + " chunks of " +
                                                     std::to_string(n_chunks));
    }
    uint64_t chunk_size = 0;
    for (uint32_t i = 0; i < n_chunks; ++i) {
        if (!chunks[i]) {
            return failed(tier_load_error::missing, "chunk " + std::to_string(i) + " of " + std::to_string(n_chunks) +
                                                        " is not in Redis (evicted or flushed)");
        }
        std::string_view data;
        tier_load_result r = check_chunk(ek, payload_bytes, n_chunks, i, *chunks[i], chunk_size, data);
        if (r.error != tier_load_error::none) {
            return r;
        }
        payload.append(data);
    }
    return {};
}

}  // namespace lineage::cache
