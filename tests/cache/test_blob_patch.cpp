// Unit tests of cache::blob_patch: a patch gives its whole blob back byte for byte over the base
// it was made over, and refuses runs or bases it cannot have been made of.
#include "cache/blob_patch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace lineage::cache {
namespace {

blob bytes_from(uint8_t first, size_t n) {
    blob b(n);
    std::iota(b.begin(), b.end(), first);
    return b;
}

TEST(BlobPatch, GivesTheWholeBlobBackAndHoldsOnlyWhatTheBaseLacks) {
    const blob base = bytes_from(1, 1000);
    // whole: 10 own bytes, base[100, 400), 5 own bytes, base[400, 500) (contiguous: one op),
    // base[0, 50), 20 own bytes.
    blob whole(485, 0x5a);
    std::copy(base.begin() + 100, base.begin() + 400, whole.begin() + 10);
    std::copy(base.begin() + 400, base.begin() + 500, whole.begin() + 315);
    std::copy(base.begin(), base.begin() + 50, whole.begin() + 415);
    const std::vector<shared_run> runs{{10, 100, 300}, {315, 400, 100}, {415, 0, 50}};
    const auto patch = make_patch(whole, runs);
    ASSERT_TRUE(patch);
    EXPECT_EQ(patched_size(*patch), whole.size());
    // 35 literal bytes, 4 ops of 24 bytes and a 24-byte header.
    EXPECT_EQ(patch->size(), 35u + 4 * 24 + 24);
    const auto back = apply_patch(base, *patch);
    ASSERT_TRUE(back);
    EXPECT_EQ(*back, whole);
}

TEST(BlobPatch, AWholeBlobOfTheBaseAloneIsOneOp) {
    const blob base = bytes_from(7, 300);
    const auto patch = make_patch(base, {{0, 0, 100}, {100, 100, 200}});
    ASSERT_TRUE(patch);
    EXPECT_EQ(patch->size(), 24u + 24);
    EXPECT_EQ(*apply_patch(base, *patch), base);
}

TEST(BlobPatch, RunsOutOfOrderOrPastTheBlobAreRefused) {
    const blob whole = bytes_from(0, 100);
    EXPECT_FALSE(make_patch(whole, {{50, 0, 10}, {40, 0, 5}}));
    EXPECT_FALSE(make_patch(whole, {{95, 0, 10}}));
    EXPECT_TRUE(make_patch(whole, {{90, 0, 10}}));
}

TEST(BlobPatch, ABaseTooShortOrAMalformedPatchDoesNotApply) {
    const blob base = bytes_from(1, 500);
    const blob whole(base.begin() + 100, base.begin() + 400);
    const auto patch = make_patch(whole, {{0, 100, 300}});
    ASSERT_TRUE(patch);
    EXPECT_FALSE(apply_patch(blob(200, 0), *patch)) << "names bytes past this base's end";
    EXPECT_FALSE(apply_patch(base, whole)) << "no patch";
    EXPECT_EQ(patched_size(whole), 0u);
    blob cut = *patch;
    cut.resize(cut.size() - 8);
    EXPECT_FALSE(apply_patch(base, cut)) << "a truncated op table";
}

}  // namespace
}  // namespace lineage::cache
