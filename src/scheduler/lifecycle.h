// scheduler::lifecycle: a request's way through the cache on the engine thread, between the
// store's decisions and the engine's states: restore the plan's restore point into the
// request's sequence (falling back to a cold prefill when the engine refuses), capture the
// planned checkpoints and anchors as the prefill passes them, keep the prompt-end recurrent
// state, and commit the sequence (or abandon the plan when the request fails). It works over
// sequence_states, so tests drive it with fake states (tests/scheduler/test_lifecycle.cpp).
// Thread safety: engine thread only. Ownership: borrows the states, the store and the pool.
#pragma once

#include "cache/store/store.h"
#include "scheduler/sequence_pool.h"
#include "scheduler/sequence_states.h"
#include "scheduler/slot.h"

#include <functional>

namespace lineage::scheduler {

/** Puts `p`'s restore point into sequence `seq` (empty, or the parked sequence itself for
 *  take_device): the parked KV or the whole-state blob, then the checkpoint's recurrent state,
 *  then the KV trimmed to n_restore. REQUIRES for load_ram/load_tier: p.full set. False when the
 *  engine refused a step or the sequence does not end at n_restore afterwards. */
bool restore_point(sequence_states & st, const cache::restore_plan & p, int32_t seq);

/** How many of `generated` (a reply's decoded tokens) come back token for token when the
 *  reply's text is tokenized again: the length of the common prefix of `generated` and
 *  tokenize(detokenize(generated)). A client sends the text back, so a next prompt parts from
 *  the entry there at the latest. */
using round_trip_fn = std::function<int32_t(const cache::tokens & generated)>;

class lifecycle {
public:
    /** `round_trip`: empty = every reply comes back whole (no reply checkpoint is kept). */
    lifecycle(sequence_states & st, cache::store & store, sequence_pool & pool, bool hybrid,
              round_trip_fn round_trip = {})
        : st_(st), store_(store), pool_(pool), hybrid_(hybrid), round_trip_(std::move(round_trip)) {}

    /** Restores s.plan into s.seq (REQUIRES: acquired; a load_tier plan completed by the store):
     *  sets n_past, cached_tokens, hit_kind and restore_s (from s.restore_started). An engine
     *  failure abandons the plan and prefills cold with the same captures. Absorbing a file
     *  restored whole keeps the sequence's recurrent state as a turn checkpoint. Captures
     *  planned exactly at the restore point are taken. */
    void restore(slot & s, double now_s);

    /** After a prefill chunk brought s.n_past forward: takes the captures planned there (when
     *  the request uses the cache) and, once the whole prompt is in, keeps the recurrent state
     *  at the prompt end (hybrid), then takes a resend guard the chunk passed over
     *  (s.guard_rollback) by rolling the sequence back to it: n_past moves back to the guard and
     *  s.replay counts the prompt tokens the next decode step computes again. Returns true when
     *  the whole prompt is in. */
    bool after_chunk(slot & s, double now_s);

    /** After a decode step brought s.n_past forward by one (hybrid, keep_reply, reply_step > 0,
     *  cache in use): every s.reply_stride decoded tokens, takes the recurrent state as a reply
     *  checkpoint candidate (RAM reserved; skipped when there is none). When
     *  max_reply_candidates are held the stride doubles and the candidates off it are dropped
     *  (their reservations released). No prefill is split: the state is the decode's own. */
    void after_decode(slot & s);

    /** Takes capture `c` at s.n_past: an anchor (the whole state) is pinned in the store; a
     *  checkpoint (recurrent state, hybrid) joins s.captured. Skipped (traced) when the RAM
     *  budget has no room. `split`: the prefill pass was cut short here for it (counted in the
     *  cache's stats::capture_splits). */
    void capture(slot & s, const cache::capture_point & c, double now_s, bool split);

    /** The request is done: its sequence becomes an entry parked on the device (hybrid: the
     *  prompt-end state is put back and the KV trimmed to the prompt; dense: everything
     *  decoded), or is released when the cache is bypassed or the store does not keep it.
     *  A warm-up's entry (whole, or the part a preemption left) is marked warmed at its length.
     *  Sets commit_s; s.seq is -1 afterwards. */
    void commit(slot & s, double now_s);

    /** The request failed: the plan is abandoned (its reservations released) and the sequence
     *  released. s.seq is -1 afterwards. */
    void abandon(slot & s);

    /** A ladder job is done or preempted (generation_request::ladder): the rungs it captured
     *  join their anchor (store::add_rungs) and the sequence is released; nothing else is
     *  stored. s.seq is -1 afterwards. */
    void commit_rungs(slot & s, double now_s);

    /** Called when a request pins an anchor whose near and volatile rungs its plan deferred
     *  (restore_plan::deferred_rungs; config::ladder_defer): the request's slot, the anchor's
     *  tokens, and the rungs inside it (ascending). The scheduler queues a ladder job. */
    using rungs_owed_fn = std::function<void(const slot & s, cache::tokens anchor, std::vector<int32_t> rungs)>;
    void on_rungs_owed(rungs_owed_fn f) { rungs_owed_ = std::move(f); }

private:
    /** Takes capture `c` (before s.n_past, the prompt end) through the engine's recurrent-state
     *  rollback: seq_rm back to c, the state read there, n_past = c, replay = what was rolled
     *  back. Skipped (traced, nothing changed) without the prompt-end state, without RAM, or
     *  when the engine refuses. */
    void guard_by_rollback(slot & s, const cache::capture_point & c);

    /** Commit of a kept reply: the reply candidates at or before where the reply stops coming
     *  back from its text join in.captured (all of them when it comes back whole). */
    void keep_reply_checkpoints(slot & s, cache::commit_input & in);

    sequence_states & st_;
    cache::store & store_;
    sequence_pool & pool_;
    bool hybrid_;
    round_trip_fn round_trip_;
    rungs_owed_fn rungs_owed_;
};

}  // namespace lineage::scheduler
