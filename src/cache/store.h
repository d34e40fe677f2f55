// cache::store: the prompt cache's index of entries over the device (T0) and RAM (T1) tiers,
// with the lineage rules of seed 000: one entry per conversation lineage (a full snapshot at
// its latest prompt plus recurrent-only checkpoints at earlier lengths that share its KV),
// absorption, thinning, pinned anchors, and a RAM byte budget with LRU + TTL eviction.
// It is engine-agnostic: it decides (plan), the scheduler executes with the engine and
// reports back (commit, demote); states are opaque blobs.
// Thread safety: not thread-safe; owned by the engine thread. Tests call check_invariants().
//
// Entry states and transitions (cf. RocksDB lru_cache.h):
//   (new) --commit--> DEVICE(parked on a sequence id)
//   DEVICE --take (a request extends it; lineage mode)--> TAKEN (out of the index; the request
//          owns the sequence; its checkpoints return with the request's commit: absorption)
//   DEVICE --demote (sequence id needed)--> RAM (whole-state blob)
//   RAM    --take--> TAKEN (blob loaded into the request's sequence, then freed at commit)
//   DEVICE|RAM --evict (LRU over budget / max entries, TTL)--> gone (device: sequence released)
//   ANCHOR: RAM only, pinned: never taken, absorbed or LRU-evicted; capped by count and bytes.
#pragma once

#include "cache/config.h"
#include "cache/key.h"
#include "cache/stats.h"
#include "cache/trace.h"
#include "cache/types.h"

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace lineage::cache {

/** Cache key (seed 001 "Cache Key Composition"): entries only match within a bucket;
 *  session decides the two-tier precedence. */
struct key {
    key() = default;
    key(std::string b, std::string s, key_dims d = {}) : bucket(std::move(b)), session(std::move(s)), dims(std::move(d)) {}

    std::string bucket;
    std::string session;
    key_dims dims;  ///< the bucket's dimensions, for the decision trace only (may be empty)
};

/** A recurrent-only state at an earlier length of its entry (hybrid families). */
struct checkpoint {
    int32_t n_tokens = 0;
    point_kind kind = point_kind::turn;
    blob_ptr recurrent;
};

/** Request facts the plan needs besides its tokens. */
struct plan_hints {
    int32_t anchor_tokens = -1;   ///< end of system prompt + tools, tokens (-1: none)
    int32_t history_tokens = -1;  ///< prompt minus its generation prompt, tokens (-1: unknown)
    /** End of the tool block where the template renders it before the system text, tokens
     *  (-1: none): a second anchor, shared by system texts that differ (a per-session
     *  timestamp, sibling prompts), so that their new sessions do not start cold. Hybrid only
     *  (a dense entry restores any prefix of an earlier session anyway). */
    int32_t tools_anchor_tokens = -1;
};

/** A state to capture during prefill, after exactly n_tokens of the prompt. */
struct capture_point {
    int32_t n_tokens = 0;
    point_kind kind = point_kind::turn;  ///< turn, guard, divergence (checkpoints) or anchor (whole state)
};

/** How to put the restore point into the request's sequence. */
enum class restore_op {
    none,          ///< cold: prefill from token 0
    take_device,   ///< continue the parked sequence `device_seq` itself (zero copies)
    share_device,  ///< seq_cp(device_seq -> new, [0, n)) then load `recurrent` if set
    load_ram,      ///< load `full` (whole state), then `recurrent` if set, then trim to n
};

/** What cache.plan() decided for one request. */
struct restore_plan {
    int32_t n_restore = 0;                 ///< prompt tokens restored (0: miss)
    point_kind kind = point_kind::none;    ///< kind of the restore point used
    restore_op op = restore_op::none;
    uint64_t source = 0;                   ///< entry id restored from (0: none)
    int32_t source_tokens = 0;             ///< that entry's full length, tokens
    int32_t source_history = -1;           ///< that entry's history boundary (absorption threshold)
    int32_t device_seq = -1;               ///< take_device / share_device
    blob_ptr full;                         ///< load_ram
    blob_ptr recurrent;                    ///< checkpoint to apply after the KV (hybrid, n < full length)
    /** The entry was taken: its checkpoints and final state go into the request's commit. */
    bool absorbs = false;
    /** absorbs: the taken entry's checkpoints plus its final state as a turn checkpoint
     *  (hybrid), carried over to the request's new entry (seed 000 "final"). */
    std::vector<checkpoint> inherited;
    uint64_t inflight_bytes = 0;           ///< absorbs: RAM bytes the taken entry held
    std::vector<capture_point> captures;   ///< ascending n_tokens, each in [n_restore, |prompt|)
    std::string reason;                    ///< one line for the decision log
};

/** What the scheduler hands back when a request's sequence is done. */
struct commit_input {
    key k;
    tokens toks;                       ///< tokens whose state the sequence holds (its full length)
    int32_t seq = -1;                  ///< device sequence holding that state
    uint64_t device_bytes = 0;         ///< size of that state, bytes (accounting)
    blob_ptr final_recurrent;          ///< hybrid: recurrent state at toks.size() (may be null)
    std::vector<checkpoint> captured;  ///< checkpoints taken during this request's prefill
    /** The prompt's history boundary (plan_hints), -1 when none (e.g. it ends with a tool
     *  result): the entry then keeps the absorbed entry's boundary as its absorption threshold. */
    int32_t history_tokens = -1;
    std::optional<restore_plan> absorbed;  ///< the plan, when it took an entry (absorption)
    uint64_t reserved_bytes = 0;       ///< sum of this request's reserve() calls
};

/** Summary of an entry, for tests and the decision log. */
struct entry_view {
    uint64_t id = 0;
    key k;
    int32_t n_tokens = 0;
    tier where = tier::ram;
    int32_t seq = -1;
    bool anchor = false;
    std::vector<std::pair<int32_t, point_kind>> checkpoints;
    uint64_t bytes = 0;
};

class store {
public:
    /** `hybrid`: the model has recurrent state (checkpoints needed); else dense (any prefix
     *  of a stored KV is a restore point). */
    store(const config & cfg, bool hybrid);

    /** Chooses the longest restore point for `prompt` (REQUIRES: non-empty) under key `k` and
     *  the capture points of its prefill. Takes the entry out of the index when the plan
     *  absorbs it. `now_s`: monotonic seconds. Always leaves >= 1 token to prefill. */
    restore_plan plan(const key & k, const tokens & prompt, const plan_hints & hints, double now_s);

    /** Reserves `bytes` of RAM for a new state before it is allocated, evicting least
     *  recently used entries first (never entry `protect`). Returns false (and counts a
     *  rejection; WARN once when `bytes` alone exceeds the budget) when it cannot fit. The
     *  reservation is released by the commit/commit_anchor/demote/abandon that reports it. */
    bool reserve(uint64_t bytes, uint64_t protect = 0);

    /** Stores the request's sequence as an entry parked on the device (absorbing the plan's
     *  source, thinning its checkpoints). Returns false when not stored (too short, disabled):
     *  the caller then frees the sequence. */
    bool commit(commit_input in, double now_s);

    /** Stores an anchor: the whole state of the first `toks.size()` tokens, pinned in RAM.
     *  `reserved`: the bytes reserve()d for `full`. */
    void commit_anchor(const key & k, tokens toks, blob_ptr full, uint64_t reserved, double now_s);

    /** The least recently used parked device entry (to demote when a sequence id is
     *  needed), or nullopt when none is parked. */
    std::optional<entry_view> device_lru() const;

    /** Moves device entry `id` to RAM with its whole-state blob (REQUIRES: reserve() of its
     *  size succeeded, or `full` null to drop it). Its sequence is released. */
    void demote(uint64_t id, blob_ptr full, uint64_t reserved);

    /** Drops a taken entry's plan without a commit (the request failed); nothing to do for
     *  RAM, the device sequence was the request's. Counts it. */
    void abandon(const restore_plan & p, uint64_t reserved);

    /** Expires entries whose last hit is older than the TTL. */
    void expire(double now_s);

    /** Removes everything; returns entries and bytes freed. Device sequences are released. */
    reset_result reset();

    /** Device sequences the store let go of since the last call (the scheduler seq_rm's them). */
    std::vector<int32_t> take_released_seqs();

    stats get_stats() const;
    std::vector<entry_view> entries() const;
    /** RAM bytes held by entries plus outstanding reservations. */
    uint64_t ram_bytes() const { return held_bytes() + pending_bytes_; }
    uint64_t budget() const { return cfg_.ram_bytes; }
    const config & cfg() const { return cfg_; }
    bool hybrid() const { return hybrid_; }
    /** The decision trace (off until a sink is set; the scheduler sets one with --cache-trace). */
    tracer & trace() { return trace_; }

    /** Throws std::logic_error naming the first broken invariant:
     *  1. checkpoints of an entry ascend strictly, each in [1, n_tokens);
     *  2. at most max_checkpoints per entry; none on dense families or in exact mode;
     *  3. device entries hold distinct sequence ids and no full blob; RAM entries hold a blob;
     *  4. anchors are in RAM, at most max_anchors, their bytes <= max_anchor_bytes;
     *  5. ram_bytes() (blobs held + reservations) is <= budget();
     *  6. conversation entries <= max_entries. */
    void check_invariants() const;

private:
    struct entry {
        uint64_t id = 0;
        key k;
        tokens toks;
        tier where = tier::device;
        int32_t seq = -1;
        uint64_t device_bytes = 0;
        blob_ptr full;
        blob_ptr final_recurrent;
        std::vector<checkpoint> checkpoints;
        bool anchor = false;
        int32_t history = -1;  // history boundary of the prompt that made it (-1: unknown)
        double last_use = 0;
        uint64_t ram_bytes() const;
        /** Restoring at n continues this conversation (seed 000 "a prompt that extends an
         *  entry"): n reaches the entry's history boundary, or its whole length. */
        bool extended_by(int32_t n) const {
            const int32_t len = static_cast<int32_t>(toks.size());
            return !anchor && n >= (history >= 0 ? std::min(history, len) : len);
        }
    };
    using iter = std::list<entry>::iterator;

    struct candidate {
        iter it;
        int32_t n = 0;
        point_kind kind = point_kind::none;
        const checkpoint * ckpt = nullptr;
    };

    std::optional<candidate> best_in(const entry & e, iter it, const tokens & prompt) const;
    void add_captures(restore_plan & p, const key & k, const tokens & prompt, const plan_hints & h) const;
    void thin(std::vector<checkpoint> & cps);
    void erase(iter it, const char * reason, std::string_view detail = {});
    /** Decision trace of a plan (store_trace.cpp): the decision, each rejected candidate and
     *  why, the capture points and why others were not planned. REQUIRES: trace_.on(). */
    void trace_plan(const key & k, const tokens & prompt, const plan_hints & h, const restore_plan & p);
    bool evict_one_lru(uint64_t protect_id, const char * reason);
    void release_pending(uint64_t bytes);
    uint64_t held_bytes() const;
    entry_view view(const entry & e) const;

    config cfg_;
    bool hybrid_;
    std::list<entry> entries_;      // front = most recently used
    uint64_t next_id_ = 1;
    uint64_t pending_bytes_ = 0;    // reserved for states in flight
    std::vector<int32_t> released_;
    bool warned_too_large_ = false;
    stats stats_;
    tracer trace_;
};

}  // namespace lineage::cache
