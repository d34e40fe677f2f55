// Tests of the server::config settings added with the Responses and completions endpoints:
// where the stored responses live (next to the disk tier, in memory without it), their TTL
// and byte cap, and --n-predict.
#include "server/config.h"

#include "config_args.h"

#include <gtest/gtest.h>

using lineage::server::config_test::parse;

TEST(ConfigResponses, StoreLivesInTheCacheDirByDefault) {
    auto r = parse({"-m", "x.gguf", "--cache-dir", "/var/cache/l"});
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_EQ(r.config->responses_store, "/var/cache/l/responses.sqlite");
    EXPECT_DOUBLE_EQ(r.config->responses_ttl_s, 2592000.0);
    EXPECT_EQ(r.config->responses_capacity_bytes, 1ull << 30);
    EXPECT_EQ(r.config->n_predict, -1);
    auto home = parse({"-m", "x.gguf"}, {{"HOME", "/home/u"}});
    ASSERT_TRUE(home.config) << home.output;
    EXPECT_EQ(home.config->responses_store, "/home/u/.cache/lineage/prompt-cache/responses.sqlite");
}

TEST(ConfigResponses, InMemoryWithoutTheDiskTierOrWhenAsked) {
    auto off = parse({"-m", "x.gguf", "--cache-disk=false", "--cache-dir", "/var/cache/l"});
    ASSERT_TRUE(off.config) << off.output;
    EXPECT_EQ(off.config->responses_store, ":memory:");
    auto mem = parse({"-m", "x.gguf", "--cache-dir", "/var/cache/l", "--responses-store", "memory"});
    ASSERT_TRUE(mem.config) << mem.output;
    EXPECT_EQ(mem.config->responses_store, ":memory:");
    auto explicit_path = parse({"-m", "x.gguf", "--cache-disk=false"}, {{"LINEAGE_RESPONSES_STORE", "/srv/r.sqlite"}});
    ASSERT_TRUE(explicit_path.config) << explicit_path.output;
    EXPECT_EQ(explicit_path.config->responses_store, "/srv/r.sqlite");
}

TEST(ConfigResponses, TtlCapAndNPredict) {
    auto r = parse({"-m", "x.gguf", "--responses-ttl-s", "60", "--responses-capacity-bytes", "8MiB", "-n", "128"});
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_DOUBLE_EQ(r.config->responses_ttl_s, 60.0);
    EXPECT_EQ(r.config->responses_capacity_bytes, 8ull << 20);
    EXPECT_EQ(r.config->n_predict, 128);
    auto bad = parse({"-m", "x.gguf", "--responses-ttl-s", "0"});
    EXPECT_FALSE(bad.config);
    EXPECT_NE(bad.output.find("--responses-ttl-s '0': expected a number of seconds > 0"), std::string::npos) << bad.output;
    auto bad_cap = parse({"-m", "x.gguf"}, {{"LINEAGE_RESPONSES_CAPACITY_BYTES", "lots"}});
    EXPECT_FALSE(bad_cap.config);
    EXPECT_NE(bad_cap.output.find("LINEAGE_RESPONSES_CAPACITY_BYTES='lots' (environment)"), std::string::npos);
    EXPECT_FALSE(parse({"-m", "x.gguf", "--n-predict", "-2"}).config);
}
