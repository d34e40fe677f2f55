// Tests of server::text_stream: UTF-8 boundaries and stop strings across token pieces.
#include "server/run/text_stream.h"

#include <gtest/gtest.h>

using namespace lineage::server;

TEST(Utf8, CompletePrefixHoldsBackAnUnfinishedCharacter) {
    const std::string euro = "\xE2\x82\xAC";      // U+20AC, 3 bytes
    const std::string emoji = "\xF0\x9F\x98\x80";  // U+1F600, 4 bytes
    EXPECT_EQ(utf8_complete_prefix(""), 0u);
    EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
    EXPECT_EQ(utf8_complete_prefix("a" + euro), 4u);
    EXPECT_EQ(utf8_complete_prefix("a" + euro.substr(0, 1)), 1u);
    EXPECT_EQ(utf8_complete_prefix("a" + euro.substr(0, 2)), 1u);
    EXPECT_EQ(utf8_complete_prefix(emoji.substr(0, 3)), 0u);
    EXPECT_EQ(utf8_complete_prefix("x" + emoji), 5u);
    EXPECT_EQ(utf8_complete_prefix("\xC3\xA9"), 2u);  // é
    EXPECT_EQ(utf8_complete_prefix("\xC3"), 0u);
    EXPECT_EQ(utf8_complete_prefix("a\x80"), 2u);   // stray continuation byte: not held back
    EXPECT_EQ(utf8_complete_prefix("a\xFF"), 2u);   // invalid byte: not held back
}

TEST(TextStream, SplitCharacterIsShownOnlyWhenComplete) {
    text_stream t({});
    t.append("h\xE2");
    EXPECT_EQ(t.stable_length(), 1u);
    t.append("\x82");
    EXPECT_EQ(t.stable_length(), 1u);
    t.append("\xAC!");
    EXPECT_EQ(t.stable_length(), 5u);
    EXPECT_EQ(t.text(), "h\xE2\x82\xAC!");
}

TEST(TextStream, StopStringInOnePieceCutsTheText) {
    text_stream t({"END"});
    EXPECT_FALSE(t.append("hello "));
    EXPECT_TRUE(t.append("worldEND and more"));
    EXPECT_TRUE(t.stopped());
    EXPECT_EQ(t.text(), "hello world");
    EXPECT_EQ(t.matched_stop(), "END");
    EXPECT_EQ(t.stable_length(), 11u);
    EXPECT_FALSE(t.append("ignored"));
    EXPECT_EQ(t.text(), "hello world");
}

TEST(TextStream, StopStringAcrossPiecesIsHeldBackThenCut) {
    text_stream t({"</answer>"});
    t.append("42 </");
    EXPECT_EQ(t.stable_length(), 3u);  // "</" may start the stop string
    t.append("ans");
    EXPECT_EQ(t.stable_length(), 3u);
    EXPECT_TRUE(t.append("wer>"));
    EXPECT_EQ(t.text(), "42 ");
}

TEST(TextStream, FalseAlarmIsReleased) {
    text_stream t({"</answer>"});
    t.append("a </an");
    EXPECT_EQ(t.stable_length(), 2u);
    t.append("d b");
    EXPECT_FALSE(t.stopped());
    EXPECT_EQ(t.stable_length(), t.text().size());
    EXPECT_EQ(t.text(), "a </and b");
}

TEST(TextStream, EarliestOfSeveralStopsWins) {
    text_stream t({"bbb", "ab"});
    EXPECT_TRUE(t.append("xxabbbb"));
    EXPECT_EQ(t.text(), "xx");
    EXPECT_EQ(t.matched_stop(), "ab");
}

TEST(TextStream, StopSpanningManySingleBytePieces) {
    text_stream t({"\n\nUser:"});
    const std::string s = "Sure.\n\nUser: more";
    bool stopped = false;
    for (char c : s) {
        stopped = t.append(std::string(1, c)) || stopped;
    }
    EXPECT_TRUE(stopped);
    EXPECT_EQ(t.text(), "Sure.");
}

TEST(TextStream, StopInsideAnEarlierPieceIsNotSearchedAgain) {
    // Only new matches are looked for; a match must end inside the new piece.
    text_stream t({"aa"});
    EXPECT_FALSE(t.append("xa"));
    EXPECT_TRUE(t.append("a"));
    EXPECT_EQ(t.text(), "x");
}

TEST(TextStream, StopAfterALeadingSpaceTakesTheSpaceToo) {
    // " Hello" with stop "Hello" used to leave content " "; OpenAI's example ("Hello world",
    // stop "world") returns "Hello": the stop's token goes with its leading space.
    text_stream t({"Hello"});
    EXPECT_TRUE(t.append(" Hello there"));
    EXPECT_EQ(t.text(), "");
    EXPECT_TRUE(t.piece_starts().empty());

    text_stream u({"world"});
    EXPECT_FALSE(u.append("Hello"));
    EXPECT_TRUE(u.append(" world"));
    EXPECT_EQ(u.text(), "Hello");
    EXPECT_EQ(u.piece_starts(), std::vector<size_t>{0});

    // Text before the stop inside the same piece stays ("." of a ".\n\n" token).
    text_stream v({"\n\nUser:"});
    EXPECT_FALSE(v.append("Sure"));
    EXPECT_FALSE(v.append(".\n\n"));
    EXPECT_TRUE(v.append("User: more"));
    EXPECT_EQ(v.text(), "Sure.");
    EXPECT_EQ(v.piece_starts(), (std::vector<size_t>{0, 4}));
}

TEST(TextStream, LeadingSpaceBeforeAPartialStopIsHeldBack) {
    text_stream t({"Hello"});
    t.append("ok");
    t.append(" Hel");
    EXPECT_EQ(t.stable_length(), 2u);  // " " may go with a stop that starts after it
    t.append("icopter");
    EXPECT_EQ(t.stable_length(), t.text().size());
}

TEST(TextStream, EmptyStopStringsAreIgnored) {
    text_stream t({"", "Z"});
    EXPECT_FALSE(t.append("abc"));
    EXPECT_EQ(t.stable_length(), 3u);
}

TEST(TextStream, PartialStopSuffix) {
    EXPECT_EQ(partial_stop_suffix("abc<", {"<stop>"}), 1u);
    EXPECT_EQ(partial_stop_suffix("abc<sto", {"<stop>"}), 4u);
    EXPECT_EQ(partial_stop_suffix("abc", {"<stop>"}), 0u);
    EXPECT_EQ(partial_stop_suffix("ab", {"b", "abc"}), 2u);
    EXPECT_EQ(partial_stop_suffix("", {"x"}), 0u);
}

TEST(Utf8, SanitizeReplacesEveryInvalidByte) {
    const std::string r = "\xEF\xBF\xBD";
    EXPECT_EQ(utf8_sanitize("plain"), "plain");
    EXPECT_EQ(utf8_sanitize("caf\xC3\xA9 \xF0\x9F\x98\x80"), "caf\xC3\xA9 \xF0\x9F\x98\x80");
    EXPECT_EQ(utf8_sanitize("a\x80" "b"), "a" + r + "b");            // stray continuation
    EXPECT_EQ(utf8_sanitize("a\xE2" "b"), "a" + r + "b");            // lead without continuation
    EXPECT_EQ(utf8_sanitize("a\xE2\x82" "b"), "a" + r + r + "b");    // truncated 3-byte sequence
    EXPECT_EQ(utf8_sanitize("\xC0\xAF"), r + r);                     // overlong '/'
    EXPECT_EQ(utf8_sanitize("\xED\xA0\x80"), r + r + r);             // UTF-16 surrogate
    EXPECT_EQ(utf8_sanitize("\xF4\x90\x80\x80"), r + r + r + r);     // beyond U+10FFFF
    EXPECT_EQ(utf8_sanitize("\xFF"), r);
    EXPECT_EQ(utf8_sanitize("end\xE2\x82"), "end" + r + r);          // a final truncated tail
}

TEST(Utf8, SanitizeIsPrefixStableAtCharacterBoundaries) {
    const std::string text = "x\xE2y\xC3\xA9z\x80w";
    std::string prev;
    for (size_t n = 0; n <= text.size(); ++n) {
        const std::string_view prefix = std::string_view(text).substr(0, n);
        const std::string s = utf8_sanitize(prefix.substr(0, utf8_complete_prefix(prefix)));
        EXPECT_EQ(s.compare(0, prev.size(), prev), 0) << n;
        prev = s;
    }
}
