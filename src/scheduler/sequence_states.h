// scheduler::sequence_states: the narrow interface over the engine's sequence states that the
// cache lifecycle (restore, capture, commit, demotion, disk writes) needs, and nothing more:
// states as byte blobs, trimming, copying. engine_states adapts engine::context to it; the
// scheduler's unit tests give it a fake (tests/scheduler/fake_engine_states.h), so that the
// lifecycle is tested without a model. Thread safety: engine thread only. Ownership: the
// adapter borrows the context.
#pragma once

#include "cache/blob_pool.h"
#include "cache/types.h"
#include "engine/context.h"

#include <cstddef>
#include <cstdint>

namespace lineage::scheduler {

class sequence_states {
public:
    virtual ~sequence_states() = default;
    /** Snapshot of sequence `seq`: the whole state (KV + recurrent), or the recurrent part only. */
    virtual cache::blob get_state(int32_t seq, bool recurrent_only) const = 0;
    /** Bytes get_state() would return. */
    virtual size_t state_size(int32_t seq, bool recurrent_only) const = 0;
    /** Restores a snapshot into `seq`. False on failure (`seq` is then cleared). */
    virtual bool set_state(int32_t seq, const cache::blob & b, bool recurrent_only) = 0;
    /** Removes positions [p0, p1) of `seq` (p0 < 0: all; p1 < 0: to the end). False when refused
     *  (a recurrent state past p0 cannot be cut back). */
    virtual bool seq_rm(int32_t seq, int32_t p0, int32_t p1) = 0;
    /** Gives `dst` the KV of `src` for [0, p1) and src's recurrent state. False on failure
     *  (`dst` is then cleared). */
    virtual bool seq_cp(int32_t src, int32_t dst, int32_t p1) = 0;
    /** Last position held by `seq`, -1 when empty. */
    virtual int32_t seq_pos_max(int32_t seq) const = 0;
};

/** sequence_states over the real engine::context. */
class engine_states final : public sequence_states {
public:
    explicit engine_states(engine::context & ctx) : ctx_(ctx) {}
    /** Into a recycled buffer of the state's size where the pool has one (cache/blob_pool.h). */
    cache::blob get_state(int32_t seq, bool recurrent_only) const override {
        cache::blob b = cache::take_blob(ctx_.state_size(seq, recurrent_only));
        ctx_.get_state_into(seq, recurrent_only, b);
        return b;
    }
    size_t state_size(int32_t seq, bool recurrent_only) const override { return ctx_.state_size(seq, recurrent_only); }
    bool set_state(int32_t seq, const cache::blob & b, bool recurrent_only) override {
        return ctx_.set_state(seq, b, recurrent_only);
    }
    bool seq_rm(int32_t seq, int32_t p0, int32_t p1) override { return ctx_.seq_rm(seq, p0, p1); }
    /** On the CPU alone the copy goes through a recycled buffer of the state's size, which
     *  then returns to the pool for a later capture or copy (cache/blob_pool.h). */
    bool seq_cp(int32_t src, int32_t dst, int32_t p1) override {
        if (!ctx_.shares_by_state_copy()) {
            return ctx_.seq_cp(src, dst, p1);
        }
        cache::blob through = cache::take_blob(ctx_.state_size(src, false));
        const bool ok = ctx_.seq_cp(src, dst, p1, &through);
        cache::blob_pool::instance().give(std::move(through));
        return ok;
    }
    int32_t seq_pos_max(int32_t seq) const override { return ctx_.seq_pos_max(seq); }

private:
    engine::context & ctx_;
};

}  // namespace lineage::scheduler
