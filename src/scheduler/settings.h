// scheduler::settings: how the scheduler's parameters become the settings in effect for the
// served model, before the engine thread starts: the default sequence length, the model
// family's cache flags (dense: --prompt-cache-*; hybrid: --prompt-cache-snapshot-*), and the
// model-aware RAM budget measured on the context (seed 001 "Model-aware capacity defaults").
// Thread safety: functions called once, on the constructing thread. Ownership: none.
#pragma once

#include "cache/store.h"
#include "engine/context.h"
#include "engine/model.h"
#include "scheduler/scheduler.h"

#include <cstdint>

namespace lineage::scheduler {

/** Default tokens per sequence: the model's trained context, capped so that a laptop can hold it. */
int32_t default_n_ctx(const engine::model & m);

/** The family's settings become the store's (docs/prompt-cache.md "Configuration"): dense
 *  families use --prompt-cache-capacity-bytes / -max-entries / -ttl, hybrid families (whose
 *  entries are session snapshots plus checkpoints, seed 001 "Session Snapshots") the snapshot
 *  trio. A budget of 0 is filled in later by apply_capacity_default(). */
params with_family_settings(params p, bool hybrid);

/** Sets the store's byte budget when p.cache.ram_bytes is 0 (the model-aware default, measured
 *  on `ctx`, which must be empty and is left empty) and WARNs when one representative entry
 *  cannot fit the budget. Updates p.cache.ram_bytes. */
void apply_capacity_default(engine::context & ctx, const engine::model & m, params & p, cache::store & store,
                            int32_t n_seq, int32_t max_seq_tokens, bool hybrid);

}  // namespace lineage::scheduler
