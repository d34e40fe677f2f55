// server::stats_json: the JSON body of GET /v1/cache/stats (the admin's view: every figure of
// cache::stats, as the cache, each tier, the warm-ups and the buffer pool describe themselves:
// cache/figure.h; this file names none of them). The counter maps by kind, cause or reason (hits,
// misses_by_cause, evictions, warmup.skipped, ...) list every key /metrics lists
// (stat_figure::known), at 0 before the first event, so a dashboard finds each key from the
// start; a key the cache adds later still shows up. Thread safety: a pure function of its argument.
#pragma once

#include "cache/stats.h"
#include "scheduler/metrics.h"
#include "server/http/errors.h"

#include <vector>

namespace lineage::server {

/** The stats object: {enabled, mode, family, entries, ..., hits: {full: N, prefix: N, ...},
 *  misses_by_cause: {...}, disk: {...}, redis: {...}, warmup: {..., skipped: {...}}, ...};
 *  byte figures in bytes, counts since the server started. docs/prompt-cache.md
 *  "GET /v1/cache/stats". */
json stats_json(const cache::stats & s);

/** The scheduler's figures that have a JSON key (scheduler::metrics_snapshot::describe: "prefill"
 *  {passes, splits: {kind: N}}, "sequence_moves" {moves, tokens}, "prepare" {renders,
 *  tokenizations}), added to `j` in their order, as stats_json adds the cache's. */
void add_scheduler_figures(json & j, const std::vector<scheduler::metric_figure> & figures);

}  // namespace lineage::server
