// scheduler::request: the event channel between the engine thread and an HTTP thread, and the
// names of finish reasons; see request.h.
#include "scheduler/request.h"

namespace lineage::scheduler {

std::string_view to_string(failure_kind k) {
    switch (k) {
        case failure_kind::prompt_too_long: return "prompt_too_long";
        case failure_kind::bad_grammar: return "bad_grammar";
        case failure_kind::grammar_too_costly: return "grammar_too_costly";
        case failure_kind::no_free_sequence: return "no_free_sequence";
        case failure_kind::kv_full: return "kv_full";
        case failure_kind::decode_failed: return "decode_failed";
        case failure_kind::shutting_down: return "shutting_down";
    }
    return "?";
}

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
        util::lock_guard lk(mu_);
        q_.push_back(std::move(e));
    }
    cv_.notify_one();
}

std::optional<generation_event> event_channel::pop(std::chrono::milliseconds timeout) {
    util::unique_lock lk(mu_);
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (q_.empty()) {
        if (lk.wait_until(cv_, until) == std::cv_status::timeout && q_.empty()) {
            return std::nullopt;
        }
    }
    generation_event e = std::move(q_.front());
    q_.pop_front();
    return e;
}

}  // namespace lineage::scheduler
