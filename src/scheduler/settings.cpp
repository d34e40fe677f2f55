// scheduler::settings: the settings in effect for the served model; see settings.h.
#include "scheduler/settings.h"

#include "cache/store/capacity.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <thread>

#include <unistd.h>

namespace lineage::scheduler {

namespace {

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

std::optional<state_size_model> probe_state_sizes(const engine::model & m, const engine::context_params & cp) {
    engine::context_params small = cp;
    small.n_seq = 1;
    small.n_ctx = 256;  // llama.cpp's smallest KV (it pads to 256 cells)
    small.n_batch = 8;
    small.n_ubatch = 8;
    small.n_rs_seq = 0;
    std::optional<state_size_model> out;
    try {
        engine::context probe(m, small);
        std::thread([&] { out = measure_state_sizes(probe); }).join();
    } catch (const std::exception & e) {
        spdlog::warn("memory plan: the probe context failed ({})", e.what());
    }
    return out;
}

memory_plan plan_of(const engine::model & m, const params & p, const state_size_model & sizes, int32_t n_ctx_seq,
                    int32_t n_parked) {
    memory_inputs in;
    in.device = p.device.name.empty() ? "CPU" : p.device.name;
    in.gpu = p.device.gpu;
    in.budget_from_flag = p.device_budget_bytes > 0;
    in.budget_bytes = in.budget_from_flag ? p.device_budget_bytes : p.device.free_bytes;
    in.model_bytes = m.size_bytes();
    in.type_k = p.type_k;
    in.type_v = p.type_v;
    in.kv_bytes_per_token = sizes.per_token;
    in.seq_fixed_bytes = sizes.fixed;
    in.n_parallel = p.n_parallel;
    in.n_parked = n_parked;
    in.n_ctx_seq = n_ctx_seq;
    in.ram_tier_bytes = p.cache.ram_bytes;
    return plan_memory(in);
}

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

params with_device_settings(params p, bool gpu) {
    auto & c = p.cache;
    if (c.ram_release_s < 0) {
        c.ram_release_s = c.ram_release_s_for(gpu);
        if (c.enabled && !c.disk_dir.empty()) {
            spdlog::info("cache: --cache-ram-release-s auto: {:.0f} s ({})", c.ram_release_s,
                         gpu ? "the model runs on a GPU"
                             : "the model runs on the CPU: a written entry's file is in the page cache, so its RAM copy "
                               "goes soon");
        }
    }
    c.repin_read_anchors = cache::config::repin_read_anchors_for(gpu, c.ram_release_s);
    if (c.device_slots < 0) {
        c.device_slots = c.device_slots_for(gpu);
        // Auto never asks for more than llama.cpp holds (LLAMA_MAX_SEQ sequences) or a batch has
        // rows for (one token of each sequence): the startup check passed with auto's CPU value.
        const int32_t room = std::min(cache::config::max_sequences - p.n_parallel, p.n_batch - p.n_parallel);
        const bool lowered = c.device_slots > room;
        c.device_slots = std::max(cache::config::auto_device_slots_cpu, std::min(c.device_slots, room));
        spdlog::info(
            "scheduler: --cache-device-slots auto: {} parked sequence{} ({}{})", c.device_slots,
            c.device_slots == 1 ? "" : "s",
            gpu ? "the model runs on a GPU"
                : "the model runs on the CPU: a parked sequence holds a KV buffer in host RAM, so one spare "
                  "is kept for restores that copy a parked entry; the RAM tier keeps finished states too",
            lowered ? "; lowered to fit beside --parallel within llama.cpp's 256 sequences and --batch-size" : "");
    }
    return p;
}

void apply_capacity_default(const std::optional<state_size_model> & sizes, const engine::model & m, params & p,
                            cache::store & store, int32_t n_seq, int32_t max_seq_tokens, bool hybrid) {
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
