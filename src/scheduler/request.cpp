// scheduler::request: the event channel between the engine thread and an HTTP thread, and the
// names of finish reasons; see request.h.
#include "scheduler/request.h"

namespace lineage::scheduler {

const char * to_string(finish_reason r) {
    switch (r) {
        case finish_reason::none: return "none";
        case finish_reason::stop: return "stop";
        case finish_reason::length: return "length";
        case finish_reason::cancelled: return "cancelled";
        case finish_reason::error: return "error";
    }
    return "?";
}

void event_channel::push(generation_event e) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        q_.push_back(std::move(e));
    }
    cv_.notify_one();
}

std::optional<generation_event> event_channel::pop(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lk(mu_);
    if (!cv_.wait_for(lk, timeout, [this] { return !q_.empty(); })) {
        return std::nullopt;
    }
    generation_event e = std::move(q_.front());
    q_.pop_front();
    return e;
}

}  // namespace lineage::scheduler
