// cache::restore_rule: the restore-point choice shared by every tier; see restore_rule.h.
#include "cache/rule/restore_rule.h"

#include "cache/rule/block_chain.h"

#include <algorithm>

namespace lineage::cache {

restore_settings restore_settings::from(const config & c, bool hybrid) {
    restore_settings r;
    r.hybrid = hybrid;
    r.lineage = c.lineage;
    r.min_prefix = c.min_prefix;
    r.apc_block_size = c.apc_enabled && !hybrid ? std::max(c.apc_block_size, 1) : 0;
    r.apc_hash = c.apc_hash;
    return r;
}

std::vector<std::string> restore_settings::prompt_chain(const std::string & bucket, const tokens & prompt) const {
    if (!apc_on() || prompt.size() < 2) {
        return {};
    }
    // Only blocks inside [0, |prompt| - 1) can be restored (>= 1 token is always prefilled).
    const tokens head(prompt.begin(), prompt.end() - 1);
    return block_chain(bucket, head, apc_block_size, static_cast<size_t>(-1), apc_hash);
}

std::optional<restore_candidate> best_point(const restore_settings & rule, uint64_t id, const stored_state & s,
                                            const tokens & prompt, int32_t lcp,
                                            const std::vector<std::string> & prompt_chain) {
    const int32_t limit = static_cast<int32_t>(prompt.size()) - 1;  // >= 1 token is always prefilled
    const int32_t n_s = static_cast<int32_t>(s.toks.size());
    restore_candidate c;
    c.id = id;
    c.same_session = s.same_session;
    c.parked = s.parked;
    c.recency = s.recency;
    if (lcp == n_s && n_s <= limit) {
        c.n = n_s;
        c.kind = s.anchor ? point_kind::anchor : point_kind::full;
        return c;
    }
    const int32_t reach = std::min(lcp, limit);
    if (!rule.hybrid) {
        // Dense: KV is append-only, so rows [0, n) of any stored KV are the KV at n. With APC,
        // the lockstep walk of the two block chains clamps n to whole agreeing blocks.
        c.n = reach;
        if (rule.apc_on()) {
            const auto bs = static_cast<size_t>(rule.apc_block_size);
            static const std::vector<std::string> none;
            c.n = static_cast<int32_t>(
                agreeing_blocks(s.chain ? *s.chain : none, prompt_chain, static_cast<size_t>(std::max(reach, 0)) / bs) *
                bs);
        }
        c.kind = s.anchor ? point_kind::anchor : point_kind::prefix;
    } else {
        // Hybrid: the recurrent state cannot be cut back, so only a checkpoint restores earlier.
        for (size_t i = 0; i < s.checkpoints.size(); ++i) {
            if (s.checkpoints[i].n_tokens <= reach) {
                c.n = s.checkpoints[i].n_tokens;
                c.kind = s.checkpoints[i].kind;
                c.checkpoint = static_cast<int32_t>(i);
            }
        }
    }
    if (c.n <= 0) {
        return std::nullopt;
    }
    return c;
}

bool prefer(const restore_candidate & a, const restore_candidate & b) {
    if (a.n != b.n) {
        return a.n > b.n;
    }
    if (a.parked != b.parked) {
        return a.parked;
    }
    if ((a.checkpoint < 0) != (b.checkpoint < 0)) {
        return a.checkpoint < 0;
    }
    if (a.recency != b.recency) {
        return a.recency > b.recency;
    }
    return a.id < b.id;
}

bool continues(const restore_settings & rule, int32_t n, int32_t len, int32_t history, bool anchor) {
    return rule.lineage && !anchor && n >= (history >= 0 ? std::min(history, len) : len);
}

restore_search::restore_search(const restore_settings & rule, const tokens & prompt,
                               const std::vector<std::string> & prompt_chain, int32_t longer_than)
    : rule_(rule),
      prompt_(prompt),
      chain_(prompt_chain),
      longer_than_(longer_than),
      limit_(static_cast<int32_t>(prompt.size()) - 1) {}

bool restore_search::worth(int32_t lcp) const {
    // A restore point is never longer than min(common prefix, limit), and states come in
    // descending common prefix: once that bound cannot change the decision, nothing later can.
    const int32_t bound = std::min(lcp, limit_);
    if (bound <= 0 || bound <= longer_than_) {
        return false;
    }
    if (in_session_ && bound < in_session_->n) {
        return false;
    }
    if (!in_session_ && cross_ && bound < cross_->n) {
        return false;
    }
    return !(bound < rule_.min_prefix && (in_session_ || cross_ || bound <= best_short_));
}

void restore_search::offer(uint64_t id, const stored_state & s, int32_t lcp) {
    auto c = best_point(rule_, id, s, prompt_, lcp, chain_);
    if (!c || c->n <= longer_than_) {
        return;
    }
    if (c->n < rule_.min_prefix) {
        best_short_ = std::max(best_short_, c->n);
        return;
    }
    auto & slot = c->same_session ? in_session_ : cross_;
    if (!slot || prefer(*c, *slot)) {
        slot = c;
    }
}

std::optional<restore_candidate> restore_search::chosen() const {
    if (cross_ && (!in_session_ || cross_->n > in_session_->n)) {
        return cross_;
    }
    return in_session_;
}

}  // namespace lineage::cache
