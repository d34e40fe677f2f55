// scheduler::memory_plan: the startup memory plan in bytes: the model's weights, the
// KV cache of the --parallel sequences and of the parked ones at --ctx-size tokens each (KV
// bytes per token measured in the chosen --cache-type-k/-v, plus each sequence's fixed part:
// the recurrent state of a hybrid model), against the device's budget (--cache-device-bytes,
// default the device's memory as ggml reports it: the GPUs' free memory before the model loads,
// or the host's physical memory on the CPU), and the RAM tier's budget. One line is logged at
// startup; a plan that does not fit refuses the start with its numbers.
// Thread safety: pure functions on value types.
#pragma once

#include "util/status.h"

#include <cstdint>
#include <string>

namespace lineage::scheduler {

struct memory_inputs {
    std::string device = "CPU";      ///< device name (engine::device_memory::name)
    bool gpu = false;                ///< the device is a GPU (else host memory)
    uint64_t budget_bytes = 0;       ///< what the device may hold, bytes
    bool budget_from_flag = false;   ///< true: --cache-device-bytes set it; false: the device's memory
    uint64_t model_bytes = 0;        ///< weights, bytes
    std::string type_k = "f16";      ///< --cache-type-k
    std::string type_v = "f16";      ///< --cache-type-v
    uint64_t kv_bytes_per_token = 0; ///< one token's K and V rows over all attention layers, bytes
    uint64_t seq_fixed_bytes = 0;    ///< per sequence, whatever its length (recurrent state, headers), bytes
    int32_t n_parallel = 1;          ///< --parallel
    int32_t n_parked = 0;            ///< --cache-device-slots in effect
    int32_t n_ctx_seq = 0;           ///< tokens per sequence (--ctx-size, capped at the training context)
    uint64_t ram_tier_bytes = 0;     ///< the RAM tier's budget (0: not decided yet)
};

struct memory_plan {
    memory_inputs in;
    uint64_t seq_bytes = 0;     ///< one sequence at n_ctx_seq tokens: fixed + per_token x n_ctx_seq
    uint64_t active_bytes = 0;  ///< n_parallel x seq_bytes
    uint64_t parked_bytes = 0;  ///< n_parked x seq_bytes
    uint64_t need_bytes = 0;    ///< model + active + parked
    int64_t headroom_bytes = 0; ///< budget - need (negative: does not fit)

    bool fits() const { return headroom_bytes >= 0; }
};

/** The plan of `in` (saturating arithmetic: absurd inputs give a plan that does not fit, never
 *  an overflow). */
memory_plan plan_memory(const memory_inputs & in);

/** One line: "memory plan (CPU, host memory): model ... + KV .../token (K f16, V f16) x 2048
 *  tokens + ... fixed = ... per sequence; 4 --parallel = ..., 1 parked (--cache-device-slots) =
 *  ...; needs ... of device budget ... (...), headroom ...; RAM tier budget ..." with every size
 *  as "1.5 GiB (1610612736)" (plan_bytes); the RAM tier only when ram_tier_bytes > 0. */
std::string describe(const memory_plan & p);

/** ok when the plan fits; else why not, with its numbers, naming --cache-device-bytes and the
 *  flags that shrink the plan (--ctx-size, --parallel, --cache-device-slots, --cache-type-k/-v). */
util::status refusal(const memory_plan & p);

/** `b` bytes as "1.5 GiB (1610612736)". */
std::string plan_bytes(uint64_t b);

}  // namespace lineage::scheduler
