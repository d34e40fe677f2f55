// Tests of server::delta_pump: the deltas a writer gets are exactly the stable text, once each:
// nothing of a split UTF-8 character or of a possible stop string before it is settled, nothing
// twice, the rest at finish(); a stop string ends it. Plain-content parsing
// (engine::chat_parse_params' default); the dialect tests cover reasoning and tool calls.
#include "server/run/delta_pump.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace lineage::server {
namespace {

std::string content_of(const std::vector<engine::chat_delta> & ds) {
    std::string out;
    for (const auto & d : ds) {
        out += d.content;
    }
    return out;
}

TEST(DeltaPump, EachStableByteIsGivenOnceAndTheRestAtFinish) {
    delta_pump p({"</answer>"}, engine::chat_parse_params());
    EXPECT_TRUE(p.take().empty()) << "nothing generated yet";
    EXPECT_FALSE(p.add("Hello"));
    EXPECT_EQ(content_of(p.take()), "Hello");
    EXPECT_EQ(p.parsed(), 5u);
    EXPECT_TRUE(p.take().empty()) << "nothing new: no delta, nothing parsed again";
    EXPECT_FALSE(p.add(" w\xC3"));  // the first byte of a two-byte character
    EXPECT_EQ(content_of(p.take()), " w");
    EXPECT_FALSE(p.add("\xA9 </"));  // the character completes; "</" may start the stop string
    EXPECT_EQ(content_of(p.take()), "\xC3\xA9 ");
    EXPECT_EQ(p.parsed(), 10u);
    EXPECT_FALSE(p.add("b>"));  // "</b>" is not the stop string: it is text after all
    EXPECT_EQ(content_of(p.take()), "</b>");
    EXPECT_EQ(content_of(p.finish()), "");
    EXPECT_EQ(p.message().content, "Hello w\xC3\xA9 </b>");
}

TEST(DeltaPump, AStopStringEndsTheTextAndFinishGivesWhatWasHeldBack) {
    delta_pump p({"</answer>"}, engine::chat_parse_params());
    EXPECT_FALSE(p.add("42 </ans"));
    EXPECT_EQ(content_of(p.take()), "42 ");
    EXPECT_TRUE(p.add("wer> and more"));
    EXPECT_TRUE(p.text().stopped());
    EXPECT_EQ(p.text().matched_stop(), "</answer>");
    EXPECT_EQ(content_of(p.finish()), "") << "the stop string and what follows are never given";
    EXPECT_EQ(p.message().content, "42 ");
}

TEST(DeltaPump, FinishGivesATextEndingInsideAPossibleStopString) {
    delta_pump p({"END"}, engine::chat_parse_params());
    EXPECT_FALSE(p.add("the EN"));
    EXPECT_EQ(content_of(p.take()), "the ");
    EXPECT_EQ(content_of(p.finish()), "EN") << "generation ended: held-back bytes are text";
    EXPECT_EQ(p.parsed(), 6u);
    EXPECT_EQ(p.message().content, "the EN");
}

}  // namespace
}  // namespace lineage::server
