// cache::ladder: where restore points go inside a system region and around a divergence, so that
// the first sight of a variation already restores close to where it parts (docs/architecture.md
// "The anchor ladder"). Agents end their system text with per-session lines (date, working folder,
// a memory path); on a hybrid model only a checkpoint restores a prefix shorter than a stored
// state, so a new session whose system text parts from a known one in its last line restored only
// the tools anchor. The ladder puts rungs (recurrent checkpoints, kept with the pinned anchor) at
// line starts inside a newly pinned region; divergence checkpoints move back to a line start.
// Rules and the costs behind the spacing: docs/architecture.md "The anchor ladder".
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace lineage::cache {

struct config;

/** The rungs of a system region: `near` are exact positions (each splits the prefill there),
 *  `far` are points each taken at the end of the prefill pass that reaches it (no split;
 *  capture_point::at_pass_end). Both ascending, tokens. */
struct ladder {
    std::vector<int32_t> near;
    std::vector<int32_t> far;
};

/** The rungs of a system region ending at `anchor` (the anchor capture point, tokens), strictly
 *  after `from` (what the request restored or the region's start, tokens).
 *  Near zone (the region's last cfg.ladder_near_tokens, where agents put their per-session
 *  lines): walking back from the anchor, each rung is the earliest line start (`line_starts`:
 *  prompt positions where a line begins, ascending) at most cfg.ladder_near_step before the
 *  rung after it and at least a quarter of that step before it, or the gap's end when no line
 *  starts there. Each is a split: one more prefill pass, ~45 ms on the bench model on 2 CPU
 *  cores (docs/architecture.md "The anchor ladder").
 *  Far zone (from `from` to the first near rung): points every cfg.ladder_step tokens from its
 *  start (stretched so that near and far together stay within cfg.ladder_max_rungs), each
 *  taken at the first prefill pass end at or after it, so they cost no pass; empty when the
 *  zone is no longer than one step. Rungs below `min_len` (--prompt-cache-min-prefix) are left
 *  out. Both empty when cfg.ladder_step <= 0. */
ladder ladder_rungs(const config & cfg, int32_t from, int32_t anchor, std::span<const int32_t> line_starts,
                    int32_t min_len);

/** The message rungs of a last user message spanning [start, end) (prompt positions,
 *  tokens): start + k * step for k >= 1, strictly inside (max(start, from), end), ascending, where
 *  step is cfg.message_step stretched so that at most cfg.message_rungs rungs cover the message.
 *  Rungs below `min_len` (--prompt-cache-min-prefix) are left out. Empty when cfg.message_rungs
 *  or cfg.message_step is <= 0, or start < 0 (no user message known). */
std::vector<int32_t> message_rungs(const config & cfg, int32_t from, int32_t start, int32_t end, int32_t min_len);

/** The pass-end message rungs of a last user message spanning [start, end): end - k * step for
 *  k = 1 .. cfg.message_pass_rungs (step = cfg.message_pass_step), strictly after max(start,
 *  from), ascending: the message's last rungs x step tokens, where what a new session or a resumed
 *  one repeats ends (right before the question). The scheduler takes each at the end of the
 *  prefill pass that reaches it (capture_point::at_pass_end), so none splits the prefill.
 *  Rungs below `min_len` are left out; empty when the message is no longer than one step. */
std::vector<int32_t> message_pass_rungs(const config & cfg, int32_t from, int32_t start, int32_t end,
                                        int32_t min_len);

/** Where a divergence checkpoint at `n` (the common prefix with the closest stored state,
 *  tokens) goes: the start of the line holding token n when it is at most cfg.divergence_slack
 *  tokens earlier, else n - cfg.anchor_slack (BPE slack), never below 0; n itself when
 *  cfg.divergence_slack is 0. */
int32_t divergence_point(const config & cfg, int32_t n, std::span<const int32_t> line_starts);

}  // namespace lineage::cache
