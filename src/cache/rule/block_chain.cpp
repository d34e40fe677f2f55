// cache::block_chain: APC block hash chains; see block_chain.h.
#include "cache/rule/block_chain.h"

#include <algorithm>

namespace lineage::cache {

std::vector<std::string> block_chain(const std::string & root, const tokens & t, int32_t block_size,
                                     size_t max_blocks, hash_algo algo) {
    const size_t bs = static_cast<size_t>(std::max(block_size, 1));
    const size_t n = std::min(t.size() / bs, max_blocks);
    std::vector<std::string> out;
    out.reserve(n);
    std::string parent = root;
    for (size_t i = 0; i < n; ++i) {
        hasher h(algo);
        h.field("lineage:apc-block:v1");
        h.field(parent);
        h.u64(bs);
        for (size_t j = i * bs; j < (i + 1) * bs; ++j) {
            const auto v = static_cast<uint32_t>(t[j]);
            const char b[4] = {static_cast<char>(v & 0xff), static_cast<char>((v >> 8) & 0xff),
                               static_cast<char>((v >> 16) & 0xff), static_cast<char>((v >> 24) & 0xff)};
            h.raw(std::string_view(b, 4));
        }
        parent = h.bytes();
        out.push_back(parent);
    }
    return out;
}

size_t agreeing_blocks(const std::vector<std::string> & a, const std::vector<std::string> & b, size_t limit) {
    const size_t n = std::min({a.size(), b.size(), limit});
    size_t i = 0;
    while (i < n && a[i] == b[i]) {
        ++i;
    }
    return i;
}

}  // namespace lineage::cache
