// scheduler::next_lora_set: which LoRA adapter set the next batched step serves. llama.cpp
// applies one adapter set per llama_decode, so a step batches only the computing slots whose
// request has that set (generation_request::lora); the others wait for a later step.
// Why a round robin: with sets A and B in flight, serving the set of the next computing slot
// after the previous step's turn means no set waits more than n_parallel steps.
// Thread safety: engine thread only (reads the slots). Ownership: borrows the slots.
#pragma once

#include "scheduler/slot.h"

#include <cstddef>
#include <vector>

namespace lineage::scheduler {

/** The adapter scales of the first slot in prefill or decode at or after `turn` (cyclically);
 *  empty (the base model) when none computes. Advances `turn` by one (modulo slots.size()). */
std::vector<float> next_lora_set(const std::vector<slot> & slots, size_t & turn);

}  // namespace lineage::scheduler
