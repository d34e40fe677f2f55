// server::warmup: the warm-up renderer's thread; see warmup.h.
#include "server/run/warmup.h"

#include "scheduler/scheduler.h"
#include "server/prepare/chat_prepare.h"

#include <spdlog/spdlog.h>

namespace lineage::server {

warmer::warmer(const chat_preparer & prep, scheduler::scheduler & sched, std::atomic<uint64_t> & next_id, bool enabled)
    : prep_(prep), sched_(sched), next_id_(next_id), enabled_(enabled) {
    if (enabled_) {
        thread_ = std::thread([this] { run(); });
    }
}

warmer::~warmer() {
    {
        util::lock_guard lk(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) {
        thread_.join();
    }
}

void warmer::after_reply(std::shared_ptr<const chat_request> conv, engine::chat_parsed reply,
                         const scheduler::cache_hints & hints, std::vector<float> lora, uint64_t lora_epoch) {
    if (!enabled_ || !conv || !hints.cache_prompt) {
        return;
    }
    {
        util::lock_guard lk(mu_);
        if (stopping_) {
            return;
        }
        if (jobs_.size() >= max_pending) {
            jobs_.pop_front();
        }
        jobs_.push_back({std::move(conv), std::move(reply), hints, std::move(lora), lora_epoch});
    }
    cv_.notify_one();
}

bool warmer::wait_for_idle_engine(const job & j) {
    util::unique_lock lk(mu_);
    for (;;) {
        if (stopping_) {
            return false;
        }
        for (const auto & newer : jobs_) {
            // Conversations without a session key share "": never taken for one another.
            if (!j.hints.session_key.empty() && newer.hints.bucket == j.hints.bucket &&
                newer.hints.session_key == j.hints.session_key) {
                superseded_++;
                return false;
            }
        }
        if (!sched_.serving()) {
            return true;
        }
        lk.wait_until(cv_, std::chrono::steady_clock::now() + idle_poll);
    }
}

void warmer::run() {
    for (;;) {
        job j;
        {
            util::unique_lock lk(mu_);
            while (!stopping_ && jobs_.empty()) {
                lk.wait(cv_);
            }
            if (stopping_) {
                return;
            }
            j = std::move(jobs_.front());
            jobs_.pop_front();
        }
        // Rendered once no request is queued or running: the scheduler starts a warm-up only on
        // an idle engine, so a render on a busy server only takes CPU from the requests (on the
        // CPU the engine computes on every core), and is wasted when the conversation's next
        // request comes first, as it does in a closed loop. A newer reply of the same
        // conversation replaces the job meanwhile.
        if (!wait_for_idle_engine(j)) {
            continue;
        }
        auto w = std::make_shared<scheduler::generation_request>();
        w->id = next_id_.fetch_add(1);
        w->warmup = true;
        // With the conversation's images: their pseudo-tokens in the prefix, their chunks to
        // decode at those positions (the next request restores past them).
        w->prompt = prep_.next_turn_prefix(*j.conv, j.reply, w->media, w->prepared);
        if (w->prompt.empty() || static_cast<int32_t>(w->prompt.size()) >= sched_.max_sequence_tokens()) {
            continue;  // not renderable, or the next request cannot fit either
        }
        w->cache = j.hints;
        w->cache.history_tokens = -1;  // the entry keeps the absorbed one's boundary
        w->cache.breakpoint_tokens.clear();
        // Positions of the reply's prompt: not this prefix's (the reply is rendered into it).
        w->cache.line_starts.clear();
        w->cache.volatile_starts.clear();
        w->cache.last_user_tokens = -1;
        w->cache.multi_turn = false;  // the conversation has not come back yet: its plan is no use either
        // The same adapters as the reply: the state goes under the same key (lora_id).
        w->lora = std::move(j.lora);
        w->lora_epoch = j.lora_epoch;
        spdlog::debug("warm-up {}: next turn prefix of {} tokens queued", w->id, w->prompt.size());
        sched_.submit(std::move(w));
    }
}

}  // namespace lineage::server
