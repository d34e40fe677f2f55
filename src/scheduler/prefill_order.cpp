// scheduler::plan_prefill; see prefill_order.h.
#include "scheduler/prefill_order.h"

#include <algorithm>

namespace lineage::scheduler {

std::vector<prefill_chunk> plan_prefill(std::vector<slot> & slots, const std::vector<float> & lora, int32_t budget,
                                        int32_t short_prefill, int32_t max_deferrals) {
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

}  // namespace lineage::scheduler
