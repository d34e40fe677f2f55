// scheduler::admission: the retry hold and the warm-up queue; see admission.h.
#include "scheduler/admission.h"

#include "cache/types.h"

#include <algorithm>

namespace lineage::scheduler {

namespace {

// True when `longer` starts with `head` (all of it).
bool extends(const std::vector<token> & longer, const std::vector<token> & head) {
    return longer.size() >= head.size() && std::equal(head.begin(), head.end(), longer.begin());
}

}  // namespace

const slot * repeated_by(const std::vector<slot> & slots, const generation_request & r) {
    if (!r.cache.cache_prompt || r.warmup) {
        return nullptr;
    }
    for (const auto & s : slots) {
        if ((s.ph != slot::phase::prefill && s.ph != slot::phase::decode) || !s.use_cache || !s.req ||
            s.req->warmup || !s.req->answers_probe || s.req->cancelled->load() || s.req->cache.bucket != r.cache.bucket) {
            continue;
        }
        const auto & p = s.req->prompt;
        if (p.size() < 2) {
            continue;
        }
        const int32_t lcp = cache::common_prefix(p, r.prompt);
        if (lcp >= static_cast<int32_t>(p.size()) - 1) {
            return &s;
        }
    }
    return nullptr;
}

bool retry_hold(const std::vector<slot> & slots, generation_request & r, std::chrono::steady_clock::time_point now,
                std::chrono::milliseconds limit) {
    const slot * s = repeated_by(slots, r);
    if (s == nullptr) {
        return false;  // none, or it was cancelled meanwhile (committed before r is planned)
    }
    if (!r.held_since) {
        r.held_since = now;
        s->req->probe->store(probe_state::asked);
        return true;
    }
    if (s->req->probe->load() == probe_state::alive) {
        return false;  // a concurrent request with the same prompt, not a retry
    }
    return now - *r.held_since < limit;
}

const slot * prefix_hold(const std::vector<slot> & slots, const generation_request & r, bool hybrid, int32_t stored,
                         int32_t min_prefix) {
    if (!r.cache.cache_prompt || r.warmup || !r.media.empty() || r.prompt.size() < 2) {
        return nullptr;
    }
    for (const auto & s : slots) {
        if (s.ph != slot::phase::prefill || !s.use_cache || !s.req || s.req->warmup || !s.req->media.empty() ||
            s.req->cache.bucket != r.cache.bucket) {
            continue;
        }
        const int32_t lcp =
            std::min(cache::common_prefix(s.req->prompt, r.prompt), static_cast<int32_t>(r.prompt.size()) - 1);
        int32_t point = hybrid ? 0 : lcp;
        if (hybrid) {
            if (s.prompt_size() <= lcp) {
                point = s.prompt_size();
            }
            for (const auto & c : s.plan.captures) {
                if (c.n_tokens <= lcp) {
                    point = std::max(point, c.n_tokens);
                }
            }
        }
        if (point >= min_prefix && point > stored && s.n_past < point) {
            return &s;
        }
    }
    return nullptr;
}

std::vector<size_t> admission_order(const std::deque<std::shared_ptr<generation_request>> & queue,
                                    const std::vector<int64_t> & new_tokens) {
    std::vector<size_t> order(queue.size());
    for (size_t i = 0; i < order.size(); ++i) {
        order[i] = i;
    }
    auto starving = [&](size_t i) { return queue[i]->passed_over >= max_passed_over; };
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        if (starving(a) != starving(b)) {
            return starving(a);
        }
        return !starving(a) && new_tokens[a] < new_tokens[b];
    });
    return order;
}

bool admission_blocked(int64_t new_tokens, int32_t long_tokens, int32_t long_running, int32_t parallel) {
    return new_tokens > long_tokens && long_running >= std::max(1, parallel - 1);
}

void count_passed_over(std::deque<std::shared_ptr<generation_request>> & queue, const std::vector<bool> & taken) {
    bool later_taken = false;
    for (size_t i = queue.size(); i-- > 0;) {
        if (taken[i]) {
            later_taken = true;
        } else if (later_taken) {
            queue[i]->passed_over++;
        }
    }
}

void warmup_queue::push(std::shared_ptr<generation_request> job) {
    received++;
    renders += job->prepared.renders;
    tokenizations += job->prepared.tokenizations;
    // One job per conversation: a newer prefix that extends a queued one replaces it.
    for (auto it = q_.begin(); it != q_.end(); ++it) {
        if ((*it)->cache.bucket == job->cache.bucket && (*it)->cache.session_key == job->cache.session_key &&
            extends(job->prompt, (*it)->prompt)) {
            q_.erase(it);
            replaced++;
            break;
        }
    }
    if (q_.size() >= capacity_) {
        q_.pop_front();
        dropped++;
    }
    q_.push_back(std::move(job));
}

void warmup_queue::push_front(std::shared_ptr<generation_request> job) {
    q_.push_front(std::move(job));
}

std::shared_ptr<generation_request> warmup_queue::pop() {
    if (q_.empty()) {
        return nullptr;
    }
    auto j = std::move(q_.front());
    q_.pop_front();
    return j;
}

}  // namespace lineage::scheduler
