// cache::tier_cost: whether a copy in a tier below RAM is worth reading and worth writing, from
// the running machine's own rates (docs/prompt-cache.md "The tier cost rule"). A copy saves the
// recompute of the tokens it restores and costs the read of its bytes; on the CPU a read saves
// seconds to minutes, but a small model on a fast GPU recomputes 10k tokens in ~0.3 s, about what
// reading its ~250 MB state back took on the H200 (docs/benchmarks/README.md "First figures on a
// GPU"), and writing 18 such entries at shutdown cost 4.76 s. So:
//   recompute_s(tokens) = tokens / the engine's prefill rate (tokens/s, measured on this run's
//                         prefill passes of at least min_pass_tokens)
//   read_s(bytes)       = bytes / the tier's restore rate (bytes/s, measured on this run's
//                         restores from it of at least min_sample_bytes: the tier worker's read
//                         and checks plus the state applied; for the first tier, its write rate
//                         until the first restore; else prior_bytes_per_s), or
//                         --cache-tier-bandwidth
//   write_s(bytes)      = bytes / the first tier's write rate (measured on its writes of at
//                         least min_sample_bytes; its restore rate, else the prior, until the
//                         first one), or --cache-tier-bandwidth
// - a read is worth it when read_s(its bytes) < recompute_s(the tokens it restores beyond the
//   best restore point above it);
// - a write during the run (idle, overdue, leaving RAM) is worth it when its copy would be worth
//   reading whole: read_s(bytes) < recompute_s(tokens);
// - a write at shutdown delays the exit (and a restart) by its write time, so it must save more:
//   recompute_s(tokens) - read_s(bytes) > write_s(bytes).
// Until the engine has measured its prefill rate (a fresh process) every copy is worth it. The
// tier's rates start at the prior and are measured only on the copies the rule lets through, so
// a prior too low for the machine is corrected only by a write (or a read) that happens anyway;
// --cache-tier-bandwidth sets them where the operator knows better. Rates are exponential moving
// averages (weight `ewma_weight` for the newest sample).
// Thread safety: none (the store's, engine thread only).
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace lineage::cache {

class tier_cost {
public:
    /** The restore and write rate assumed before the first measurement, bytes/s: 512 MiB/s.
     *  Source: the restores measured so far, file read + checks + state applied, queueing
     *  included: ~0.3 GB/s on the 2-core CPU machine (58 MB anchors in ~200 ms,
     *  docs/benchmarks/README.md "Memory"), 0.33-0.65 GB/s on the H200 (250 MB in 375-760 ms,
     *  four reads queued on one thread). */
    static constexpr double prior_bytes_per_s = 512.0 * (1 << 20);
    /** Passes shorter than this (tokens) are not prefill-rate samples: a few-token pass costs
     *  the weights' read whatever its length, and would make recompute look dearer than it is. */
    static constexpr int32_t min_pass_tokens = 64;
    /** Reads and writes of fewer bytes than this (16 MiB) are not rate samples: a small copy's
     *  time is its fixed costs (an fsync, the hand-off between threads, a scheduling delay on a
     *  loaded machine), not its transfer, and its rate would make every copy look slow. The
     *  bench models' copies are 47-58 MB (bench-qwen35, CPU) and ~250 MB (large-qwen35, H200). */
    static constexpr uint64_t min_sample_bytes = 16ull << 20;
    /** Weight of the newest sample in a rate's moving average. */
    static constexpr double ewma_weight = 0.25;

    /** `on`: --cache-tier-cost (off: every read and write is worth it, the rates are still
     *  measured for the stats). `fixed_bytes_per_s` > 0: --cache-tier-bandwidth, the read and
     *  write rate of every tier, not measured. */
    explicit tier_cost(bool on = true, double fixed_bytes_per_s = 0) : on_(on), fixed_bps_(fixed_bytes_per_s) {}

    /** Weight of the newest pass in the prefill cost fit's sums (prefill_seconds): ~20 passes'
     *  memory, so a fit spans passes at several context lengths. */
    static constexpr double fit_weight = 0.05;

    /** One engine pass of `tokens` (prefill and decode tokens together) in `seconds`; ignored
     *  below min_pass_tokens or for seconds <= 0. `position_sum`: the sum of the pass's token
     *  positions (>= 0; a token at position p attends to p earlier ones), which feeds the
     *  per-length fit of prefill_seconds; < 0: unknown (the rate alone). */
    void observe_prefill(int32_t tokens, double seconds, double position_sum = -1);
    /** Seconds to prefill positions [from, to) of one sequence, attention included: the fit
     *  seconds = a * tokens + b * (sum of positions) over this run's passes (least squares,
     *  exponentially weighted by fit_weight; a cost per token that grows linearly with the
     *  context, as attention's does), while it has 0 < a, 0 <= b and passes spread enough
     *  over lengths to tell them apart; else (to - from) / the prefill rate; nullopt before any
     *  pass was measured. Used by the eviction value (store_value.cpp). */
    std::optional<double> prefill_seconds(int32_t from, int32_t to) const;
    /** The fit's seconds per token at position 0 and per token per position of context (a, b),
     *  when it is usable (see prefill_seconds). */
    std::optional<std::pair<double, double>> prefill_fit() const;
    /** One restore of `bytes` from tier `tier` (the store's attach order) in `seconds`; ignored
     *  below min_sample_bytes. */
    void observe_read(int32_t tier, uint64_t bytes, double seconds);
    /** One write of `bytes` by the first tier in `seconds` (its worker's time for it); ignored
     *  below min_sample_bytes. */
    void observe_write(uint64_t bytes, double seconds);

    /** The measured prefill rate, tokens/s; nullopt before the first sample. */
    std::optional<double> prefill_tokens_per_s() const { return prefill_; }
    /** Tier `tier`'s restore rate in effect, bytes/s: fixed, measured, the first tier's write
     *  rate (tier 0 only), or the prior. */
    double read_bytes_per_s(int32_t tier) const;
    /** The first tier's write rate in effect, bytes/s: fixed, measured, its restore rate, or
     *  the prior. */
    double write_bytes_per_s() const;

    /** Whether reading `bytes` from tier `tier` beats recomputing `tokens_gained` tokens (true
     *  while the rule is off or the prefill rate is unmeasured; false for tokens_gained <= 0). */
    bool worth_read(int32_t tier, uint64_t bytes, int32_t tokens_gained) const;
    /** Whether a copy of `bytes` restoring `tokens` is worth writing to the first tier: during the
     *  run (`at_shutdown` false) when it would be worth reading whole; at shutdown when what it
     *  saves on read-back exceeds its write time. */
    bool worth_write(uint64_t bytes, int32_t tokens, bool at_shutdown) const;

private:
    bool on_;
    double fixed_bps_;
    std::optional<double> prefill_;       // tokens/s
    // Exponentially weighted sums of the fit seconds = a * n + b * S over passes (n tokens,
    // S their position sum, y seconds).
    double snn_ = 0, sns_ = 0, sss_ = 0, sny_ = 0, ssy_ = 0;
    std::vector<std::optional<double>> read_;  // bytes/s by tier
    std::optional<double> write_;         // bytes/s
};

}  // namespace lineage::cache
