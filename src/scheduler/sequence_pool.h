// scheduler::sequence_pool: the engine's sequence ids, shared between active requests and the
// cache's parked entries (tier T0). A request acquires an id; when none is free the least
// recently used parked entry is demoted to RAM (its whole state read into a blob, or dropped
// when the RAM budget has no room) and its id reused. Ids the store lets go of are released
// here, after the entries that left the store for lack of room were handed to the disk tier
// (a parked one's state is read before its id is released).
// Thread safety: engine thread only. Ownership: borrows the states and the store.
#pragma once

#include "cache/store/store.h"
#include "scheduler/sequence_states.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace lineage::scheduler {

/** True when `seq` - 1 or `seq` + 1 is in `ids`: a step of `seq` beside them is one micro-batch
 *  (acquire below). */
bool next_to_any(int32_t seq, const std::vector<int32_t> & ids);

/** The patch (cache/blob_patch.h) that holds `whole`, one sequence's whole state, over `base`, a
 *  pinned anchor's: the KV rows engine::shared_state_ranges finds equal are named, not copied.
 *  nullopt where they are under a quarter of `whole` (docs/prompt-cache.md "Prefix sharing in RAM"). */
std::optional<cache::blob> state_patch(const cache::blob & base, const cache::blob & whole);

class sequence_pool {
public:
    /** `n_seq` ids [0, n_seq) start free. `spill` receives the entries the store pushed out
     *  (write-behind); empty: dropped. */
    sequence_pool(sequence_states & st, cache::store & store, int32_t n_seq,
                  std::function<void(cache::tier_job)> spill = {});

    /** A free sequence id, emptied; demotes parked entries (never entry `protect`, the one the
     *  request restores from) until one is free. nullopt when every id is busy. Of the free
     *  ids it takes one next to an id in `active` (the sequences computing now), else the
     *  lowest: llama.cpp computes a step of several sequences with per-sequence KV buffers in
     *  one micro-batch only when their ids are consecutive (llama_batch_allocr::split_equal,
     *  "accept only increasing sequence ids"), and in one graph per run of consecutive ids
     *  otherwise (docs/architecture.md "One computing thread"). */
    std::optional<int32_t> acquire(uint64_t protect, const std::vector<int32_t> & active = {});
    /** An id next to an id in `active` and not in it, emptied: the lowest free one, else the one
     *  of the parked entry of at most `max_parked_tokens` tokens (the shortest; never entry
     *  `protect`) there, which is demoted to RAM first (its whole state read, as demote_one does).
     *  nullopt when there is neither, or when RAM has no room for that entry (it is not dropped
     *  for this). */
    std::optional<int32_t> acquire_next_to(const std::vector<int32_t> & active, int32_t max_parked_tokens,
                                           uint64_t protect = 0);
    /** Empties `seq` and returns it to the pool. */
    void release(int32_t seq);
    /** Hands the store's spills to `spill`, then releases the ids the store let go of. */
    void drain_released();
    /** Demotes the least recently used parked entry other than `protect` to RAM (or drops it
     *  when RAM has no room). False when there is none. */
    bool demote_one(uint64_t protect);
    size_t n_free() const { return free_.size(); }
    /** Demotes parked entry `victim` to RAM, or, when RAM has no room, drops it (`or_drop`) or
     *  leaves it parked and returns false. Its sequence is released when it leaves. */
    bool demote(const cache::entry_view & victim, bool or_drop);

private:
    sequence_states & st_;
    cache::store & store_;
    std::function<void(cache::tier_job)> spill_;
    /** free_[i], taken out of the free list and emptied. */
    int32_t take_free(size_t i);

    std::vector<int32_t> free_;  // back = next handed out
};

}  // namespace lineage::scheduler
