// scheduler::plan_prefill; see prefill_order.h.
#include "scheduler/prefill_order.h"

#include <algorithm>

namespace lineage::scheduler {

std::vector<prefill_chunk> plan_prefill(std::vector<slot> & slots, const std::vector<float> & lora, int32_t budget,
                                        int32_t short_prefill, int32_t max_deferrals, bool hold_long) {
    std::vector<slot *> prefills;
    for (auto & s : slots) {
        if (s.ph == slot::phase::prefill && s.req->lora == lora) {
            prefills.push_back(&s);
        }
    }
    auto left = [](const slot * s) { return s->prompt_size() - s->n_past; };
    std::stable_sort(prefills.begin(), prefills.end(), [&](const slot * a, const slot * b) { return left(a) < left(b); });
    const bool short_waiting = std::any_of(prefills.begin(), prefills.end(), [&](const slot * s) {
        return !s->req->warmup && left(s) <= short_prefill;
    });
    std::vector<prefill_chunk> out;
    for (slot * s : prefills) {
        if (budget <= 0) {
            break;
        }
        if (hold_long && left(s) > short_prefill) {
            continue;  // a short request's read is in flight: its first pass goes without this chunk
        }
        if (short_waiting && left(s) > short_prefill && s->deferred_steps < max_deferrals) {
            s->deferred_steps++;
            continue;
        }
        s->deferred_steps = 0;
        const int32_t n = std::min(budget, s->text_stop() - s->n_past);
        if (n <= 0) {
            continue;  // an image comes next: decoded at the next step
        }
        out.push_back({s, n});
        budget -= n;
    }
    return out;
}

std::vector<int32_t> order_by_sequence(std::vector<engine::batch_token> & batch) {
    std::vector<int32_t> order(batch.size());
    for (size_t i = 0; i < order.size(); ++i) {
        order[i] = static_cast<int32_t>(i);
    }
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return batch[static_cast<size_t>(a)].seq < batch[static_cast<size_t>(b)].seq;
    });
    std::vector<int32_t> where(batch.size());
    std::vector<engine::batch_token> sorted;
    sorted.reserve(batch.size());
    for (size_t i = 0; i < order.size(); ++i) {
        where[static_cast<size_t>(order[i])] = static_cast<int32_t>(i);
        sorted.push_back(batch[static_cast<size_t>(order[i])]);
    }
    batch = std::move(sorted);
    return where;
}

}  // namespace lineage::scheduler
