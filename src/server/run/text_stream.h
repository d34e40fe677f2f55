// server::text_stream: the generated text of one request as it grows piece by piece: stop
// strings (the text is cut where one starts), and how much of it is safe to stream: never half
// a UTF-8 character, never the start of what may become a stop string.
// Why: token pieces are raw bytes (a character may span tokens) and a stop string may span
// tokens; a client must never see bytes that are later taken back.
// Thread safety: none; one per request, used by the request's HTTP thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace lineage::server {

/** Length of the longest prefix of `s` that does not end inside a UTF-8 multi-byte sequence
 *  (the bytes after it are the start of a character still missing its continuation bytes).
 *  Invalid bytes are not held back. */
size_t utf8_complete_prefix(std::string_view s);

/** `s` with every invalid UTF-8 byte (stray continuation, bad lead, truncated, overlong or
 *  surrogate sequence, beyond U+10FFFF) replaced by U+FFFD. Prefix-stable: for text that does
 *  not end inside a character, sanitising a longer text extends the sanitised shorter one. */
std::string utf8_sanitize(std::string_view s);

/** Length of the longest suffix of `text` that is a proper prefix of one of `stops`. */
size_t partial_stop_suffix(std::string_view text, const std::vector<std::string> & stops);

class text_stream {
public:
    /** `stops`: strings that end generation; empty strings are ignored. */
    explicit text_stream(std::vector<std::string> stops);

    /** Appends a piece (one token's text). Returns true when this piece completed a stop
     *  string: the text is then cut where the earliest stop string starts, and later appends are
     *  ignored. When the piece in which the stop string starts has only whitespace before it (a
     *  word's leading space: " Hello" with stop "Hello"), that whitespace goes too, as in
     *  OpenAI's documented example ("Hello world" with stop "world" returns "Hello"). */
    bool append(std::string_view piece);

    /** Byte offset in text() where the i-th appended piece starts (pieces wholly cut by a stop
     *  string are not counted). */
    const std::vector<size_t> & piece_starts() const { return starts_; }

    /** The text so far (cut before a matched stop string). */
    const std::string & text() const { return text_; }

    /** Bytes of text() that can be shown now: all of it once stopped; otherwise without a
     *  trailing partial stop string and without a trailing incomplete UTF-8 sequence. */
    size_t stable_length() const;

    bool stopped() const { return stopped_; }
    /** The stop string that matched ("" when none). */
    const std::string & matched_stop() const { return matched_; }

private:
    /** Where a cut at byte `pos` really falls: the start of the piece holding `pos` when that
     *  piece has only whitespace before `pos`, else `pos`. */
    size_t cut_point(size_t pos) const;

    std::vector<std::string> stops_;
    std::string text_;
    std::vector<size_t> starts_;  ///< byte offset of each piece
    size_t max_stop_ = 0;
    bool stopped_ = false;
    std::string matched_;
};

}  // namespace lineage::server
