// cache::ghost_set: records of entries that left the store; see ghosts.h.
#include "cache/store/ghosts.h"

#include <xxhash.h>

#include <algorithm>

namespace lineage::cache {

std::vector<uint64_t> ghost_set::chain(const std::string & bucket, const tokens & toks, size_t max_blocks) {
    std::vector<uint64_t> out;
    uint64_t h = XXH3_64bits(bucket.data(), bucket.size());
    const size_t n_blocks = std::min(max_blocks, toks.size() / static_cast<size_t>(block_tokens));
    out.reserve(n_blocks);
    for (size_t b = 0; b < n_blocks; ++b) {
        // Each block's hash is seeded with the one before: a chain, so equal hashes mean equal
        // prefixes (up to 64-bit collisions, harmless here: a cause label).
        h = XXH3_64bits_withSeed(toks.data() + b * block_tokens, sizeof(token) * block_tokens, h);
        out.push_back(h);
    }
    return out;
}

void ghost_set::add(const std::string & bucket, const tokens & toks, int32_t uses) {
    if (max_ == 0) {
        return;
    }
    auto c = chain(bucket, toks, max_blocks);
    if (c.empty()) {
        return;
    }
    for (uint64_t h : c) {
        block & b = refs_[h];
        b.refs++;
        b.uses = std::max(b.uses, uses);
    }
    for (size_t i = c.size() > tail_blocks ? c.size() - tail_blocks : 0; i < c.size(); ++i) {
        refs_[c[i]].ends++;
    }
    n_blocks_ += c.size();
    ghosts_.push_back(std::move(c));
    while (ghosts_.size() > max_ || n_blocks_ > max_blocks) {
        pop_oldest();
    }
}

void ghost_set::pop_oldest() {
    const auto & c = ghosts_.front();
    for (size_t i = c.size() > tail_blocks ? c.size() - tail_blocks : 0; i < c.size(); ++i) {
        if (auto it = refs_.find(c[i]); it != refs_.end()) {
            it->second.ends--;
        }
    }
    for (uint64_t h : c) {
        if (auto it = refs_.find(h); it != refs_.end() && --it->second.refs <= 0) {
            refs_.erase(it);
        }
    }
    n_blocks_ -= ghosts_.front().size();
    ghosts_.pop_front();
}

ghost_set::match ghost_set::longest(const std::string & bucket, const tokens & prompt) const {
    match m;
    if (ghosts_.empty()) {
        return m;
    }
    const auto c = chain(bucket, prompt, max_blocks);
    for (uint64_t h : c) {
        const auto it = refs_.find(h);
        if (it == refs_.end()) {
            break;
        }
        m.tokens += block_tokens;
        m.uses = it->second.uses;
        m.whole = it->second.ends > 0;
    }
    return m;
}

void ghost_set::clear() {
    ghosts_.clear();
    refs_.clear();
    n_blocks_ = 0;
}

}  // namespace lineage::cache
