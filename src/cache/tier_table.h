// cache::tier_row, cache::tier_table(): the tiers below RAM this server knows, one row each, in
// the order the store consults them (each only for a restore point longer than those before it;
// the entries track the first open one's copies). docs/architecture.md "Tiers below RAM".
//
// A new tier is its folder under cache/tier/ (a class derived from lower_tier, its opener and its
// flags function) and one row in tier_table.cpp: the server's flags (--help, environment, errors),
// the scheduler's tier_link (open, write, load, stats, reset), GET /v1/cache/stats, /metrics and
// POST /v1/cache/reset all loop over the rows. tests/server/test_tier_table.cpp registers the
// unit tests' in-memory tier as one more row and serves from it through the same paths.
// Thread safety: the table is built once and read-only after.
#pragma once

#include "cache/config.h"
#include "cache/stats.h"
#include "cache/tier/lower_tier.h"
#include "cache/tier/tier_flags.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace lineage::cache {

/** POST /v1/cache/reset's flat fields for one tier, beside its `tiers.<name>` object (the
 *  API's older spelling: "disk_files_freed", "redis_entries_freed"). Empty: none. */
struct tier_reset_keys {
    std::string copies;   ///< copies deleted
    std::string bytes;    ///< their bytes
    bool always = false;  ///< reported (0) while the tier is off too
};

struct tier_row {
    /** tier_traits::name of the tier it opens: "disk", "redis". */
    std::string name;
    /** Declares the tier's flags, bound to its fields of `cfg` (or to the tier's own settings). */
    std::function<void(flag_sink & sink, config & cfg)> flags;
    /** Whether the parsed flags name the tier (the server then opens it); a server that names no
     *  tier skips reading the model's fingerprint. */
    std::function<bool(const config & cfg)> named;
    /** Opens the tier as the flags set it; nullptr when it could not be opened (the opener WARNs
     *  why: the server goes on without it). `model`: model_fingerprint() of the served model;
     *  `hybrid`: the model keeps recurrent state (restore_settings::from). */
    std::function<std::unique_ptr<lower_tier>(const config & cfg, const std::string & model, bool hybrid)> open;
    /** Its figures while it is off (its stats at zero), so that stats and /metrics list every
     *  tier the server knows. */
    std::function<tier_report()> off;
    tier_reset_keys reset_keys;
};

/** The tiers below RAM: disk (T2), then Redis (T3). */
const std::vector<tier_row> & tier_table();

}  // namespace lineage::cache
