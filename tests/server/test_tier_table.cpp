// The tier table (src/cache/tier_table.h) as a new tier uses it: the unit tests' in-memory tier
// (tests/cache/mem_tier.h) registered as one more row, with two flags of its own, and nothing
// else. The server's flags take it (--help lists it with its default, the environment sets it, a
// bad value is refused naming the flag); the scheduler's tier_link opens it beside the built-in
// rows, writes an idle entry to it, lists it in stats and resets it; a store after a restart
// restores from it, as from the disk tier. No model runs: the engine's states are
// fake_engine_states; the model file is only fingerprinted, so each test writes a few bytes of its
// own (the unit tests run where no model was fetched, as in the sanitizer build).
#include "cache/tier_table.h"
#include "scheduler/tier_link.h"

#include "../cache/mem_tier.h"
#include "../scheduler/fake_engine_states.h"
#include "config_args.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include <unistd.h>

namespace lineage::server {
namespace {

/** A file that stands in for the model: tier_link fingerprints its bytes and reads nothing else.
 *  Written when made, removed when it goes. */
struct stand_in_model {
    std::string path;
    stand_in_model() {
        path = (std::filesystem::temp_directory_path() /
                ("lineage-tier-table-" + std::to_string(::getpid()) + "-" +
                 ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".gguf"))
                   .string();
        std::ofstream(path, std::ios::binary) << "GGUF stand-in weights";
    }
    ~stand_in_model() { std::filesystem::remove(path); }
};

const std::string model_file = "/models/absent.gguf";  // parse_config does not open it

/** The in-memory tier's own settings: what its flags set, and the tier its row opened. */
struct memory_settings {
    bool on = false;
    uint64_t max_bytes = 1ull << 20;
    cache::fakes::mem_tier * opened = nullptr;
};

/** cache::tier_table() and one more row: the in-memory tier, opened by --cache-memory-tier. */
std::vector<cache::tier_row> table_with_memory_tier(memory_settings & m) {
    std::vector<cache::tier_row> t = cache::tier_table();
    t.push_back(cache::tier_row{
        .name = "memory",
        .flags =
            [&m](cache::flag_sink & add, cache::config &) {
                add.boolean({"--cache-memory-tier", "LINEAGE_CACHE_MEMORY_TIER", "[=BOOL]", "",
                             "keep a tier of the prompt cache in process memory (a test tier)"},
                            m.on);
                add.bytes({"--cache-memory-tier-bytes", "LINEAGE_CACHE_MEMORY_TIER_BYTES", "BYTES", "",
                           "byte cap of the in-memory tier"},
                          m.max_bytes, 1024);
            },
        .named = [&m](const cache::config &) { return m.on; },
        .open =
            [&m](const cache::config &, const std::string &, bool) -> std::unique_ptr<cache::lower_tier> {
                auto t = std::make_unique<cache::fakes::mem_tier>("memory");
                m.opened = t.get();
                return t;
            },
        .off =
            [] {
                cache::tier_report off;
                off.name = "memory";
                off.enabled = false;
                return off;
            },
        .reset_keys = {}});
    return t;
}

cache::tokens seq_tokens(int32_t n) {
    cache::tokens t(static_cast<size_t>(n));
    std::iota(t.begin(), t.end(), 100);
    return t;
}

TEST(TierTable, ARowsFlagsAreTheServersFlags) {
    memory_settings m;
    const auto table = table_with_memory_tier(m);
    const std::string help = config_help("lineage-server", table);
    EXPECT_NE(help.find("--cache-memory-tier"), std::string::npos);
    EXPECT_NE(help.find("LINEAGE_CACHE_MEMORY_TIER_BYTES"), std::string::npos);
    EXPECT_NE(help.find("1MiB"), std::string::npos);  // the default, as the field held it
    // Without the row the server knows no such flag.
    EXPECT_EQ(config_help().find("--cache-memory-tier"), std::string::npos);

    auto r = config_test::parse({"-m", model_file, "--cache-memory-tier", "--cache-memory-tier-bytes", "2MiB"}, {},
                                table);
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_TRUE(m.on);
    EXPECT_EQ(m.max_bytes, 2ull << 20);

    memory_settings from_env;
    const auto table2 = table_with_memory_tier(from_env);
    r = config_test::parse({"-m", model_file}, {{"LINEAGE_CACHE_MEMORY_TIER", "yes"}}, table2);
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_TRUE(from_env.on);

    memory_settings bad;
    const auto table3 = table_with_memory_tier(bad);
    r = config_test::parse({"-m", model_file, "--cache-memory-tier-bytes", "12"}, {}, table3);
    EXPECT_FALSE(r.config);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("--cache-memory-tier-bytes"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(">= 1024"), std::string::npos) << r.output;

    // The built-in rows' flags are there as before (the disk and Redis tiers' own files).
    r = config_test::parse({"-m", model_file, "--cache-disk=false", "--cache-redis", " redis://h:7000/2 "});
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_TRUE(r.config->sched.cache.disk_dir.empty());  // --cache-disk=false clears the folder
    EXPECT_EQ(r.config->sched.cache.redis_url, "redis://h:7000/2");  // checked, stored trimmed
    r = config_test::parse({"-m", model_file, "--cache-redis", "http://h"});
    EXPECT_FALSE(r.config);
    EXPECT_NE(r.output.find("--cache-redis"), std::string::npos) << r.output;
}

TEST(TierTable, TheInMemoryTierAsARowIsOpenedWrittenListedResetAndRestoredFrom) {
    memory_settings m;
    const auto table = table_with_memory_tier(m);
    auto parsed = config_test::parse({"-m", model_file, "--cache-disk=false", "--cache-memory-tier"}, {}, table);
    ASSERT_TRUE(parsed.config) << parsed.output;
    cache::config cfg = parsed.config->sched.cache;
    cfg.ram_bytes = 1 << 20;
    cfg.min_prefix = 4;
    cfg.disk_idle_s = 0;  // write an idle entry at once

    cache::store st(cfg, /*hybrid=*/true);
    scheduler::fakes::fake_engine_states states(true);
    const stand_in_model model;
    scheduler::tier_link link(st, states, cfg, model.path, /*hybrid=*/true, table);
    ASSERT_TRUE(link.on());
    ASSERT_NE(m.opened, nullptr);
    const auto ready = link.readiness();
    ASSERT_EQ(ready.size(), 1u);  // the only tier the flags name
    EXPECT_EQ(ready[0].first, "memory");

    // An idle parked entry is written to it.
    const cache::key k{"b", "s"};
    const cache::tokens toks = seq_tokens(40);
    states.decode(1, 40);
    cache::commit_input in;
    in.k = k;
    in.toks = toks;
    in.seq = 1;
    in.device_bytes = states.state_size(1, false);
    ASSERT_TRUE(st.commit(std::move(in), 1.0));
    link.housekeeping(/*idle=*/true, 10.0);
    m.opened->drain();
    ASSERT_EQ(m.opened->held().size(), 1u);
    EXPECT_EQ(m.opened->held().begin()->second.toks, toks);
    link.housekeeping(false, 11.0);  // its completion reaches the store
    ASSERT_EQ(st.entries().size(), 1u);
    EXPECT_EQ(st.entries()[0].tier_copy, m.opened->held().begin()->first);

    // Stats list every row: the built-in tiers off, then this one.
    cache::stats s;
    link.report(s);
    std::vector<std::string> names;
    for (const auto & t : s.tiers) {
        names.push_back(t.name);
    }
    EXPECT_EQ(names, (std::vector<std::string>{"disk", "redis", "memory"}));
    EXPECT_FALSE(s.tiers[0].enabled);
    EXPECT_TRUE(s.tiers[2].enabled);

    // A store after a restart restores the conversation from it.
    cache::store st2(cfg, true);
    st2.attach_tier(m.opened, m.opened->traits());
    cache::tokens prompt = toks;
    prompt.push_back(7);
    prompt.push_back(8);
    auto p = st2.plan(k, prompt, {}, 12.0);
    EXPECT_EQ(p.op, cache::restore_op::load_tier) << p.reason;
    EXPECT_EQ(p.tier_name, "memory");
    EXPECT_EQ(p.n_restore, 40);
    st2.abandon(p, 0);
    st2.detach_tiers();

    // Reset counts its copies by name.
    cache::reset_result r;
    link.reset(r, std::nullopt);
    ASSERT_EQ(r.tiers.count("memory"), 1u);
    EXPECT_EQ(r.tiers.at("memory").copies, 1);
    EXPECT_TRUE(m.opened->held().empty());
}

TEST(TierTable, ARowTheFlagsDoNotNameReportsItsFiguresOff) {
    memory_settings m;  // --cache-memory-tier not given
    const auto table = table_with_memory_tier(m);
    cache::config cfg;
    cfg.disk_dir.clear();
    cache::store st(cfg, true);
    scheduler::fakes::fake_engine_states states(true);
    const stand_in_model model;
    scheduler::tier_link link(st, states, cfg, model.path, true, table);
    EXPECT_FALSE(link.on());
    EXPECT_EQ(m.opened, nullptr);
    cache::stats s;
    link.report(s);
    ASSERT_EQ(s.tiers.size(), 3u);
    EXPECT_EQ(s.tiers[2].name, "memory");
    EXPECT_FALSE(s.tiers[2].enabled);
}

}  // namespace
}  // namespace lineage::server
