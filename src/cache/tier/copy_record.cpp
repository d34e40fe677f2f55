// cache::copy_record: the record layout every tier below RAM stores; see copy_record.h.
#include "cache/tier/copy_record.h"

#include "cache/blob_patch.h"

#include "cache/blob_pool.h"
#include "cache/rule/digest.h"

#include <xxhash.h>

#include <sys/stat.h>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <vector>

namespace lineage::cache {

namespace {

// Layout (little-endian, as the engine's state blobs on the platforms we build for):
//   magic[8] u32 version u32 reserved u64 copy_id
//   u32 len + model | u32 len + bucket | u32 len + session | u32 len + tenant
//   i32 n_tokens u64 tokens_digest i32 history u8 anchor u32 n_checkpoints u64 full_bytes
//   n_checkpoints x (i32 n_tokens u8 kind u64 bytes)
//   tokens (n_tokens x i32) | full | checkpoint bytes in order | u64 XXH3-64 of all the above
constexpr uint32_t max_string = 1u << 20;        // key digests and session keys are far shorter
constexpr uint32_t max_checkpoints = 1u << 12;   // --cache-max-checkpoints is 4; a sanity bound on damage

uint64_t header_size(const copy_record & r) {
    return 8 + 4 + 4 + 8 + (4 + r.model.size()) + (4 + r.bucket.size()) + (4 + r.session.size()) +
           (4 + r.tenant.size()) + 4 + 8 + 4 + 1 + 4 + 8 +
           r.checkpoints.size() * (4 + 1 + 8);
}

uint64_t size_of(const blob_ptr & b) {
    return b ? b->size() : 0;
}

/** Buffered writer that hashes what it writes. */
class writer {
public:
    explicit writer(FILE * f) : f_(f), st_(XXH3_createState()) { XXH3_64bits_reset(st_); }
    ~writer() { XXH3_freeState(st_); }
    writer(const writer &) = delete;
    writer & operator=(const writer &) = delete;

    void bytes(const void * p, size_t n) {
        if (n == 0 || !ok_) {
            return;
        }
        XXH3_64bits_update(st_, p, n);
        ok_ = std::fwrite(p, 1, n, f_) == n;
    }
    template <typename T> void pod(T v) { bytes(&v, sizeof v); }
    void str(const std::string & s) {
        pod(static_cast<uint32_t>(s.size()));
        bytes(s.data(), s.size());
    }
    /** Appends the checksum (not hashed itself). */
    void finish() {
        const uint64_t h = XXH3_64bits_digest(st_);
        ok_ = ok_ && std::fwrite(&h, 1, sizeof h, f_) == sizeof h;
    }
    bool ok() const { return ok_; }

private:
    FILE * f_;
    XXH3_state_t * st_;
    bool ok_ = true;
};

/** Reader that hashes what it reads and knows how many bytes remain before the checksum. */
class reader {
public:
    reader(FILE * f, uint64_t payload) : f_(f), left_(payload), st_(XXH3_createState()) { XXH3_64bits_reset(st_); }
    ~reader() { XXH3_freeState(st_); }
    reader(const reader &) = delete;
    reader & operator=(const reader &) = delete;

    bool bytes(void * p, size_t n) {
        if (n > left_) {
            return false;
        }
        if (n > 0 && std::fread(p, 1, n, f_) != n) {
            return false;
        }
        XXH3_64bits_update(st_, p, n);
        left_ -= n;
        return true;
    }
    template <typename T> bool pod(T & v) { return bytes(&v, sizeof v); }
    bool str(std::string & s) {
        uint32_t n = 0;
        if (!pod(n) || n > max_string || n > left_) {
            return false;
        }
        s.resize(n);
        return bytes(s.data(), n);
    }
    uint64_t left() const { return left_; }
    uint64_t digest() const { return XXH3_64bits_digest(st_); }

private:
    FILE * f_;
    uint64_t left_;
    XXH3_state_t * st_;
};

struct file_closer {
    void operator()(FILE * f) const { std::fclose(f); }
};
using file_ptr = std::unique_ptr<FILE, file_closer>;

struct header {
    uint32_t version = 0;
    uint64_t id = 0;
    std::string model, bucket, session, tenant;
    uint64_t digest = 0;
    int32_t n_tokens = 0, history = -1;
    uint8_t anchor = 0;
    uint32_t n_checkpoints = 0;
    uint64_t full_bytes = 0;
    std::vector<std::pair<checkpoint, uint64_t>> cps;  // (n, kind) and bytes
};

tier_load_result fail(tier_load_error e, std::string detail) {
    tier_load_result r;
    r.error = e;
    r.detail = std::move(detail);
    return r;
}

/** Parses the header of the `size` bytes readable from `f`; every declared size is checked
 *  against what the bytes hold (overflow-safe) before anything is allocated for it. */
tier_load_result parse_header(FILE * f, uint64_t size, std::unique_ptr<reader> & rd, header & h) {
    if (size < 8 + 4 + 4 + 8) {
        return fail(tier_load_error::truncated, "file of " + std::to_string(size) + " bytes is shorter than a header");
    }
    rd = std::make_unique<reader>(f, size - 8);
    char magic[8];
    uint32_t reserved = 0;
    if (!rd->bytes(magic, sizeof magic) || std::memcmp(magic, copy_magic, sizeof magic) != 0) {
        return fail(tier_load_error::bad_magic, "not a lineage cache file");
    }
    if (!rd->pod(h.version) || !rd->pod(reserved)) {
        return fail(tier_load_error::truncated, "header cut short");
    }
    if (h.version != copy_format_version) {
        return fail(tier_load_error::other_format,
                    "format version " + std::to_string(h.version) + " (this build reads " +
                        std::to_string(copy_format_version) + ")");
    }
    if (!rd->pod(h.id) || !rd->str(h.model) || !rd->str(h.bucket) || !rd->str(h.session) || !rd->str(h.tenant) ||
        !rd->pod(h.n_tokens) || !rd->pod(h.digest) || !rd->pod(h.history) || !rd->pod(h.anchor) ||
        !rd->pod(h.n_checkpoints) || !rd->pod(h.full_bytes)) {
        return fail(tier_load_error::truncated, "header cut short");
    }
    if (h.n_tokens < 1 || h.n_checkpoints > max_checkpoints || h.history < -1 || h.history > h.n_tokens ||
        h.anchor > 1 || h.id == 0) {
        return fail(tier_load_error::corrupt, "header out of range");
    }
    // Sizes: each against what is left, so that no sum can wrap.
    const uint64_t left = rd->left();
    uint64_t body = static_cast<uint64_t>(h.n_tokens) * sizeof(token);
    auto add = [&](uint64_t n) {
        if (n > left || body > left - n) {
            return false;
        }
        body += n;
        return true;
    };
    bool fits = body <= left && add(h.full_bytes);
    for (uint32_t i = 0; i < h.n_checkpoints; ++i) {
        checkpoint c;
        uint8_t kind = 0;
        uint64_t bytes = 0;
        if (!rd->pod(c.n_tokens) || !rd->pod(kind) || !rd->pod(bytes)) {
            return fail(tier_load_error::truncated, "checkpoint table cut short");
        }
        if (kind > static_cast<uint8_t>(last_point_kind) || c.n_tokens < 1 || c.n_tokens >= h.n_tokens ||
            (!h.cps.empty() && c.n_tokens <= h.cps.back().first.n_tokens)) {
            return fail(tier_load_error::corrupt, "checkpoint table out of range");
        }
        c.kind = static_cast<point_kind>(kind);
        fits = fits && add(bytes);
        h.cps.emplace_back(std::move(c), bytes);
    }
    if (!fits) {
        return fail(tier_load_error::truncated,
                    "the header declares sections larger than the " + std::to_string(rd->left()) + " bytes left");
    }
    if (body != rd->left()) {
        return fail(tier_load_error::corrupt,
                    "sections of " + std::to_string(body) + " bytes, file holds " + std::to_string(rd->left()));
    }
    return {};
}

/** The header's fields of a record (no sections yet). */
copy_record record_of(header & h) {
    copy_record rec;
    rec.id = h.id;
    rec.model = std::move(h.model);
    rec.bucket = std::move(h.bucket);
    rec.session = std::move(h.session);
    rec.tenant = std::move(h.tenant);
    rec.history = h.history;
    rec.anchor = h.anchor != 0;
    return rec;
}

/** The sections and checksum after a parsed header (read_copy_record). */
tier_load_result read_body(FILE * f, reader & rdr, header & h, tier_load_result r, const std::string & model,
                           const checkpoint_filter & keep) {
    reader * rd = &rdr;
    r.n_tokens = h.n_tokens;
    r.digest = h.digest;
    if (h.model != model) {
        return fail(tier_load_error::other_model, "written by model " + h.model + ", this server runs " + model);
    }
    copy_record rec = record_of(h);
    rec.toks.resize(static_cast<size_t>(h.n_tokens));
    if (!rd->bytes(rec.toks.data(), rec.toks.size() * sizeof(token))) {
        return fail(tier_load_error::truncated, "tokens cut short");
    }
    if (tokens_digest(rec.toks) != h.digest) {
        return fail(tier_load_error::corrupt, "the tokens do not match the header's token digest");
    }
    auto section = [&](uint64_t n) -> blob_ptr {
        blob b = take_blob(n);
        if (!rd->bytes(b.data(), n)) {
            return nullptr;
        }
        return make_blob(std::move(b));
    };
    rec.full = section(h.full_bytes);
    if (!rec.full) {
        return fail(tier_load_error::truncated, "state cut short");
    }
    // A checkpoint the caller does not keep is read and hashed through one reused buffer.
    thread_local std::vector<char> scratch;
    auto skip = [&](uint64_t n) {
        scratch.resize(std::min<uint64_t>(n, 1u << 20));
        while (n > 0) {
            const size_t step = static_cast<size_t>(std::min<uint64_t>(n, scratch.size()));
            if (!rd->bytes(scratch.data(), step)) {
                return false;
            }
            n -= step;
        }
        return true;
    };
    for (auto & [c, bytes] : h.cps) {
        if (!keep.keeps(c.n_tokens)) {
            if (!skip(bytes)) {
                return fail(tier_load_error::truncated, "checkpoint cut short");
            }
            continue;
        }
        c.recurrent = section(bytes);
        if (!c.recurrent) {
            return fail(tier_load_error::truncated, "checkpoint cut short");
        }
        rec.checkpoints.push_back(std::move(c));
    }
    uint64_t stored = 0;
    if (std::fread(&stored, 1, sizeof stored, f) != sizeof stored) {
        return fail(tier_load_error::truncated, "checksum missing");
    }
    if (stored != rd->digest()) {
        return fail(tier_load_error::corrupt, "checksum mismatch");
    }
    r.record = std::move(rec);
    return r;
}

/** A copy's header parsed (read_copy_header, read_copy_record): the reader positioned after
 *  it, and the result so far, its format version set (an error when the header did not parse). */
struct opened_copy {
    std::unique_ptr<reader> rd;
    header h;
    tier_load_result result;
};

/** Parses the header of the `size` bytes (of the whole copy, checksum included) readable from `f`. */
opened_copy open_copy(FILE * f, uint64_t size) {
    opened_copy o;
    o.result = parse_header(f, size, o.rd, o.h);
    o.result.version = o.h.version;
    return o;
}

}  // namespace

const char * to_string(tier_load_error e) {
    switch (e) {
        case tier_load_error::none: return "ok";
        case tier_load_error::missing: return "missing";
        case tier_load_error::truncated: return "truncated";
        case tier_load_error::bad_magic: return "bad_magic";
        case tier_load_error::other_format: return "other_format";
        case tier_load_error::other_model: return "other_model";
        case tier_load_error::corrupt: return "corrupt";
        case tier_load_error::io: return "io";
        case tier_load_error::identity: return "identity";
        case tier_load_error::not_regular: return "not_regular";
    }
    return "?";
}

uint64_t tokens_digest(const tokens & t) {
    return XXH3_64bits(t.data(), t.size() * sizeof(token));
}

namespace {

/** The bytes of r's whole state (a patch's whole size). */
uint64_t state_bytes(const copy_record & r) {
    return r.base && r.full ? patched_size(*r.full) : size_of(r.full);
}

}  // namespace

uint64_t copy_record_size(const copy_record & r) {
    uint64_t n = header_size(r) + r.toks.size() * 4 + state_bytes(r) + 8;
    for (const auto & c : r.checkpoints) {
        n += size_of(c.recurrent);
    }
    return n;
}

bool write_copy_record(FILE * f, const copy_record & r) {
    writer w(f);
    w.bytes(copy_magic, sizeof copy_magic);
    w.pod(copy_format_version);
    w.pod(uint32_t{0});
    w.pod(static_cast<uint64_t>(r.id));
    w.str(r.model);
    w.str(r.bucket);
    w.str(r.session);
    w.str(r.tenant);
    w.pod(static_cast<int32_t>(r.toks.size()));
    w.pod(tokens_digest(r.toks));
    w.pod(r.history);
    w.pod(static_cast<uint8_t>(r.anchor ? 1 : 0));
    w.pod(static_cast<uint32_t>(r.checkpoints.size()));
    w.pod(state_bytes(r));
    for (const auto & c : r.checkpoints) {
        w.pod(c.n_tokens);
        w.pod(static_cast<uint8_t>(c.kind));
        w.pod(size_of(c.recurrent));
    }
    w.bytes(r.toks.data(), r.toks.size() * sizeof(token));
    if (r.full && r.base) {
        if (!visit_patch(*r.base, *r.full, [&](const uint8_t * p, uint64_t n) { w.bytes(p, n); })) {
            return false;  // a patch that does not apply over its base: no copy
        }
    } else if (r.full) {
        w.bytes(r.full->data(), r.full->size());
    }
    for (const auto & c : r.checkpoints) {
        if (c.recurrent) {
            w.bytes(c.recurrent->data(), c.recurrent->size());
        }
    }
    w.finish();
    return w.ok();
}

tier_load_result read_copy_header(FILE * f, uint64_t size, bool with_tokens) {
    opened_copy o = open_copy(f, size);
    if (o.result.error != tier_load_error::none) {
        return std::move(o.result);
    }
    tier_load_result r = std::move(o.result);
    header & h = o.h;
    r.n_tokens = h.n_tokens;
    r.digest = h.digest;
    r.record = record_of(h);
    for (auto & [c, bytes] : h.cps) {
        r.record->checkpoints.push_back(std::move(c));
    }
    if (with_tokens) {
        r.record->toks.resize(static_cast<size_t>(h.n_tokens));
        if (!o.rd->bytes(r.record->toks.data(), r.record->toks.size() * sizeof(token)) ||
            tokens_digest(r.record->toks) != h.digest) {
            return fail(tier_load_error::corrupt, "the tokens do not match the header's token digest");
        }
    }
    return r;
}

tier_load_result read_copy_record(FILE * f, uint64_t size, const std::string & model, const checkpoint_filter & keep) {
    opened_copy o = open_copy(f, size);
    if (o.result.error != tier_load_error::none) {
        return std::move(o.result);
    }
    return read_body(f, *o.rd, o.h, std::move(o.result), model, keep);
}

std::string encode_copy_record(const copy_record & r) {
    char * buf = nullptr;
    size_t len = 0;
    FILE * f = ::open_memstream(&buf, &len);
    if (f == nullptr) {
        throw std::bad_alloc();
    }
    const bool ok = write_copy_record(f, r);
    std::fclose(f);
    std::string out = ok ? std::string(buf, len) : std::string();
    std::free(buf);
    if (!ok) {
        throw std::bad_alloc();
    }
    return out;
}

tier_load_result decode_copy_record(std::string_view bytes, const std::string & model) {
    if (bytes.empty()) {
        return fail(tier_load_error::truncated, "no bytes");
    }
    file_ptr f(::fmemopen(const_cast<char *>(bytes.data()), bytes.size(), "rb"));
    if (!f) {
        return fail(tier_load_error::io, std::strerror(errno));
    }
    return read_copy_record(f.get(), bytes.size(), model);
}

std::string model_fingerprint(const std::string & path) {
    constexpr size_t window = 16u << 20;
    file_ptr f(std::fopen(path.c_str(), "rb"));
    struct stat st {};
    if (!f || ::stat(path.c_str(), &st) != 0) {
        throw std::runtime_error("cannot read the model file " + path + ": " + std::strerror(errno));
    }
    const auto size = static_cast<uint64_t>(st.st_size);
    hasher h(hash_algo::xxh3);
    h.u64(size);
    std::vector<char> buf(window);
    auto hash_at = [&](uint64_t off, uint64_t n) {
        if (std::fseek(f.get(), static_cast<long>(off), SEEK_SET) != 0) {
            return;
        }
        const size_t got = std::fread(buf.data(), 1, static_cast<size_t>(n), f.get());
        h.raw(std::string_view(buf.data(), got));
    };
    hash_at(0, std::min<uint64_t>(size, window));
    if (size > window) {
        const uint64_t n = std::min<uint64_t>(window, size - window);
        hash_at(size - n, n);
    }
    return h.hex();
}

}  // namespace lineage::cache
