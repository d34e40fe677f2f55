// cache::tier_worker: the queue and thread of the tiers below RAM (tier_worker.h).
#include "cache/tier/tier_worker.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <exception>

namespace lineage::cache {

tier_worker::tier_worker(tier_io & io, worker_config cfg) : io_(io), cfg_(std::move(cfg)) {}

tier_worker::~tier_worker() {
    stop();
}

void tier_worker::start() {
    thread_ = std::thread([this] { run(); });
}

void tier_worker::stop() {
    {
        util::lock_guard lk(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) {
        thread_.join();
    }
}

void tier_worker::push(job j, bool front) {
    {
        util::lock_guard lk(mu_);
        queued_writes_ += j.k == job::kind::write ? 1 : 0;
        if (front) {
            // Behind the loads already waiting: they are as urgent and came first.
            auto at = queue_.begin();
            while (at != queue_.end() && at->k == job::kind::load) {
                ++at;
            }
            queue_.insert(at, std::move(j));
        } else {
            queue_.push_back(std::move(j));
        }
    }
    cv_.notify_one();
}

void tier_worker::complete(tier_completion c) {
    util::lock_guard lk(mu_);
    completions_.push_back(std::move(c));
}

bool tier_worker::write(tier_write w) {
    {
        util::lock_guard lk(mu_);
        if (cfg_.max_queued_writes > 0 && queued_writes_ >= cfg_.max_queued_writes) {
            completions_.push_back({w.entry_id, 0, util::status::error(cfg_.name + ": queue full")});
            return false;
        }
    }
    job j;
    j.k = job::kind::write;
    j.w = std::move(w);
    push(std::move(j), false);
    return true;
}

std::future<tier_load_result> tier_worker::load(copy_id id, tier_expect want, std::function<void()> on_done) {
    job j;
    j.k = job::kind::load;
    j.id = id;
    j.want = std::move(want);
    j.load_done = std::make_shared<std::promise<tier_load_result>>();
    j.on_done = std::move(on_done);
    auto fut = j.load_done->get_future();
    push(std::move(j), true);
    return fut;
}

void tier_worker::remove(std::vector<copy_id> ids) {
    if (ids.empty()) {
        return;
    }
    job j;
    j.k = job::kind::remove;
    j.ids = std::move(ids);
    push(std::move(j), false);
}

std::pair<int64_t, uint64_t> tier_worker::reset(std::optional<std::string> tenant) {
    job j;
    j.k = job::kind::reset;
    j.tenant = std::move(tenant);
    j.reset_done = std::make_shared<std::promise<std::pair<int64_t, uint64_t>>>();
    auto fut = j.reset_done->get_future();
    push(std::move(j), false);
    return fut.get();
}

void tier_worker::drain(bool tick_first) {
    if (tick_first) {
        request_tick();
    }
    job j;
    j.k = job::kind::barrier;
    j.barrier = std::make_shared<std::promise<void>>();
    auto fut = j.barrier->get_future();
    push(std::move(j), false);
    fut.wait();
}

void tier_worker::request_tick() {
    {
        util::lock_guard lk(mu_);
        tick_now_ = true;
    }
    cv_.notify_one();
}

std::vector<tier_completion> tier_worker::take_completions() {
    util::lock_guard lk(mu_);
    std::vector<tier_completion> out;
    out.swap(completions_);
    return out;
}

int64_t tier_worker::queued() const {
    util::lock_guard lk(mu_);
    return static_cast<int64_t>(queue_.size());
}

void tier_worker::execute(job & j) {
    switch (j.k) {
        case job::kind::write: {
            const auto t0 = std::chrono::steady_clock::now();
            tier_completion c = io_.write_now(j.w);
            c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            complete(std::move(c));
            break;
        }
        case job::kind::load: {
            const auto t0 = std::chrono::steady_clock::now();
            tier_load_result r = io_.load_now(j.id, j.want);
            r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            j.load_done->set_value(std::move(r));
            j.load_done.reset();
            if (j.on_done) {
                j.on_done();
            }
            break;
        }
        case job::kind::remove: io_.remove_now(j.ids); break;
        case job::kind::reset:
            j.reset_done->set_value(io_.reset_now(j.tenant));
            j.reset_done.reset();
            break;
        case job::kind::barrier: j.barrier->set_value(); break;
    }
}

// A job that threw: whoever waits on it gets an answer (never a broken promise).
void tier_worker::fail(job & j, const std::string & what) {
    spdlog::error("{}: {}", cfg_.name, what);
    if (j.load_done) {
        tier_load_result r;
        r.error = tier_load_error::io;
        r.detail = what;
        j.load_done->set_value(std::move(r));
        if (j.on_done) {
            j.on_done();
        }
    }
    if (j.reset_done) {
        j.reset_done->set_value({0, 0});
    }
    if (j.k == job::kind::write) {
        complete({j.w.entry_id, 0, util::status::error(cfg_.name + ": " + what)});
    }
}

void tier_worker::run() {
    using clock = std::chrono::steady_clock;
    auto next_tick = clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(cfg_.tick_s));
    for (;;) {
        std::optional<job> j;
        bool tick = false;
        {
            util::unique_lock lk(mu_);
            while (!stopping_ && queue_.empty() && !tick_now_) {
                if (cfg_.tick_s <= 0) {
                    lk.wait(cv_);
                } else if (lk.wait_until(cv_, next_tick) == std::cv_status::timeout) {
                    break;
                }
            }
            if (stopping_ && queue_.empty()) {
                break;  // everything queued is done (writes at shutdown included)
            }
            tick = tick_now_ || (cfg_.tick_s > 0 && clock::now() >= next_tick);
            if (!queue_.empty()) {
                j = std::move(queue_.front());
                queue_.pop_front();
                queued_writes_ -= j->k == job::kind::write ? 1 : 0;
                tick = tick && j->k != job::kind::load;  // a request waits on the load: tick after it
            }
            if (tick) {
                tick_now_ = false;
            }
        }
        if (tick) {
            next_tick = clock::now() +
                        std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(cfg_.tick_s));
            try {
                if (io_.tick_now()) {
                    util::lock_guard lk(mu_);
                    tick_now_ = true;  // more to do at once
                }
            } catch (const std::exception & e) {
                spdlog::error("{}: {}", cfg_.name, e.what());
            }
        }
        if (j) {
            try {
                execute(*j);
            } catch (const std::exception & e) {
                fail(*j, e.what());
            }
        }
    }
}

}  // namespace lineage::cache
