// Vocabulary of the prompt cache: tokens, kinds of restore point, opaque state blobs.
// The cache never sees llama.cpp types: a state is a byte blob with a length and a kind
// (docs/architecture.md "Layers"). Thread safety: value types; blobs are immutable once
// shared (std::shared_ptr<const ...>), so tiers may hold the same blob without copying.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace lineage::cache {

using token = int32_t;
using tokens = std::vector<token>;
using blob = std::vector<uint8_t>;
using blob_ptr = std::shared_ptr<const blob>;

/** Kinds of restore point (docs/prompt-cache.md "Restore points"). */
enum class point_kind : uint8_t {
    none,        ///< no restore point: cold prefill
    full,        ///< an entry's full snapshot (KV + recurrent) at its whole length
    prefix,      ///< dense families: a strict prefix of a full snapshot (KV trimmed)
    turn,        ///< checkpoint at a turn boundary (an absorbed entry's final state, or the
                 ///< history boundary before the generation prompt)
    guard,       ///< checkpoint at prompt - guard_distance, for verbatim resends
    anchor,      ///< pinned entry at the end of system prompt + tools
    divergence,  ///< checkpoint where a prompt stopped sharing tokens with its closest sibling
    ladder,      ///< a rung of an anchor's ladder: a checkpoint at a line start inside a newly
                 ///< pinned system region, so a later system text that parts from it restores
                 ///< close to where it parts
    message,     ///< a rung inside the last user message, so that an edit of that message
                 ///< restores close to where it parts; only the newest message keeps them
    reply,       ///< a checkpoint inside the decoded reply, taken between decode steps (no
                 ///< prefill split), before where the reply stops coming back token for token
                 ///< from its text; only the newest reply keeps one
};

/** The last point_kind (file readers check a stored kind against it). */
inline constexpr point_kind last_point_kind = point_kind::reply;

std::string_view to_string(point_kind k);

/** Tiers (docs/prompt-cache.md "Tiers"): T0 device (parked sequence), T1 host RAM (blob), T2 disk
 *  (file). */
enum class tier : uint8_t { device, ram, disk };

std::string_view to_string(tier t);

/** Length of the longest common prefix of a and b, tokens. */
int32_t common_prefix(const tokens & a, const tokens & b);

/** A recurrent-only state at an earlier length of its entry (hybrid families). */
struct checkpoint {
    int32_t n_tokens = 0;
    point_kind kind = point_kind::turn;
    blob_ptr recurrent;
};

/** The id of a copy in a tier below RAM, in that tier's ids (the disk tier: a row of its index and
 *  the file's name; Redis: the shared index's id); 0 = none. */
using copy_id = uint64_t;

/** What preparing a request found in its prompt besides its tokens (docs/prompt-cache.md
 *  "Restore points"): one struct from the HTTP thread's preparation (scheduler::cache_hints
 *  derives from it) through the plan (store::plan_hints) to the commit (commit_input::hints).
 *  Lengths and positions in tokens of the prompt; -1 or empty: not known or none. */
struct prompt_hints {
    /** End of the shared system prompt + tools (the anchor length), or -1 when the request has no
     *  leading system message/tools. */
    int32_t anchor_tokens = -1;
    /** The prompt without its generation prompt (the history boundary: where the next turn's
     *  prompt can leave this one when the template re-renders the assistant turn). */
    int32_t history_tokens = -1;
    /** End of the tool block alone, where the template renders the tools before the system text
     *  (Qwen3.5, GLM): the prefix every system prompt with these tools shares, even one whose
     *  text changes per session (a timestamp); a second anchor. Hybrid only; -1 when the request
     *  has no tools or the tool block does not come first. */
    int32_t tools_anchor_tokens = -1;
    /** Positions where a line begins (the token before holds a newline), ascending: where ladder
     *  rungs and divergence checkpoints go (cache/rule/ladder.h). Hybrid families only. */
    std::vector<int32_t> line_starts = {};
    /** Where the last message starts when it is a user message (the conversation before it
     *  rendered alone: its common prefix with the prompt): an edit of that message restores up
     *  to it (--cache-last-user-checkpoint), and message rungs before it belong to older
     *  messages. Hybrid families only. */
    int32_t last_user_tokens = -1;
    /** Positions where per-session content starts inside the system region (an absolute path, a
     *  date: what agents write per folder and per day into their system text or a tool's
     *  description), ascending: on a new system region a ladder rung (a split) goes right before
     *  each that lies before the near zone (--cache-ladder-volatile-rungs; ladder.h). Hybrid only. */
    std::vector<int32_t> volatile_starts = {};
    /** Prompt lengths where the client marked a cache breakpoint (Anthropic `cache_control`),
     *  before BPE slack: a restore point is captured at each. */
    std::vector<int32_t> breakpoint_tokens = {};
    /** The prompt sends back an earlier reply of its conversation (it holds an assistant
     *  message): the conversation has come back at least once, so its entry starts in reuse
     *  class 1 (cache/store/value.h), as one that has been restored, also where its earlier
     *  entry is not in this store (after a restart, an eviction the ghosts no longer recall, a
     *  turn served by another replica). False for a raw completion prompt and a warm-up. */
    bool multi_turn = false;
};

/** Shares `b` as an immutable blob; when its last reference goes, its buffer returns to the
 *  process's blob_pool (blob_pool.h) for a later capture of the same size. */
blob_ptr make_blob(blob b);

}  // namespace lineage::cache
