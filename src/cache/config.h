// cache::config: every tunable of the prompt cache, with its default and the source of the
// number. Each field is a server flag with an environment variable (see src/server/config.cpp
// and docs). Thread safety: plain value type.
#pragma once

#include "cache/rule/digest.h"

#include <cstdint>
#include <string>

namespace lineage::cache {

/** Which copy leaves RAM first when the budget is full (--cache-eviction; docs/prompt-cache.md
 *  "Eviction by value"). */
enum class eviction_policy : uint8_t {
    /** The lowest value: the prefill time its restore saves beyond the next restore point below
     *  it, times how likely it is to be restored again, per byte (store_value.cpp). */
    value,
    /** The least recently used (the policy before value; kept to compare against). */
    recency,
};

constexpr const char * to_string(eviction_policy p) {
    return p == eviction_policy::value ? "value" : "recency";
}

struct config {
    /** Master switch (--prompt-cache-enabled[=BOOL], alias --cache-prompt / --no-cache-prompt).
     *  Off: nothing read or written. */
    bool enabled = true;
    /** Lineage mode (docs/prompt-cache.md "Entries and lineages"); false = exact mode,
     *  whole-prompt snapshots only (--lineage=false, env LINEAGE_LINEAGE=0; "Exact mode"). */
    bool lineage = true;
    /** Byte budget of the host-RAM tier T1 in effect, bytes. The scheduler sets it from
     *  kv_capacity_bytes (dense families) or snapshot_capacity_bytes (hybrid families) before
     *  the store is built; a store built directly takes it as is. */
    uint64_t ram_bytes = 0;
    /** --prompt-cache-capacity-bytes (alias --cache-ram-bytes): the budget on dense families,
     *  bytes; 0 = model-aware default (docs/prompt-cache.md "Model-aware capacity default",
     *  floor 2 GiB). */
    uint64_t kv_capacity_bytes = 0;
    /** --prompt-cache-snapshot-capacity-bytes: the budget on hybrid families, bytes; 0 =
     *  model-aware default (floor 512 MiB). */
    uint64_t snapshot_capacity_bytes = 0;
    /** What leaves RAM first when the budget is full (--cache-eviction value|recency). */
    eviction_policy eviction = eviction_policy::value;
    /** Share of the RAM budget the pinned anchors' own states leave (not their ladder rungs,
     *  which are eviction victims: store::protected_live) within which the entries of live
     *  conversations (likely to come back, store::likely_back, and last used within
     *  live_window_s) are not eviction victims while any other copy is (--cache-ram-protect;
     *  0.5: half, so that a burst of one-off calls cannot push every running conversation
     *  out, while the other half still takes the new ones). Anchors are never eviction victims
     *  (their own caps apply). */
    double ram_protect_share = 0.5;
    /** A conversation is live while its entry was used within max(this, 4 x the measured reuse
     *  gap) seconds (reuse_model::gap_s): an agent running a tool comes back within seconds. */
    static constexpr double live_window_s = 60;
    /** The eviction value looks at this many least recently used copies for its victim (as
     *  Redis samples keys for its approximated LFU): its cost stays bounded by a few prompt
     *  lengths of trie walk, however many entries the store holds. */
    static constexpr int32_t eviction_candidates = 64;
    /** --prompt-cache-snapshot-max-entries / --prompt-cache-snapshot-ttl: max_entries and ttl_s
     *  on hybrid families (defaults 4096 entries, 7200 s: docs/prompt-cache.md "Configuration"). */
    int32_t snapshot_max_entries = 4096;
    double snapshot_ttl_s = 7200;
    /** Digest of the bucket and template_sig (--prompt-cache-hash; docs/architecture.md "Keys: one
     *  vocabulary"). */
    hash_algo key_hash = hash_algo::sha256;
    /** Automatic Prefix Caching: block hash chains on dense entries; a partial dense match is
     *  clamped to whole agreeing blocks (--apc-enabled). Off by default in lineage, see
     *  docs/prompt-cache.md "Automatic Prefix Caching (APC)". Hybrid families never use it. */
    bool apc_enabled = false;
    /** Tokens per APC block (--apc-block-size; default 16: docs/prompt-cache.md "Configuration"). */
    int32_t apc_block_size = 16;
    /** Most block hashes held over all entries (--apc-num-blocks); 0 = max_entries * 512
     *  (8192 tokens a entry at 16 tokens a block: the capacity default's representative length). */
    int64_t apc_num_blocks = 0;
    /** Hash of the APC block chains (--apc-hash; default sha256: docs/prompt-cache.md
     *  "Configuration"). */
    hash_algo apc_hash = hash_algo::sha256;
    /** Flags named in the store's messages about its budget and TTL (the family's flags). */
    std::string budget_flag = "--prompt-cache-capacity-bytes";
    std::string ttl_flag = "--prompt-cache-ttl";
    /** Sequences kept parked on the device after they finish (T0), in addition to the
     *  --parallel active slots (--cache-device-slots). -1 (the default) is resolved by the
     *  scheduler: auto_device_slots_gpu when the model runs on a GPU, auto_device_slots_cpu on
     *  the CPU alone (a parked sequence is a KV buffer in host RAM, resident as far as tokens
     *  were written to it: docs/architecture.md "KV pages resident as used"; the RAM tier holds
     *  the same state; measured: docs/benchmarks/README.md "Raw engine and time"). */
    int32_t device_slots = -1;
    /** --cache-device-slots' value when a GPU holds the model (auto). */
    static constexpr int32_t auto_device_slots_gpu = 4;
    /** --cache-device-slots' value on the CPU alone (auto): the one spare sequence a request
     *  needs when every --parallel sequence is busy or parked and it restores by copying a
     *  parked entry it must not evict (sequence_pool::acquire's `protect`). */
    static constexpr int32_t auto_device_slots_cpu = 1;
    /** Sequences one llama.cpp context holds at most (LLAMA_MAX_SEQ in llama.cpp's
     *  src/llama-cparams.h, not in its public header): --parallel plus the parked ones. */
    static constexpr int32_t max_sequences = 256;
    /** The number of parked sequences in effect for a model on a GPU (`gpu`) or not. */
    int32_t device_slots_for(bool gpu) const {
        return device_slots >= 0 ? device_slots : gpu ? auto_device_slots_gpu : auto_device_slots_cpu;
    }
    /** Minimum prompt tokens before an entry is stored (--prompt-cache-min-prefix; default 32:
     *  docs/prompt-cache.md "Configuration"). */
    int32_t min_prefix = 32;
    /** Maximum live entries in T1 (--prompt-cache-max-entries; default 1024: docs/prompt-cache.md
     *  "Configuration"). */
    int32_t max_entries = 1024;
    /** Seconds since last hit before an entry expires (--prompt-cache-ttl; default 3600:
     *  docs/prompt-cache.md "Configuration"). */
    double ttl_s = 3600;
    /** Decision trace: one INFO line "cache-trace: ..." per cache decision (docs/prompt-cache.md
     *  "The decision trace"; --cache-trace, env LINEAGE_CACHE_TRACE). Off: costs a null check. */
    bool trace = false;
    /** Background warm-up of the next turn (docs/prompt-cache.md "Warm-up of the next turn"): after
     *  a reply, the conversation's entry is extended, on an idle engine, over the reply as the next
     *  request will render it (--cache-warmup, env LINEAGE_CACHE_WARMUP). */
    bool warmup = true;

    // --- tier 2, disk (docs/prompt-cache.md "Tiers", "Disk tier") ---
    /** The disk tier is on (--cache-disk): the server fills disk_dir with its default folder
     *  when none is given, and clears it when this is false. */
    bool disk = true;
    /** Directory of the tier-2 files and their index; "" = no disk tier (--cache-dir; default
     *  $XDG_CACHE_HOME/lineage/prompt-cache, else ~/.cache/lineage/prompt-cache). */
    std::string disk_dir;
    /** Byte cap of the tier-2 files (--cache-disk-capacity-bytes; the default, 16 GiB, suits a
     *  laptop disk: docs/prompt-cache.md "Configuration"). */
    uint64_t disk_capacity_bytes = 16ull << 30;
    /** Write-behind: an entry unused for this many seconds is written to disk
     *  (--cache-disk-idle-s). Besides, entries are written when they leave RAM and at shutdown. */
    double disk_idle_s = 30;
    /** Write-behind under load (docs/prompt-cache.md "Disk tier"): an entry whose content has had
     *  no tier-2 copy for this many seconds is written even while the engine is busy, at most one
     *  state read per engine step (--cache-disk-max-unwritten-s); this bounds what a kill -9 under
     *  continuous load loses. 0 = off (written only when idle, leaving RAM or at shutdown). */
    double disk_max_unwritten_s = 10;
    /** RAM release (docs/prompt-cache.md "Disk tier"): an entry in RAM whose state has a tier-2
     *  file and that has been unused this many seconds gives its RAM back; its next hit loads the
     *  file on the disk thread (from the kernel's page cache while it keeps it, memory the kernel
     *  reclaims under pressure where the process's RSS is not; measured on the small agent trace,
     *  docs/benchmarks/README.md "Memory": an anchor of 2,177 tokens restored in 222-246 ms from
     *  its file against 138-180 ms from RAM). Anchors too: the disk tier deletes anchor files
     *  last, and a new session that reads one back pins it in RAM again where
     *  repin_read_anchors says so. Device-parked entries
     *  are not RAM. Needs the disk tier
     *  (--cache-dir); --cache-ram-release-s, 0 = off (the RAM tier keeps every entry within its
     *  budget), -1 = auto (ram_release_s_for; resolved by the scheduler once it knows where the
     *  model runs: the store treats a value <= 0 as off). */
    double ram_release_s = -1;
    /** --cache-ram-release-s' value with a GPU (auto): host RAM is not where the model and its
     *  KV live, so written entries stay half a minute for the next turn. */
    static constexpr double auto_ram_release_s_gpu = 30;
    /** Its value on the CPU alone (auto). There the RAM tier, the weights, the KV cache and the
     *  kernel's page cache are the same memory, and a written entry's file is in the page cache
     *  (memory the kernel reclaims, not the process's RSS): a RAM copy kept 30 s doubles it. 5 s
     *  keeps an agent's quick next step (a tool result) in RAM. Measured on the small agent trace
     *  (docs/benchmarks/README.md "Written entries leave RAM after 5 s on the CPU"): peak RSS 1,315
     *  -> 989 MiB, TTFT p50 587 -> 596 ms. */
    static constexpr double auto_ram_release_s_cpu = 5;
    /** The release delay in effect for a model on a GPU (`gpu`) or not. */
    double ram_release_s_for(bool gpu) const {
        return ram_release_s >= 0 ? ram_release_s : gpu ? auto_ram_release_s_gpu : auto_ram_release_s_cpu;
    }
    /** The tier cost rule (cache/rule/tier_cost.h; docs/prompt-cache.md "The tier cost rule"): a
     *  tier copy is read only where its read is estimated to cost less than recomputing the tokens
     *  it adds, and written only where it would be worth reading back (at shutdown: where that
     *  saves more than its write time), from the engine's measured prefill rate and the tiers'
     *  measured restore and write rates (--cache-tier-cost). Until the prefill rate is measured
     *  every copy is worth it. Off: every copy is read and written, as the triggers say. */
    bool tier_cost = true;
    /** The tiers' read and write rate the tier cost rule assumes, bytes/s, instead of measuring
     *  them (--cache-tier-bandwidth); 0 = measured (tier_cost::prior_bytes_per_s until a restore
     *  or write of tier_cost::min_sample_bytes or more is measured). */
    uint64_t tier_bandwidth_bytes_per_s = 0;
    /** Whether an anchor read back from a tier below RAM for a hit is pinned in RAM again with
     *  its ladder (true), or serves that hit from the file's state and stays a file (false). Set
     *  by the scheduler (repin_read_anchors_for, once it knows where the model runs). */
    bool repin_read_anchors = true;
    /** Its value: true on a GPU, or with RAM release off; false on the CPU alone with RAM release
     *  on. Why: there the anchor's file is in the kernel's page cache, the same memory as the RAM
     *  tier, and a pinned copy (its state and every rung) would be released again after
     *  `release_s` unless another new session came within it; held meanwhile, beside that
     *  session's own captures, it made the small agent trace's peak RSS (docs/benchmarks/README.md
     *  "Read-back anchors stay files on the CPU"). */
    static bool repin_read_anchors_for(bool gpu, double release_s) { return gpu || release_s <= 0; }

    // --- tier 3 (docs/prompt-cache.md "Tier 3: Redis shared by replicas") ---
    /** redis://host[:port][/db]; "" = no tier 3 (--cache-redis, env LINEAGE_CACHE_REDIS). Its
     *  writes follow the tier-2 triggers above (--cache-disk-idle-s, leaving RAM, shutdown,
     *  --cache-disk-max-unwritten-s), plus anchors as soon as they are pinned. */
    std::string redis_url;
    /** Key prefix (--cache-redis-namespace): tenants or deployments sharing one Redis. */
    std::string redis_namespace = "lineage";
    /** Bound on connecting and on each call, milliseconds (--cache-redis-timeout-ms). */
    int32_t redis_timeout_ms = 200;
    /** Payload bytes per chunk (--cache-redis-chunk-bytes; Redis values are capped at 512 MB). */
    uint64_t redis_chunk_bytes = 4ull << 20;

    // --- lineage rules (docs/prompt-cache.md "Restore points", "Commit, thinning, eviction") ---
    /** Guard checkpoint distance from the prompt end, tokens (--cache-guard-distance; default 16:
     *  docs/prompt-cache.md "Configuration"). */
    int32_t guard_distance = 16;
    /** Guard only when the uncached suffix is at least this long, tokens
     *  (--cache-guard-min-suffix; default 256: docs/prompt-cache.md "Configuration"). */
    int32_t guard_min_suffix = 256;
    /** Capture a checkpoint at prompt - 1 so that a verbatim resend or a regenerate restores all
     *  but one token instead of the previous turn boundary; costs one extra one-token forward per
     *  request. When on, it replaces the prompt - 16 guard. (--cache-resend-checkpoint) */
    bool resend_checkpoint = true;
    /** Tokens: the resend checkpoint (prompt - 1) is not taken when a restore point lies at most
     *  this far before it (a split capture of this prefill, or its restore point); a resend then
     *  restores that point and computes those tokens in one pass instead of 1 token, and every
     *  such prefill saves the pass the guard would cut. On a user turn the history boundary lies
     *  the generation prompt's length back (6 tokens with Qwen3.5's template). Default 16: on
     *  bench-qwen35 on 2 CPU cores a pass costs ~25-45 ms whatever its length and each token in a
     *  small pass ~2-3 ms, so merging pays while fewer than about one request in two is a
     *  resend (docs/architecture.md "What a split costs"). 0 = always the guard.
     *  (--cache-guard-merge) */
    int32_t guard_merge = 16;
    /** Take the resend checkpoint (prompt - 1) by rolling the recurrent state back one token
     *  after the prefill instead of splitting the prefill there (which costs one more forward
     *  pass, ~40 ms on the bench model on 2 CPU cores, in every request's TTFT). The prompt's
     *  last token is then decoded again together with the first sampled token (a 2-token decode
     *  step, about the price of a 1-token one). Needs llama.cpp's recurrent-state rollback
     *  (n_rs_seq = 1: the recurrent memory doubles), which llama.cpp has for some hybrid
     *  architectures only (qwen35, qwen35moe, nemotron_h, lfm2, ...); elsewhere the prefill is
     *  split as before. Off by default: a resend then computes the last prompt token alone
     *  where the first request computed it inside its prefill, so a hit equals a miss in its
     *  greedy tokens but not bit for bit in its logits (docs/prompt-cache.md "What a hit
     *  guarantees"). (--cache-guard-rollback) */
    bool guard_rollback = false;
    /** Minimum gain of a divergence checkpoint, tokens (--cache-divergence-min-gain; default 256:
     *  docs/prompt-cache.md "Configuration"). */
    int32_t divergence_min_gain = 256;
    /** The anchor ladder (hybrid families): when a new system region is pinned as an
     *  anchor, checkpoints ("rungs") are captured inside it: at line starts at most
     *  ladder_near_step tokens apart in its last ladder_near_tokens tokens (where agents put
     *  their per-session lines: date, folder, memory path; each a prefill split), and before
     *  that one at the first prefill pass end at or after every ladder_step tokens (no split),
     *  at most ladder_max_rungs of them (the far spacing stretches to fit). A later system text
     *  that parts from this one restores the last rung before the parting point. The rule
     *  comes from measured costs: a rung on the bench model is ~5 MB and ~0.4 ms, a split
     *  ~45-70 ms, a prefilled token ~2 ms (docs/architecture.md "The anchor ladder").
     *  --cache-ladder-step (0: no ladder), --cache-ladder-near-step, --cache-ladder-near-tokens,
     *  --cache-ladder-max-rungs. */
    int32_t ladder_step = 256;
    int32_t ladder_near_step = 64;
    int32_t ladder_near_tokens = 512;
    int32_t ladder_max_rungs = 24;
    /** At most this many more rungs on a new system region, each a split right before
     *  per-session content (plan_hints::volatile_starts: an absolute path, a date) that lies
     *  before the near zone, tools included, at least ladder_near_step / 4 apart (where there are
     *  more: the first half of them, rounded up, and the last half): a new session whose
     *  text parts there (another folder in a tool description or a memory path) restores up to
     *  it instead of the far rung or tools anchor before it. 0: none; none either without a
     *  ladder (ladder_step 0) (--cache-ladder-volatile-rungs; docs/architecture.md "The anchor
     *  ladder"). */
    int32_t ladder_volatile_rungs = 8;
    /** Off the request's path (issue 54; docs/architecture.md "Ladder jobs"): the near and
     *  volatile rungs of a newly pinned system region (after the tools anchor or restore point),
     *  each a split, are deferrable: while the prefill has the engine to itself it passes over
     *  them, and the scheduler makes them afterwards in a ladder job, a background prefill on
     *  the idle engine from the latest stored state before them, or right before the plan of a
     *  new session that would restore them; beside other requests the prefill splits at them.
     *  false: always split the request's prefill at them (--cache-ladder-defer). */
    bool ladder_defer = true;
    /** A divergence checkpoint moves back to the start of the line it falls in when that is at
     *  most this many tokens earlier, else back by anchor_slack tokens: a variation that parts
     *  a few tokens earlier next time still restores it (--cache-divergence-slack).
     *  0: at the exact divergence token. */
    int32_t divergence_slack = 64;
    /** A turn checkpoint at the start of the last user message, so that an edit of it restores
     *  up to it (--cache-last-user-checkpoint). Not taken for a request with client
     *  cache breakpoints (Anthropic cache_control): those say where the client comes back, and
     *  an extra turn would thin one of them away (max_checkpoints). */
    bool last_user_checkpoint = true;
    /** The last-user-message checkpoint is planned only where it lies at least this many tokens
     *  after the restore point, tokens (--cache-last-user-min-gain). On a warm user turn it
     *  usually lies a few tokens (the previous turn's end-of-turn markup) after the history
     *  boundary just restored: a split there costs about one forward pass (~45-70 ms on the bench
     *  model, the price of ~25-35 prefilled tokens) to save an edit those few tokens, and the
     *  restore point itself stays a checkpoint that an edit restores. 0: whenever it lies after
     *  the restore point (docs/architecture.md "What a split costs, and the rule for where to
     *  split"). */
    int32_t last_user_min_gain = 32;
    /** Hybrid families: an entry keeps the state after the reply (prompt + the tokens decoded
     *  while generating) instead of the state at the prompt end only; a prompt that parts inside
     *  the reply restores the resend guard (prompt - 1), or, with resend_checkpoint off, the
     *  prompt-end state kept as a `turn` checkpoint. An agent-loop step sends the reply back verbatim (prompt + reply +
     *  tool result) and then prefills only the tool result, not the reply again
     *  (--cache-keep-reply). Dense families always keep it (any prefix of the KV restores). */
    bool keep_reply = true;
    /** Message rungs (hybrid families): checkpoints inside the last user message,
     *  message_step tokens apart (stretched so that at most message_rungs fit), so that an edit
     *  of the message restores up to the rung before the edit instead of the message start.
     *  Only the newest user message keeps them: the next user turn's rungs replace them, and
     *  they do not count against max_checkpoints. Cost per rung on the bench model: ~5 MB of
     *  RAM while the message is the newest and ~0.4 ms; an edit saves on average step/2
     *  prefilled tokens (~3-5 ms each) per rung spacing (docs/architecture.md "Message rungs").
     *  Off by default: each rung splits the prefill, and a split costs about one forward pass
     *  (~30 ms on the bench model, ~17 prefilled tokens), paid on every user turn for the edits
     *  only (docs/benchmarks/README.md: TTFT p50 466 -> 641 ms for edits 2.50 -> 1.27x).
     *  --cache-message-rungs (0: none), --cache-message-step. */
    int32_t message_rungs = 0;
    int32_t message_step = 16;
    /** Pass-end message rungs (hybrid families): inside a last user message longer than
     *  message_pass_step tokens, checkpoints every message_pass_step tokens back from its end,
     *  at most message_pass_rungs, each taken at the end of the prefill pass that reaches it
     *  (capture_point::at_pass_end): no split, so no forward pass of their own, only the state
     *  copy (~5 MB and a few ms each on the bench model). Agents open a
     *  session with a long first message (the working folder's files, environment, memory)
     *  before the question: a new session in the same folder, a resumed one, or an edit of the
     *  question restores up to the pass end before it instead of the message start (a 2.2k
     *  token context block: 2,048 tokens not prefilled again). Kept like message rungs (only the
     *  newest user message's; their own cap, not max_checkpoints). The step is the default
     *  batch (512): one rung per pass. --cache-message-pass-rungs (0: none),
     *  --cache-message-pass-step. */
    int32_t message_pass_rungs = 4;
    int32_t message_pass_step = 512;
    /** The most message rungs an entry keeps: split rungs and pass-end rungs together (64-bit:
     *  each flag may be INT32_MAX). */
    int64_t message_rungs_max() const { return static_cast<int64_t>(message_rungs) + message_pass_rungs; }
    /** Reply checkpoints (hybrid families with keep_reply): while a reply is decoded,
     *  the recurrent state is taken every reply_step decoded tokens (between decode steps, so
     *  no prefill is split; ~0.4 ms and ~5 MB each on the bench model), at most
     *  max_reply_candidates at once (the spacing doubles when they are full). At commit the
     *  entry keeps those at or before the first token where the reply's text, tokenized again,
     *  no longer gives the decoded tokens (a client sends the text back, so a next prompt parts
     *  there at the latest). An agent-loop step whose prompt parts inside the reply (a token
     *  the text does not give back, a template that renders the reply differently) then
     *  restores the last one before the parting point instead of the resend guard at
     *  prompt - 1. Only the newest reply keeps them, and they do not count against
     *  max_checkpoints (their own cap: max_reply_candidates). --cache-reply-step (0: none). */
    int32_t reply_step = 16;
    static constexpr int32_t max_reply_candidates = 4;
    /** Tokens of BPE slack subtracted from the anchor length (--cache-anchor-slack; default 2:
     *  docs/prompt-cache.md "Configuration"). */
    int32_t anchor_slack = 2;
    /** Checkpoints kept per lineage (--cache-max-checkpoints; default 4: docs/prompt-cache.md
     *  "Commit, thinning, eviction"). */
    int32_t max_checkpoints = 4;
    /** Anchor caps inside the total budget (--cache-max-anchors, --cache-max-anchor-bytes;
     *  defaults 16 entries, 16 GiB: docs/prompt-cache.md "Configuration"); max_anchors 0 = no
     *  anchors. */
    int32_t max_anchors = 16;
    uint64_t max_anchor_bytes = 16ull << 30;
    /** Prefix sharing in RAM (--cache-ram-share-prefix; docs/prompt-cache.md "Prefix sharing in
     *  RAM"): an entry that leaves the device for RAM is held as a patch over the longest pinned
     *  anchor its tokens continue, naming the anchor's KV rows instead of copying them, where the
     *  engine finds those rows equal byte for byte (store::patch_base_for). On bench-qwen35 a
     *  3,155-token conversation's 23.4 MiB state on its 3,127-token persona anchor became a
     *  5.1 MiB patch (docs/benchmarks/README.md, session 24). */
    bool ram_share_prefix = true;
};

}  // namespace lineage::cache
