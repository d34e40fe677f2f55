// cache::stats: the figures the warm-ups describe of themselves (stats.h).
#include "cache/stats.h"

namespace lineage::cache {

std::vector<stat_figure> warmup_stats::describe() const {
    return {
        figure("queued", queued),
        figure("renders", renders),
        figure("tokenizations", tokenizations),
        figure_series("runs", runs, "warmups_total",
                      "Background warm-ups of a conversation's next turn, by outcome: stored (the whole prefix), "
                      "preempted (a request came first; what was done is parked).",
                      "outcome", "stored"),
        figure_series("preempted", preempted, "warmups_total", "", "outcome", "preempted"),
        figure("active", active, "warmups_active", "Warm-ups running now (one at a time, on an idle engine)."),
        figure("tokens", tokens, "warmup_tokens_total", "Tokens prefilled by warm-ups."),
        figure("hits", hits, "warmup_hits_total", "Requests that restored at least the length a warm-up stored."),
        figure("wasted", wasted, "warmup_wasted_total",
               "Warmed entries that left the cache before a hit, and warm-ups dropped unfinished."),
        figure_map("skipped", skipped, "warmup_skipped_total",
                   "Warm-up jobs not run, by cause: not_needed, replaced, queue_full, preempted_too_often.", "cause",
                   skip_causes),
    };
}

}  // namespace lineage::cache
