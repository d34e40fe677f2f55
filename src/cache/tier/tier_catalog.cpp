// cache::tier_catalog: per-bucket index of the tier-2 files; see tier_catalog.h.
#include "cache/tier/tier_catalog.h"

#include "cache/rule/block_chain.h"

#include <algorithm>
#include <stdexcept>

namespace lineage::cache {

void tier_catalog::add(file f) {
    if (rule_.apc_on()) {
        f.chain = block_chain(f.bucket, f.toks, rule_.apc_block_size, static_cast<size_t>(-1), rule_.apc_hash);
    }
    by_bucket_[f.bucket].insert(f.toks, f.id);
    const copy_id id = f.id;
    files_.insert_or_assign(id, std::move(f));
}

std::optional<tier_catalog::file> tier_catalog::remove(copy_id id) {
    auto it = files_.find(id);
    if (it == files_.end()) {
        return std::nullopt;
    }
    if (auto t = by_bucket_.find(it->second.bucket); t != by_bucket_.end()) {
        t->second.erase(it->second.toks, id);
        if (t->second.empty()) {
            by_bucket_.erase(t);
        }
    }
    file out = std::move(it->second);
    files_.erase(it);
    return out;
}

tier_catalog::file * tier_catalog::find(copy_id id) {
    auto it = files_.find(id);
    return it == files_.end() ? nullptr : &it->second;
}

void tier_catalog::clear() {
    files_.clear();
    by_bucket_.clear();
}

std::optional<tier_candidate> tier_catalog::best(const std::string & bucket, const std::string & session,
                                                 const tokens & prompt, int32_t longer_than) const {
    auto t = by_bucket_.find(bucket);
    if (t == by_bucket_.end() || prompt.empty()) {
        return std::nullopt;
    }
    const auto chain = rule_.prompt_chain(bucket, prompt);
    restore_search search(rule_, prompt, chain, longer_than);
    t->second.match(prompt, [&](uint64_t id, int32_t lcp) {
        if (!search.worth(lcp)) {
            return false;
        }
        const file & f = files_.at(id);
        search.offer(
            id,
            stored_state{f.toks, f.checkpoints, f.anchor, f.history, f.session == session, false, f.last_use, &f.chain},
            lcp);
        return true;
    });
    const auto c = search.chosen();
    if (!c) {
        return std::nullopt;
    }
    const file & f = files_.at(c->id);
    tier_candidate d;
    d.id = f.id;
    d.n = c->n;
    d.kind = c->kind;
    d.source_tokens = static_cast<int32_t>(f.toks.size());
    d.history = f.history;
    d.anchor = f.anchor;
    d.same_session = c->same_session;
    d.bytes = f.bytes;
    return d;
}

void tier_catalog::check_invariants() const {
    size_t in_tries = 0;
    for (const auto & [bucket, t] : by_bucket_) {
        t.check_invariants();
        in_tries += t.size();
    }
    if (in_tries != files_.size()) {
        throw std::logic_error("disk catalog invariant broken: the tries hold " + std::to_string(in_tries) +
                               " ids for " + std::to_string(files_.size()) + " files");
    }
    for (const auto & [id, f] : files_) {
        auto t = by_bucket_.find(f.bucket);
        const auto ids = t == by_bucket_.end() ? std::vector<uint64_t>{} : t->second.exact(f.toks);
        if (std::find(ids.begin(), ids.end(), id) == ids.end()) {
            throw std::logic_error("disk catalog invariant broken: file " + std::to_string(id) +
                                   " is not indexed under its tokens");
        }
        const auto n = static_cast<int32_t>(f.toks.size());
        bool sound = id == f.id && id >= 1 && id <= max_copy_id && n >= 1 && f.history >= -1 && f.history <= n &&
                     f.bytes > 0;
        for (size_t i = 0; sound && i < f.checkpoints.size(); ++i) {
            const int32_t c = f.checkpoints[i].n_tokens;
            sound = c >= 1 && c < n && (i == 0 || f.checkpoints[i - 1].n_tokens < c);
        }
        if (!sound) {
            throw std::logic_error("disk catalog invariant broken: file " + std::to_string(id) +
                                   " has a row the index loader would refuse");
        }
        if (f.chain.empty() == (rule_.apc_on() && f.toks.size() >= static_cast<size_t>(rule_.apc_block_size))) {
            throw std::logic_error("disk catalog invariant broken: APC chain of file " + std::to_string(id));
        }
    }
}

}  // namespace lineage::cache
