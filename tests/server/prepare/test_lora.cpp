// Tests of server::lora_registry: the lora_id of the cache key (contents and scales, "" for
// no adapter), --lora / --lora-scaled values, a request's selection, POST /lora-adapters
// (scales, reload of a changed file, rollback when the engine refuses it), the config flags.
#include "server/config.h"
#include "server/http/json_fields.h"
#include "server/prepare/lora_registry.h"

#include "config_args.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

using namespace lineage::server;
using lineage::cache::hash_algo;
using lineage::server::config_test::parse;

namespace {

std::string temp_file(const std::string & tag, const std::string & content) {
    const std::string path = ::testing::TempDir() + "lora-" + tag + "-" + std::to_string(getpid()) + ".gguf";
    std::ofstream(path, std::ios::binary) << content;
    return path;
}

}  // namespace

TEST(LoraId, EmptyForNoAdapterOrAllZeroScales) {
    EXPECT_EQ(lora_id_of({}, {}, hash_algo::sha256), "");
    EXPECT_EQ(lora_id_of({"d1", "d2"}, {0.0f, 0.0f}, hash_algo::sha256), "");
}

TEST(LoraId, DependsOnContentAndScaleOnly) {
    const std::string a = lora_id_of({"d1", "d2"}, {1.0f, 0.0f}, hash_algo::sha256);
    EXPECT_EQ(a.size(), 64u);
    EXPECT_EQ(a, lora_id_of({"d1", "other"}, {1.0f, 0.0f}, hash_algo::sha256));  // a zero-scale adapter is not in it
    EXPECT_NE(a, lora_id_of({"d1x", "d2"}, {1.0f, 0.0f}, hash_algo::sha256));    // content
    EXPECT_NE(a, lora_id_of({"d1", "d2"}, {0.5f, 0.0f}, hash_algo::sha256));     // scale
    EXPECT_NE(a, lora_id_of({"d1", "d2"}, {1.0f, 1.0f}, hash_algo::sha256));     // another adapter on
    EXPECT_EQ(lora_id_of({"d1"}, {1.0f}, hash_algo::xxh3).size(), 32u);
}

TEST(LoraSpecs, ParsesBothForms) {
    std::vector<lora_spec> out;
    EXPECT_TRUE(parse_lora_specs("a.gguf,b.gguf", false, out).is_ok());
    EXPECT_TRUE(parse_lora_specs("c.gguf:0.5,d.gguf,0.25", true, out).is_ok());
    ASSERT_EQ(out.size(), 4u);
    EXPECT_EQ(out[0].path, "a.gguf");
    EXPECT_EQ(out[0].scale, 1.0f);
    EXPECT_EQ(out[2].path, "c.gguf");
    EXPECT_EQ(out[2].scale, 0.5f);
    EXPECT_EQ(out[3].path, "d.gguf");
    EXPECT_EQ(out[3].scale, 0.25f);
    EXPECT_FALSE(parse_lora_specs("e.gguf", true, out).is_ok());
    EXPECT_FALSE(parse_lora_specs("e.gguf:x", true, out).is_ok());
}

TEST(LoraConfig, FlagsGiveIdsInOrderAndPaths) {
    auto r = parse({"-m", "m.gguf", "--lora-scaled", "s.gguf", "0.5", "--lora", "a.gguf", "--lora", "b.gguf",
                    "--lora-scaled", "t.gguf:2"});
    ASSERT_TRUE(r.config) << r.output;
    const auto & l = r.config->loras;
    ASSERT_EQ(l.size(), 4u);
    EXPECT_EQ(l[0].path, "a.gguf");
    EXPECT_EQ(l[1].path, "b.gguf");
    EXPECT_EQ(l[2].path, "s.gguf");
    EXPECT_EQ(l[2].scale, 0.5f);
    EXPECT_EQ(l[3].path, "t.gguf");
    EXPECT_EQ(l[3].scale, 2.0f);
    EXPECT_EQ(r.config->sched.lora_paths, (std::vector<std::string>{"a.gguf", "b.gguf", "s.gguf", "t.gguf"}));
    auto bad = parse({"-m", "m.gguf", "--lora-scaled", "s.gguf:zz"});
    EXPECT_FALSE(bad.config);
    EXPECT_NE(bad.output.find("--lora-scaled"), std::string::npos) << bad.output;
}

TEST(LoraConfig, EnvironmentVariables) {
    const char * argv[] = {"lineage-server", "-m", "m.gguf"};
    auto r = parse_config(3, argv, [](const char * name) -> const char * {
        if (std::string(name) == "LINEAGE_LORA") {
            return "a.gguf,b.gguf";
        }
        if (std::string(name) == "LINEAGE_LORA_SCALED") {
            return "s.gguf:0.25";
        }
        return nullptr;
    });
    ASSERT_TRUE(r.config) << r.output;
    ASSERT_EQ(r.config->loras.size(), 3u);
    EXPECT_EQ(r.config->loras[1].path, "b.gguf");
    EXPECT_EQ(r.config->loras[2].path, "s.gguf");
    EXPECT_EQ(r.config->loras[2].scale, 0.25f);
}

TEST(LoraList, ParsesAndRejects) {
    const auto l = parse_lora_list(json::parse(R"([{"id": 1, "scale": 0.5}, {"id": 0}])"), "lora");
    ASSERT_EQ(l.size(), 2u);
    EXPECT_EQ(l[0].id, 1);
    EXPECT_EQ(l[0].scale, 0.5f);
    EXPECT_EQ(l[1].scale, 0.0f);
    try {
        parse_lora_list(json::parse(R"([{"id": -1}])"), "lora");
        FAIL() << "a negative id was accepted";
    } catch (const fields::bad_field & e) {
        EXPECT_EQ(e.err.param, "lora[0].id");
    }
    EXPECT_THROW(parse_lora_list(json::parse(R"({"id": 0})"), "lora"), fields::bad_field);
    EXPECT_THROW(parse_lora_list(json::parse(R"([{"scale": 1}])"), "lora"), fields::bad_field);
}

TEST(LoraRegistry, SelectionUsesGlobalOrRequestedScales) {
    const std::string a = temp_file("a", "adapter A");
    const std::string b = temp_file("b", "adapter B");
    lora_registry reg({{a, 1.0f}, {b, 0.0f}}, hash_algo::sha256);
    lora_selection g;
    ASSERT_FALSE(reg.select({}, g));
    EXPECT_EQ(g.scales, (std::vector<float>{1.0f, 0.0f}));
    EXPECT_EQ(g.lora_id.size(), 64u);
    lora_selection r;
    ASSERT_FALSE(reg.select({{1, 1.0f}}, r));  // adapter 0 not named: 0
    EXPECT_EQ(r.scales, (std::vector<float>{0.0f, 1.0f}));
    EXPECT_NE(r.lora_id, g.lora_id);
    lora_selection none;
    ASSERT_FALSE(reg.select({{0, 0.0f}}, none));
    EXPECT_TRUE(none.scales.empty());
    EXPECT_EQ(none.lora_id, "");
    lora_selection bad;
    auto err = reg.select({{2, 1.0f}}, bad);
    ASSERT_TRUE(err);
    EXPECT_EQ(err->status, 400);
    EXPECT_EQ(err->param, "lora");
    std::remove(a.c_str());
    std::remove(b.c_str());
}

TEST(LoraRegistry, ApplyReloadsOnlyChangedFilesAndChangesTheId) {
    const std::string a = temp_file("ra", "adapter A");
    lora_registry reg({{a, 1.0f}}, hash_algo::sha256);
    lora_selection before;
    ASSERT_FALSE(reg.select({}, before));
    std::vector<std::pair<size_t, uint64_t>> calls;
    auto reload = [&](size_t id, uint64_t epoch) {
        calls.emplace_back(id, epoch);
        return lineage::util::status::ok();
    };
    std::vector<int64_t> reloaded;
    ASSERT_FALSE(reg.apply({{0, 1.0f}}, reload, reloaded));
    EXPECT_TRUE(calls.empty());  // unchanged file: no reload
    EXPECT_TRUE(reloaded.empty());
    lora_selection same;
    ASSERT_FALSE(reg.select({}, same));
    EXPECT_EQ(same.lora_id, before.lora_id);
    EXPECT_EQ(same.epoch, before.epoch);

    std::ofstream(a, std::ios::binary) << "adapter A, retrained";
    ASSERT_FALSE(reg.apply({{0, 1.0f}}, reload, reloaded));
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0].first, 0u);
    EXPECT_EQ(reloaded, (std::vector<int64_t>{0}));
    lora_selection after;
    ASSERT_FALSE(reg.select({}, after));
    EXPECT_NE(after.lora_id, before.lora_id);
    EXPECT_EQ(after.epoch, calls[0].second);
    EXPECT_NE(after.epoch, before.epoch);

    // POST with no entry: every scale 0, the base model's key.
    ASSERT_FALSE(reg.apply({}, reload, reloaded));
    lora_selection off;
    ASSERT_FALSE(reg.select({}, off));
    EXPECT_EQ(off.lora_id, "");
    EXPECT_EQ(reg.list()[0].scale, 0.0f);
    std::remove(a.c_str());
}

TEST(LoraRegistry, RefusedReloadKeepsTheOldContent) {
    const std::string a = temp_file("fa", "adapter A");
    lora_registry reg({{a, 1.0f}}, hash_algo::sha256);
    lora_selection before;
    ASSERT_FALSE(reg.select({}, before));
    std::ofstream(a, std::ios::binary) << "not an adapter";
    std::vector<int64_t> reloaded;
    auto err = reg.apply(
        {{0, 1.0f}}, [](size_t, uint64_t) { return lineage::util::status::error("bad file"); }, reloaded);
    ASSERT_TRUE(err);
    EXPECT_EQ(err->status, 500);
    EXPECT_NE(err->message.find("bad file"), std::string::npos);
    lora_selection after;
    ASSERT_FALSE(reg.select({}, after));
    EXPECT_EQ(after.lora_id, before.lora_id);
    EXPECT_EQ(after.epoch, before.epoch);
    EXPECT_THROW(lora_registry({{a + ".missing", 1.0f}}, hash_algo::sha256), std::runtime_error);
    std::remove(a.c_str());
}
