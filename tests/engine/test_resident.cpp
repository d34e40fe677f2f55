// engine::resident: all-zero pages of private anonymous memory go back to the kernel (mincore
// says they are no longer resident), pages with data stay and keep it, and a context whose
// buffers were released computes the same logits as one whose were not; a read-only shared file
// mapping's pages leave RSS and read back the same bytes, and a model whose weights were unmapped
// computes the same logits again.
#include "engine/context.h"
#include "engine/model.h"
#include "engine/resident.h"

#include <gguf.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace lineage::engine {
namespace {

const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));

// Which of the n pages at p are resident (mincore).
std::vector<bool> resident(void * p, size_t n) {
    std::vector<unsigned char> v(n);
    EXPECT_EQ(mincore(p, n * page, v.data()), 0);
    std::vector<bool> out(n);
    for (size_t i = 0; i < n; ++i) {
        out[i] = (v[i] & 1) != 0;
    }
    return out;
}

class Mapped : public ::testing::Test {
protected:
    void SetUp() override {
        base_ = static_cast<unsigned char *>(mmap(nullptr, n_ * page, PROT_READ | PROT_WRITE,
                                                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        ASSERT_NE(base_, MAP_FAILED);
        std::memset(base_, 0, n_ * page);  // every page resident, as llama.cpp's buffer clear leaves them
    }
    void TearDown() override { munmap(base_, n_ * page); }
    uintptr_t at(size_t i) const { return reinterpret_cast<uintptr_t>(base_) + i * page; }

    const size_t n_ = 16;
    unsigned char * base_ = nullptr;
};

TEST_F(Mapped, ZeroPagesGoBackAndPagesWithDataStay) {
    base_[3 * page + 17] = 0x5a;             // one byte in page 3
    base_[10 * page + page - 1] = 0x01;     // the last byte of page 10
    ASSERT_EQ(resident(base_, n_), std::vector<bool>(n_, true));

    EXPECT_EQ(release_zero_pages(at(0), at(n_)), (n_ - 2) * page);

    const auto r = resident(base_, n_);
    for (size_t i = 0; i < n_; ++i) {
        EXPECT_EQ(r[i], i == 3 || i == 10) << "page " << i;
    }
    EXPECT_EQ(base_[3 * page + 17], 0x5a);
    EXPECT_EQ(base_[10 * page + page - 1], 0x01);
    for (size_t i = 0; i < n_ * page; ++i) {
        if (i != 3 * page + 17 && i != 10 * page + page - 1) {
            ASSERT_EQ(base_[i], 0) << "byte " << i << " reads as zero after the release";
        }
    }
    // A released page comes back (zero-filled) when written.
    base_[5 * page] = 7;
    EXPECT_TRUE(resident(base_, n_)[5]);
    EXPECT_EQ(base_[5 * page], 7);
}

TEST_F(Mapped, RangeIsShrunkToWholePages) {
    // [page 2 + 1 byte, page 6 - 1 byte): only pages 3 and 4 lie wholly inside it.
    EXPECT_EQ(release_zero_pages(at(2) + 1, at(6) - 1), 2 * page);
    const auto r = resident(base_, n_);
    for (size_t i = 0; i < n_; ++i) {
        EXPECT_EQ(r[i], !(i == 3 || i == 4)) << "page " << i;
    }
}

TEST_F(Mapped, NothingToReleaseWhereEveryPageHasData) {
    for (size_t i = 0; i < n_; ++i) {
        base_[i * page + i] = 1;
    }
    EXPECT_EQ(release_zero_pages(at(0), at(n_)), 0u);
    EXPECT_EQ(resident(base_, n_), std::vector<bool>(n_, true));
}

TEST(Untouched, PagesNeverWrittenCountNothing) {
    const size_t n = 8;
    auto * p = static_cast<unsigned char *>(mmap(nullptr, n * page, PROT_READ | PROT_WRITE,
                                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(p, MAP_FAILED);
    p[2 * page] = 0;  // page 2 resident (written, still zero); the others never touched
    const auto start = reinterpret_cast<uintptr_t>(p);
    EXPECT_EQ(release_zero_pages(start, start + n * page), page) << "only page 2 was resident";
    EXPECT_EQ(resident(p, n), std::vector<bool>(n, false));
    munmap(p, n * page);
}

TEST(Untouched, PagesThatAreNotResidentAreNotRead) {
    // 1,024 pages never touched: reading them would fault in the zero page, one minor fault each.
    const size_t n = 1024;
    auto * p = static_cast<unsigned char *>(mmap(nullptr, n * page, PROT_READ | PROT_WRITE,
                                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(p, MAP_FAILED);
    // With transparent huge pages set to `always`, the write below could fault in a whole 2 MiB
    // page (512 resident zero pages): small pages only.
    madvise(p, n * page, MADV_NOHUGEPAGE);
    p[7 * page] = 0;  // one resident zero page among them
    const auto start = reinterpret_cast<uintptr_t>(p);
    rusage before{}, after{};
    getrusage(RUSAGE_SELF, &before);
    EXPECT_EQ(release_zero_pages(start, start + n * page), page);
    getrusage(RUSAGE_SELF, &after);
    EXPECT_LT(after.ru_minflt - before.ru_minflt, 64) << "the scan faulted untouched pages in";
    munmap(p, n * page);
}

TEST(Mappings, AnonymousMappingsListANewMappingAndNewMappingsFindsIt) {
    const auto before = anonymous_mappings();
    ASSERT_FALSE(before.empty()) << "/proc/self/maps lists the heap's and malloc's anonymous mappings";
    const size_t n = 64 * page;
    void * p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    const auto after = anonymous_mappings();
    const auto fresh = new_mappings(before, after, n);
    const auto start = reinterpret_cast<uintptr_t>(p);
    bool found = false;
    for (const auto & m : fresh) {
        found = found || (m.start <= start && start + n <= m.end);
    }
    EXPECT_TRUE(found) << "the new mapping is among the new ones";
    EXPECT_TRUE(new_mappings(after, after, 0).empty()) << "nothing is new against itself";
    munmap(p, n);
}

// A file mapped as llama.cpp maps a model (PROT_READ, MAP_SHARED), every page read: unmapping it
// lowers RSS by about its size, and every byte reads back the same; named byte ranges of it are
// mapped again before any read, and not the whole file; a file nobody maps, or a mapping of
// another file, is left alone.
TEST(FilePages, AReadOnlySharedMappingLeavesRssAndReadsBackTheSameBytes) {
    char path[] = "/tmp/lineage-test-resident-XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    const size_t n = 2048 * page;  // 8 MiB on 4 KiB pages
    std::vector<unsigned char> want(n);
    for (size_t i = 0; i < n; ++i) {
        want[i] = static_cast<unsigned char>((i * 131 + i / page) & 0xff);
    }
    ASSERT_EQ(write(fd, want.data(), n), static_cast<ssize_t>(n));
    EXPECT_EQ(unmap_file_pages(path), 0u) << "not mapped yet";
    auto * p = static_cast<const unsigned char *>(mmap(nullptr, n, PROT_READ, MAP_SHARED, fd, 0));
    ASSERT_NE(p, MAP_FAILED);
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i += page) {
        sum += p[i];  // every page mapped in
    }
    EXPECT_EQ(resident(const_cast<unsigned char *>(p), n / page), std::vector<bool>(n / page, true));
    const uint64_t dropped = unmap_file_pages(path);
    EXPECT_GE(dropped, n / 2) << "RSS fell by about the mapping's size (other threads may allocate meanwhile)";
    EXPECT_EQ(0, std::memcmp(p, want.data(), n)) << "the pages map again with the file's bytes";
    EXPECT_EQ(unmap_file_pages("/tmp/lineage-test-resident-none"), 0u);
    // map_file_ranges maps the pages holding the named byte ranges back in one call, before any
    // read, and not the whole file (the kernel may map neighbours from the page cache with them:
    // fault-around, large folios of up to 2 MiB); the whole file when named whole.
    ASSERT_GE(unmap_file_pages(path), n / 2);
    const size_t part = 16 * page;
    const uint64_t two = map_file_ranges(path, {{0, part}, {n / 2 + 100, n / 2 + 100 + part}});
    EXPECT_GE(two, 2 * part) << "RSS rose by at least the two ranges' pages";
    EXPECT_LE(two, n / 2) << "and not by the whole file";
    ASSERT_GE(unmap_file_pages(path), 2 * part);
    EXPECT_GE(map_file_ranges(path, {{0, n}}), n / 2) << "the whole file named: about all of it";
    EXPECT_EQ(0, std::memcmp(p, want.data(), n)) << "the same bytes";
    EXPECT_EQ(map_file_ranges("/tmp/lineage-test-resident-none", {{0, n}}), 0u);
    std::fprintf(stderr, "[resident] file mapping: %llu of %zu bytes left RSS (sum %llu)\n",
                 static_cast<unsigned long long>(dropped), n, static_cast<unsigned long long>(sum));
    munmap(const_cast<unsigned char *>(p), n);
    close(fd);
    std::remove(path);
}

class ReleasedContext : public ::testing::TestWithParam<std::string> {
protected:
    ReleasedContext() : m_(model_params{std::string(LINEAGE_TEST_MODELS_DIR) + "/tiny-" + GetParam() + ".gguf", 0}) {
        // As lineage-server's main() does: blocks of 1 MiB and more are mmap'd, so the KV buffer
        // is a mapping of its own (glibc's default threshold moves with the blocks freed, and a
        // buffer from the main heap is not among the new mappings).
        mallopt(M_MMAP_THRESHOLD, 1 << 20);
    }
    std::unique_ptr<context> make(bool release) {
        context_params cp;
        cp.n_ctx = 32768;
        cp.n_seq = 2;
        cp.n_batch = 512;
        cp.n_threads = 2;
        cp.release_zero_pages = release;
        return std::make_unique<context>(m_, cp);
    }
    model m_;
};

// The same prompt on a context with its zero pages released and on one without: bit-identical
// logits, and a state taken from the first restores into the second.
TEST_P(ReleasedContext, ComputesAsAContextWithoutTheRelease) {
    auto plain = make(false);
    auto released = make(true);
    EXPECT_EQ(plain->released_zero_bytes(), 0u);
    // The KV cache of 32768 cells is mostly unwritten: at least a MiB of it went back.
    EXPECT_GT(released->released_zero_bytes(), uint64_t{1} << 20);
    std::fprintf(stderr, "[resident] %s: %.1f MiB given back\n", GetParam().c_str(),
                 static_cast<double>(released->released_zero_bytes()) / (1 << 20));

    std::string text = "<|im_start|>system\nYou are a careful coding assistant.<|im_end|>\n";
    while (m_.tokenize(text).value().size() < 400) {
        text += "Every error names the file, line and column of its cause. ";
    }
    auto t = m_.tokenize(text).value();
    t.resize(400);
    const auto run = [&](context & ctx, seq_id s) {
        std::vector<batch_token> b;
        for (int32_t p = 0; p < 400; ++p) {
            b.push_back({t[static_cast<size_t>(p)], p, s, p == 399});
        }
        EXPECT_EQ(ctx.decode(b), decode_result::ok);
        const float * l = ctx.logits(399);
        return std::vector<float>(l, l + m_.n_vocab());
    };
    const auto a = run(*plain, 1);
    const auto b = run(*released, 1);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));

    const bytes st = released->get_state(1, false);
    ASSERT_TRUE(plain->set_state(0, st, false));
    EXPECT_EQ(plain->seq_pos_max(0), 399);

    // The model's weights unmapped (as the scheduler does after its probe, on the CPU alone):
    // they map again on the next pass, which computes the same logits.
    EXPECT_GT(unmap_file_pages(m_.path()), uint64_t{1} << 20) << "the tiny model's weights were resident";
    auto again = make(true);
    const auto c = run(*again, 1);
    EXPECT_EQ(0, std::memcmp(a.data(), c.data(), a.size() * sizeof(float)));
}

// The weights a pass reads whole: every tensor's bytes but the token embeddings' (the tiny models
// have an output.weight of their own), in file order, within the file.
TEST_P(ReleasedContext, PassWeightRangesCoverEveryTensorButTheTokenEmbeddings) {
    gguf_init_params gp{};
    gp.no_alloc = true;
    gguf_context * g = gguf_init_from_file(m_.path().c_str(), gp);
    ASSERT_NE(g, nullptr);
    ASSERT_GE(gguf_find_tensor(g, "output.weight"), 0);
    const auto ranges = m_.pass_weight_ranges();
    ASSERT_FALSE(ranges.empty());
    const auto inside = [&](uint64_t begin, uint64_t end) {
        return std::any_of(ranges.begin(), ranges.end(),
                           [&](const auto & r) { return r.first <= begin && end <= r.second; });
    };
    const uint64_t data = gguf_get_data_offset(g);
    for (int64_t i = 0; i < gguf_get_n_tensors(g); ++i) {
        const uint64_t begin = data + gguf_get_tensor_offset(g, i);
        const uint64_t end = begin + gguf_get_tensor_size(g, i);
        const std::string name = gguf_get_tensor_name(g, i);
        if (name == "token_embd.weight") {
            EXPECT_FALSE(std::any_of(ranges.begin(), ranges.end(), [&](const auto & r) {
                return r.first < end && begin < r.second;
            })) << "no range overlaps the token embeddings";
        } else {
            EXPECT_TRUE(inside(begin, end)) << name;
        }
    }
    gguf_free(g);
    for (size_t k = 1; k < ranges.size(); ++k) {
        EXPECT_LT(ranges[k - 1].second, ranges[k].first) << "sorted, apart";
    }
    EXPECT_LE(ranges.back().second, std::filesystem::file_size(m_.path()));
}

INSTANTIATE_TEST_SUITE_P(Archs, ReleasedContext, ::testing::Values("qwen3", "qwen35"));

}  // namespace
}  // namespace lineage::engine
