// cache::media: pseudo-tokens of images and the span clamp (see media.h).
#include "cache/rule/media.h"

#include <xxhash.h>

#include <string>

namespace lineage::cache {

token media_token(std::string_view digest, int32_t i) {
    std::string buf(digest);
    buf.push_back('\0');
    for (int b = 0; b < 4; ++b) {
        buf.push_back(static_cast<char>((static_cast<uint32_t>(i) >> (8 * b)) & 0xff));
    }
    const uint64_t h = XXH3_64bits(buf.data(), buf.size());
    return -static_cast<token>(2 + (h & 0x3fffffffull));
}

int32_t clamp_to_spans(std::span<const token_span> spans, int32_t n) {
    for (const auto & s : spans) {
        if (s.begin < n && n < s.end) {
            return s.begin;
        }
        if (s.begin >= n) {
            break;
        }
    }
    return n;
}

int32_t span_starting_at(std::span<const token_span> spans, int32_t n) {
    for (size_t i = 0; i < spans.size(); ++i) {
        if (spans[i].begin == n) {
            return static_cast<int32_t>(i);
        }
    }
    return -1;
}

}  // namespace lineage::cache
