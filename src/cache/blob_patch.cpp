// cache::blob_patch: see blob_patch.h.
#include "cache/blob_patch.h"

#include "cache/blob_pool.h"

#include <cstring>

namespace lineage::cache {

namespace {

constexpr uint32_t patch_magic = 0x3154504cu;  // "LPT1"
constexpr size_t header_bytes = 4 + 4 + 8 + 8;
constexpr size_t op_bytes = 3 * 8;

template <typename T> void put(uint8_t *& p, T v) {
    std::memcpy(p, &v, sizeof v);
    p += sizeof v;
}

template <typename T> T get(const uint8_t * p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

}  // namespace

std::optional<blob> make_patch(const blob & whole, const std::vector<shared_run> & runs) {
    struct op {
        uint64_t literal = 0, base_off = 0, base_len = 0;
    };
    std::vector<op> ops;
    uint64_t at = 0;
    uint64_t literal = 0;
    for (const auto & r : runs) {
        if (r.at < at || r.len > whole.size() || r.at > whole.size() - r.len) {
            return std::nullopt;
        }
        if (r.len == 0) {
            continue;
        }
        const uint64_t gap = r.at - at;
        if (gap == 0 && !ops.empty() && ops.back().base_off + ops.back().base_len == r.base_off) {
            ops.back().base_len += r.len;  // contiguous in both: one op
        } else {
            ops.push_back({gap, r.base_off, r.len});
        }
        literal += gap;
        at = r.at + r.len;
    }
    if (at < whole.size()) {
        ops.push_back({whole.size() - at, 0, 0});
        literal += whole.size() - at;
    }
    blob out = take_blob(header_bytes + ops.size() * op_bytes + literal);
    uint8_t * p = out.data();
    put<uint32_t>(p, patch_magic);
    put<uint32_t>(p, 0);
    put<uint64_t>(p, whole.size());
    put<uint64_t>(p, ops.size());
    for (const auto & o : ops) {
        put<uint64_t>(p, o.literal);
        put<uint64_t>(p, o.base_off);
        put<uint64_t>(p, o.base_len);
    }
    // The literal bytes: whole's, outside the runs, in order.
    at = 0;
    for (const auto & r : runs) {
        if (r.len == 0) {
            continue;
        }
        std::memcpy(p, whole.data() + at, r.at - at);
        p += r.at - at;
        at = r.at + r.len;
    }
    std::memcpy(p, whole.data() + at, whole.size() - at);
    return out;
}

uint64_t patched_size(const blob & patch) {
    if (patch.size() < header_bytes || get<uint32_t>(patch.data()) != patch_magic) {
        return 0;
    }
    return get<uint64_t>(patch.data() + 8);
}

bool visit_patch(const blob & base, const blob & patch, const std::function<void(const uint8_t *, uint64_t)> & out) {
    const uint64_t whole = patched_size(patch);
    if (whole == 0) {
        return false;
    }
    const uint64_t n_ops = get<uint64_t>(patch.data() + 16);
    if (n_ops > (patch.size() - header_bytes) / op_bytes) {
        return false;
    }
    const uint8_t * op = patch.data() + header_bytes;
    const uint8_t * lit = op + n_ops * op_bytes;
    const uint8_t * lit_end = patch.data() + patch.size();
    uint64_t at = 0;
    for (uint64_t i = 0; i < n_ops; ++i, op += op_bytes) {
        const auto n_lit = get<uint64_t>(op);
        const auto off = get<uint64_t>(op + 8);
        const auto n_base = get<uint64_t>(op + 16);
        if (n_lit > static_cast<uint64_t>(lit_end - lit) || n_lit > whole - at || off > base.size() ||
            n_base > base.size() - off || n_base > whole - at - n_lit) {
            return false;
        }
        if (n_lit > 0) {
            out(lit, n_lit);
        }
        lit += n_lit;
        at += n_lit;
        if (n_base > 0) {
            out(base.data() + off, n_base);
        }
        at += n_base;
    }
    return at == whole && lit == lit_end;
}

std::optional<blob> apply_patch(const blob & base, const blob & patch) {
    blob out = take_blob(patched_size(patch));
    uint64_t at = 0;
    const bool ok = visit_patch(base, patch, [&](const uint8_t * p, uint64_t n) {
        std::memcpy(out.data() + at, p, n);
        at += n;
    });
    if (!ok) {
        return std::nullopt;
    }
    return out;
}

}  // namespace lineage::cache
