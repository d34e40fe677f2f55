// scheduler::settings: how the scheduler's parameters become the settings in effect for the
// served model, before the engine thread starts: the default sequence length, the model
// family's cache flags (dense: --prompt-cache-*; hybrid: --prompt-cache-snapshot-*), and the
// model-aware RAM budget measured on the context (docs/prompt-cache.md "Model-aware capacity
// default").
// Thread safety: functions called once, on the constructing thread. Ownership: none.
#pragma once

#include "cache/store/store.h"
#include "engine/context.h"
#include "engine/model.h"
#include "scheduler/memory_plan.h"
#include "scheduler/scheduler.h"

#include <cstdint>
#include <optional>

namespace lineage::scheduler {

/** Default tokens per sequence: the model's trained context, capped so that a laptop can hold it. */
int32_t default_n_ctx(const engine::model & m);

/** The family's settings become the store's (docs/prompt-cache.md "Configuration"): dense families
 *  use --prompt-cache-capacity-bytes / -max-entries / -ttl, hybrid families (whose entries are
 *  session snapshots plus checkpoints: docs/prompt-cache.md "Which settings apply: dense and hybrid
 *  families") the snapshot trio. A budget of 0 is filled in later by apply_capacity_default(). */
params with_family_settings(params p, bool hybrid);

/** `p` with the settings that depend on where the model runs (`gpu`: offloaded to a GPU)
 *  resolved, each auto (-1) logged with its value: --cache-ram-release-s
 *  (cache::config::ram_release_s_for) and --cache-device-slots (device_slots_for). */
params with_device_settings(params p, bool gpu);

/** Bytes of a sequence's whole state (KV + recurrent) as fixed + per_token * tokens. */
struct state_size_model {
    uint64_t fixed = 0;      ///< bytes whatever the length (recurrent state, headers)
    uint64_t per_token = 0;  ///< one token's K and V rows over all attention layers, bytes
    uint64_t at(int64_t n_tokens) const { return fixed + per_token * static_cast<uint64_t>(n_tokens); }
};

/** Measures state_size_model on a small context of its own (one sequence, the KV types, flash
 *  attention and threads of `cp`), freed before it returns: the state after one and after two
 *  decoded tokens. Runs the decodes on a thread of its own (see scheduler.cpp on OpenMP
 *  pools). nullopt when llama.cpp refuses the context or a decode fails. */
std::optional<state_size_model> probe_state_sizes(const engine::model & m, const engine::context_params & cp);

/** The startup memory plan (memory_plan.h) of `p` on `m` with `sizes`, `n_ctx_seq` tokens per
 *  sequence and `n_parked` parked sequences. */
memory_plan plan_of(const engine::model & m, const params & p, const state_size_model & sizes, int32_t n_ctx_seq,
                    int32_t n_parked);

/** Sets the store's byte budget when p.cache.ram_bytes is 0 (the model-aware default from
 *  `sizes`, nullopt: the floor) and WARNs when one representative entry cannot fit the budget.
 *  Updates p.cache.ram_bytes. */
void apply_capacity_default(const std::optional<state_size_model> & sizes, const engine::model & m, params & p,
                            cache::store & store, int32_t n_seq, int32_t max_seq_tokens, bool hybrid);

}  // namespace lineage::scheduler
