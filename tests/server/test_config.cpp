// Tests of server::config: flags, environment variables, precedence, rejected values.
#include "server/config.h"

#include "config_args.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using lineage::server::parse_bytes;
using lineage::server::config_test::env_vars;
using lineage::server::config_test::parse;

TEST(Config, DefaultsWithOnlyAModel) {
    auto r = parse({"-m", "/models/x.gguf"});
    ASSERT_TRUE(r.config) << r.output;
    const auto & c = *r.config;
    EXPECT_EQ(c.model_path, "/models/x.gguf");
    EXPECT_EQ(c.host, "127.0.0.1");
    EXPECT_EQ(c.port, 8080);
    EXPECT_EQ(c.sched.n_parallel, 4);
    EXPECT_EQ(c.sched.n_ctx, 0);
    EXPECT_EQ(c.sched.n_batch, 512);
    EXPECT_EQ(c.sched.n_ubatch, 512);
    EXPECT_EQ(c.sched.n_threads, 0);
    EXPECT_TRUE(c.sched.cache.enabled);
    EXPECT_TRUE(c.sched.cache.lineage);
    EXPECT_EQ(c.sched.cache.min_prefix, 32);
    EXPECT_EQ(c.sched.cache.max_entries, 1024);
    EXPECT_DOUBLE_EQ(c.sched.cache.ttl_s, 3600);
    EXPECT_EQ(c.sched.cache.guard_distance, 16);
    EXPECT_EQ(c.sched.cache.guard_min_suffix, 256);
    EXPECT_EQ(c.sched.cache.divergence_min_gain, 256);
    EXPECT_EQ(c.sched.cache.anchor_slack, 2);
    EXPECT_EQ(c.sched.cache.max_checkpoints, 4);
    EXPECT_EQ(c.sched.cache.max_anchors, 16);
    EXPECT_EQ(c.sched.cache.max_anchor_bytes, 16ull << 30);
    EXPECT_EQ(c.log_level, "info");
    EXPECT_EQ(c.api_key, "");
    EXPECT_EQ(c.max_body_bytes, 64ull << 20);
    EXPECT_FALSE(c.metrics);
    EXPECT_FALSE(c.sched.cache.trace);
}

TEST(Config, RamReleaseIsAutoUnlessGivenAndRefusesOtherWords) {
    auto r = parse({"-m", "m.gguf"});
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_DOUBLE_EQ(r.config->sched.cache.ram_release_s, -1);  // auto: the scheduler resolves it
    for (const char * v : {"auto", "-1"}) {
        r = parse({"-m", "m.gguf", "--cache-ram-release-s", v});
        ASSERT_TRUE(r.config) << v << ": " << r.output;
        EXPECT_DOUBLE_EQ(r.config->sched.cache.ram_release_s, -1) << v;
    }
    r = parse({"-m", "m.gguf", "--cache-ram-release-s", "0"});
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_DOUBLE_EQ(r.config->sched.cache.ram_release_s, 0);
    r = parse({"-m", "m.gguf", "--cache-ram-release-s", "2.5"});
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_DOUBLE_EQ(r.config->sched.cache.ram_release_s, 2.5);
    for (const char * v : {"soon", "-2", "nan"}) {
        r = parse({"-m", "m.gguf", "--cache-ram-release-s", v});
        EXPECT_FALSE(r.config) << v;
        EXPECT_NE(r.output.find("expected a number of seconds >= 0, or auto"), std::string::npos) << r.output;
    }
}

TEST(Config, FlagsSetEverySetting) {
    auto r = parse({"--model", "m.gguf", "--host", "0.0.0.0", "--port", "9000", "--parallel", "8", "-c", "4096",
                    "-b", "256", "--ubatch-size", "128", "-t", "3", "--no-cache-prompt", "--lineage=false",
                    "--cache-ram-bytes", "2GiB", "--cache-device-slots", "2", "--prompt-cache-min-prefix", "64",
                    "--prompt-cache-max-entries", "10", "--prompt-cache-ttl", "1.5", "--cache-guard-distance", "8",
                    "--cache-guard-min-suffix", "100", "--cache-divergence-min-gain", "50", "--cache-anchor-slack", "3",
                    "--cache-max-checkpoints", "6", "--cache-max-anchors", "5", "--cache-max-anchor-bytes", "512MiB",
                    "--log-level", "debug", "--api-key", "sekrit", "--chat-template-file", "t.jinja", "--alias",
                    "my-model", "--max-body-bytes", "1M", "--n-gpu-layers", "0"});
    ASSERT_TRUE(r.config) << r.output;
    const auto & c = *r.config;
    EXPECT_EQ(c.host, "0.0.0.0");
    EXPECT_EQ(c.port, 9000);
    EXPECT_EQ(c.sched.n_parallel, 8);
    EXPECT_EQ(c.sched.n_ctx, 4096);
    EXPECT_EQ(c.sched.n_batch, 256);
    EXPECT_EQ(c.sched.n_ubatch, 128);
    EXPECT_EQ(c.sched.n_threads, 3);
    EXPECT_FALSE(c.sched.cache.enabled);
    EXPECT_FALSE(c.sched.cache.lineage);
    EXPECT_EQ(c.sched.cache.kv_capacity_bytes, 2ull << 30);  // --cache-ram-bytes is its alias
    EXPECT_EQ(c.sched.cache.device_slots, 2);
    EXPECT_EQ(c.sched.cache.min_prefix, 64);
    EXPECT_EQ(c.sched.cache.max_entries, 10);
    EXPECT_DOUBLE_EQ(c.sched.cache.ttl_s, 1.5);
    EXPECT_EQ(c.sched.cache.guard_distance, 8);
    EXPECT_EQ(c.sched.cache.guard_min_suffix, 100);
    EXPECT_EQ(c.sched.cache.divergence_min_gain, 50);
    EXPECT_EQ(c.sched.cache.anchor_slack, 3);
    EXPECT_EQ(c.sched.cache.max_checkpoints, 6);
    EXPECT_EQ(c.sched.cache.max_anchors, 5);
    EXPECT_EQ(c.sched.cache.max_anchor_bytes, 512ull << 20);
    EXPECT_EQ(c.log_level, "debug");
    EXPECT_EQ(c.api_key, "sekrit");
    EXPECT_EQ(c.chat_template_file, "t.jinja");
    EXPECT_EQ(c.alias, "my-model");
    EXPECT_EQ(c.max_body_bytes, 1ull << 20);
    EXPECT_EQ(c.n_gpu_layers, 0);
}

TEST(Config, PromptCacheAndApcFlagsSetTheCacheConfig) {
    auto r = parse({"-m", "m.gguf", "--prompt-cache-enabled=false", "--prompt-cache-capacity-bytes", "3GiB",
                    "--prompt-cache-snapshot-capacity-bytes", "700MiB", "--prompt-cache-snapshot-max-entries", "77",
                    "--prompt-cache-snapshot-ttl", "60", "--prompt-cache-hash", "xxh3", "--apc-enabled",
                    "--apc-block-size", "32", "--apc-num-blocks", "5000", "--apc-hash", "xxh3"});
    ASSERT_TRUE(r.config) << r.output;
    const auto & c = r.config->sched.cache;
    EXPECT_FALSE(c.enabled);
    EXPECT_EQ(c.kv_capacity_bytes, 3ull << 30);
    EXPECT_EQ(c.snapshot_capacity_bytes, 700ull << 20);
    EXPECT_EQ(c.snapshot_max_entries, 77);
    EXPECT_DOUBLE_EQ(c.snapshot_ttl_s, 60);
    EXPECT_EQ(c.key_hash, lineage::cache::hash_algo::xxh3);
    EXPECT_TRUE(c.apc_enabled);
    EXPECT_EQ(c.apc_block_size, 32);
    EXPECT_EQ(c.apc_num_blocks, 5000);
    EXPECT_EQ(c.apc_hash, lineage::cache::hash_algo::xxh3);

    // Defaults (docs/prompt-cache.md "Configuration"; APC off in lineage, see "Automatic Prefix
    // Caching (APC)").
    auto d = parse({"-m", "m.gguf"});
    ASSERT_TRUE(d.config) << d.output;
    const auto & dc = d.config->sched.cache;
    EXPECT_TRUE(dc.enabled);
    EXPECT_EQ(dc.kv_capacity_bytes, 0u);
    EXPECT_EQ(dc.snapshot_capacity_bytes, 0u);
    EXPECT_EQ(dc.snapshot_max_entries, 4096);
    EXPECT_DOUBLE_EQ(dc.snapshot_ttl_s, 7200);
    EXPECT_EQ(dc.key_hash, lineage::cache::hash_algo::sha256);
    EXPECT_FALSE(dc.apc_enabled);
    EXPECT_EQ(dc.apc_block_size, 16);
    EXPECT_EQ(dc.apc_num_blocks, 0);
    EXPECT_EQ(dc.apc_hash, lineage::cache::hash_algo::sha256);
}

TEST(Config, PromptCacheVariablesAndTheirAliases) {
    env_vars env;
    env = {{"LINEAGE_MODEL", "m.gguf"},
           {"LINEAGE_PROMPT_CACHE_CAPACITY_BYTES", "3GiB"},
           {"LINEAGE_CACHE_RAM_BYTES", "1GiB"},
           {"APC_ENABLED", "1"},
           {"APC_HASH", "xxh3"},
           {"LINEAGE_PROMPT_CACHE_HASH", "xxh3"},
           {"LINEAGE_PROMPT_CACHE_SNAPSHOT_TTL", "5"}};
    auto r = parse({}, env);
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_EQ(r.config->sched.cache.kv_capacity_bytes, 3ull << 30);  // the primary variable wins
    EXPECT_TRUE(r.config->sched.cache.apc_enabled);
    EXPECT_EQ(r.config->sched.cache.apc_hash, lineage::cache::hash_algo::xxh3);
    EXPECT_EQ(r.config->sched.cache.key_hash, lineage::cache::hash_algo::xxh3);
    EXPECT_DOUBLE_EQ(r.config->sched.cache.snapshot_ttl_s, 5);
    env.erase("LINEAGE_PROMPT_CACHE_CAPACITY_BYTES");
    r = parse({}, env);
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_EQ(r.config->sched.cache.kv_capacity_bytes, 1ull << 30);  // then the old one
    // The older APC_* names are read when the LINEAGE_* ones are unset; the LINEAGE_* ones win;
    // --help names the alias.
    env = {{"LINEAGE_MODEL", "m.gguf"}, {"APC_BLOCK_SIZE", "32"}, {"APC_NUM_BLOCKS", "7"}, {"APC_LINEAGE", "0"}};
    r = parse({}, env);
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_EQ(r.config->sched.cache.apc_block_size, 32);
    EXPECT_EQ(r.config->sched.cache.apc_num_blocks, 7);
    EXPECT_FALSE(r.config->sched.cache.lineage);
    env["LINEAGE_APC_BLOCK_SIZE"] = "64";
    env["LINEAGE_LINEAGE"] = "1";
    r = parse({}, env);
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_EQ(r.config->sched.cache.apc_block_size, 64);
    EXPECT_TRUE(r.config->sched.cache.lineage);
    env["LINEAGE_APC_BLOCK_SIZE"] = "0";
    r = parse({}, env);
    EXPECT_FALSE(r.config);
    EXPECT_NE(r.output.find("LINEAGE_APC_BLOCK_SIZE='0' (environment)"), std::string::npos) << r.output;
    EXPECT_NE(lineage::server::config_help().find("APC_BLOCK_SIZE is read when LINEAGE_APC_BLOCK_SIZE is unset"),
              std::string::npos);
    // The master switch: LINEAGE_PROMPT_CACHE_ENABLED, then LINEAGE_CACHE_PROMPT, then
    // LLAMA_ARG_CACHE_REUSE.
    env = {{"LINEAGE_MODEL", "m.gguf"},
           {"LINEAGE_PROMPT_CACHE_ENABLED", "true"},
           {"LINEAGE_CACHE_PROMPT", "0"},
           {"LLAMA_ARG_CACHE_REUSE", "0"}};
    r = parse({}, env);
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_TRUE(r.config->sched.cache.enabled);
    env.erase("LINEAGE_PROMPT_CACHE_ENABLED");
    env["LLAMA_ARG_CACHE_REUSE"] = "1";
    r = parse({}, env);
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_FALSE(r.config->sched.cache.enabled);
    env.erase("LINEAGE_CACHE_PROMPT");
    env["LLAMA_ARG_CACHE_REUSE"] = "0";
    r = parse({}, env);
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_FALSE(r.config->sched.cache.enabled);
    // The flag beats all of them, in every spelling.
    env["LINEAGE_PROMPT_CACHE_ENABLED"] = "0";
    for (const char * flag : {"--prompt-cache-enabled", "--prompt-cache-enabled=true", "--cache-prompt"}) {
        r = parse({flag}, env);
        ASSERT_TRUE(r.config) << r.output;
        EXPECT_TRUE(r.config->sched.cache.enabled) << flag;
    }
    env["LINEAGE_PROMPT_CACHE_ENABLED"] = "1";
    r = parse({"--no-cache-prompt"}, env);
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_FALSE(r.config->sched.cache.enabled);
    // A bad value of an alias names the alias.
    env = {{"LINEAGE_MODEL", "m.gguf"}, {"LINEAGE_CACHE_RAM_BYTES", "lots"}};
    r = parse({}, env);
    EXPECT_FALSE(r.config);
    EXPECT_NE(r.output.find("LINEAGE_CACHE_RAM_BYTES='lots' (environment)"), std::string::npos) << r.output;
}

TEST(Config, EnvironmentVariablesSetSettings) {
    env_vars env;
    env = {{"LINEAGE_MODEL", "env.gguf"}, {"LINEAGE_HOST", "::1"},
           {"LINEAGE_PORT", "7070"},      {"LINEAGE_PARALLEL", "2"},
           {"LINEAGE_CTX_SIZE", "8192"},  {"LINEAGE_CACHE_PROMPT", "0"},
           {"APC_LINEAGE", "0"},          {"LINEAGE_LOG_LEVEL", "warn"},
           {"LINEAGE_API_KEY", "k"},      {"LINEAGE_CACHE_MAX_ANCHOR_BYTES", "1GiB"}};
    auto r = parse({}, env);
    ASSERT_TRUE(r.config) << r.output;
    const auto & c = *r.config;
    EXPECT_EQ(c.model_path, "env.gguf");
    EXPECT_EQ(c.host, "::1");
    EXPECT_EQ(c.port, 7070);
    EXPECT_EQ(c.sched.n_parallel, 2);
    EXPECT_EQ(c.sched.n_ctx, 8192);
    EXPECT_FALSE(c.sched.cache.enabled);
    EXPECT_FALSE(c.sched.cache.lineage);
    EXPECT_EQ(c.log_level, "warn");
    EXPECT_EQ(c.api_key, "k");
    EXPECT_EQ(c.sched.cache.max_anchor_bytes, 1ull << 30);
}

TEST(Config, FlagBeatsEnvironment) {
    env_vars env;
    env = {{"LINEAGE_MODEL", "env.gguf"},
           {"LINEAGE_PORT", "7070"},
           {"APC_LINEAGE", "0"},
           {"LINEAGE_CACHE_PROMPT", "false"}};
    auto r = parse({"-m", "flag.gguf", "--port", "9090", "--lineage", "--cache-prompt"}, env);
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_EQ(r.config->model_path, "flag.gguf");
    EXPECT_EQ(r.config->port, 9090);
    EXPECT_TRUE(r.config->sched.cache.lineage);
    EXPECT_TRUE(r.config->sched.cache.enabled);
}

TEST(Config, BadEnvironmentValueIsIgnoredWhenTheFlagIsGiven) {
    env_vars env;
    env = {{"LINEAGE_PORT", "not-a-port"}};
    auto r = parse({"-m", "m.gguf", "--port", "1234"}, env);
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_EQ(r.config->port, 1234);
}

TEST(Config, LlamaCacheReuseIsAnAliasOnlyWhenNothingElseIsSet) {
    env_vars env;
    env = {{"LINEAGE_MODEL", "m.gguf"}, {"LLAMA_ARG_CACHE_REUSE", "0"}};
    auto r = parse({}, env);
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_FALSE(r.config->sched.cache.enabled);

    env["LLAMA_ARG_CACHE_REUSE"] = "256";
    r = parse({}, env);
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_TRUE(r.config->sched.cache.enabled);

    env["LLAMA_ARG_CACHE_REUSE"] = "0";
    env["LINEAGE_CACHE_PROMPT"] = "1";
    r = parse({}, env);
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_TRUE(r.config->sched.cache.enabled);

    env.erase("LINEAGE_CACHE_PROMPT");
    r = parse({"--cache-prompt"}, env);
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_TRUE(r.config->sched.cache.enabled);

    env["LLAMA_ARG_CACHE_REUSE"] = "maybe";
    r = parse({}, env);
    EXPECT_FALSE(r.config);
    EXPECT_NE(r.output.find("LLAMA_ARG_CACHE_REUSE='maybe' (environment): expected a boolean or a non-negative integer"),
              std::string::npos)
        << r.output;
}

TEST(Config, LineageFlagForms) {
    EXPECT_TRUE(parse({"-m", "m", "--lineage"}).config->sched.cache.lineage);
    EXPECT_FALSE(parse({"-m", "m", "--lineage=false"}).config->sched.cache.lineage);
    EXPECT_FALSE(parse({"-m", "m", "--lineage=0"}).config->sched.cache.lineage);
    EXPECT_TRUE(parse({"-m", "m", "--lineage=1"}).config->sched.cache.lineage);
    auto r = parse({"-m", "m", "--lineage=maybe"});
    EXPECT_FALSE(r.config);
    EXPECT_NE(r.output.find("--lineage 'maybe': expected a boolean (true/false, 1/0, yes/no, on/off)"), std::string::npos)
        << r.output;
}

TEST(Config, MetricsAndCacheTraceSwitches) {
    auto r = parse({"-m", "m", "--metrics", "--cache-trace"});
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_TRUE(r.config->metrics);
    EXPECT_TRUE(r.config->sched.cache.trace);
    env_vars env;
    env = {{"LINEAGE_METRICS", "1"}, {"LINEAGE_CACHE_TRACE", "1"}};
    r = parse({"-m", "m"}, env);
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_TRUE(r.config->metrics);
    EXPECT_TRUE(r.config->sched.cache.trace);
    r = parse({"-m", "m", "--metrics=false", "--cache-trace=0"}, env);
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_FALSE(r.config->metrics) << "the flag wins over the variable";
    EXPECT_FALSE(r.config->sched.cache.trace);
}

TEST(Config, CacheWarmupIsOnByDefaultAndTurnsOffByFlagOrVariable) {
    auto r = parse({"-m", "m"});
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_TRUE(r.config->sched.cache.warmup);
    EXPECT_FALSE(parse({"-m", "m", "--cache-warmup=false"}).config->sched.cache.warmup);
    env_vars env;
    env = {{"LINEAGE_CACHE_WARMUP", "0"}};
    r = parse({"-m", "m"}, env);
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_FALSE(r.config->sched.cache.warmup);
    r = parse({"-m", "m", "--cache-warmup"}, env);
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_TRUE(r.config->sched.cache.warmup) << "the flag wins over the variable";
}

TEST(Config, MissingModelIsAnError) {
    auto r = parse({});
    EXPECT_FALSE(r.config);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("error: no model given: pass -m/--model PATH or set LINEAGE_MODEL"), std::string::npos)
        << r.output;
}

TEST(Config, BadFlagValuesAreRejectedWithTheFlagAndWhatIsAccepted) {
    struct bad_case {
        std::vector<std::string> args;
        std::string message;
    };
    const std::vector<bad_case> cases = {
        {{"--port", "0"}, "error: --port '0': expected an integer in [1, 65535]"},
        {{"--port", "http"}, "error: --port 'http': expected an integer in [1, 65535]"},
        {{"--port", "80x"}, "error: --port '80x': expected an integer in [1, 65535]"},
        {{"--parallel", "0"}, "error: --parallel '0': expected an integer in [1, 256]"},
        {{"-c", "-5"}, "error: --ctx-size '-5': expected an integer >= 0"},
        {{"-b", "0"}, "error: --batch-size '0': expected an integer >= 1"},
        {{"--prompt-cache-ttl", "0"}, "error: --prompt-cache-ttl '0': expected a number of seconds > 0"},
        {{"--prompt-cache-ttl", "soon"}, "error: --prompt-cache-ttl 'soon': expected a number of seconds > 0"},
        {{"--cache-ram-bytes", "lots"},
         "error: --prompt-cache-capacity-bytes 'lots': expected a byte count such as 512MiB or 17179869184"},
        {{"--prompt-cache-hash", "md5"}, "error: --prompt-cache-hash 'md5': expected one of sha256|xxh3"},
        {{"--apc-hash", "blake3"}, "error: --apc-hash 'blake3': expected one of sha256|xxh3"},
        {{"--apc-block-size", "0"}, "error: --apc-block-size '0': expected an integer in [1, 1048576]"},
        {{"--apc-num-blocks", "-1"}, "error: --apc-num-blocks '-1': expected an integer >= 0"},
        {{"--cache-max-anchor-bytes", "16XB"}, "error: --cache-max-anchor-bytes '16XB': expected a byte count"},
        {{"--max-body-bytes", "10"}, "error: --max-body-bytes '10': expected a byte count >= 1024"},
        {{"--log-level", "loud"}, "error: --log-level 'loud': expected one of trace|debug|info|warn|error"},
        {{"--host", ""}, "error: --host '': expected a non-empty value"},
        {{"--cache-guard-distance", "0"}, "error: --cache-guard-distance '0': expected an integer >= 1"},
    };
    for (const auto & c : cases) {
        std::vector<std::string> args = {"-m", "m.gguf"};
        args.insert(args.end(), c.args.begin(), c.args.end());
        auto r = parse(args);
        EXPECT_FALSE(r.config) << c.message;
        EXPECT_EQ(r.exit_code, 1);
        EXPECT_NE(r.output.find(c.message), std::string::npos) << "want: " << c.message << "\ngot: " << r.output;
    }
}

TEST(Config, BadEnvironmentValuesNameTheVariable) {
    env_vars env;
    env = {{"LINEAGE_MODEL", "m.gguf"}, {"LINEAGE_PORT", "99999"}, {"LINEAGE_PARALLEL", "many"}};
    auto r = parse({}, env);
    EXPECT_FALSE(r.config);
    EXPECT_NE(r.output.find("error: LINEAGE_PORT='99999' (environment): expected an integer in [1, 65535]"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("error: LINEAGE_PARALLEL='many' (environment): expected an integer in [1, 256]"),
              std::string::npos)
        << r.output;
}

TEST(Config, UnknownFlagIsRejected) {
    auto r = parse({"-m", "m.gguf", "--turbo"});
    EXPECT_FALSE(r.config);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("--turbo"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("run with --help"), std::string::npos) << r.output;
}

TEST(Config, HelpListsEveryFlagWithItsVariableAndDefault) {
    auto r = parse({"--help"});
    EXPECT_FALSE(r.config);
    EXPECT_EQ(r.exit_code, 0);
    const std::vector<std::pair<std::string, std::string>> flags = {
        {"--model", "[env LINEAGE_MODEL; default (required)]"},
        {"--host", "[env LINEAGE_HOST; default 127.0.0.1]"},
        {"--port", "[env LINEAGE_PORT; default 8080]"},
        {"--parallel", "[env LINEAGE_PARALLEL; default 4]"},
        {"--ctx-size", "[env LINEAGE_CTX_SIZE; default 0]"},
        {"--batch-size", "[env LINEAGE_BATCH_SIZE; default 512]"},
        {"--ubatch-size", "[env LINEAGE_UBATCH_SIZE; default 512]"},
        {"--threads", "[env LINEAGE_THREADS; default 0]"},
        {"--prompt-cache-enabled", "[env LINEAGE_PROMPT_CACHE_ENABLED; default true]"},
        {"--no-cache-prompt", "[env LINEAGE_PROMPT_CACHE_ENABLED; default true]"},
        {"--lineage", "[env LINEAGE_LINEAGE; default true]"},
        {"--prompt-cache-capacity-bytes,--cache-ram-bytes", "[env LINEAGE_PROMPT_CACHE_CAPACITY_BYTES; default 0]"},
        {"--prompt-cache-snapshot-capacity-bytes", "[env LINEAGE_PROMPT_CACHE_SNAPSHOT_CAPACITY_BYTES; default 0]"},
        {"--prompt-cache-snapshot-max-entries", "[env LINEAGE_PROMPT_CACHE_SNAPSHOT_MAX_ENTRIES; default 4096]"},
        {"--prompt-cache-snapshot-ttl", "[env LINEAGE_PROMPT_CACHE_SNAPSHOT_TTL; default 7200]"},
        {"--prompt-cache-hash", "[env LINEAGE_PROMPT_CACHE_HASH; default sha256]"},
        {"--apc-enabled", "[env LINEAGE_APC_ENABLED; default false]"},
        {"--apc-block-size", "[env LINEAGE_APC_BLOCK_SIZE; default 16]"},
        {"--apc-num-blocks", "[env LINEAGE_APC_NUM_BLOCKS; default 0]"},
        {"--apc-hash", "[env LINEAGE_APC_HASH; default sha256]"},
        {"--cache-device-slots", "[env LINEAGE_CACHE_DEVICE_SLOTS; default -1]"},
        {"--prompt-cache-min-prefix", "[env LINEAGE_PROMPT_CACHE_MIN_PREFIX; default 32]"},
        {"--prompt-cache-max-entries", "[env LINEAGE_PROMPT_CACHE_MAX_ENTRIES; default 1024]"},
        {"--prompt-cache-ttl", "[env LINEAGE_PROMPT_CACHE_TTL; default 3600]"},
        {"--cache-guard-distance", "[env LINEAGE_CACHE_GUARD_DISTANCE; default 16]"},
        {"--cache-guard-min-suffix", "[env LINEAGE_CACHE_GUARD_MIN_SUFFIX; default 256]"},
        {"--cache-divergence-min-gain", "[env LINEAGE_CACHE_DIVERGENCE_MIN_GAIN; default 256]"},
        {"--cache-anchor-slack", "[env LINEAGE_CACHE_ANCHOR_SLACK; default 2]"},
        {"--cache-max-checkpoints", "[env LINEAGE_CACHE_MAX_CHECKPOINTS; default 4]"},
        {"--cache-max-anchors", "[env LINEAGE_CACHE_MAX_ANCHORS; default 16]"},
        {"--cache-max-anchor-bytes", "[env LINEAGE_CACHE_MAX_ANCHOR_BYTES; default 16GiB]"},
        {"--log-level", "[env LINEAGE_LOG_LEVEL; default info]"},
        {"--api-key", "[env LINEAGE_API_KEY; default (none)]"},
        {"--chat-template-file", "[env LINEAGE_CHAT_TEMPLATE_FILE; default (the model's template)]"},
        {"--alias", "[env LINEAGE_ALIAS; default (model file name)]"},
        {"--max-body-bytes", "[env LINEAGE_MAX_BODY_BYTES; default 64MiB]"},
        {"--metrics", "[env LINEAGE_METRICS; default false]"},
        {"--cache-trace", "[env LINEAGE_CACHE_TRACE; default false]"},
        {"--cache-warmup", "[env LINEAGE_CACHE_WARMUP; default true]"},
    };
    // CLI11 wraps long descriptions; compare with whitespace runs collapsed.
    auto squash = [](const std::string & s) {
        std::string out;
        for (char ch : s) {
            if (ch == '\n' || ch == ' ') {
                if (!out.empty() && out.back() == ' ') {
                    continue;
                }
                ch = ' ';
            }
            out += ch;
        }
        return out;
    };
    const std::string help = squash(r.output);
    for (const auto & [flag, note] : flags) {
        EXPECT_NE(help.find(flag), std::string::npos) << flag;
        EXPECT_NE(help.find(note), std::string::npos) << note << "\n" << r.output;
    }
}

TEST(Config, ByteSizes) {
    EXPECT_EQ(parse_bytes("0"), 0u);
    EXPECT_EQ(parse_bytes("123"), 123u);
    EXPECT_EQ(parse_bytes("123B"), 123u);
    EXPECT_EQ(parse_bytes("4k"), 4096u);
    EXPECT_EQ(parse_bytes("4KiB"), 4096u);
    EXPECT_EQ(parse_bytes("4 MB"), 4u << 20);
    EXPECT_EQ(parse_bytes("16GiB"), 16ull << 30);
    EXPECT_EQ(parse_bytes("2t"), 2ull << 40);
    EXPECT_EQ(parse_bytes(""), std::nullopt);
    EXPECT_EQ(parse_bytes("GiB"), std::nullopt);
    EXPECT_EQ(parse_bytes("-1"), std::nullopt);
    EXPECT_EQ(parse_bytes("1.5G"), std::nullopt);
    EXPECT_EQ(parse_bytes("1X"), std::nullopt);
    EXPECT_EQ(parse_bytes("99999999999999999999"), std::nullopt);
    EXPECT_EQ(parse_bytes("17179869184T"), std::nullopt);  // overflows 64 bits
}

TEST(Config, EngineLimitsAreRefusedAtStartupWithTheFlagsNamed) {
    // Values llama.cpp aborts on are refused here, with the flag named.
    auto r = parse({"-m", "m.gguf", "--threads", "513"});
    ASSERT_FALSE(r.config);
    EXPECT_NE(r.output.find("--threads '513': expected an integer in [0, 512]"), std::string::npos) << r.output;
    r = parse({"-m", "m.gguf", "--parallel", "200", "--cache-device-slots", "57"});
    ASSERT_FALSE(r.config);
    EXPECT_NE(r.output.find("--parallel 200 + --cache-device-slots 57 = 257 sequences"), std::string::npos) << r.output;
    r = parse({"-m", "m.gguf", "--batch-size", "1"});  // --parallel 4 + at least 1 device slot (auto)
    ASSERT_FALSE(r.config);
    EXPECT_NE(r.output.find("--batch-size 1 is smaller than --parallel + --cache-device-slots auto (at least 1) = 5"),
              std::string::npos)
        << r.output;
    // Auto is checked with its smallest value (the CPU's 1); its GPU value is lowered to fit later
    // (DeviceSettings.DeviceSlotsAutoOnAGpuIsLoweredToFitTheSequenceLimitAndTheBatch).
    r = parse({"-m", "m.gguf", "--parallel", "255", "--http-threads", "300"});
    ASSERT_TRUE(r.config) << r.output;
    r = parse({"-m", "m.gguf", "--parallel", "256", "--http-threads", "300"});
    ASSERT_FALSE(r.config);
    EXPECT_NE(r.output.find("--parallel 256 + --cache-device-slots auto (at least 1) = 257 sequences"),
              std::string::npos)
        << r.output;
    r = parse({"-m", "m.gguf", "--batch-size", "5"});
    ASSERT_TRUE(r.config) << r.output;
    r = parse({"-m", "m.gguf", "--batch-size", "2", "--parallel", "1", "--cache-device-slots", "1"});
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_EQ(r.config->sched.n_batch, 2);
    r = parse({"-m", "m.gguf", "--cache-max-anchors", "0"});
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_EQ(r.config->sched.cache.max_anchors, 0);
}
