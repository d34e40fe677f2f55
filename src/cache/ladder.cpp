// cache::ladder: rung placement and divergence slack; see ladder.h.
#include "cache/ladder.h"

#include "cache/config.h"

#include <algorithm>

namespace lineage::cache {

std::vector<int32_t> ladder_rungs(const config & cfg, int32_t from, int32_t anchor,
                                  std::span<const int32_t> line_starts, int32_t min_len) {
    std::vector<int32_t> rungs;
    if (cfg.ladder_step <= 0 || cfg.ladder_max_rungs <= 0 || anchor <= from) {
        return rungs;
    }
    const int32_t near_step = std::max(1, std::min(cfg.ladder_near_step, cfg.ladder_step));
    const int32_t near_len = std::max(0, cfg.ladder_near_tokens);
    const int32_t region = anchor - std::max(from, 0);
    // Rungs the near zone takes, then the far spacing stretched to the rest of the budget.
    const int32_t near_span = std::min(region, near_len);
    const int32_t n_near = near_span / near_step;
    const int32_t far_span = region - near_span;
    int32_t far_step = cfg.ladder_step;
    const int32_t far_budget = cfg.ladder_max_rungs - n_near;
    if (far_span > 0 && far_budget > 0 && far_span / far_step > far_budget) {
        far_step = (far_span + far_budget - 1) / far_budget;
    }
    int32_t next = anchor;  // the rung (or anchor) after the one being placed
    while (static_cast<int32_t>(rungs.size()) < cfg.ladder_max_rungs) {
        const int32_t gap = anchor - next < near_len ? near_step : far_step;
        if (far_budget <= 0 && anchor - next >= near_len) {
            break;  // the near zone took every rung
        }
        const int32_t lo = next - gap;
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
        rungs.push_back(rung);
        next = rung;
    }
    std::reverse(rungs.begin(), rungs.end());
    return rungs;
}

std::vector<int32_t> message_rungs(const config & cfg, int32_t from, int32_t start, int32_t end, int32_t min_len) {
    std::vector<int32_t> rungs;
    if (cfg.message_rungs <= 0 || cfg.message_step <= 0 || start < 0 || end - start < 2) {
        return rungs;
    }
    const int32_t len = end - start;
    // ceil((len - 1) / rungs): the stretched step still leaves the last rung inside the message.
    const int32_t step = std::max(cfg.message_step, (len - 1 + cfg.message_rungs - 1) / cfg.message_rungs);
    for (int32_t r = start + step; r < end && static_cast<int32_t>(rungs.size()) < cfg.message_rungs; r += step) {
        if (r > from && r >= min_len) {
            rungs.push_back(r);
        }
    }
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
