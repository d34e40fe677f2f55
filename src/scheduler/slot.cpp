// scheduler::slot: the phase invariants (check_invariants); see slot.h.
#include "scheduler/slot.h"

#include <set>
#include <stdexcept>
#include <string>

namespace lineage::scheduler {
namespace {

const char * name(slot::phase ph) {
    switch (ph) {
        case slot::phase::idle: return "idle";
        case slot::phase::loading: return "loading";
        case slot::phase::prefill: return "prefill";
        case slot::phase::decode: return "decode";
    }
    return "?";
}

[[noreturn]] void broken(size_t i, const slot & s, const std::string & what) {
    throw std::logic_error("slot " + std::to_string(i) + " (" + name(s.ph) + ", request " +
                           std::to_string(s.req ? s.req->id : 0) + "): " + what);
}

}  // namespace

void check_invariants(const std::vector<slot> & slots, int32_t n_seq_max) {
    std::set<int32_t> seqs;
    for (size_t i = 0; i < slots.size(); ++i) {
        const slot & s = slots[i];
        check_invariants(s, i, n_seq_max);
        if (s.active() && !seqs.insert(s.seq).second) {
            broken(i, s, "6. sequence id " + std::to_string(s.seq) + " held by two active slots");
        }
    }
}

void check_invariants(const slot & s, size_t i, int32_t n_seq_max) {
    {
        if (s.ph == slot::phase::idle) {
            if (s.req || s.seq != -1 || s.reserved_bytes != 0 || !s.captured.empty() || s.load.valid() ||
                s.n_past != 0 || !s.reply_candidates.empty()) {
                broken(i, s, "1. an idle slot holds a request, a sequence, reserved bytes, checkpoints or a read");
            }
            return;
        }
        if (!s.req) {
            broken(i, s, "an active slot has no request");
        }
        if (s.seq < 0 || s.seq >= n_seq_max) {
            broken(i, s, "6. sequence id " + std::to_string(s.seq) + " outside [0, " + std::to_string(n_seq_max) + ")");
        }
        const auto & caps = s.plan.captures;
        switch (s.ph) {
            case slot::phase::loading:
                if (s.plan.op != cache::restore_op::load_tier || !s.load.valid()) {
                    broken(i, s, "2. loading without a load_tier plan and its read in flight");
                }
                if (s.n_past != 0 || !s.captured.empty()) {
                    broken(i, s, "2. loading but already prefilled or captured");
                }
                return;
            case slot::phase::prefill:
                if (s.n_past < s.plan.n_restore || s.n_past >= s.prompt_size()) {
                    broken(i, s, "3. n_past " + std::to_string(s.n_past) + " outside [n_restore " +
                                     std::to_string(s.plan.n_restore) + ", prompt " +
                                     std::to_string(s.prompt_size()) + ")");
                }
                for (const auto & m : s.req->media) {
                    if (m.span.begin < s.n_past && s.n_past < m.span.end) {
                        broken(i, s, "3. n_past " + std::to_string(s.n_past) + " inside the image at [" +
                                         std::to_string(m.span.begin) + ", " + std::to_string(m.span.end) + ")");
                    }
                }
                if (s.next_capture > caps.size()) {
                    broken(i, s, "3. next_capture past the planned captures");
                }
                for (size_t c = 0; c < caps.size(); ++c) {
                    const bool passed = c < s.next_capture;
                    if (passed ? caps[c].n_tokens > s.n_past : caps[c].n_tokens <= s.n_past) {
                        broken(i, s, "3. capture at " + std::to_string(caps[c].n_tokens) +
                                         (passed ? " marked taken but ahead of n_past " : " not taken at or before n_past ") +
                                         std::to_string(s.n_past));
                    }
                }
                break;
            case slot::phase::decode:
                if (s.n_past + s.replay < s.prompt_size() || s.next_capture != caps.size() || !s.smpl ||
                    s.replay < 0 || s.replay > 1 || (s.replay > 0 && s.n_past + s.replay != s.prompt_size())) {
                    broken(i, s, "4. decoding before the whole prompt and every capture are in (n_past + replay), "
                                 "or without a sampler");
                }
                break;
            case slot::phase::idle:
                break;
        }
        int32_t last = 0;
        for (const auto & cp : s.captured) {
            if (cp.n_tokens <= last || cp.n_tokens > s.n_past + s.replay) {
                broken(i, s, "5. checkpoint at " + std::to_string(cp.n_tokens) + " not ascending in [1, n_past " +
                                 std::to_string(s.n_past) + "]");
            }
            last = cp.n_tokens;
        }
    }
}

}  // namespace lineage::scheduler
