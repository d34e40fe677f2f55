// server::text_stream: stop strings and UTF-8 boundaries over a growing text.
#include "server/run/text_stream.h"

#include <algorithm>
#include <cctype>

namespace lineage::server {

size_t utf8_complete_prefix(std::string_view s) {
    // Look back at most 3 bytes for the lead byte of the last character.
    const size_t n = s.size();
    for (size_t back = 1; back <= 4 && back <= n; ++back) {
        const auto c = static_cast<unsigned char>(s[n - back]);
        if ((c & 0xC0) == 0x80) {
            continue;  // continuation byte: keep looking for the lead
        }
        size_t need = 1;
        if ((c & 0xE0) == 0xC0) {
            need = 2;
        } else if ((c & 0xF0) == 0xE0) {
            need = 3;
        } else if ((c & 0xF8) == 0xF0) {
            need = 4;
        }
        return back < need ? n - back : n;
    }
    return n;  // only continuation bytes: invalid, not held back
}

namespace {

// Length of the valid UTF-8 sequence at the start of `s` (RFC 3629), or 0 when invalid.
size_t valid_sequence(std::string_view s) {
    const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
    const unsigned char c = b(0);
    if (c < 0x80) {
        return 1;
    }
    size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        lo = c == 0xE0 ? 0xA0 : 0x80;   // no overlongs
        hi = c == 0xED ? 0x9F : 0xBF;   // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        lo = c == 0xF0 ? 0x90 : 0x80;   // no overlongs
        hi = c == 0xF4 ? 0x8F : 0xBF;   // <= U+10FFFF
    } else {
        return 0;
    }
    if (s.size() < need || b(1) < lo || b(1) > hi) {
        return 0;
    }
    for (size_t i = 2; i < need; ++i) {
        if ((b(i) & 0xC0) != 0x80) {
            return 0;
        }
    }
    return need;
}

}  // namespace

std::string utf8_sanitize(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        const size_t n = valid_sequence(s.substr(i));
        if (n == 0) {
            out += "\xEF\xBF\xBD";
            ++i;
        } else {
            out.append(s.substr(i, n));
            i += n;
        }
    }
    return out;
}

size_t partial_stop_suffix(std::string_view text, const std::vector<std::string> & stops) {
    size_t best = 0;
    for (const auto & stop : stops) {
        const size_t max_k = std::min(stop.size() - (stop.empty() ? 0 : 1), text.size());
        for (size_t k = max_k; k > best; --k) {
            if (text.substr(text.size() - k) == std::string_view(stop).substr(0, k)) {
                best = k;
                break;
            }
        }
    }
    return best;
}

text_stream::text_stream(std::vector<std::string> stops) {
    for (auto & s : stops) {
        if (!s.empty()) {
            max_stop_ = std::max(max_stop_, s.size());
            stops_.push_back(std::move(s));
        }
    }
}

bool text_stream::append(std::string_view piece) {
    if (stopped_) {
        return false;
    }
    const size_t old_size = text_.size();
    starts_.push_back(old_size);
    text_.append(piece);
    if (stops_.empty() || piece.empty()) {
        return false;
    }
    // A new match must end inside the new piece, so it starts at most max_stop_ - 1 bytes
    // before it.
    const size_t from = old_size > max_stop_ - 1 ? old_size - (max_stop_ - 1) : 0;
    size_t best = std::string::npos;
    for (const auto & s : stops_) {
        const size_t pos = text_.find(s, from);
        if (pos != std::string::npos && pos < best) {
            best = pos;
            matched_ = s;
        }
    }
    if (best == std::string::npos) {
        return false;
    }
    const size_t cut = cut_point(best);
    text_.resize(cut);
    while (!starts_.empty() && starts_.back() >= cut) {
        starts_.pop_back();  // pieces that start at or after the cut are gone
    }
    stopped_ = true;
    return true;
}

size_t text_stream::cut_point(size_t pos) const {
    // The piece holding byte `pos`: the last one that starts at or before it.
    auto it = std::upper_bound(starts_.begin(), starts_.end(), pos);
    if (it == starts_.begin()) {
        return pos;
    }
    const size_t start = *std::prev(it);
    for (size_t i = start; i < pos; ++i) {
        if (!std::isspace(static_cast<unsigned char>(text_[i]))) {
            return pos;
        }
    }
    return start;
}

size_t text_stream::stable_length() const {
    if (stopped_) {
        return text_.size();
    }
    const size_t partial = partial_stop_suffix(text_, stops_);
    const size_t keep = partial > 0 ? cut_point(text_.size() - partial) : text_.size();
    return utf8_complete_prefix(std::string_view(text_).substr(0, keep));
}

}  // namespace lineage::server
