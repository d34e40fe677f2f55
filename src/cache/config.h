// cache::config: every tunable of the prompt cache, with its default and the source of the
// number. Each field is a server flag with an environment variable (see src/server/config.cpp
// and docs). Thread safety: plain value type.
#pragma once

#include <cstdint>
#include <string>

namespace lineage::cache {

struct config {
    /** Master switch (--cache-prompt / --no-cache-prompt). Off: nothing read or written. */
    bool enabled = true;
    /** Lineage mode (seed 000); false = exact mode, whole-prompt snapshots only
     *  (--lineage=false, env APC_LINEAGE=0). */
    bool lineage = true;
    /** Byte budget of the host-RAM tier T1, bytes (--cache-ram-bytes). 0 = model-aware default. */
    uint64_t ram_bytes = 0;
    /** Sequences kept parked on the device after they finish (T0), in addition to the
     *  --parallel active slots (--cache-device-slots). */
    int32_t device_slots = 4;
    /** Minimum prompt tokens before an entry is stored (seed 001: 32). */
    int32_t min_prefix = 32;
    /** Maximum live entries in T1 (seed 001: 1024). */
    int32_t max_entries = 1024;
    /** Seconds since last hit before an entry expires (seed 001: 3600). */
    double ttl_s = 3600;
    /** Decision trace: one INFO line "cache-trace: ..." per cache decision (seed 001
     *  "Session Snapshots"; --cache-trace, env LINEAGE_CACHE_TRACE). Off: costs a null check. */
    bool trace = false;

    // --- tier 2, disk (DESIGN.md "Tiers"; issue 6) ---
    /** Directory of the tier-2 files and their index; "" = no disk tier (--cache-dir; default
     *  $XDG_CACHE_HOME/lineage/prompt-cache, else ~/.cache/lineage/prompt-cache). */
    std::string disk_dir;
    /** Byte cap of the tier-2 files (--cache-disk-capacity-bytes; seed 000 ran with 1 TB; the
     *  default suits a laptop disk). */
    uint64_t disk_capacity_bytes = 16ull << 30;
    /** Write-behind: an entry unused for this many seconds is written to disk
     *  (--cache-disk-idle-s). Besides, entries are written when they leave RAM and at shutdown. */
    double disk_idle_s = 30;

    // --- lineage rules (seed 000; DESIGN.md "Lineage rules") ---
    /** Guard checkpoint distance from the prompt end, tokens (seed 000: 16). */
    int32_t guard_distance = 16;
    /** Guard only when the uncached suffix is at least this long, tokens (seed 000: 256). */
    int32_t guard_min_suffix = 256;
    /** Capture a checkpoint at prompt - 1 so that a verbatim resend or a regenerate restores
     *  all but one token (SCENARIOS.md B3) instead of the previous turn boundary; costs one
     *  extra one-token forward per request. When on, it replaces the prompt - 16 guard.
     *  (--cache-resend-checkpoint) */
    bool resend_checkpoint = true;
    /** Minimum gain of a divergence checkpoint, tokens (seed 000: 256). */
    int32_t divergence_min_gain = 256;
    /** Tokens of BPE slack subtracted from the anchor length (seed 000: 2). */
    int32_t anchor_slack = 2;
    /** Checkpoints kept per lineage (seed 000: 4). */
    int32_t max_checkpoints = 4;
    /** Anchor caps inside the total budget (seed 000: 16 entries, 16 GiB). */
    int32_t max_anchors = 16;
    uint64_t max_anchor_bytes = 16ull << 30;
};

}  // namespace lineage::cache
