// Unit tests of cache::blob_pool: a freed buffer is handed to the next take() of its size
// (same memory, no allocation), within the bounds on buffers, bytes and idle time; small and
// oversized buffers are never kept; make_blob returns a blob's buffer to the process's pool
// when its last reference goes.
#include "cache/blob_pool.h"

#include <gtest/gtest.h>

#include <thread>

namespace lineage::cache {
namespace {

constexpr size_t mb = 1 << 20;

TEST(BlobPool, AFreedBufferServesTheNextTakeOfItsSize) {
    blob_pool p;
    p.configure(8, 64 * mb, 60.0);
    blob a = p.take(5 * mb);
    ASSERT_EQ(a.size(), 5 * mb);
    const uint8_t * mem = a.data();
    EXPECT_EQ(p.stats().allocated, 1);
    p.give(std::move(a));
    EXPECT_EQ(p.stats().idle_buffers, 1);
    EXPECT_EQ(p.stats().idle_bytes, 5 * mb);
    blob b = p.take(5 * mb - 100);  // a little smaller: the same buffer, resized down
    EXPECT_EQ(b.data(), mem);
    EXPECT_EQ(b.size(), 5 * mb - 100);
    EXPECT_EQ(p.stats().reused, 1);
    EXPECT_EQ(p.stats().idle_buffers, 0);
    EXPECT_EQ(p.stats().idle_bytes, 0u);
}

TEST(BlobPool, ABufferMuchLargerThanTheTakeIsKeptForALargerOne) {
    blob_pool p;
    p.configure(8, 64 * mb, 60.0);
    p.give(p.take(8 * mb));
    blob small = p.take(4 * mb);  // 8 MiB > 4 MiB * 5/4: a new buffer
    EXPECT_EQ(p.stats().reused, 0);
    EXPECT_EQ(p.stats().allocated, 2);
    EXPECT_EQ(p.stats().idle_buffers, 1);
    blob large = p.take(7 * mb);  // 8 MiB <= 7 MiB * 5/4
    EXPECT_EQ(p.stats().reused, 1);
}

TEST(BlobPool, TheBoundsDropTheOldestAndNeverKeepSmallOrOversizedBuffers) {
    blob_pool p;
    p.configure(2, 12 * mb, 60.0);
    p.give(blob(blob_pool::min_bytes - 1));  // cheap to allocate: not kept
    EXPECT_EQ(p.stats().idle_buffers, 0);
    p.give(blob(13 * mb));  // over the byte bound alone
    EXPECT_EQ(p.stats().idle_buffers, 0);
    blob first(5 * mb);
    const uint8_t * first_mem = first.data();
    p.give(std::move(first));
    p.give(blob(5 * mb));
    p.give(blob(5 * mb));  // a third: the oldest goes (2 buffers)
    EXPECT_EQ(p.stats().idle_buffers, 2);
    EXPECT_EQ(p.stats().idle_bytes, 10 * mb);
    blob t1 = p.take(5 * mb);
    blob t2 = p.take(5 * mb);
    EXPECT_NE(t1.data(), first_mem);
    EXPECT_NE(t2.data(), first_mem);
    p.give(blob(6 * mb));
    p.give(blob(6 * mb));  // 12 MiB: at the byte bound
    p.give(blob(6 * mb));  // 18 > 12: the oldest goes
    EXPECT_EQ(p.stats().idle_bytes, 12 * mb);
    p.configure(1, 12 * mb, 60.0);  // tighter bounds apply at once
    EXPECT_EQ(p.stats().idle_buffers, 1);
    p.configure(0, 12 * mb, 60.0);
    EXPECT_EQ(p.stats().idle_buffers, 0);
    p.give(blob(5 * mb));
    EXPECT_EQ(p.stats().idle_buffers, 0);
}

TEST(BlobPool, IdleBuffersExpire) {
    blob_pool p;
    p.configure(8, 64 * mb, 0.05);
    p.give(blob(5 * mb));
    p.trim();
    EXPECT_EQ(p.stats().idle_buffers, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    p.trim();
    EXPECT_EQ(p.stats().idle_buffers, 0);
    p.configure(8, 64 * mb, 60.0);
    p.give(blob(5 * mb));
    p.trim(/*all=*/true);
    EXPECT_EQ(p.stats().idle_buffers, 0);
}

TEST(BlobPool, MakeBlobReturnsTheBufferWhenTheLastReferenceGoes) {
    auto & pool = blob_pool::instance();
    pool.configure(8, 64 * mb, 60.0);
    pool.trim(/*all=*/true);
    blob b = take_blob(3 * mb);
    b[0] = 7;
    const uint8_t * mem = b.data();
    blob_ptr shared = make_blob(std::move(b));
    blob_ptr other = shared;
    shared.reset();
    EXPECT_EQ(pool.stats().idle_buffers, 0);  // still referenced
    EXPECT_EQ((*other)[0], 7);
    other.reset();
    EXPECT_EQ(pool.stats().idle_buffers, 1);
    const int64_t reused = pool.stats().reused;
    blob again = take_blob(3 * mb);
    EXPECT_EQ(again.data(), mem);
    EXPECT_EQ(pool.stats().reused, reused + 1);
}

}  // namespace
}  // namespace lineage::cache
