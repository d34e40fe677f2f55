// cache::store's decision trace of a lookup (--cache-trace): the decision itself, why every
// other entry was not taken, and which capture points the prefill will take and why others were
// not planned. Only runs when the trace is on, so it may recompute what plan() computed.
#include "cache/store/store.h"

#include <algorithm>
#include <map>

namespace lineage::cache {

namespace {

// Entries of the prompt's own bucket listed one per line, the closest (longest common token
// prefix) first; the rest are counted.
constexpr size_t max_listed = 8;

std::string short_digest(const std::string & hex) {
    return hex.substr(0, 12);
}

}  // namespace

/** What a plan's trace lists of the entries and running requests it did not restore from
 *  (trace_plan's steps). */
struct store::plan_trace_listing {
    std::vector<std::pair<int32_t, std::string>> same_bucket;  ///< (common prefix in tokens, line)
    std::map<std::string, int32_t> other_buckets;              ///< key difference -> entries
    const entry * closest_other = nullptr;                     ///< the other bucket's entry sharing the most tokens
    int32_t closest_other_lcp = 0;                             ///< tokens it shares with the prompt
    std::string closest_other_diff;                            ///< how its key differs
};

void store::trace_plan(const key & k, const tokens & prompt, const plan_hints & h, const restore_plan & p) {
    const int32_t n_prompt = static_cast<int32_t>(prompt.size());
    trace_("lookup of {} tokens (session {}, bucket {}): {}", n_prompt, quote_for_log(k.session),
           short_digest(k.bucket), p.reason);

    // Why each other entry was not taken.
    plan_trace_listing listing;
    list_entries_not_taken(k, prompt, p, listing);
    list_live_not_restored(k, prompt, h, p, listing);
    trace_listing(listing);

    // Capture points, and why the others were not planned.
    std::string planned;
    for (const auto & c : p.captures) {
        // ">=": taken at the end of the pass that reaches it (capture_point::at_pass_end); "~": a
        // split only while other requests run or wait, else a ladder job's (deferrable).
        planned += fmt::format("{}{}@{}{}", planned.empty() ? "" : " ", to_string(c.kind),
                               c.at_pass_end ? ">=" : (c.deferrable ? "~" : ""), c.n_tokens);
    }
    std::vector<std::string> not_planned;
    if (!cfg_.lineage) {
        not_planned.push_back("exact mode: no checkpoints, no anchor");
    } else {
        anchors_not_planned(k, prompt, h, p, not_planned);
        if (hybrid_) {
            checkpoints_not_planned(k, prompt, h, p, not_planned);
        }
    }
    std::string skipped;
    for (const auto & s : not_planned) {
        skipped += (skipped.empty() ? "" : "; ") + s;
    }
    trace_("captures planned: [{}]{}{}", planned, skipped.empty() ? "" : "; not planned: ", skipped);
}

std::string store::why_not_taken(const entry & e, const key & k, const tokens & prompt, int32_t lcp,
                                 const restore_plan & p) const {
    const int32_t limit = static_cast<int32_t>(prompt.size()) - 1;
    const int32_t n_e = static_cast<int32_t>(e.toks.size());
    const auto c = best_point(rule_, e.id, state_of(e, k.session), prompt, lcp, rule_.prompt_chain(k.bucket, prompt));
    if (!c) {
        if (lcp == 0) {
            return "shares no tokens with the prompt";
        }
        // Hybrid only (a dense entry restores any prefix): no restore point in reach.
        const int32_t reach = std::min(lcp, limit);
        const checkpoint * nearest = nullptr;
        for (const auto & cp : e.checkpoints) {
            if (cp.n_tokens > reach) {
                nearest = &cp;
                break;
            }
        }
        return lcp == n_e ? fmt::format("matches all {} tokens, but a restore must leave >= 1 token to prefill "
                                        "and it has no checkpoint before its end",
                                        n_e)
                          : fmt::format("the prompt diverges from it at token {}; no restore point at or "
                                        "before {} (nearest: {})",
                                        lcp, reach,
                                        nearest ? fmt::format("{} at {}", to_string(nearest->kind), nearest->n_tokens)
                                                : fmt::format("its full snapshot at {}", n_e));
    }
    if (c->n < cfg_.min_prefix) {
        return fmt::format("its {} restore point at {} is shorter than min prefix {}", to_string(c->kind), c->n,
                           cfg_.min_prefix);
    }
    if (c->n < p.n_restore) {
        return fmt::format("its {} restore point at {} is shorter than the chosen one at {}", to_string(c->kind), c->n,
                           p.n_restore);
    }
    return fmt::format("its {} restore point at {} ties with the chosen one (preferred: own session, then a "
                       "parked sequence, then a full snapshot){}",
                       to_string(c->kind), c->n,
                       e.k.session != k.session ? "; cross-session restores must be strictly longer" : "");
}

void store::list_entries_not_taken(const key & k, const tokens & prompt, const restore_plan & p,
                                   plan_trace_listing & out) const {
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        const entry & e = *it;
        if (e.id == p.source) {
            continue;  // the chosen one
        }
        const int32_t n_e = static_cast<int32_t>(e.toks.size());
        const int32_t lcp = common_prefix(e.toks, prompt);
        if (e.k.bucket != k.bucket) {
            std::string diff = key_difference(e.k.dims, k.dims);
            if (diff.empty()) {
                diff = "bucket differs (dimensions not recorded)";
            }
            out.other_buckets[diff]++;
            if (lcp > out.closest_other_lcp) {
                out.closest_other = &e;
                out.closest_other_lcp = lcp;
                out.closest_other_diff = diff;
            }
            continue;
        }
        const std::string who = fmt::format("entry {} ({}{}, {} tokens, session {})", e.id, e.anchor ? "anchor, " : "",
                                            to_string(e.where), n_e, quote_for_log(e.k.session));
        out.same_bucket.emplace_back(lcp, who + " not taken: " + why_not_taken(e, k, prompt, lcp, p));
    }
}

void store::list_live_not_restored(const key & k, const tokens & prompt, const plan_hints & h, const restore_plan & p,
                                   plan_trace_listing & out) const {
    const int32_t limit = static_cast<int32_t>(prompt.size()) - 1;
    // Running requests' sequences (plan_hints::live) that were not restored from.
    for (const auto & l : h.live) {
        if (l.bucket != k.bucket || (p.source == 0 && p.op == restore_op::share_device && p.device_seq == l.seq)) {
            continue;
        }
        const int32_t lcp = common_prefix(l.toks, prompt);
        if (lcp == 0) {
            continue;
        }
        const stored_state st{l.toks, l.checkpoints, false, -1, l.session == k.session, true, 0.0, nullptr};
        const auto c = best_point(rule_, 0, st, prompt, lcp, rule_.prompt_chain(k.bucket, prompt));
        out.same_bucket.emplace_back(
            lcp, fmt::format("running request {} (sequence {}, {} tokens so far) not restored from: {}", l.request,
                             l.seq, l.toks.size(),
                             !c ? fmt::format("it shares {} tokens, but has no restore point at or before {} yet "
                                              "(its prefill captured none there)",
                                              lcp, std::min(lcp, limit))
                             : c->n < p.n_restore || c->n < cfg_.min_prefix
                                 ? fmt::format("its {} restore point at {} is shorter than the chosen one at {} or "
                                               "min prefix {}",
                                               to_string(c->kind), c->n, p.n_restore, cfg_.min_prefix)
                                 : fmt::format("its {} restore point at {} ties with a stored one (preferred)",
                                               to_string(c->kind), c->n)));
    }
}

void store::trace_listing(plan_trace_listing & listing) {
    auto & same_bucket = listing.same_bucket;
    std::stable_sort(same_bucket.begin(), same_bucket.end(),
                     [](const auto & a, const auto & b) { return a.first > b.first; });
    for (size_t i = 0; i < same_bucket.size() && i < max_listed; ++i) {
        trace_("  {}", same_bucket[i].second);
    }
    if (same_bucket.size() > max_listed) {
        trace_("  ... and {} more entries of this bucket, sharing fewer tokens", same_bucket.size() - max_listed);
    }
    if (const entry * closest_other = listing.closest_other; closest_other != nullptr) {
        trace_("  entry {} ({} tokens, session {}) shares {} tokens with the prompt but is in another bucket: {}",
               closest_other->id, closest_other->toks.size(), quote_for_log(closest_other->k.session),
               listing.closest_other_lcp, listing.closest_other_diff);
    }
    if (!listing.other_buckets.empty()) {
        std::string summary;
        int32_t n = 0;
        for (const auto & [diff, count] : listing.other_buckets) {
            summary += fmt::format("{}{}: {}", summary.empty() ? "" : "; ", diff, count);
            n += count;
        }
        trace_("  {} entr{} in other buckets ({})", n, n == 1 ? "y" : "ies", summary);
    }
}

void store::anchors_not_planned(const key & k, const tokens & prompt, const plan_hints & h, const restore_plan & p,
                                std::vector<std::string> & not_planned) const {
    auto anchor_not_planned = [&](const char * what, int32_t a) {
        const bool planned = std::any_of(p.captures.begin(), p.captures.end(), [a](const capture_point & c) {
            return c.kind == point_kind::anchor && c.n_tokens == a;
        });
        if (planned) {
            return;
        }
        const bool pinned = std::any_of(entries_.begin(), entries_.end(), [&](const entry & e) {
            return e.anchor && e.k.bucket == k.bucket && static_cast<int32_t>(e.toks.size()) == a &&
                   common_prefix(e.toks, prompt) == a;
        });
        not_planned.push_back(pinned                ? fmt::format("{} at {}: already pinned", what, a)
                              : a < cfg_.min_prefix ? fmt::format("{} at {}: below min prefix {}", what, a,
                                                                  cfg_.min_prefix)
                              : a < p.n_restore     ? fmt::format("{} at {}: before the restore point", what, a)
                                                    : fmt::format("{} at {}: not inside the prompt", what, a));
    };
    const int32_t anchor = h.anchor_tokens - cfg_.anchor_slack;
    if (h.anchor_tokens <= 0) {
        not_planned.push_back("anchor: the request has no leading system message or tools");
    } else {
        anchor_not_planned("anchor", anchor);
    }
    if (hybrid_ && h.tools_anchor_tokens > 0) {
        const int32_t t = h.tools_anchor_tokens - cfg_.anchor_slack;
        if (t >= anchor) {
            not_planned.push_back(fmt::format("tools anchor at {}: not before the anchor", t));
        } else {
            anchor_not_planned("tools anchor", t);
        }
    }
}

void store::checkpoints_not_planned(const key & k, const tokens & prompt, const plan_hints & h, const restore_plan & p,
                                    std::vector<std::string> & not_planned) const {
    const int32_t n_prompt = static_cast<int32_t>(prompt.size());
    int32_t sibling = 0;
    for (const auto & e : entries_) {
        const int32_t l = common_prefix(e.toks, prompt);
        if (e.k.bucket == k.bucket && l < static_cast<int32_t>(e.toks.size())) {
            sibling = std::max(sibling, l);
        }
    }
    const bool div_planned = std::any_of(p.captures.begin(), p.captures.end(), [](const capture_point & c) {
        return c.kind == point_kind::divergence;
    });
    if (sibling > p.n_restore && !div_planned) {
        not_planned.push_back(fmt::format("divergence at {}: gain {} < {} (--cache-divergence-min-gain)",
                                          sibling, sibling - p.n_restore, cfg_.divergence_min_gain));
    }
    // The last user message's start, mirroring add_captures: skipped a few tokens after
    // the restore point (no breakpoints; a point before the restore is no capture at all).
    const int32_t last_user = h.last_user_tokens;
    if (cfg_.last_user_checkpoint && last_user > p.n_restore && last_user < n_prompt &&
        last_user - p.n_restore < cfg_.last_user_min_gain &&
        std::none_of(p.captures.begin(), p.captures.end(),
                     [last_user](const capture_point & c) { return c.n_tokens == last_user; })) {
        not_planned.push_back(fmt::format("last user message at {}: gain {} < {} (--cache-last-user-min-gain)",
                                          last_user, last_user - p.n_restore, cfg_.last_user_min_gain));
    }
    if (cfg_.resend_checkpoint && n_prompt - 1 > p.n_restore &&
        std::none_of(p.captures.begin(), p.captures.end(),
                     [](const capture_point & c) { return c.kind == point_kind::guard; })) {
        not_planned.push_back(
            fmt::format("guard at {}: a restore point within {} tokens before it "
                        "(--cache-guard-merge)",
                        n_prompt - 1, cfg_.guard_merge));
    }
    if (!cfg_.resend_checkpoint && n_prompt - p.n_restore < cfg_.guard_min_suffix) {
        not_planned.push_back(fmt::format("guard: uncached suffix {} < {} (--cache-guard-min-suffix)",
                                          n_prompt - p.n_restore, cfg_.guard_min_suffix));
    }
}

void store::classify(const key & k, const tokens & prompt, int32_t live_lcp, std::span<const token_span> media,
                     restore_plan & p) {
    const int32_t limit = static_cast<int32_t>(prompt.size()) - 1;  // a restore leaves >= 1 token
    const int32_t live = std::min(live_lcp, limit);
    // An image the stored conversation does not have at this place (another image, or text):
    // the longest match parts exactly where the prompt's image starts. The key's mm_digest
    // dimension, carried by the image's pseudo-tokens (media.h), is what differs.
    if (const int32_t img = span_starting_at(media, live); img >= 0 && live < limit) {
        bool parts_there = false;
        if (auto t = tries_.find(k.bucket); t != tries_.end()) {
            t->second.match(prompt, [&](uint64_t id, int32_t lcp) {
                parts_there = lcp == live_lcp && static_cast<int32_t>(by_id_.at(id)->toks.size()) > lcp;
                return !parts_there && lcp == live_lcp;
            });
        }
        if (parts_there) {
            p.cause = miss_cause::key_differs;
            p.cause_dimension = "mm_digest";
            stats_.key_differs["mm_digest"]++;
            (p.n_restore == 0 ? stats_.misses_by_cause : stats_.short_hits_by_cause)[std::string(to_string(*p.cause))]++;
            p.reason += fmt::format("; {} cause: key_differs: a live entry shares {} tokens and then holds another "
                                    "image or text where image {} starts (mm_digest differs)",
                                    p.n_restore == 0 ? "miss" : "short hit", live, img + 1);
            return;
        }
    }
    // A ghost of an evicted entry that the prompt holds whole (but for its last blocks:
    // ghost_set::tail_blocks),
    // at least one block more than was restored and more than any live entry shares, names the
    // eviction however few tokens it cost (its state at its end would have restored it): the
    // short_hit_tokens slack is for the spacing of restore points, and an agent's conversation
    // often holds only a few dozen tokens past its system prompt's anchor.
    const ghost_set::match gm = ghosts_.longest(k.bucket, prompt);
    const int32_t ghost = std::min(gm.tokens, limit);
    const bool evicted_more = gm.whole && ghost >= p.n_restore + ghost_set::block_tokens && ghost > live;
    if (p.n_restore > 0 && p.n_restore + short_hit_tokens >= limit && !evicted_more) {
        return;  // restored (nearly) the whole prompt: nothing can have shared more
    }
    // What else shared more: an entry under another key (at most max_other_buckets buckets
    // looked at: a cause label, not worth a scan of every bucket).
    constexpr size_t max_other_buckets = 16;
    int32_t other = 0;
    uint64_t other_id = 0;
    size_t looked = 0;
    for (const auto & [bucket, trie] : tries_) {
        if (bucket == k.bucket) {
            continue;
        }
        if (++looked > max_other_buckets) {
            break;
        }
        trie.match(prompt, [&](uint64_t id, int32_t lcp) {
            if (lcp > other) {
                other = lcp;
                other_id = id;
            }
            return false;  // the first is the longest
        });
    }
    other = std::min(other, limit);
    const int32_t known = std::max({live, ghost, other});
    if (p.n_restore > 0 && p.n_restore + short_hit_tokens >= known && !(evicted_more && ghost >= known)) {
        return;  // a hit that restored what was shared
    }
    miss_cause c;
    std::string detail;
    if (known < cfg_.min_prefix && 2 * known < limit) {
        // Nothing reusable: at most a chat template's header is shared.
        c = miss_cause::no_shared_prefix;
    } else if (known < cfg_.min_prefix) {
        // A short prompt, mostly seen before, shorter than what the cache stores.
        c = miss_cause::below_min_prefix;
        detail = fmt::format("shares {} tokens < --prompt-cache-min-prefix {}", known, cfg_.min_prefix);
    } else if (live >= known) {
        c = miss_cause::before_first_restore_point;
        detail = fmt::format("a live entry shares {} tokens; no restore point between {} and {}", live, p.n_restore, live);
    } else if (ghost >= known) {
        c = miss_cause::evicted;
        detail = fmt::format("an evicted entry shared {} tokens (raise the RAM budget to keep it)", ghost);
        if (gm.whole) {
            // The prompt holds the whole evicted entry: it would have been restored (value.h),
            // and the lineage it continues keeps its reuse class. A prefix it shares with the
            // entry (a system text of its kind) is no reuse of it.
            reuse_.ghost_reused(gm.uses, reuse_family(k.bucket, prompt));
            p.evicted_uses = gm.uses + 1;
        }
    } else {
        c = miss_cause::key_differs;
        const entry & e = *by_id_.at(other_id);
        std::string diff = key_difference(e.k.dims, k.dims);
        const size_t sp = diff.find(' ');
        const std::string dim = diff.empty() ? "unrecorded" : diff.substr(0, sp);
        stats_.key_differs[dim]++;
        p.cause_dimension = dim;
        detail = fmt::format("an entry under another key shares {} tokens ({})", other,
                             diff.empty() ? "dimensions not recorded" : diff);
    }
    p.cause = c;
    (p.n_restore == 0 ? stats_.misses_by_cause : stats_.short_hits_by_cause)[std::string(to_string(c))]++;
    p.reason += fmt::format("; {} cause: {}{}{}", p.n_restore == 0 ? "miss" : "short hit", to_string(c),
                            detail.empty() ? "" : ": ", detail);
}

}  // namespace lineage::cache
