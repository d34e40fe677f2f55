// scheduler::memory_plan: the startup memory plan; see memory_plan.h.
#include "scheduler/memory_plan.h"

#include <cstdio>
#include <limits>

namespace lineage::scheduler {

namespace {

constexpr uint64_t u64_max = std::numeric_limits<uint64_t>::max();

uint64_t sat_mul(uint64_t a, uint64_t b) { return a != 0 && b > u64_max / a ? u64_max : a * b; }
uint64_t sat_add(uint64_t a, uint64_t b) { return b > u64_max - a ? u64_max : a + b; }

std::string human(uint64_t b) {
    static const char * units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = static_cast<double>(b);
    int u = 0;
    while (v >= 1024.0 && u < 6) {
        v /= 1024.0;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
    return buf;
}

}  // namespace

std::string plan_bytes(uint64_t b) { return human(b) + " (" + std::to_string(b) + ")"; }

memory_plan plan_memory(const memory_inputs & in) {
    memory_plan p;
    p.in = in;
    const auto n_ctx = static_cast<uint64_t>(in.n_ctx_seq > 0 ? in.n_ctx_seq : 0);
    p.seq_bytes = sat_add(in.seq_fixed_bytes, sat_mul(in.kv_bytes_per_token, n_ctx));
    p.active_bytes = sat_mul(static_cast<uint64_t>(in.n_parallel > 0 ? in.n_parallel : 0), p.seq_bytes);
    p.parked_bytes = sat_mul(static_cast<uint64_t>(in.n_parked > 0 ? in.n_parked : 0), p.seq_bytes);
    p.need_bytes = sat_add(sat_add(in.model_bytes, p.active_bytes), p.parked_bytes);
    constexpr auto i64_max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    const uint64_t budget = in.budget_bytes > i64_max ? i64_max : in.budget_bytes;
    const uint64_t need = p.need_bytes > i64_max ? i64_max : p.need_bytes;
    p.headroom_bytes = static_cast<int64_t>(budget) - static_cast<int64_t>(need);
    return p;
}

std::string describe(const memory_plan & p) {
    const auto & in = p.in;
    std::string s = "memory plan (" + in.device + (in.gpu ? ", GPU" : ", host memory") + "): model " +
                    plan_bytes(in.model_bytes) + " + KV " + plan_bytes(in.kv_bytes_per_token) + "/token (K " +
                    in.type_k + ", V " + in.type_v + ") x " + std::to_string(in.n_ctx_seq) + " tokens";
    if (in.seq_fixed_bytes > 0) {
        s += " + " + plan_bytes(in.seq_fixed_bytes) + " fixed";
    }
    s += " = " + plan_bytes(p.seq_bytes) + " per sequence; " + std::to_string(in.n_parallel) + " --parallel = " +
         plan_bytes(p.active_bytes) + ", " + std::to_string(in.n_parked) + " parked (--cache-device-slots) = " +
         plan_bytes(p.parked_bytes) + "; needs " + plan_bytes(p.need_bytes) + " of device budget " +
         plan_bytes(in.budget_bytes) +
         (in.budget_from_flag ? " (--cache-device-bytes)" : " (the device's memory; --cache-device-bytes 0 = auto)") +
         ", headroom ";
    s += p.headroom_bytes >= 0 ? plan_bytes(static_cast<uint64_t>(p.headroom_bytes))
                               : "-" + plan_bytes(static_cast<uint64_t>(-(p.headroom_bytes + 1)) + 1);
    if (in.ram_tier_bytes > 0) {
        s += "; RAM tier budget " + plan_bytes(in.ram_tier_bytes) + " (a cap, in host memory)";
    }
    return s;
}

util::status refusal(const memory_plan & p) {
    if (p.fits()) {
        return util::status::ok();
    }
    const auto & in = p.in;
    std::string s = "the memory plan does not fit: " + std::string(in.budget_from_flag ? "--cache-device-bytes " : "the device's memory, ") +
                    plan_bytes(in.budget_bytes) +
                    (in.budget_from_flag ? "" : " (" + in.device + "; --cache-device-bytes 0 = auto)") +
                    ", is less than model " + plan_bytes(in.model_bytes) + " + " + std::to_string(in.n_parallel) +
                    " --parallel sequences x " + plan_bytes(p.seq_bytes) + " at --ctx-size " +
                    std::to_string(in.n_ctx_seq) + " tokens (KV " + plan_bytes(in.kv_bytes_per_token) +
                    "/token, K " + in.type_k + ", V " + in.type_v + ") + " + std::to_string(in.n_parked) +
                    " parked (--cache-device-slots) = " + plan_bytes(p.need_bytes) + "; ";
    const uint64_t without_parked = p.need_bytes - p.parked_bytes;
    if (in.n_parked > 0 && without_parked <= in.budget_bytes) {
        s += "lower --cache-device-slots, ";
    }
    s += "raise --cache-device-bytes, or lower --ctx-size or --parallel, or pick a smaller --cache-type-k/-v";
    return util::status::error(std::move(s));
}

}  // namespace lineage::scheduler
