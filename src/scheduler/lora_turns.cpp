// scheduler::next_lora_set: the round robin over adapter sets (see lora_turns.h).
#include "scheduler/lora_turns.h"

namespace lineage::scheduler {

std::vector<float> next_lora_set(const std::vector<slot> & slots, size_t & turn) {
    const size_t n = slots.size();
    if (n == 0) {
        return {};
    }
    std::vector<float> chosen;
    for (size_t k = 0; k < n; ++k) {
        const slot & s = slots[(turn + k) % n];
        if ((s.ph == slot::phase::prefill || s.ph == slot::phase::decode) && s.req) {
            chosen = s.req->lora;
            break;
        }
    }
    turn = (turn + 1) % n;
    return chosen;
}

}  // namespace lineage::scheduler
