// engine::state_blob: see state_blob.h.
#include "engine/state_blob.h"

#include <cstring>
#include <optional>

namespace lineage::engine {

namespace {

/** llama-context.cpp's io_magic, the first word of a sequence state. */
constexpr uint32_t state_magic = 0xaf143cd8u;

/** A bounds-checked reader over a blob. */
struct reader {
    const std::vector<uint8_t> & b;
    size_t at = 0;
    bool ok = true;

    template <typename T> T get() {
        T v{};
        if (!ok || b.size() - at < sizeof v) {
            ok = false;
            return v;
        }
        std::memcpy(&v, b.data() + at, sizeof v);
        at += sizeof v;
        return v;
    }
    void skip(uint64_t n) {
        if (!ok || b.size() - at < n) {
            ok = false;
            return;
        }
        at += static_cast<size_t>(n);
    }
};

/** One layer's rows: where they start, the bytes of one cell's row (K, V) or of one element
 *  (transposed V, with `n_embd` rows of cell_count elements each). */
struct rows {
    int32_t type = 0;
    size_t off = 0;
    uint64_t unit = 0;
    uint32_t n_embd = 1;
};

/** The KV cache section of one sequence's state: its one non-empty stream. */
struct kv_section {
    uint32_t n_stream = 0;
    uint32_t cell_count = 0;
    size_t meta_off = 0;
    size_t meta_stride = 0;
    uint32_t v_trans = 0;
    std::vector<rows> k, v;
};

/** Reads the cells' metadata at r.at with `stride` bytes a cell (12, or 24 with the cell ext):
 *  every cell of one sequence (n_seq_id 1, one seq id). */
bool read_meta(reader & r, uint32_t n, size_t stride) {
    const size_t start = r.at;
    int32_t seq = 0;
    for (uint32_t i = 0; i < n && r.ok; ++i) {
        r.at = start + i * stride;
        (void) r.get<int32_t>();
        if (r.get<uint32_t>() != 1) {
            return false;
        }
        r.skip(stride - 12);
        const auto s = r.get<int32_t>();
        if (i == 0) {
            seq = s;
        } else if (s != seq) {
            return false;
        }
    }
    r.at = start;
    r.skip(uint64_t{n} * stride);
    return r.ok;
}

bool read_rows(reader & r, uint32_t n_layer, uint32_t cells, bool transposed, std::vector<rows> & out) {
    for (uint32_t il = 0; il < n_layer && r.ok; ++il) {
        rows l;
        l.type = r.get<int32_t>();
        if (transposed) {
            l.unit = r.get<uint32_t>();
            l.n_embd = r.get<uint32_t>();
        } else {
            l.unit = r.get<uint64_t>();
        }
        l.off = r.at;
        if (l.unit == 0 || l.unit > (uint64_t{1} << 32) || (transposed && (l.unit > 16 || l.n_embd > (1u << 20)))) {
            return false;
        }
        r.skip(l.unit * cells * l.n_embd);
        out.push_back(l);
    }
    return r.ok;
}

std::optional<kv_section> read_kv(const std::vector<uint8_t> & b, size_t stride, bool with_v) {
    reader r{b};
    kv_section kv;
    // llama_context::state_seq_get_data's header: the magic, the source sequence id.
    if (r.get<uint32_t>() != state_magic) {
        return std::nullopt;
    }
    (void) r.get<int32_t>();
    kv.n_stream = r.get<uint32_t>();
    if (!r.ok || kv.n_stream == 0 || kv.n_stream > 4096) {
        return std::nullopt;
    }
    bool found = false;
    for (uint32_t s = 0; s < kv.n_stream; ++s) {
        const auto n = r.get<uint32_t>();
        if (!r.ok) {
            return std::nullopt;
        }
        if (n == 0) {
            continue;
        }
        if (found) {
            return std::nullopt;  // one sequence's cells lie in one stream
        }
        found = true;
        kv.cell_count = n;
        kv.meta_off = r.at;
        kv.meta_stride = stride;
        if (!read_meta(r, n, stride)) {
            return std::nullopt;
        }
        kv.v_trans = r.get<uint32_t>();
        const auto n_layer = r.get<uint32_t>();
        if (!r.ok || kv.v_trans > 1 || n_layer == 0 || n_layer > 4096 || !read_rows(r, n_layer, n, false, kv.k) ||
            !read_rows(r, with_v ? n_layer : 0, n, kv.v_trans == 1, kv.v)) {
            return std::nullopt;
        }
    }
    if (!found) {
        return std::nullopt;
    }
    return kv;
}

/** Reads `b` with the stride that parses: 12 bytes a cell, or 24 on models with the cell ext.
 *  `with_v`: every layer holds V rows; else none does (MLA: the K rows hold the latent). */
std::optional<kv_section> read_kv(const std::vector<uint8_t> & b, bool with_v) {
    if (auto kv = read_kv(b, 12, with_v)) {
        return kv;
    }
    return read_kv(b, 24, with_v);
}

bool same_bytes(const std::vector<uint8_t> & x, size_t xo, const std::vector<uint8_t> & y, size_t yo, uint64_t n) {
    return std::memcmp(x.data() + xo, y.data() + yo, static_cast<size_t>(n)) == 0;
}


/** The ranges under one reading of the layout (with_v); empty where it does not hold. */
std::vector<shared_range> shared_under(const std::vector<uint8_t> & base, const std::vector<uint8_t> & whole,
                                       bool with_v) {
    const auto kb = read_kv(base, with_v);
    const auto kw = read_kv(whole, with_v);
    if (!kb || !kw || kb->n_stream != kw->n_stream || kb->meta_stride != kw->meta_stride ||
        kb->v_trans != kw->v_trans || kb->k.size() != kw->k.size() || kb->v.size() != kw->v.size() ||
        kb->cell_count > kw->cell_count) {
        return {};
    }
    const uint32_t a = kb->cell_count;
    const uint32_t n = kw->cell_count;
    // Same positions (and M-RoPE ext) cell for cell; the seq id at the end may differ.
    for (uint32_t i = 0; i < a; ++i) {
        if (!same_bytes(base, kb->meta_off + i * kb->meta_stride, whole, kw->meta_off + i * kw->meta_stride,
                        kb->meta_stride - 4)) {
            return {};
        }
    }
    std::vector<shared_range> out;
    auto share = [&](const std::vector<rows> & lb, const std::vector<rows> & lw) {
        for (size_t il = 0; il < lb.size(); ++il) {
            const rows & b = lb[il];
            const rows & w = lw[il];
            if (b.type != w.type || b.unit != w.unit || b.n_embd != w.n_embd) {
                return false;
            }
            // Row-major: the first a cells are one run; transposed: one run of a elements per
            // embedding row (n elements apart in whole, a in base).
            for (uint32_t j = 0; j < b.n_embd; ++j) {
                const uint64_t len = b.unit * a;
                const size_t bo = b.off + static_cast<size_t>(j * b.unit * a);
                const size_t wo = w.off + static_cast<size_t>(j * w.unit * n);
                if (!same_bytes(base, bo, whole, wo, len)) {
                    return false;
                }
                out.push_back({wo, bo, len});
            }
        }
        return true;
    };
    if (!share(kb->k, kw->k) || !share(kb->v, kw->v)) {
        return {};
    }
    return out;
}

}  // namespace

std::vector<shared_range> shared_state_ranges(const std::vector<uint8_t> & base, const std::vector<uint8_t> & whole) {
    auto out = shared_under(base, whole, true);
    if (out.empty()) {
        out = shared_under(base, whole, false);
    }
    return out;
}

}  // namespace lineage::engine
