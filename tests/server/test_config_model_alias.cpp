// Tests of the --model-alias setting (server::config): repeatable, comma lists, the variable,
// duplicates dropped, and its --help line.
#include "server/config.h"

#include "config_args.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using lineage::server::config_test::parse;

namespace {

using names = std::vector<std::string>;

}  // namespace

TEST(ConfigModelAlias, NoneByDefault) {
    auto r = parse({"-m", "x.gguf"});
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_TRUE(r.config->model_aliases.empty());
}

TEST(ConfigModelAlias, RepeatedFlagsAndCommaListsInOrderWithoutDuplicates) {
    auto r = parse({"-m", "x.gguf", "--model-alias", "claude-sonnet-4-5", "--model-alias", "gpt-5, claude-sonnet-4-5 ,o3"});
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_EQ(r.config->model_aliases, (names{"claude-sonnet-4-5", "gpt-5", "o3"}));
}

TEST(ConfigModelAlias, VariableAndFlagPrecedence) {
    auto r = parse({"-m", "x.gguf"}, {{"LINEAGE_MODEL_ALIAS", "a,b"}});
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_EQ(r.config->model_aliases, (names{"a", "b"}));
    r = parse({"-m", "x.gguf", "--model-alias", "c"}, {{"LINEAGE_MODEL_ALIAS", "a,b"}});
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_EQ(r.config->model_aliases, (names{"c"})) << "the flag wins over its variable";
}

TEST(ConfigModelAlias, HelpNamesTheFlagAndVariable) {
    const std::string help = lineage::server::config_help();
    EXPECT_NE(help.find("--model-alias"), std::string::npos);
    EXPECT_NE(help.find("[env LINEAGE_MODEL_ALIAS; default (none)]"), std::string::npos) << help;
}
