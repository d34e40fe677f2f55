// scheduler::plan_prefill: which prefilling slots join the next batched step, and with how many
// prompt tokens. Why: a step is one llama_decode, and its time grows with its tokens; a short
// prefill (a next turn, a retry, an edit) batched with a long one's chunk waits for that whole
// chunk. Fewest tokens left go first, and while one has at most `short_prefill` left the longer
// ones sit the step out (a bounded number of steps in a row), so the short one's TTFT is its
// own tokens' time. The same holds while a short request's state is still being read from a tier
// (the read hold: scheduler::impl::read_hold, bounded in time there). See docs/architecture.md
// "Prefill order".
// Thread safety: engine thread only (it updates the slots' deferred_steps).
#pragma once

#include "scheduler/slot.h"

#include <cstdint>
#include <vector>

namespace lineage::scheduler {

/** One prefilling slot's share of a step: n > 0 prompt tokens from s->n_past. */
struct prefill_chunk {
    slot * s = nullptr;
    int32_t n = 0;
};

/** The chunks of the step that serves adapter set `lora`, within `budget` tokens (what the
 *  decoding slots left of n_batch), fewest prompt tokens left first. Each chunk ends at the
 *  slot's text_stop() (a capture point, an image, the prompt end). While a request that is not
 *  a warm-up has at most `short_prefill` tokens left, a slot with more sits the step out, at
 *  most `max_deferrals` steps in a row (then it joins again); its deferred_steps counts them
 *  and is reset when it joins. With `hold_long` (a short request's state read is in flight:
 *  scheduler::impl::read_hold) every slot with more than `short_prefill` tokens left sits the
 *  step out too, not counted in deferred_steps (the caller bounds that hold in time). A slot
 *  whose next input is an image gets no chunk. */
std::vector<prefill_chunk> plan_prefill(std::vector<slot> & slots, const std::vector<float> & lora, int32_t budget,
                                        int32_t short_prefill, int32_t max_deferrals, bool hold_long = false);

/** Orders a step's tokens by sequence id, stably (each sequence's tokens keep their order), and
 *  returns each old position's new one (size = batch size; identity when already in order).
 *  Why: with a KV buffer per sequence llama.cpp cuts a batch into micro-batches of increasing,
 *  consecutive sequence ids taken in batch order (llama_batch_allocr::split_equal), so tokens
 *  of sequences 2, 1, 0 cost three graphs where 0, 1, 2 cost one (docs/architecture.md "One
 *  micro-batch per step"). */
std::vector<int32_t> order_by_sequence(std::vector<engine::batch_token> & batch);

}  // namespace lineage::scheduler
