// cache::ladder: rung placement and divergence slack; see ladder.h.
#include "cache/rule/ladder.h"

#include "cache/config.h"

#include <algorithm>

namespace lineage::cache {

ladder ladder_rungs(const config & cfg, int32_t from, int32_t anchor, std::span<const int32_t> line_starts,
                    int32_t min_len) {
    ladder out;
    if (cfg.ladder_step <= 0 || cfg.ladder_max_rungs <= 0 || anchor <= from) {
        return out;
    }
    const int32_t near_step = std::max(1, std::min(cfg.ladder_near_step, cfg.ladder_step));
    const int32_t near_len = std::max(0, cfg.ladder_near_tokens);
    // The near zone: walking back from the anchor, a rung at most near_step before the next one
    // (each one splits the prefill: a pass of its own).
    int32_t next = anchor;  // the rung (or anchor) after the one being placed
    while (static_cast<int32_t>(out.near.size()) < cfg.ladder_max_rungs && anchor - next < near_len) {
        const int32_t lo = next - near_step;
        if (lo <= from) {
            break;  // the restore point (or the region's start) is within one gap
        }
        // The earliest line start in [lo, next - min_gap]: the fewest rungs for the allowed
        // gap, none right before the next rung (a line start a few tokens before the anchor,
        // e.g. the end-of-message line, restores next to nothing more than the anchor does).
        const int32_t min_gap = std::max(1, near_step / 4);
        auto it = std::lower_bound(line_starts.begin(), line_starts.end(), lo);
        const int32_t rung = it != line_starts.end() && *it <= next - min_gap ? *it : lo;
        if (rung < min_len) {
            break;
        }
        out.near.push_back(rung);
        next = rung;
    }
    std::reverse(out.near.begin(), out.near.end());
    // The far zone, [from, the first near rung): points every far step from its start, each
    // taken at the end of the prefill pass that reaches it (no split), the step stretched so that
    // near and far rungs together stay within the cap.
    const int32_t far_end = out.near.empty() ? anchor : out.near.front();
    const int32_t far_budget = cfg.ladder_max_rungs - static_cast<int32_t>(out.near.size());
    const int32_t far_span = far_end - std::max(from, 0);
    if (far_budget <= 0 || far_span <= cfg.ladder_step) {
        return out;
    }
    int32_t far_step = cfg.ladder_step;
    if ((far_span - 1) / far_step > far_budget) {
        far_step = (far_span + far_budget) / (far_budget + 1);  // ceil(span / (budget + 1)): budget points inside
    }
    for (int32_t r = std::max(from, 0) + far_step; r < far_end && static_cast<int32_t>(out.far.size()) < far_budget;
         r += far_step) {
        if (r >= min_len) {
            out.far.push_back(r);
        }
    }
    return out;
}

namespace {

// Rungs start + k * step inside (max(start, from), end), step stretched so that at most `count` fit.
std::vector<int32_t> spaced_rungs(int32_t count, int32_t min_step, int32_t from, int32_t start, int32_t end,
                                  int32_t min_len) {
    std::vector<int32_t> rungs;
    if (count <= 0 || min_step <= 0 || start < 0 || end - start < 2) {
        return rungs;
    }
    const int64_t len = static_cast<int64_t>(end) - start;
    // ceil((len - 1) / rungs): the stretched step still leaves the last rung inside the message
    // (64-bit: a count or step of INT32_MAX does not wrap).
    const int64_t step = std::max<int64_t>(min_step, (len - 1 + count - 1) / count);
    for (int64_t r = start + step; r < end && static_cast<int64_t>(rungs.size()) < count; r += step) {
        if (r > from && r >= min_len) {
            rungs.push_back(static_cast<int32_t>(r));
        }
    }
    return rungs;
}

}  // namespace

std::vector<int32_t> message_rungs(const config & cfg, int32_t from, int32_t start, int32_t end, int32_t min_len) {
    return spaced_rungs(cfg.message_rungs, cfg.message_step, from, start, end, min_len);
}

std::vector<int32_t> message_pass_rungs(const config & cfg, int32_t from, int32_t start, int32_t end,
                                        int32_t min_len) {
    std::vector<int32_t> rungs;
    if (cfg.message_pass_rungs <= 0 || cfg.message_pass_step <= 0 || start < 0) {
        return rungs;
    }
    // Walking back from the end: what a new session or a resume repeats ends right before the
    // question, at the message's end.
    const int32_t floor = std::max(start, from);
    for (int64_t k = 1; k <= cfg.message_pass_rungs; ++k) {
        const int64_t r = static_cast<int64_t>(end) - k * cfg.message_pass_step;  // 64-bit: no wrap
        if (r <= floor) {
            break;
        }
        if (r >= min_len) {
            rungs.push_back(static_cast<int32_t>(r));
        }
    }
    std::reverse(rungs.begin(), rungs.end());
    return rungs;
}

int32_t divergence_point(const config & cfg, int32_t n, std::span<const int32_t> line_starts) {
    if (cfg.divergence_slack <= 0) {
        return n;  // --cache-divergence-slack 0: at the divergence token itself
    }
    // The last line start at or before n.
    auto it = std::upper_bound(line_starts.begin(), line_starts.end(), n);
    if (it != line_starts.begin()) {
        const int32_t start = *std::prev(it);
        if (n - start <= cfg.divergence_slack) {
            return start;
        }
    }
    return std::max(0, n - cfg.anchor_slack);
}

}  // namespace lineage::cache
