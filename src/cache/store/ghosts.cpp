// cache::ghost_set: records of entries that left the store; see ghosts.h.
#include "cache/store/ghosts.h"

#include <xxhash.h>

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

void ghost_set::add(const std::string & bucket, const tokens & toks) {
    if (max_ == 0) {
        return;
    }
    auto c = chain(bucket, toks, static_cast<size_t>(-1));
    if (c.empty()) {
        return;
    }
    for (uint64_t h : c) {
        refs_[h]++;
    }
    ghosts_.push_back(std::move(c));
    while (ghosts_.size() > max_) {
        for (uint64_t h : ghosts_.front()) {
            if (auto it = refs_.find(h); it != refs_.end() && --it->second <= 0) {
                refs_.erase(it);
            }
        }
        ghosts_.pop_front();
    }
}

int32_t ghost_set::longest(const std::string & bucket, const tokens & prompt) const {
    if (ghosts_.empty()) {
        return 0;
    }
    const auto c = chain(bucket, prompt, static_cast<size_t>(-1));
    int32_t n = 0;
    for (uint64_t h : c) {
        if (refs_.count(h) == 0) {
            break;
        }
        n += block_tokens;
    }
    return n;
}

void ghost_set::clear() {
    ghosts_.clear();
    refs_.clear();
}

}  // namespace lineage::cache
