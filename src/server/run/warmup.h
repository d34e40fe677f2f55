// server::warmup: after a reply, the background warm-up of the conversation's next turn
// (docs/prompt-cache.md "Warm-up"). The next request of a conversation re-renders the reply as a
// past assistant turn, which templates like Qwen3.5's render differently from the generated
// tokens (thinking stripped); without a warm-up that request re-prefills the reply. The warmer
// renders the conversation + the reply + a placeholder next message on its own thread (the
// reply's HTTP thread goes back to its client at once), cuts it where the placeholder starts
// (chat_preparer::next_turn_prefix), and submits that prefix to the scheduler as a warm-up job
// under the request's cache key; the scheduler runs it when the engine is idle. A conversation's
// images go with it: the prefix holds their pseudo-tokens and the job their chunks, so the
// scheduler decodes them where the next request will restore past them.
// Thread safety: after_reply() may be called from any thread; one worker thread renders.
// Ownership: borrows the preparer and the scheduler, which must outlive it (the destructor joins).
#pragma once

#include "engine/chat_template.h"
#include "scheduler/request.h"
#include "server/request/chat_request.h"
#include "util/thread_annotations.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace lineage::scheduler {
class scheduler;
}

namespace lineage::server {

class chat_preparer;

class warmer {
public:
    /** `enabled` false (--cache-warmup=false, or the cache off): after_reply() does nothing and
     *  no thread is started. `next_id`: the server's request-id counter (warm-ups get ids too). */
    warmer(const chat_preparer & prep, scheduler::scheduler & sched, std::atomic<uint64_t> & next_id, bool enabled);
    ~warmer();
    warmer(const warmer &) = delete;
    warmer & operator=(const warmer &) = delete;

    /** A reply to `conv` finished (stop or length) and was sent: queue the warm-up of its next
     *  turn. `hints`: the cache hints `conv` was served with (bucket, session, anchors); nothing
     *  happens when it bypassed the cache. Returns at once; at most `max_pending` jobs wait for
     *  the renderer (older ones are dropped). `lora`, `lora_epoch`: the adapter scales the
     *  reply was computed with and their generation (the warm-up must compute with the same
     *  adapters: its state goes under the same key, whose lora_id names them). */
    void after_reply(std::shared_ptr<const chat_request> conv, engine::chat_parsed reply,
                     const scheduler::cache_hints & hints, std::vector<float> lora = {}, uint64_t lora_epoch = 0);

    static constexpr size_t max_pending = 16;
    /** How often a job waiting for an idle engine looks again (scheduler::serving()). */
    static constexpr std::chrono::milliseconds idle_poll{10};

    /** Jobs dropped unrendered because a newer reply of the same conversation came first
     *  (the engine was serving meanwhile). */
    uint64_t superseded() const { return superseded_.load(); }

private:
    struct job {
        std::shared_ptr<const chat_request> conv;
        engine::chat_parsed reply;
        scheduler::cache_hints hints;
        std::vector<float> lora;
        uint64_t lora_epoch = 0;
    };
    void run();
    /** Waits until the scheduler serves no request (true), or until the job is replaced by a
     *  newer one of its conversation or the warmer stops (false). */
    bool wait_for_idle_engine(const job & j);

    const chat_preparer & prep_;
    scheduler::scheduler & sched_;
    std::atomic<uint64_t> & next_id_;
    bool enabled_;
    util::mutex mu_;
    std::condition_variable cv_;
    std::deque<job> jobs_ GUARDED_BY(mu_);
    bool stopping_ GUARDED_BY(mu_) = false;
    std::atomic<uint64_t> superseded_{0};
    std::thread thread_;
};

}  // namespace lineage::server
