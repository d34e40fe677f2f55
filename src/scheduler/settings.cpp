// scheduler::settings: the settings in effect for the served model; see settings.h.
#include "scheduler/settings.h"

#include "cache/capacity.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>

#include <unistd.h>

namespace lineage::scheduler {

namespace {

/** Bytes of a sequence's whole state (KV + recurrent) as fixed + per_token * tokens. */
struct state_size_model {
    uint64_t fixed = 0;
    uint64_t per_token = 0;
    uint64_t at(int64_t n_tokens) const { return fixed + per_token * static_cast<uint64_t>(n_tokens); }
};

/** Measures state_size_model on sequence 0 of an empty context: the state after one and after
 *  two decoded tokens (the difference is one KV row over all attention layers; the rest is the
 *  recurrent state and headers). Leaves the context empty. nullopt when a decode fails. */
std::optional<state_size_model> measure_state_sizes(engine::context & ctx) {
    const engine::seq_id s = 0;
    std::optional<state_size_model> out;
    if (ctx.decode({{0, 0, s, true}}) == engine::decode_result::ok) {
        const uint64_t one = ctx.state_size(s, false);
        if (ctx.decode({{0, 1, s, true}}) == engine::decode_result::ok) {
            const uint64_t two = ctx.state_size(s, false);
            if (two >= one && one >= two - one) {
                out = state_size_model{one - (two - one), two - one};
            }
        }
    }
    ctx.clear();
    return out;
}

}  // namespace

int32_t default_n_ctx(const engine::model & m) {
    const int32_t train = m.n_ctx_train() > 0 ? m.n_ctx_train() : 4096;
    return std::min(train, 16384);
}

params with_family_settings(params p, bool hybrid) {
    auto & c = p.cache;
    // A budget given only through the other family's flag is still the operator's budget (e.g.
    // --cache-ram-bytes, the alias of --prompt-cache-capacity-bytes, on a hybrid model).
    if (hybrid && c.snapshot_capacity_bytes == 0 && c.kv_capacity_bytes != 0) {
        spdlog::info("cache: hybrid model: the RAM budget is --prompt-cache-capacity-bytes ({} bytes), as "
                     "--prompt-cache-snapshot-capacity-bytes is not set",
                     c.kv_capacity_bytes);
        c.snapshot_capacity_bytes = c.kv_capacity_bytes;
    } else if (!hybrid && c.kv_capacity_bytes == 0 && c.snapshot_capacity_bytes != 0) {
        spdlog::info("cache: dense model: the RAM budget is --prompt-cache-snapshot-capacity-bytes ({} bytes), as "
                     "--prompt-cache-capacity-bytes is not set",
                     c.snapshot_capacity_bytes);
        c.kv_capacity_bytes = c.snapshot_capacity_bytes;
    }
    if (hybrid) {
        c.ram_bytes = c.snapshot_capacity_bytes;
        c.max_entries = c.snapshot_max_entries;
        c.ttl_s = c.snapshot_ttl_s;
        c.budget_flag = "--prompt-cache-snapshot-capacity-bytes";
        c.ttl_flag = "--prompt-cache-snapshot-ttl";
    } else {
        c.ram_bytes = c.kv_capacity_bytes;
        c.budget_flag = "--prompt-cache-capacity-bytes";
        c.ttl_flag = "--prompt-cache-ttl";
    }
    return p;
}

void apply_capacity_default(engine::context & ctx, const engine::model & m, params & p, cache::store & store,
                            int32_t n_seq, int32_t max_seq_tokens, bool hybrid) {
    const auto sizes = measure_state_sizes(ctx);
    const int64_t rep_tokens = cache::representative_tokens(max_seq_tokens);
    const uint64_t entry = sizes ? sizes->at(rep_tokens) : 0;
    if (p.cache.ram_bytes == 0) {
        const uint64_t phys =
            static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
        const uint64_t pool = sizes ? static_cast<uint64_t>(n_seq) * sizes->at(max_seq_tokens) : 0;
        const uint64_t used = m.size_bytes() + pool;
        const uint64_t left = phys > used ? phys - used : 0;
        const uint64_t cap = cache::capacity_default(entry, left, hybrid);
        spdlog::info("cache: model-aware {} capacity default {} bytes ({}): entry {} bytes at {} tokens, ceiling "
                     "{} bytes (a quarter of {} bytes left = {} physical - {} weights - {} KV pool), floor {} bytes",
                     hybrid ? "snapshot" : "KV store", cap, p.cache.budget_flag, entry, rep_tokens, left / 4, left,
                     phys, m.size_bytes(), pool,
                     hybrid ? cache::snapshot_capacity_floor_bytes : cache::kv_capacity_floor_bytes);
        p.cache.ram_bytes = cap;
        store.set_budget(cap);
    }
    if (entry > p.cache.ram_bytes) {
        spdlog::warn("cache: one entry of {} tokens takes {} bytes, more than the whole budget of {} bytes: such "
                     "entries can never be kept in RAM; raise {}",
                     rep_tokens, entry, p.cache.ram_bytes, p.cache.budget_flag);
    }
}

}  // namespace lineage::scheduler
