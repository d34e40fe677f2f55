// cache::store: the prompt cache's index of entries over the device (T0) and RAM (T1) tiers, with
// the lineage rules (docs/prompt-cache.md "How it works"): one entry per conversation lineage (a
// full snapshot at its latest prompt plus recurrent-only checkpoints at earlier lengths that share
// its KV), absorption, thinning, pinned anchors, and a RAM byte budget with LRU + TTL eviction.
// It is engine-agnostic: it decides (plan), the scheduler executes with the engine and
// reports back (commit, demote); states are opaque blobs.
// Thread safety: not thread-safe; owned by the engine thread. Tests call check_invariants().
//
// Entry states and transitions (cf. RocksDB lru_cache.h):
//   (new) --commit--> DEVICE(parked on a sequence id)
//   DEVICE --take (a request extends it; lineage mode)--> TAKEN (out of the index; the request
//          owns the sequence; its checkpoints return with the request's commit: absorption)
//   DEVICE --demote (sequence id needed)--> RAM (whole-state blob, or a patch over the state of
//          the anchor it continues: store_share.cpp)
//   RAM    --take--> TAKEN (blob loaded into the request's sequence, then freed at commit)
//   DEVICE|RAM --evict (LRU over budget / max entries, TTL)--> gone (device: sequence released)
//   ANCHOR: RAM only, pinned: never taken, absorbed or LRU-evicted; capped by count and bytes.
//   RAM|ANCHOR --release (its file has landed, unused --cache-ram-release-s)--> gone from RAM; the
//          file answers the next lookup (load_tier; an anchor is pinned again, but on the CPU
//          alone: config::repin_read_anchors).
// Tier 2 (write-behind), beside the states above:
//   no copy --idle / shutdown (take_idle_writes), unwritten too long, even while the engine is busy
//          (take_overdue_write, one per step), or leaving for room/TTL (spill)--> WRITING
//   WRITING --tier_written(f)--> has file f | --tier_written(0)--> write_failed (not offered again)
//   WRITING --absorbed meanwhile--> f becomes an ancestor of the successor (deleted once it is durable)
//   (file only) --plan: longer than memory's best--> load_tier --tier_loaded()--> TAKEN, or an
//          anchor pinned in RAM again (config::repin_read_anchors), or a counted miss (damaged)
//
// Lookup (docs/prompt-cache.md "Lookup"): one radix trie per bucket over the entries'
// tokens; plan() visits the bucket's entries in descending common prefix with the prompt and
// stops as soon as no remaining entry can change the decision, so a lookup costs the prompt
// length plus the candidates that could win, not every entry times its length. The choice of
// restore point, the tie order, the session rule and absorption are restore_rule.h's, shared
// with the disk tier; a disk hit is completed here (tier_loaded). Dense families
// with APC on (--apc-enabled) also keep a block hash chain per entry; a partial match is then
// clamped to the whole blocks on which the prompt's chain and the entry's agree.
#pragma once

#include "cache/config.h"
#include "cache/tier/lower_tier.h"
#include "cache/store/ghosts.h"
#include "cache/rule/key.h"
#include "cache/rule/media.h"
#include "cache/rule/radix_trie.h"
#include "cache/store/reasons.h"
#include "cache/rule/restore_rule.h"
#include "cache/rule/tier_cost.h"
#include "cache/stats.h"
#include "cache/store/trace.h"
#include "cache/store/value.h"
#include "cache/types.h"
#include "util/status.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <list>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace lineage::cache {

/** A running request's sequence offered to plan() as a restore source (docs/prompt-cache.md
 *  "Parallel requests on one prefix"): two requests that share a prefix and run at once need
 *  not both prefill it. The plan copies its KV [0, n) (and, hybrid, a checkpoint its prefill
 *  took) as it copies a parked entry's (restore_op::share_device); nothing is absorbed. */
struct live_state {
    uint64_t request = 0;                 ///< the running request's id (decision trace)
    int32_t seq = -1;                     ///< its device sequence
    std::string bucket;                   ///< its cache key's bucket (matches only within one)
    std::string session;                  ///< its session key
    tokens toks;                          ///< the tokens its sequence holds now
    std::vector<checkpoint> checkpoints;  ///< hybrid: recurrent states its prefill took, ascending
};

/** What the plan needs besides the prompt's tokens: the prompt's hints (prompt_hints, types.h)
 *  and, for this one plan, its images and the running requests' sequences. Positional
 *  initialisation fills the prompt_hints first (anchor, history, tools anchor, line starts, last
 *  user message, ...). */
struct plan_hints : prompt_hints {
    /** The prompt's images (media.h), ascending: no capture is planned strictly inside one (it
     *  moves back to the image's start), a hybrid prefill captures a turn checkpoint at each
     *  image's start, and a lookup whose longest match parts at an image's start names
     *  mm_digest as its miss cause. The span must outlive the plan() call. */
    std::span<const token_span> media = {};
    /** Running requests' sequences (live_state), considered beside the stored entries; a live
     *  restore point is chosen only when it is longer than every stored one. The span must
     *  outlive the plan() call. */
    std::span<const live_state> live = {};
    /** A tier not consulted (attach_tier order; -1: none): a plan made again after a read from it
     *  failed for another cause than its copy being gone (damaged, an I/O error, a timeout), so
     *  that the request does not wait on that tier a second time (scheduler complete_load). */
    int32_t skip_tier = -1;
};

/** A state to capture during prefill, after exactly n_tokens of the prompt. */
struct capture_point {
    int32_t n_tokens = 0;
    /** turn, guard, divergence, ladder (checkpoints) or anchor (whole state). Ladder rungs lie
     *  before the anchor capture of the same plan and are kept with that anchor. */
    point_kind kind = point_kind::turn;
    /** Taken at the end of the prefill pass that reaches n_tokens, wherever that pass ends
     *  (before the next point that is not), instead of ending a pass at n_tokens: a restore
     *  point that costs no forward pass of its own. The far rungs of the anchor ladder
     *  (ladder.h); the scheduler captures at most one per pass end. */
    bool at_pass_end = false;
    /** A ladder rung the prefill splits at only while other requests run or wait
     *  (config::ladder_defer; slot::defer_rungs): with the engine to itself it passes over it,
     *  and a ladder job makes it afterwards on the idle engine (restore_plan::deferred_rungs;
     *  docs/architecture.md "Ladder jobs"). */
    bool deferrable = false;
};

/** How to put the restore point into the request's sequence. */
enum class restore_op {
    none,          ///< cold: prefill from token 0
    take_device,   ///< continue the parked sequence `device_seq` itself (zero copies)
    share_device,  ///< seq_cp(device_seq -> new, [0, n)) then load `recurrent` if set
    load_ram,      ///< load `full` (whole state), then `recurrent` if set, then trim to n
    load_tier,     ///< read copy `tier_copy` of tier `tier` (its worker thread), then as load_ram with its blobs
};

/** What cache.plan() decided for one request. */
struct restore_plan {
    int32_t n_restore = 0;                 ///< prompt tokens restored (0: miss)
    point_kind kind = point_kind::none;    ///< kind of the restore point used
    restore_op op = restore_op::none;
    uint64_t source = 0;                   ///< entry id restored from (0: none)
    int32_t source_tokens = 0;             ///< that entry's full length, tokens
    bool source_anchor = false;            ///< load_tier: the copy is a pinned anchor's (system prompt + tools)
    int32_t source_history = -1;           ///< that entry's history boundary (absorption threshold)
    /** That entry's restores while stored (entry::uses; 0 for a tier copy or a running request):
     *  the eviction value's reuse class. */
    int32_t source_uses = 0;
    /** The restore counted as a use of that entry (a request's, beyond what another copy
     *  restores): an absorbing request's entry then has source_uses + 1 uses. */
    bool source_used = false;
    /** A miss or short hit caused by an eviction (cause evicted): the uses the evicted entry had
     *  (ghost_set::match::uses); 0 otherwise. */
    int32_t evicted_uses = 0;
    /** That entry's first turn boundary (entry::first_turn; -1: unknown, e.g. a tier copy). */
    int32_t source_first_turn = -1;
    int32_t device_seq = -1;               ///< take_device / share_device
    blob_ptr full;                         ///< load_ram
    blob_ptr recurrent;                    ///< checkpoint to apply after the KV (hybrid, n < full length)
    /** The entry was taken: its checkpoints and final state go into the request's commit. */
    bool absorbs = false;
    /** absorbs: the taken entry's checkpoints plus its final state as a turn checkpoint (hybrid),
     *  carried over to the request's new entry (docs/architecture.md "Restore points as
     *  implemented"). A copy from a running request's sequence or by a twin-keeping warm-up (twin):
     *  the source's restore points up to n_restore, shared blobs, carried over the same way. */
    std::vector<checkpoint> inherited;
    uint64_t inflight_bytes = 0;           ///< absorbs: RAM bytes the taken entry held
    copy_id tier_copy = 0;                 ///< load_tier: the copy to read, in that tier's ids
    uint64_t tier_bytes = 0;               ///< load_tier: that copy's size, bytes (tier_cost::observe_read)
    double tier_read_s = 0;                ///< load_tier: the tier worker's seconds reading it (tier_load_result::seconds)
    /** load_tier: the tier whose copy tier_copy names, as an index into the store's tiers
     *  (attach_tier order; the scheduler's tier list has the same order), and its name. */
    int32_t tier = -1;
    std::string tier_name;
    /** absorbs: tier-2 files the request's entry supersedes (the taken entry's own file and
     *  its unfinished deletions); deleted once the new entry's file is durable. */
    std::vector<copy_id> tier_ancestors;
    /** absorbs: since when (monotonic seconds) the taken entry's content has had no tier-2 copy
     *  and none in flight; -1 when it had one. The request's entry inherits it, so that a
     *  conversation extended faster than --cache-disk-max-unwritten-s is still written. */
    double unwritten_since = -1;
    /** absorbs: the taken entry's id when its write was still in flight (its file then
     *  becomes an ancestor of the new entry when it completes). */
    uint64_t pending_write_of = 0;
    /** load_tier absorbing a hybrid file restored whole: the file keeps no separate final state,
     *  so after the restore the sequence's recurrent state becomes the new entry's turn
     *  checkpoint at source_tokens (the scheduler reserves and takes it). */
    bool final_from_sequence = false;
    /** The resend twin (docs/prompt-cache.md "Warm-up of the next turn"): a warm-up that continues
     *  an entry short of its end (the next turn re-renders the reply from the history boundary)
     *  does not absorb it: the entry stays as the conversation's resend twin, holding its state at
     *  its end and its resend guard, so that a regenerate or a verbatim resend after the warm-up
     *  still restores all but one token; `inherited` then holds copies of its restore points up to
     *  n_restore (shared blobs) for the warm-up's entry. This is the twin's id (0: none), carried to
     *  the warm-up's entry (and through a preempted warm-up's continuation); the next request
     *  that continues that entry retires the twin (eviction reason `superseded`). */
    uint64_t twin = 0;
    std::vector<capture_point> captures;   ///< ascending n_tokens, each in [n_restore, |prompt|)
    /** The deferrable rungs (capture_point::deferrable) the prefill passed over, ascending,
     *  tokens (lifecycle::after_chunk): the anchor's capture hands those before it to a ladder job
     *  (store::plan_ladder_job, add_rungs). */
    std::vector<int32_t> deferred_rungs;
    /** Ladder rungs this plan left out because the RAM budget could not keep them (store::plan's
     *  rung admission, --cache-eviction value: no room left and each worth less per byte than
     *  what it would push out; stats::ladder_rungs_not_planned). */
    int32_t rungs_not_planned = 0;
    /** The lookup was a request's, counted in stats (lookups, hits or misses, tokens): not a
     *  warm-up's or a ladder job's (store::plan_warmup, plan_ladder_job). */
    bool counted = false;
    std::string reason;                    ///< one line for the decision log
    /** A miss or a short hit: why (reasons.h); nullopt for a hit that restored what was shared. */
    std::optional<miss_cause> cause;
    /** share_device from a running request's sequence (plan_hints::live), not a parked entry. */
    bool live = false;
    /** cause key_differs: the first key dimension that differs ("tenant", "lora_id", "mm_digest",
     *  ...; "unrecorded" when the other entry kept none); "" otherwise. */
    std::string cause_dimension;
};

/** The tier `p` restores from, for a response's diagnostics: "device" (a parked sequence),
 *  "running_request" (plan.live), "ram", "disk", "redis"; "" for a miss. */
std::string_view restored_from(const restore_plan & p);

/** restore_op by its enumerator's name ("none", "take_device", "share_device", "load_ram",
 *  "load_tier"), for logs. */
std::string_view to_string(restore_op op);

/** What the scheduler hands back when a request's sequence is done. */
struct commit_input {
    key k;
    tokens toks;                       ///< tokens whose state the sequence holds (its full length)
    int32_t seq = -1;                  ///< device sequence holding that state
    uint64_t device_bytes = 0;         ///< size of that state, bytes (accounting)
    blob_ptr final_recurrent;          ///< hybrid: recurrent state at toks.size() (may be null)
    std::vector<checkpoint> captured;  ///< checkpoints taken during this request's prefill
    /** The prompt's hints (the scheduler fills what the commit reads): history_tokens (-1 when none, e.g.
     *  it ends with a tool result: the entry then keeps the absorbed entry's boundary as its
     *  absorption threshold) and last_user_tokens (-1 when unknown: message rungs before it
     *  belong to older messages and are dropped, config::message_rungs). */
    prompt_hints hints;
    /** The plan, when it took an entry (absorption), or when it copied one whose restore points
     *  the new entry carries (restore_plan::inherited: a running request's, a resend twin's). */
    std::optional<restore_plan> absorbed;
    /** The plan's evicted_uses: a conversation coming back after its entry was evicted keeps its
     *  reuse class (value.h) in the new entry. */
    int32_t evicted_uses = 0;
    uint64_t reserved_bytes = 0;       ///< sum of this request's reserve() calls
    /** A warm-up that prefilled its whole prefix: the entry is marked warmed at its length, and
     *  a later request restoring at least that much counts a warm-up hit. */
    bool warmed = false;
};

/** An entry to write to tier 2 (write-behind: docs/architecture.md "Tier 2 (disk) as implemented"):
 *  what the scheduler hands to the disk tier once it has the whole state (RAM entries carry it;
 *  device entries name their sequence, read before the sequence is released). */
struct tier_job {
    uint64_t entry_id = 0;
    key k;
    tokens toks;
    int32_t history = -1;
    bool anchor = false;
    blob_ptr full;                      ///< RAM entries
    blob_ptr base;                      ///< set: `full` is a patch over it (the copy holds the whole state)
    int32_t seq = -1;                   ///< device entries
    std::vector<checkpoint> checkpoints;
    std::vector<copy_id> ancestors;     ///< files to delete once this one is durable
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
    uint64_t bytes = 0;         ///< device_bytes + ram_bytes
    uint64_t device_bytes = 0;  ///< its parked sequence's state, bytes (in stats::bytes["device"])
    uint64_t ram_bytes = 0;     ///< its whole-state blob and checkpoints, bytes (in stats::bytes["ram"])
    copy_id tier_copy = 0;     ///< its copy in the first tier below RAM (0: none yet)
    std::vector<copy_id> tier_ancestors;
    int32_t warmed = 0;        ///< length a warm-up stored it at, not hit yet (0: none)
    int32_t uses = 0;          ///< requests that restored it or the entries it absorbed (value.h)
};

/** The plan of a cold prefill that replaces `p` (its restore failed): from token 0 every
 *  planned capture lies ahead and is still taken. */
restore_plan cold_plan(restore_plan p);

class store {
public:
    /** `hybrid`: the model has recurrent state (checkpoints needed); else dense (any prefix
     *  of a stored KV is a restore point). */
    store(const config & cfg, bool hybrid);

    /** Chooses the longest restore point for `prompt` (REQUIRES: non-empty) under key `k` and
     *  the capture points of its prefill. Takes the entry out of the index when the plan
     *  absorbs it. `now_s`: monotonic seconds. Always leaves >= 1 token to prefill.
     *  hints.breakpoint_tokens: client-marked cache breakpoints (Anthropic `cache_control`),
     *  prompt lengths before BPE slack: a hybrid prompt captures a turn checkpoint at each, minus
     *  anchor_slack (a dense entry restores any prefix of itself anyway). */
    restore_plan plan(const key & k, const tokens & prompt, const plan_hints & hints, double now_s);

    /** Reserves `bytes` of RAM for a new state before it is allocated, evicting the entries of
     *  least value first (--cache-eviction; least recently used with `recency`; never entry
     *  `protect`: store_value.cpp). Returns false (and counts a
     *  rejection; WARN once when `bytes` alone exceeds the budget) when it cannot fit. The
     *  reservation is released by the commit/commit_anchor/demote/abandon that reports it. */
    bool reserve(uint64_t bytes, uint64_t protect = 0);

    /** Releases `bytes` of an earlier reserve() whose state was dropped before any commit
     *  reported it (a reply checkpoint candidate given up during decode). */
    void unreserve(uint64_t bytes) { release_pending(bytes); }

    /** plan() for a background warm-up of `prefix` (docs/prompt-cache.md "Warm-up"): the same
     *  decision, but the lookup stays out of the request counters (lookups, hits, misses, tokens;
     *  its prefill shows in stats.warmup), and continuing a warmed entry is no hit
     *  (store_warmup.cpp). */
    restore_plan plan_warmup(const key & k, const tokens & prefix, const plan_hints & hints, double now_s);

    /** Stores the request's sequence as an entry parked on the device (absorbing the plan's
     *  source, thinning its checkpoints). Returns false when not stored (too short, disabled):
     *  the caller then frees the sequence. */
    bool commit(commit_input in, double now_s);

    /** The capture points plan() gives `prompt` on an empty cache (anchor, tools anchor, turn,
     *  guard; no divergence, no existing anchor), in ascending order. A prefill that bypasses
     *  the cache splits its chunks there, so that on a model whose numerics depend on the split
     *  (Mamba2's chunked scan) it computes what a first request with the cache on computes.
     *  Its only side effect: the rungs the budget could not keep are counted
     *  (stats::ladder_rungs_not_planned), as a miss's plan counts them. */
    std::vector<capture_point> cold_split_points(const tokens & prompt, const plan_hints & hints);

    /** Stores an anchor: the whole state of the first `toks.size()` tokens, pinned in RAM, with
     *  its ladder `rungs` (recurrent checkpoints inside it, ascending; hybrid; those outside
     *  [1, toks.size()) or past ladder_max_rungs are dropped). `reserved`: the bytes reserve()d
     *  for `full` and the rungs. With max_anchors 0, stores nothing. */
    void commit_anchor(const key & k, tokens toks, blob_ptr full, uint64_t reserved, double now_s,
                       copy_id tier_copy = 0, std::vector<checkpoint> rungs = {});

    /** Ladder jobs (config::ladder_defer; docs/architecture.md "Ladder jobs"): the plan of a
     *  background prefill that makes the rungs `rungs` (ascending, tokens, each in [1, |prompt|])
     *  of the system region `prompt` (the tokens of the anchor they belong to, or a prefix of
     *  them). It restores the latest state held in RAM that lies at or before the first rung and
     *  inside what `prompt` shares with its entry (an anchor, a ladder rung, a conversation's
     *  checkpoint; op load_ram, or none: from token 0), and captures the rungs after it as ladder
     *  splits, up to the last one before the next held state (one stretch: the next restores
     *  that state); the caller ends the prompt at the last capture. Entries are left as they are (no use, no
     *  absorption, no lookup counted); the blobs it names are shared. */
    restore_plan plan_ladder_job(const key & k, const tokens & prompt, const std::vector<int32_t> & rungs) const;
    /** True when an anchor of k's bucket holds exactly `toks` (REQUIRES: non-empty). */
    bool holds_anchor(const key & k, const tokens & toks) const;
    /** Adds the ladder rungs a ladder job made (`rungs`: recurrent checkpoints inside `toks`,
     *  the anchor's tokens) to that anchor, as commit_anchor would have: sorted, one per length,
     *  at most ladder_max_rungs in all (the far end of the region goes first), within
     *  max_anchor_bytes. `reserved`: the bytes reserve()d for them. Rungs whose anchor is gone are
     *  dropped (counted). An anchor that already has a tier-2 copy gets written again with them
     *  (the old file superseded, deleted once the new one is durable). Returns the rungs added. */
    int32_t add_rungs(const key & k, const tokens & toks, std::vector<checkpoint> rungs, uint64_t reserved,
                      double now_s);
    /** While a ladder job for the anchor holding exactly `toks` is queued or running (`pending`
     *  true; each such call is ended by one with `pending` false), RAM release (release_written)
     *  keeps that anchor and every anchor whose tokens are a prefix of `toks` (the tools anchor):
     *  the job adds its rungs to the anchor's RAM copy, which one released to its file would drop,
     *  and starts from the latest RAM state before its first rung (plan_ladder_job), which is
     *  often the earlier anchor. Holds are counted, so two jobs may share an earlier anchor.
     *  No-op for anchors not held. */
    void hold_for_rungs(const key & k, const tokens & toks, bool pending);
    /** Counts ladder rungs by outcome (stats::ladder_deferred_rungs: deferred, dropped). */
    void count_deferred_rungs(const char * outcome, int64_t n) { stats_.ladder_deferred_rungs[outcome] += n; }

    /** Completes a load_tier plan with what the tier's worker read (`r`): the copy's whole state
     *  and the checkpoint at the restore point; when the plan absorbs the copy, its restore
     *  points up to n_restore return with the commit (RAM reserved for them; those that do not
     *  fit are dropped) and final_from_sequence is set (hybrid, restored whole); a file restored
     *  as an anchor is pinned in RAM again (its file stays) where config::repin_read_anchors says
     *  so, or when it came from a shared tier. Fails when the file was damaged or
     *  missing, or when a hybrid restore short of the file's length finds no checkpoint where
     *  its index said: the hit then becomes a counted miss (tier_load_failed) and `p` a cold
     *  plan with the same captures; the status says which file and why. The scheduler then
     *  plans the request again (retract_lookup, then plan): what memory still holds serves it. */
    util::status tier_loaded(const key & k, restore_plan & p, tier_load_result r, double now_s);
    /** The checkpoints tier_loaded uses of the copy `p` loads: every one where the copy may be
     *  pinned again as an anchor with its ladder (repins_read_anchor, an anchor or ladder
     *  restore), those up to n_restore where `p` absorbs it, else the one at n_restore. What the
     *  tier's read keeps in memory (checkpoint_filter). */
    checkpoint_filter checkpoints_to_read(const restore_plan & p) const;

    /** A load_tier plan's copy failed its checks or vanished: the hit becomes a counted miss
     *  (rejections[the tier's load_failed]: "disk_damaged", "redis_failed"); a warm-up's, whose
     *  hit was not counted, only the rejection. The scheduler then plans the request again
     *  (retract_lookup), or prefills it cold. */
    void tier_load_failed(const restore_plan & p);
    /** Takes back what the lookup that made `first` (the load_tier plan as planned, before
     *  tier_loaded failed and made it cold, counting a miss) counted: the lookup, that miss, the
     *  `n_prompt` tokens counted to prefill, its rungs not planned, its miss or short-hit cause
     *  (and key dimension). The request is then planned again (plan, plan_warmup) and counted
     *  once, as that plan says; the failed read stays counted (rejections[the tier's
     *  load_failed]). Only the rungs for a plan not counted (a warm-up's). Not taken back: an
     *  evicted entry's ghost counted as reused (classify), counted again if the second plan
     *  finds it too. */
    void retract_lookup(const restore_plan & first, int32_t n_prompt);

    /** The least recently used parked device entry (to demote when a sequence id is
     *  needed), or nullopt when none is parked. */
    std::optional<entry_view> device_lru() const;

    /** A pinned anchor's whole state that another entry's state may be held over as a patch
     *  (cache/blob_patch.h; docs/prompt-cache.md "Prefix sharing in RAM"). */
    struct patch_base {
        uint64_t anchor = 0;   ///< the anchor's entry id
        blob_ptr state;        ///< its whole state, as the anchor holds it
        int32_t n_tokens = 0;  ///< its tokens
    };

    /** The base device entry `id`'s state may be held over in RAM: the longest anchor of its
     *  bucket held in RAM whose tokens are a proper prefix of the entry's (config::ram_prefix_share;
     *  nullopt when off, when `id` is no device entry, or when no anchor is such a prefix). */
    std::optional<patch_base> patch_base_for(uint64_t id) const;

    /** Moves device entry `id` to RAM with its whole-state blob (REQUIRES: reserve() of its
     *  size succeeded, or `full` null to drop it). Its sequence is released. With `base`
     *  (from patch_base_for), `full` is a patch over base.state (blob_patch.h) that gives the
     *  whole state back: the entry holds the patch's bytes and reads the anchor's. */
    void demote(uint64_t id, blob_ptr full, uint64_t reserved, std::optional<patch_base> base = std::nullopt);

    /** Drops a taken entry's plan without a commit (the request failed); nothing to do for
     *  RAM, the device sequence was the request's. Counts it. */
    void abandon(const restore_plan & p, uint64_t reserved);

    /** Expires entries whose last hit is older than the TTL. */
    void expire(double now_s);

    /** RAM release (config::ram_release_s): erases the RAM entries and anchors (not device
     *  entries, none being written) that have a tier-2 file from the disk tier (attach_disk) and
     *  whose last use is at least ram_release_s seconds before `now_s`. Counted as evictions
     *  "released"; no ghost (the file still answers a lookup). Returns the bytes freed. No-op
     *  when ram_release_s <= 0 or no disk tier is attached. */
    uint64_t release_written(double now_s);

    /** True when a conversation entry of k's bucket holds `prefix` (REQUIRES: non-empty) as a
     *  prefix of its tokens: a warm-up of `prefix` has nothing to add (src/cache/store/store_warmup.cpp).
     *  No side effects. */
    bool covers(const key & k, const tokens & prefix) const;

    /** The warm-up counters, for the scheduler's part of them (runs, tokens, skips). */
    warmup_stats & warmup_counters() { return stats_.warmup; }

    /** The longest prefix `prompt` shares with a stored state (entry or anchor) of `bucket`, in
     *  memory, tokens (0: none); an upper bound of what plan() restores from memory. */
    int32_t longest_match(const std::string & bucket, const tokens & prompt) const;
    /** Counts a request that waited for a running one to compute their shared prefix. */
    void count_prefix_hold() { stats_.prefix_holds++; }
    /** A request that did not look up (cache_prompt false, cache off): counted as a miss by
     *  cause "bypassed". */
    void count_bypassed() { stats_.misses_by_cause[std::string(to_string(miss_cause::bypassed))]++; }
    /** Counts a restore point of `kind` captured (`bytes` of state), by cutting a prefill pass
     *  short there when `split` (stats::captures, capture_splits, capture_bytes). */
    void count_capture(point_kind kind, uint64_t bytes, bool split) {
        const std::string k(to_string(kind));
        stats_.captures[k]++;
        stats_.capture_splits[k] += split ? 1 : 0;
        stats_.capture_bytes[k] += static_cast<int64_t>(bytes);
    }

    /** Removes everything; returns entries and bytes freed. Device sequences are released. */
    reset_result reset();

    /** Removes the entries (anchors included) whose key satisfies `which`, as reset() does for
     *  all: no eviction counted, nothing written to disk, device sequences released (see
     *  take_released_seqs). Returns entries and bytes freed (disk fields 0: the caller owns the
     *  tier-2 files). Used for a tenant's POST /v1/cache/reset. */
    reset_result reset_if(const std::function<bool(const key &)> & which);

    /** Appends a tier below RAM (docs/architecture.md "Tiers below RAM"). Tiers are consulted
     *  in the order attached, each only for a restore point longer than the best device/RAM one
     *  and than every tier before it (docs/architecture.md "The restore rule: one function, every
     *  tier"). Once any is attached the write-behind runs (take_idle_writes, take_overdue_write,
     *  take_spills). The first tier's copies are the ones the entries track (tier_written,
     *  entry_view::tier_copy); a shared tier (tier_traits::shared) also gets an anchor as soon as
     *  it is pinned (take_spills). `t` must outlive the store's use of it (detach_tiers). */
    void attach_tier(const tier_lookup * t, tier_traits traits);
    /** Forgets every tier (before they are destroyed). */
    void detach_tiers() { tiers_.clear(); }

    /** Write-behind: entries without a tier-2 copy whose last use is at least
     *  `idle_s` seconds before `now_s` (every such entry when idle_s < 0, at shutdown), and
     *  worth a copy by the tier cost rule (tier_cost::worth_write; at shutdown by its shutdown
     *  test); each is marked as being written. An entry the rule declines is counted once
     *  (stats::tier_writes_declined) and not offered again. */
    std::vector<tier_job> take_idle_writes(double now_s, double idle_s);
    /** Write-behind under load: the entry without a tier-2 copy (none in flight, none failed,
     *  not declined by the tier cost rule, and worth a copy by it: worth_writing)
     *  whose content has gone unwritten longest, when that is at least `max_unwritten_s`
     *  seconds (inherited across absorption); nullopt otherwise. At most one per call: the
     *  scheduler calls it once per engine step, so the cost (one state read) is bounded. */
    std::optional<tier_job> take_overdue_write(double now_s, double max_unwritten_s);

    /** The tier cost rule's rates (tier_cost.h): the scheduler feeds it its prefill passes, its
     *  restores from a tier and the first tier's writes; the store decides with it. */
    tier_cost & cost() { return cost_; }
    const tier_cost & cost() const { return cost_; }

    /** Entries without a tier-2 copy that left the store for lack of room or by TTL since the
     *  last call (write-behind "when it leaves RAM"), worth a copy by the tier cost rule. Device ones name their sequence: the
     *  scheduler must read it before releasing the sequences of take_released_seqs(). */
    std::vector<tier_job> take_spills();

    /** A write finished: entry `entry_id` now has tier-2 copy `f` (0: the write failed; the
     *  entry is not offered again). When the entry was absorbed meanwhile, `f` becomes an
     *  ancestor of its successor. */
    void tier_written(uint64_t entry_id, copy_id f);

    /** Device sequences the store let go of since the last call (the scheduler seq_rm's them). */
    std::vector<int32_t> take_released_seqs();

    stats get_stats() const;
    std::vector<entry_view> entries() const;
    /** RAM bytes held by entries plus outstanding reservations. */
    uint64_t ram_bytes() const { return held_bytes() + pending_bytes_; }
    uint64_t budget() const { return cfg_.ram_bytes; }
    /** Sets the RAM byte budget (the scheduler's model-aware default, at startup). REQUIRES:
     *  nothing held yet (ram_bytes() == 0). */
    void set_budget(uint64_t bytes);
    /** Most APC block hashes held (--apc-num-blocks, or its default from max_entries). */
    int64_t apc_num_blocks() const;
    const config & cfg() const { return cfg_; }
    bool hybrid() const { return hybrid_; }
    /** The decision trace (off until a sink is set; the scheduler sets one with --cache-trace). */
    tracer & trace() { return trace_; }

    /** Throws std::logic_error naming the first broken invariant:
     *  1. checkpoints of an entry ascend strictly, each in [1, n_tokens);
     *  2. at most max_checkpoints per conversation entry besides at most message_rungs message
     *     rungs; an anchor holds only ladder rungs, at most ladder_max_rungs; none on dense
     *     families or in exact mode;
     *  3. device entries hold distinct sequence ids and no full blob; RAM entries hold a blob;
     *  4. anchors are in RAM, at most max_anchors, their bytes <= max_anchor_bytes;
     *  5. ram_bytes() (blobs held + reservations) is <= budget();
     *  6. conversation entries <= max_entries;
     *  7. every entry is in its bucket's trie under its tokens, and the tries hold nothing else;
     *  8. APC: only dense entries with APC on carry a chain; the chains hold <= apc_num_blocks
     *     hashes, and the block counters match them;
     *  9. tier 2: an entry with a file is neither being written nor marked write_failed;
     * 10. write-behind bound: an entry's content has gone unwritten since no later than its last
     *     use (unwritten_since <= last_use; absorption only moves it earlier);
     * 11. prefix sharing: an entry held as a patch is a RAM conversation entry whose base is its
     *     anchor's state or the orphan base that anchor left (counted once in held_bytes), and
     *     an orphan base counts exactly the patches over it. */
    void check_invariants() const;

private:
    struct entry {
        uint64_t id = 0;
        key k;
        tokens toks;
        tier where = tier::device;
        int32_t seq = -1;
        uint64_t device_bytes = 0;
        blob_ptr full;  // its whole state; with `base`, a patch over base (blob_patch.h)
        blob_ptr base;  // the anchor state `full` is a patch over (null: full is the whole state)
        uint64_t base_anchor = 0;  // that anchor's entry id (0: none)
        int32_t base_tokens = 0;   // that anchor's tokens: the KV rows base holds of this entry
        blob_ptr final_recurrent;
        std::vector<checkpoint> checkpoints;
        bool anchor = false;
        int32_t history = -1;  // history boundary of the prompt that made it (-1: unknown)
        // The lineage's first turn boundary: the history boundary of the first prompt of the
        // conversation this entry continues (kept through absorptions that restore at or past it),
        // where a new session that sends the same first message parts (-1: unknown; not persisted:
        // an entry read back from a tier starts over from the next prompt's boundary).
        int32_t first_turn = -1;
        double last_use = 0;
        double unwritten_since = 0;        // its content has had no tier-2 copy since (monotonic s)
        copy_id tier_copy = 0;             // its copy in the first tier below RAM (0: none)
        bool writing = false;              // a write of it is in flight
        bool stale_write = false;          // changed while being written: that write lands superseded
        int32_t rung_holds = 0;            // ladder jobs queued or running that need this anchor: kept in RAM
        std::map<int32_t, int32_t> rung_uses;  // anchors: restores of each ladder rung, by its length (cheapest_rung)
        bool write_failed = false;         // not offered to the disk tier again
        bool write_declined = false;       // the tier cost rule found no copy worth it: not offered again
        std::vector<copy_id> ancestors;    // tier-2 files it supersedes
        uint64_t mru = 0;  // recency stamp: larger = nearer the front of entries_
        std::vector<std::string> chain;  // APC block hashes (dense, --apc-enabled)
        int32_t warmed = 0;              // a warm-up stored it at this length, not hit yet (0: none)
        // The entry a warm-up left behind as this conversation's resend twin (restore_plan::twin);
        // retired when a request continues this entry (0: none).
        uint64_t resend_twin = 0;
        // Requests that restored from it or from the entries it absorbed (warm-ups not counted):
        // its reuse class in the eviction value (value.h).
        int32_t uses = 0;
        uint64_t family = 0;  // reuse_family(k.bucket, toks): its reuse counts' family (value.h)
        uint64_t ram_bytes() const;
        /** Held as a patch: the bytes its whole state has beyond the patch's (what sharing
         *  saves; 0 otherwise). */
        uint64_t shared_bytes() const;
    };
    using iter = std::list<entry>::iterator;
    /** Marks a restore_search id as an index into plan_hints::live, not an entry id. */
    static constexpr uint64_t live_id_bit = uint64_t{1} << 63;

    /** What the restore rule (restore_rule.h) sees of `e` for a request in `session`. */
    stored_state state_of(const entry & e, const std::string & session) const;
    bool apc_on() const { return rule_.apc_on(); }
    /** Files a new front entry in the index (trie, id map, recency stamp, APC chain). */
    void index_add(iter it);
    /** Takes an entry out of the index; call before erasing it from entries_. */
    void index_remove(iter it);
    // plan()'s steps (store.cpp), in the order it takes them, over the state they hand on.
    struct plan_state;
    /** Searches memory for `s.prompt`'s restore point: the bucket's entries in descending common
     *  prefix, then the running requests' sequences (plan_hints::live). Sets s.req_chain,
     *  s.chosen, s.live_lcp and s.best_short (tokens). */
    void search_memory(plan_state & s) const;
    /** Where s.chosen lies short of the end of an entry that holds a warm-up and that entry's
     *  resend twin restores as many tokens, the twin serves the request instead (s.chosen becomes
     *  the twin's point; traced). */
    void prefer_resend_twin(plan_state & s);
    /** Asks each tier below RAM for a copy longer than the best restore point above it, and
     *  keeps the last one the tier cost rule finds worth its read (bytes read vs seconds of
     *  prefill saved) in s.tier_copy and s.tier; a declined read is counted and traced. */
    void search_tiers(plan_state & s);
    /** A hit on a copy below RAM (s.tier_copy): fills `p` for load_tier, absorbing the copy when
     *  the prompt continues it; counts the hit. */
    void plan_tier_restore(const plan_state & s, restore_plan & p);
    /** A hit on a running request's sequence (s.chosen with live_id_bit): fills `p` for
     *  share_device with that sequence's restore points up to the restore point; counts it. */
    void plan_live_restore(const plan_state & s, restore_plan & p);
    /** A hit on a stored entry (s.chosen): the reuse use, absorption or the warm-up's resend
     *  twin, the restore op, the hit's counters and the decision line; takes the entry
     *  (take_entry) when `p` absorbs it, else moves it to the front of the recency list. */
    void plan_entry_restore(const plan_state & s, restore_plan & p);
    /** Absorption: the request takes entry `it` out of the index. Its restore points up to
     *  p.n_restore (and its final state, restored whole) go to p.inherited, its RAM bytes stay
     *  reserved (p.inflight_bytes), its tier-2 files become p.tier_ancestors; `retire_twin`
     *  (0: none) is the resend twin this turn retires (eviction `superseded`). */
    void take_entry(restore_plan & p, iter it, uint64_t retire_twin);

    /** What a new ladder rung must be worth to be planned (add_ladder_captures), read from the
     *  store's RAM now (value policy; otherwise, or on a dense model, every rung is planned):
     *  `headroom` bytes fit without an eviction; past them a rung of `bytes` is planned only when
     *  its value per byte (the prefill seconds it saves beyond the point below it x
     *  rung_likelihood(0), per byte: cheapest_rung's pricing) reaches `floor`, the value of what it
     *  would push out (choose_victim; infinite where that is a protected live conversation, or
     *  nothing can leave; 0, not searched, where the headroom holds the largest ladder). `bytes`
     *  0: no recurrent checkpoint held yet to size one, every rung is planned. */
    struct rung_room {
        uint64_t headroom = UINT64_MAX;
        uint64_t bytes = 0;
        double floor = 0;
    };
    rung_room rung_room_now();
    /** The capture points of `p`'s prefill (after p.n_restore tokens of `prompt`), ascending,
     *  one per length (an anchor beside a checkpoint apart), the ladder's under `room`. Exact
     *  mode: none. */
    void add_captures(restore_plan & p, const key & k, const tokens & prompt, const plan_hints & h,
                      const rung_room & room) const;
    // add_captures' steps (store.cpp), in its order, over the plan being built.
    struct capture_plan;
    /** The anchor (end of system prompt + tools, minus BPE slack) and the hybrid tools anchor,
     *  unless pinned already, below min prefix or outside [from, n_prompt) tokens. Sets
     *  c.anchor, c.tools_anchor (tokens; -1: none) and c.anchor_planned. */
    void add_anchor_captures(capture_plan & c) const;
    /** Hybrid: the turn checkpoints (history boundary, last user message's start, each image's
     *  start, cache_control breakpoints minus anchor slack) and the message rungs inside the
     *  last user message (split ones and pass-end ones). */
    void add_turn_captures(capture_plan & c) const;
    /** Hybrid: a divergence checkpoint where the prompt leaves its closest sibling entry (back
     *  to its line's start), when it gains at least --cache-divergence-min-gain tokens. */
    void add_divergence_capture(capture_plan & c) const;
    /** Hybrid, with the anchor planned: the ladder rungs inside the newly pinned system region
     *  (near ones split, far ones at a pass end) and the volatile rungs before the near zone. */
    void add_ladder_captures(capture_plan & c) const;
    /** Which of the ladder rungs `planned` ((tokens, at a pass end), ascending) a plan keeps under
     *  c.room (rung_room): all while they fit its headroom; past it, the most valuable per byte
     *  take the headroom and each other one only where its value reaches the floor. */
    std::vector<bool> admit_rungs(const capture_plan & c, const std::vector<std::pair<int32_t, bool>> & planned) const;
    /** Counts and traces the ladder rungs a plan left out (restore_plan::rungs_not_planned). */
    void count_rungs_not_planned(int32_t n);
    /** Hybrid: the guard, prompt - 1 (unless it merges into a point at most --cache-guard-merge
     *  tokens before it) or, without resend checkpoints, prompt - guard_distance when the
     *  uncached suffix is at least --cache-guard-min-suffix tokens; moved out of an image. */
    void add_guard_capture(capture_plan & c) const;
    /** Whether the prompt - 1 guard of a prompt of `n_prompt` tokens restored at `from` merges
     *  into a point at most config::guard_merge tokens before it: `from` itself, or a split
     *  capture already in `p` of a kind the entry keeps (turn, divergence, ladder). */
    bool merges_guard(const restore_plan & p, int32_t from, int32_t n_prompt) const;
    /** Drops checkpoints of `cps` (ascending by length) over their caps (--cache-max-checkpoints;
     *  message rungs and reply checkpoints have their own), in the order of drop_candidate
     *  (store_commit.cpp, docs/prompt-cache.md "Commit, thinning, eviction"): the turn
     *  checkpoints at `first_turn` (the lineage's first user turn's boundary, where a new session
     *  sending the same first message parts) and at `history` (the last user turn's boundary, which
     *  a tool loop's steps keep and where the next user message parts after a template drops the
     *  loop's reasoning) go only when nothing else can, `history` last. -1: none protected. */
    void thin(std::vector<checkpoint> & cps, int32_t first_turn, int32_t history);
    // commit()'s steps (store_commit.cpp), in its order.
    /** The new entry of a commit (not yet indexed): its id, tokens, device sequence and bytes,
     *  its times (monotonic seconds: last use `now_s`, unwritten since the absorbed entry's),
     *  reuse class, history and first turn boundaries (tokens) and the tier-2 files it
     *  supersedes (an absorbed write in flight gets it as its successor). Moves what it takes
     *  out of `in`. */
    entry committed_entry(commit_input & in, double now_s);
    /** Hybrid lineage mode: the checkpoints new entry `e` keeps, ascending by tokens: the
     *  absorbed entry's (its reply checkpoint dropped) and the request's captures, inside
     *  [1, |e.toks|) with a state, message rungs only after the last user message's start, the
     *  newest at each length, thinned. Moves them out of `in`. */
    std::vector<checkpoint> committed_checkpoints(commit_input & in, const entry & e);
    /** Supersedes the entries (anchors apart) with the same tokens as `e` (a verbatim resend
     *  that did not absorb): `e` takes over their checkpoints at lengths it lacks, their tier-2
     *  files as ancestors, their writes in flight and their uses; they are erased (eviction
     *  `superseded`). */
    void supersede_same_tokens(entry & e);
    /** After commit's entry `id` is indexed: evicts others while RAM is over the budget
     *  (bytes) and conversation entries are over max_entries (least recently used), then gives
     *  up the new entry's own checkpoints, oldest first, and its final state while still over. */
    void enforce_limits_after_commit(uint64_t id);
    /** Names the cause of a miss or short hit of `p` (restored p.n_restore of `prompt`, whose
     *  longest common prefix with a live entry of its bucket is `live_lcp`), counts it and
     *  appends it to p.reason (store_trace.cpp). */
    void classify(const key & k, const tokens & prompt, int32_t live_lcp, std::span<const token_span> media,
                  restore_plan & p);
    /** Removes `it`; counted as an eviction for `reason`, none for an absorbed or reset entry. */
    void erase(iter it, std::optional<eviction_reason> reason, std::string_view detail = {});
    void count(rejection_reason r) { stats_.rejections[std::string(to_string(r))]++; }
    /** Counts plan `p` as a hit of its kind (stats::hits, tokens_restored, tokens_reused), or
     *  takes that back (`sign` -1: a tier copy that could not be loaded). */
    void count_hit(const restore_plan & p, int sign = 1) {
        const std::string k(to_string(p.kind));
        stats_.hits[k] = std::max<int64_t>(0, stats_.hits[k] + sign);
        stats_.tokens_restored[k] = std::max<int64_t>(0, stats_.tokens_restored[k] + sign * p.n_restore);
        stats_.tokens_reused += sign * p.n_restore;
    }
    /** Decision trace of a plan (store_trace.cpp): the decision, each rejected candidate and
     *  why, the capture points and why others were not planned. REQUIRES: trace_.on(). */
    void trace_plan(const key & k, const tokens & prompt, const plan_hints & h, const restore_plan & p);
    // trace_plan's steps (store_trace.cpp), in its order.
    struct plan_trace_listing;
    /** Why entry `e` (of the prompt's bucket, sharing `lcp` tokens with it) was not taken by
     *  `p`: no restore point in reach, below min prefix, shorter than p.n_restore, or a tie
     *  lost. One phrase for the trace. */
    std::string why_not_taken(const entry & e, const key & k, const tokens & prompt, int32_t lcp,
                              const restore_plan & p) const;
    /** Lists every entry but p.source: a line per entry of the prompt's bucket (why_not_taken,
     *  by common prefix in tokens), a count per key difference for the others, and the other
     *  bucket's entry sharing the most tokens. */
    void list_entries_not_taken(const key & k, const tokens & prompt, const restore_plan & p,
                                plan_trace_listing & out) const;
    /** Lists the running requests' sequences of the prompt's bucket (plan_hints::live) that `p`
     *  did not restore from and that share tokens with it, each with why. */
    void list_live_not_restored(const key & k, const tokens & prompt, const plan_hints & h, const restore_plan & p,
                                plan_trace_listing & out) const;
    /** Traces the listing: the closest max_listed lines of the bucket (then a count of the
     *  rest), the closest entry of another bucket, and the other buckets' counts. */
    void trace_listing(plan_trace_listing & listing);
    /** Appends why the anchor and the hybrid tools anchor were not planned (pinned already,
     *  below min prefix, before the restore point, outside the prompt, no system text). */
    void anchors_not_planned(const key & k, const tokens & prompt, const plan_hints & h, const restore_plan & p,
                             std::vector<std::string> & not_planned) const;
    /** Hybrid: appends why a divergence, last user message or guard checkpoint was not planned
     *  (gain in tokens under its minimum, a guard merged, an uncached suffix too short). */
    void checkpoints_not_planned(const key & k, const tokens & prompt, const plan_hints & h, const restore_plan & p,
                                 std::vector<std::string> & not_planned) const;
    /** Evicts one RAM-holding conversation entry other than `protect_id` (anchors never): the one
     *  of least value (value_of) among the config::eviction_candidates least recently used, the
     *  live conversations' within the protected share last, or a pinned anchor's ladder rung
     *  (cheapest_rung) where one is worth less than that entry; the least recently used with
     *  --cache-eviction recency (store_value.cpp). False when none can go. */
    bool evict_one(uint64_t protect_id, eviction_reason reason);
    /** An anchor's ladder rungs as it keeps them (commit_anchor, add_rungs): ascending, one per
     *  length (the first given stays), at most ladder_max_rungs (the far end of the region goes
     *  first). */
    void order_rungs(std::vector<checkpoint> & rungs) const;
    /** The longest restore point the store holds for `e`'s first `up_to` tokens (all of them
     *  by default) outside `e` itself (its bucket's other entries and anchors), tokens: where its
     *  tokens would be recomputed from were it gone. */
    int32_t restore_point_below(const entry & e, int32_t up_to = std::numeric_limits<int32_t>::max()) const;
    /** The seconds of prefill a restore of `e` saves: its tokens beyond restore_point_below
     *  priced by tier_cost::prefill_seconds (its token count when unmeasured), or what reading
     *  its copy back from the first tier costs when that is less (it has one, or it would be
     *  written there on leaving RAM). */
    double saved_seconds(const entry & e) const;
    /** saved_seconds(e) x reuse_.likelihood(e.uses, its age) / its RAM bytes. */
    double value_of(const entry & e) const;
    /** Whether `e` may be one of the protected live conversations (value policy): restored
     *  before (uses > 0, which a conversation's prompt also gives: prompt_hints::multi_turn), or
     *  of a family whose never-restored entries have come back more often than not
     *  (reuse_model::probability(0, family) > 1/2). */
    bool likely_back(const entry & e) const;
    /** The copy evict_one would take (`live`: one of the protected live conversations; `value`:
     *  its value_of, 0 under recency); nullopt when none can go. */
    /** What leaves RAM: entry `it`, or only its checkpoint `rung` (>= 0: a ladder rung of a
     *  pinned anchor, which stays). */
    struct victim_choice {
        iter it;
        bool live = false;
        double value = 0;
        int32_t rung = -1;
    };
    /** The ladder rung of least value per byte among the pinned anchors' (value policy), as a
     *  victim: its value is the prefill seconds between it and the restore point below it (the
     *  rung before it, else restore_point_below of its anchor up to it), times
     *  rung_likelihood at its anchor's age (a rung restored before: the entries' likelihood for
     *  its use count, entry::rung_uses), per byte of its state. nullopt when no anchor holds a
     *  rung. */
    std::optional<victim_choice> cheapest_rung();
    /** The likelihood that a ladder rung `age_s` seconds past its anchor's last use is restored
     *  again: its own kind's outcomes (rung_reuse_: rungs restored against rungs evicted never
     *  restored) shrunk toward the entries' chance for a copy never restored,
     *  (restored + 2 p0) / (restored + evicted + 2) as reuse_model shrinks a family, discounted by
     *  age in the rung kind's own reuse gaps (rung_aged).
     *  On the bench's pressure trace 2 of ~60 rungs were restored: a rung was priced at a fresh
     *  anchor's likelihood before, and a conversation's parked entry was refused for one. */
    double rung_likelihood(double age_s) const;
    /** The chance `p` of a ladder rung `age_s` seconds past its anchor's last use, discounted as
     *  reuse_model::likelihood but in the rung kind's own reuse gap (rung_reuse_.gap_s(): the
     *  time from an anchor's last use to a rung's restore, averaged from reuse_model::prior_gap_s
     *  on), not the entries': a conversation comes back within seconds, a new session on a
     *  known system text after minutes. On the pressure bench, aged on the entries' ~1 s gap,
     *  a persona's rungs were all dropped within 10 s, before its first new session came. */
    double rung_aged(double p, double age_s) const;
    /** The live conversations' entries the protected share holds (value policy): not anchors,
     *  likely_back, used within max(config::live_window_s, 4 reuse gaps), most recently used
     *  first while their RAM bytes fit in --cache-ram-protect of what the pinned anchors leave of
     *  the budget; entry `id` counted with `extra_bytes` more (a parked entry's whole state). */
    std::unordered_set<uint64_t> protected_live(uint64_t id = 0, uint64_t extra_bytes = 0) const;
    std::optional<victim_choice> choose_victim(uint64_t protect_id);
    /** Admission (--cache-eviction value): parked entry `id`, leaving the device with `bytes` of
     *  state for RAM, is worth less per byte than the copy it would push out (reserve then
     *  refuses it: rejection not_admitted). False for anything else. */
    bool below_admission(uint64_t id, uint64_t bytes);
    /** A plan restores `n` tokens of `e` (store_warmup.cpp): a hit on its warmed length, or
     *  waste when the plan continues it short of that length. Clears the mark either way. */
    void note_warmed_restore(entry & e, int32_t n, bool absorbs, bool by_warmup);
    void release_pending(uint64_t bytes);
    uint64_t held_bytes() const;
    entry_view view(const entry & e) const;

    // Prefix sharing in RAM (store_share.cpp; config::ram_share_prefix).
    /** `e`'s whole state for a restore of its first `n_restore` tokens: its blob, or, held as a
     *  patch, the anchor's state where n_restore lies within the anchor (its KV rows are the
     *  entry's), else the patch applied. Null where a patch does not apply (logged). */
    blob_ptr whole_state(const entry & e, int32_t n_restore) const;
    /** Entry `it` leaves the store (erase, take_entry): an anchor that patches still read stays
     *  held as an orphan base until the last of them goes; a patch gives up its hold on one. */
    void on_leaving(const entry & e);

    /** A base whose anchor has left while patches over it remain: counted in held_bytes()
     *  once, freed with the last of them. */
    struct orphan_base {
        blob_ptr state;
        int32_t patches = 0;
    };
    std::unordered_map<uint64_t, orphan_base> orphan_bases_;  // by the anchor's entry id

    config cfg_;
    bool hybrid_;
    restore_settings rule_;
    std::list<entry> entries_;      // front = most recently used
    std::unordered_map<std::string, radix_trie> tries_;  // by bucket: entry tokens -> entry ids
    std::unordered_map<uint64_t, iter> by_id_;
    uint64_t next_mru_ = 1;
    int64_t apc_blocks_ = 0;                              // hashes in all chains
    std::unordered_map<std::string, int64_t> block_refs_;  // APC hash -> chains holding it
    uint64_t next_id_ = 1;
    uint64_t pending_bytes_ = 0;    // reserved for states in flight
    std::vector<int32_t> released_;
    ghost_set ghosts_{1024};  // evicted entries, to classify misses (1,024 x ~1 KB at most)
    struct attached_tier {
        const tier_lookup * lookup = nullptr;
        tier_traits traits;
    };
    std::vector<attached_tier> tiers_;  // attach_tier order
    /** A lower tier takes write-behind jobs. */
    bool writes_behind() const { return !tiers_.empty(); }
    /** The first tier holds copies for this replica alone: the entries' tier_copy are its
     *  copies, which supersession deletes and on whose word RAM is released. */
    bool own_copies() const { return !tiers_.empty() && !tiers_.front().traits.shared; }
    /** Whether tier_loaded pins the anchor `p` reads back in RAM again: where
     *  config::repin_read_anchors says so, and always for a copy from a shared tier (Redis: this
     *  replica has no file of it). When it does not, the anchor stays a file and the plan
     *  captures no anchor (nor its ladder) over it: it is this system prompt's anchor still. */
    bool repins_read_anchor(const restore_plan & p) const {
        return cfg_.repin_read_anchors || !(p.tier == 0 && own_copies());
    }
    /** Whether the anchor file `p` restores an anchor or ladder point of is pinned again in RAM
     *  with its whole ladder (tier_loaded, when the file is an anchor's; checkpoints_to_read). */
    bool repins_as_anchor(const restore_plan & p) const {
        return repins_read_anchor(p) && (p.kind == point_kind::anchor || p.kind == point_kind::ladder);
    }
    /** How the decision log names the copy `p` loads ("disk file"). */
    std::string copy_noun(const restore_plan & p) const;
    /** A shared tier is attached: anchors are handed over as soon as they are pinned. */
    bool shares_anchors() const {
        return std::any_of(tiers_.begin(), tiers_.end(), [](const attached_tier & t) { return t.traits.shared; });
    }
    bool warmup_lookup_ = false;  // plan() runs for plan_warmup()
    std::vector<tier_job> spills_;
    std::map<uint64_t, uint64_t> successor_;  // entry absorbed while its write was in flight -> its successor
    tier_job job_of(entry & e);
    bool warned_too_large_ = false;
    /** Whether the tier cost rule lets `e` be written (at shutdown: its shutdown test); when it
     *  does not, marks it declined (counted once, not offered again) and traces why. */
    bool worth_writing(entry & e, bool at_shutdown);
    tier_cost cost_;
    reuse_model reuse_;   // the eviction value's reuse likelihood (value.h)
    // The pinned anchors' ladder rungs' own outcomes (use class 0 only, no family): a success
    // for a rung's first restore, a failure for a rung evicted never restored (rung_likelihood);
    // its gap is the time from an anchor's last use to a rung's restore (rung_aged), averaged
    // from the 30 s prior on.
    reuse_model rung_reuse_{/*prior_is_a_sample=*/true};
    double now_s_ = 0;    // the latest monotonic time the store was given (plan, commit, expire)
    stats stats_;
    tracer trace_;
};

}  // namespace lineage::cache
