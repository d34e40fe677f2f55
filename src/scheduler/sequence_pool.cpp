// scheduler::sequence_pool: sequence ids shared by requests and parked entries; see sequence_pool.h.
#include "scheduler/sequence_pool.h"

#include "cache/blob_patch.h"
#include "engine/state_blob.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace lineage::scheduler {

bool next_to_any(int32_t seq, const std::vector<int32_t> & ids) {
    return std::find(ids.begin(), ids.end(), seq - 1) != ids.end() ||
           std::find(ids.begin(), ids.end(), seq + 1) != ids.end();
}

sequence_pool::sequence_pool(sequence_states & st, cache::store & store, int32_t n_seq,
                             std::function<void(cache::tier_job)> spill)
    : st_(st), store_(store), spill_(std::move(spill)) {
    for (int32_t s = n_seq - 1; s >= 0; --s) {
        free_.push_back(s);
    }
}

void sequence_pool::release(int32_t seq) {
    st_.seq_rm(seq, -1, -1);
    free_.push_back(seq);
}

void sequence_pool::drain_released() {
    // Entries that left the store for lack of room are written to disk first: a parked one's
    // state is read before its sequence is released.
    for (auto & j : store_.take_spills()) {
        if (spill_) {
            spill_(std::move(j));
        }
    }
    for (int32_t seq : store_.take_released_seqs()) {
        release(seq);
    }
}

bool sequence_pool::demote_one(uint64_t protect) {
    auto victim = store_.device_lru();
    if (victim && victim->id == protect) {
        // The entry a request is about to restore from stays; try the next one.
        victim.reset();
        for (const auto & e : store_.entries()) {
            if (e.where == cache::tier::device && e.id != protect) {
                victim = e;  // entries() is most recent first: keep the last match (LRU)
            }
        }
    }
    if (!victim) {
        return false;
    }
    demote(*victim, /*or_drop=*/true);
    return true;
}

std::optional<cache::blob> state_patch(const cache::blob & base, const cache::blob & whole) {
    std::vector<cache::shared_run> runs;
    uint64_t shared = 0;
    for (const auto & r : engine::shared_state_ranges(base, whole)) {
        runs.push_back({r.at, r.base_off, r.len});
        shared += r.len;
    }
    // Worth a patch only where it names most of the state (a restore then copies it once more).
    if (shared < whole.size() / 4) {
        return std::nullopt;
    }
    return cache::make_patch(whole, runs);
}

bool sequence_pool::demote(const cache::entry_view & victim, bool or_drop) {
    std::optional<cache::blob> whole;
    if (auto base = store_.patch_base_for(victim.id)) {
        whole = st_.get_state(victim.seq, false);
        auto patch = state_patch(*base->state, *whole);
        if (patch) {
            cache::blob_pool::instance().give(std::move(*whole));
            const size_t size = patch->size();
            const bool fits = store_.reserve(size, victim.id);
            if (!fits && !or_drop) {
                cache::blob_pool::instance().give(std::move(*patch));
                return false;
            }
            spdlog::debug("cache: entry {} ({} tokens) leaves the device for {}", victim.id, victim.n_tokens,
                          fits ? "RAM, as a patch over anchor " + std::to_string(base->anchor) : "nowhere (over budget)");
            store_.demote(victim.id, fits ? cache::make_blob(std::move(*patch)) : nullptr, fits ? size : 0,
                          std::move(base));
            drain_released();
            return true;
        }
    }
    const size_t size = whole ? whole->size() : st_.state_size(victim.seq, false);
    cache::blob_ptr blob;
    uint64_t reserved = 0;
    if (store_.reserve(size, victim.id)) {
        reserved = size;
        blob = cache::make_blob(whole ? std::move(*whole) : st_.get_state(victim.seq, false));
    } else {
        if (whole) {
            cache::blob_pool::instance().give(std::move(*whole));
        }
        if (!or_drop) {
            return false;
        }
    }
    spdlog::debug("cache: entry {} ({} tokens) leaves the device for {}", victim.id, victim.n_tokens,
                  blob ? "RAM" : "nowhere (over budget)");
    store_.demote(victim.id, blob, reserved);
    drain_released();
    return true;
}

std::optional<int32_t> sequence_pool::acquire(uint64_t protect, const std::vector<int32_t> & active) {
    drain_released();
    while (free_.empty()) {
        if (!demote_one(protect)) {
            return std::nullopt;
        }
    }
    size_t pick = 0;
    for (size_t i = 1; i < free_.size(); ++i) {
        const bool near_i = next_to_any(free_[i], active);
        const bool near_pick = next_to_any(free_[pick], active);
        if (near_i != near_pick ? near_i : free_[i] < free_[pick]) {
            pick = i;
        }
    }
    return take_free(pick);
}

int32_t sequence_pool::take_free(size_t i) {
    const int32_t seq = free_[i];
    free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
    st_.seq_rm(seq, -1, -1);
    return seq;
}

std::optional<int32_t> sequence_pool::acquire_next_to(const std::vector<int32_t> & active, int32_t max_parked_tokens,
                                                      uint64_t protect) {
    drain_released();
    auto near = [&](int32_t s) {
        return std::find(active.begin(), active.end(), s) == active.end() && next_to_any(s, active);
    };
    std::optional<size_t> pick;
    for (size_t i = 0; i < free_.size(); ++i) {
        if (near(free_[i]) && (!pick || free_[i] < free_[*pick])) {
            pick = i;
        }
    }
    if (!pick) {
        // No free id there: the shortest parked entry next to one leaves the device for RAM.
        std::optional<cache::entry_view> victim;
        for (const auto & e : store_.entries()) {
            if (e.where == cache::tier::device && e.id != protect && near(e.seq) && e.n_tokens <= max_parked_tokens &&
                (!victim || e.n_tokens < victim->n_tokens)) {
                victim = e;
            }
        }
        // Only to RAM: a cache entry is not dropped for a faster step.
        if (!victim || !demote(*victim, /*or_drop=*/false)) {
            return std::nullopt;
        }
        for (size_t i = 0; i < free_.size(); ++i) {
            if (free_[i] == victim->seq) {
                pick = i;
            }
        }
        if (!pick) {
            return std::nullopt;  // cannot happen: a demoted entry's sequence is released
        }
    }
    return take_free(*pick);
}

}  // namespace lineage::scheduler
