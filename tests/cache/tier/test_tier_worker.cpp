// Tests of cache::tier_worker, the queue and thread every tier below RAM runs on, against an
// in-memory tier (no files, no Redis): job order (loads ahead of writes, in their own order),
// completions, the write bound, drain and stop, what a throwing job answers, and the tick.
#include "cache/tier/tier_worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace lineage::cache {
namespace {

// An in-memory tier: copies are records by id; every call is logged in order. While `gate` is
// closed, the first job blocks (so that jobs queue up behind it).
class memory_tier : public tier_io {
public:
    tier_completion write_now(tier_write & w) override {
        wait_gate();
        log("write " + std::to_string(w.entry_id));
        if (w.entry_id == throw_on) {
            throw std::runtime_error("write failed on purpose");
        }
        std::lock_guard lk(mu);
        copies[next_id] = w.rec;
        return {w.entry_id, next_id++, util::status::ok()};
    }
    tier_load_result load_now(copy_id id, const tier_expect & want) override {
        wait_gate();
        log("load " + std::to_string(id));
        if (id == throw_on) {
            throw std::runtime_error("load failed on purpose");
        }
        tier_load_result r;
        std::lock_guard lk(mu);
        auto it = copies.find(id);
        if (it == copies.end() || (!want.bucket.empty() && it->second.bucket != want.bucket)) {
            r.error = tier_load_error::missing;
            return r;
        }
        r.record = it->second;
        return r;
    }
    void remove_now(const std::vector<copy_id> & ids) override {
        log("remove " + std::to_string(ids.size()));
        std::lock_guard lk(mu);
        for (copy_id id : ids) {
            copies.erase(id);
        }
    }
    std::pair<int64_t, uint64_t> reset_now(const std::optional<std::string> & tenant) override {
        log("reset" + (tenant ? " " + *tenant : std::string()));
        if (tenant && *tenant == "boom") {
            throw std::runtime_error("reset failed on purpose");
        }
        std::lock_guard lk(mu);
        const auto n = static_cast<int64_t>(copies.size());
        copies.clear();
        return {n, 0};
    }
    bool tick_now() override {
        const int n = ++ticks;
        log("tick");
        return n < more_ticks;
    }

    void log(std::string s) {
        std::lock_guard lk(mu);
        calls.push_back(std::move(s));
    }
    std::vector<std::string> log_copy() {
        std::lock_guard lk(mu);
        return calls;
    }
    void wait_gate() {
        std::unique_lock lk(mu);
        gate_cv.wait(lk, [&] { return open; });
    }
    void open_gate() {
        {
            std::lock_guard lk(mu);
            open = true;
        }
        gate_cv.notify_all();
    }

    std::mutex mu;
    std::condition_variable gate_cv;
    bool open = true;
    std::map<copy_id, copy_record> copies;
    copy_id next_id = 1;
    std::vector<std::string> calls;
    std::atomic<int> ticks{0};
    int more_ticks = 0;   // tick_now says "more" until this many ticks
    uint64_t throw_on = 0;
};

tier_write write_of(uint64_t entry, std::string bucket = "b") {
    tier_write w;
    w.entry_id = entry;
    w.rec.bucket = std::move(bucket);
    w.rec.toks = {1, 2, 3};
    return w;
}

TEST(TierWorker, WritesCompleteInOrderAndLoadsJumpTheQueue) {
    memory_tier io;
    tier_worker w(io, worker_config{.name = "memory tier"});
    w.start();
    io.open = false;  // the first write blocks; the rest queue behind it
    w.write(write_of(1));
    while (io.log_copy().empty() && w.queued() > 0) {
        std::this_thread::yield();
    }
    w.write(write_of(2));
    w.write(write_of(3));
    auto l1 = w.load(1, {});
    auto l2 = w.load(2, {.bucket = "other", .prefix = {}});
    EXPECT_GE(w.queued(), 4);
    io.open_gate();
    const tier_load_result r1 = l1.get();
    const tier_load_result r2 = l2.get();
    w.drain();
    // Loads ran before the queued writes, in the order they came; the first write was running.
    const std::vector<std::string> want{"write 1", "load 1", "load 2", "write 2", "write 3"};
    EXPECT_EQ(io.log_copy(), want);
    ASSERT_EQ(r1.error, tier_load_error::none);
    EXPECT_EQ(r1.record->bucket, "b");
    EXPECT_EQ(r2.error, tier_load_error::missing);  // copy 2 not written yet when it ran
    const auto done = w.take_completions();
    ASSERT_EQ(done.size(), 3u);
    for (size_t i = 0; i < done.size(); ++i) {
        EXPECT_EQ(done[i].entry_id, i + 1);
        EXPECT_EQ(done[i].file, i + 1);
        EXPECT_TRUE(done[i].result);
    }
    EXPECT_TRUE(w.take_completions().empty());
    EXPECT_EQ(w.queued(), 0);
}

TEST(TierWorker, WritesPastTheBoundAreDroppedWithAFailedCompletion) {
    memory_tier io;
    tier_worker w(io, worker_config{.name = "memory tier", .max_queued_writes = 2});
    io.open = false;
    w.start();
    EXPECT_TRUE(w.write(write_of(1)));
    while (w.queued() > 0) {  // 1 is running (blocked): nothing queued
        std::this_thread::yield();
    }
    EXPECT_TRUE(w.write(write_of(2)));
    EXPECT_TRUE(w.write(write_of(3)));
    EXPECT_FALSE(w.write(write_of(4)));  // two queued: the bound
    io.open_gate();
    w.drain();
    EXPECT_TRUE(w.write(write_of(5)));  // the queue drained: room again
    w.drain();
    const auto done = w.take_completions();
    ASSERT_EQ(done.size(), 5u);
    EXPECT_EQ(done[0].entry_id, 4u);  // the drop is recorded at once
    EXPECT_EQ(done[0].file, 0u);
    EXPECT_EQ(done[0].result.message(), "memory tier: queue full");
    EXPECT_EQ(io.copies.size(), 4u);
}

TEST(TierWorker, AThrowingJobStillAnswersEveryoneWaiting) {
    memory_tier io;
    io.throw_on = 7;
    tier_worker w(io, worker_config{.name = "memory tier"});
    w.start();
    std::promise<void> woken;  // on_done runs after the future is ready: wait for it too
    const tier_load_result r = w.load(7, {}, [&] { woken.set_value(); }).get();
    EXPECT_EQ(r.error, tier_load_error::io);
    EXPECT_EQ(r.detail, "load failed on purpose");
    EXPECT_EQ(woken.get_future().wait_for(std::chrono::seconds(5)), std::future_status::ready);
    w.write(write_of(7));
    w.drain();
    const auto done = w.take_completions();
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].file, 0u);
    EXPECT_EQ(done[0].result.message(), "memory tier: write failed on purpose");
    EXPECT_EQ(w.reset(std::string("boom")), (std::pair<int64_t, uint64_t>{0, 0}));
    // The worker goes on serving.
    w.write(write_of(8));
    EXPECT_EQ(w.reset(std::nullopt), (std::pair<int64_t, uint64_t>{1, 0}));
}

TEST(TierWorker, StopFinishesTheQueuedWrites) {
    memory_tier io;
    {
        tier_worker w(io, worker_config{.name = "memory tier"});
        io.open = false;
        w.start();
        for (uint64_t e = 1; e <= 5; ++e) {
            w.write(write_of(e));
        }
        w.remove({1, 2});
        std::thread opener([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            io.open_gate();
        });
        w.stop();
        opener.join();
    }
    EXPECT_EQ(io.log_copy().size(), 6u);
    EXPECT_EQ(io.copies.size(), 3u);  // 5 written, 2 removed after them
}

TEST(TierWorker, TicksWhileIdleOnRequestAndAgainWhileMoreIsDue) {
    memory_tier io;
    tier_worker w(io, worker_config{.name = "memory tier", .tick_s = 0.02});
    w.start();
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (io.ticks < 2 && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_GE(io.ticks, 2);  // on its own, every tick_s
    w.stop();

    // drain(tick_first) ticks before its barrier; while tick_now says "more" (three times) the
    // worker ticks again at once, then waits tick_s (an hour here) for the next.
    memory_tier io2;
    io2.more_ticks = 4;
    tier_worker w2(io2, worker_config{.name = "memory tier", .tick_s = 3600});
    w2.start();
    w2.drain(/*tick_first=*/true);
    EXPECT_GE(io2.ticks, 1);
    const auto until2 = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (io2.ticks < 4 && std::chrono::steady_clock::now() < until2) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(io2.ticks, 4);
    // Without tick_s a worker ticks only on request.
    memory_tier io3;
    tier_worker w3(io3, worker_config{.name = "memory tier"});
    w3.start();
    w3.write(write_of(1));
    w3.drain();
    EXPECT_EQ(io3.ticks, 0);
    w3.drain(/*tick_first=*/true);
    EXPECT_EQ(io3.ticks, 1);
}

}  // namespace
}  // namespace lineage::cache
