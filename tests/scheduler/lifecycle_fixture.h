// Helpers shared by the scheduler's unit tests (test_lifecycle, test_warmup, test_admission; no
// model): token runs, the small store config the lifecycle tests start from, and a slot admitted
// as the scheduler admits it (a plan's sequence, then the restore). Header-only; single-threaded.
#pragma once

#include "../cache/fake_states.h"
#include "scheduler/lifecycle.h"
#include "scheduler/sequence_pool.h"

#include <gtest/gtest.h>

#include <memory>

namespace lineage::scheduler::fakes {

/** Tokens from, from + 1, ..., from + n - 1 (cache::fakes::seq; `seq` is a local name here). */
inline cache::tokens seq_of(int32_t from, int32_t n) {
    return cache::fakes::seq(from, n);
}

using cache::fakes::cat;

/** A 1 MiB store, 4-token minimum prefix, no divergence checkpoints (gain 1 MiB). */
inline cache::config lifecycle_config() {
    cache::config c;
    c.ram_bytes = 1 << 20;
    c.min_prefix = 4;
    c.divergence_min_gain = 1 << 20;
    c.guard_merge = 0;  // the prompt - 1 guard beside the tests' turns near it; GuardMerge tests merge it
    return c;
}

/** A slot holding request `id` for `prompt` in session `session` of bucket "b", with
 *  `history` history tokens (-1: unknown), using the cache; not planned yet. */
inline std::unique_ptr<slot> new_slot(uint64_t id, const cache::tokens & prompt, int32_t history,
                                      const std::string & session) {
    auto s = std::make_unique<slot>();
    s->req = std::make_shared<generation_request>();
    s->req->id = id;
    s->req->prompt = prompt;
    s->req->cache.history_tokens = history;
    s->use_cache = true;
    s->key = cache::key{"b", session};
    return s;
}

/** What the scheduler does with a planned slot: takes the plan's device sequence or a fresh
 *  one from `pool` (a test failure when none is free), then restores and enters prefill. */
inline void place_and_restore(slot & s, sequence_pool & pool, lifecycle & life, double now) {
    if (s.plan.op == cache::restore_op::take_device) {
        s.seq = s.plan.device_seq;
    } else {
        auto seq = pool.acquire(s.plan.source);
        EXPECT_TRUE(seq.has_value());
        s.seq = seq.value_or(-1);
    }
    s.restore_started = clock::now();
    s.ph = slot::phase::prefill;
    life.restore(s, now);
}

}  // namespace lineage::scheduler::fakes
