// Tests of llama-server's flag names in server::config: the single-dash short
// forms (-np, -ngl, -tb, -fa, -ctk, -ctv, -cram) and -a, --cache-ram in MiB, --flash-attn,
// --cache-type-k/-v with llama.cpp's types, --jinja (no-op), --mlock, --no-mmap,
// --threads-batch, --cache-device-bytes; each reaches its field, bad values are refused naming
// the flag.
#include "server/config.h"

#include "config_args.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using lineage::server::config_test::parse;

TEST(ConfigLlamaFlags, DefaultsAreLlamaCppDefaults) {
    auto r = parse({"-m", "x.gguf"});
    ASSERT_TRUE(r.config) << r.output;
    const auto & c = *r.config;
    EXPECT_EQ(c.sched.type_k, "f16");
    EXPECT_EQ(c.sched.type_v, "f16");
    EXPECT_EQ(c.sched.flash_attn, -1);
    EXPECT_EQ(c.sched.n_threads_batch, 0);
    EXPECT_EQ(c.sched.device_budget_bytes, 0u);
    EXPECT_TRUE(c.use_mmap);
    EXPECT_FALSE(c.use_mlock);
    EXPECT_TRUE(c.jinja);
    EXPECT_EQ(c.cache_ram_mib, -1);
    EXPECT_EQ(c.sched.cache.kv_capacity_bytes, 0u);
    EXPECT_EQ(c.sched.cache.snapshot_capacity_bytes, 0u);
}

TEST(ConfigLlamaFlags, ShortFormsReachTheirFields) {
    auto r = parse({"-m", "x.gguf", "-np", "3", "-ngl", "7", "-tb", "5", "-fa", "on", "-ctk", "q8_0", "-ctv", "q4_0",
                    "-a", "tiny", "-cram", "64", "--jinja", "--mlock", "--no-mmap"});
    ASSERT_TRUE(r.config) << r.output;
    const auto & c = *r.config;
    EXPECT_EQ(c.sched.n_parallel, 3);
    EXPECT_EQ(c.n_gpu_layers, 7);
    EXPECT_EQ(c.sched.n_threads_batch, 5);
    EXPECT_EQ(c.sched.flash_attn, 1);
    EXPECT_EQ(c.sched.type_k, "q8_0");
    EXPECT_EQ(c.sched.type_v, "q4_0");
    EXPECT_EQ(c.alias, "tiny");
    EXPECT_EQ(c.cache_ram_mib, 64);
    EXPECT_EQ(c.sched.cache.kv_capacity_bytes, 64ull << 20);
    EXPECT_EQ(c.sched.cache.snapshot_capacity_bytes, 64ull << 20);
    EXPECT_TRUE(c.jinja);
    EXPECT_TRUE(c.use_mlock);
    EXPECT_FALSE(c.use_mmap);
}

TEST(ConfigLlamaFlags, LongFormsAndEqualsSigns) {
    auto r = parse({"-m", "x.gguf", "--cache-type-k=bf16", "--cache-type-v", "q5_1", "--flash-attn=auto",
                    "--threads-batch", "2", "--gpu-layers", "all", "-np=2", "--cache-ram", "1"});
    ASSERT_TRUE(r.config) << r.output;
    const auto & c = *r.config;
    EXPECT_EQ(c.sched.type_k, "bf16");
    EXPECT_EQ(c.sched.type_v, "q5_1");
    EXPECT_EQ(c.sched.flash_attn, -1);
    EXPECT_EQ(c.sched.n_threads_batch, 2);
    EXPECT_EQ(c.n_gpu_layers, -1);
    EXPECT_EQ(c.sched.n_parallel, 2);
    EXPECT_EQ(c.sched.cache.kv_capacity_bytes, 1ull << 20);
}

TEST(ConfigLlamaFlags, EveryLlamaCppCacheTypeIsAccepted) {
    for (const char * t : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"}) {
        auto r = parse({"-m", "x.gguf", "-ctk", t, "-ctv", t});
        ASSERT_TRUE(r.config) << t << ": " << r.output;
        EXPECT_EQ(r.config->sched.type_k, t);
        EXPECT_EQ(r.config->sched.type_v, t);
    }
    auto r = parse({"-m", "x.gguf", "-ctk", "q8_1"});
    ASSERT_FALSE(r.config);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("--cache-type-k 'q8_1': expected one of f32|f16|bf16|q8_0|q4_0|q4_1|iq4_nl|q5_0|q5_1"),
              std::string::npos)
        << r.output;
}

TEST(ConfigLlamaFlags, FlashAttnValues) {
    for (const auto & [v, want] : std::vector<std::pair<std::string, int>>{
             {"on", 1}, {"off", 0}, {"auto", -1}, {"true", 1}, {"0", 0}, {"enabled", 1}, {"disabled", 0}}) {
        auto r = parse({"-m", "x.gguf", "-fa", v});
        ASSERT_TRUE(r.config) << v << ": " << r.output;
        EXPECT_EQ(r.config->sched.flash_attn, want) << v;
    }
    auto r = parse({"-m", "x.gguf", "-fa", "sometimes"});
    ASSERT_FALSE(r.config);
    EXPECT_NE(r.output.find("--flash-attn 'sometimes': expected on, off or auto"), std::string::npos) << r.output;
    r = parse({"-m", "x.gguf"}, {{"LINEAGE_FLASH_ATTN", "off"}});
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_EQ(r.config->sched.flash_attn, 0);
}

TEST(ConfigLlamaFlags, QuantizedVCacheWithFlashAttnOffIsRefused) {
    auto r = parse({"-m", "x.gguf", "-ctv", "q8_0", "-fa", "off"});
    ASSERT_FALSE(r.config);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("--cache-type-v q8_0 with --flash-attn off"), std::string::npos) << r.output;
    // A quantized K alone is fine without flash attention (llama.cpp checks V only).
    r = parse({"-m", "x.gguf", "-ctk", "q8_0", "-fa", "off"});
    EXPECT_TRUE(r.config) << r.output;
    r = parse({"-m", "x.gguf", "-ctv", "bf16", "-fa", "off"});
    EXPECT_TRUE(r.config) << r.output;
}

TEST(ConfigLlamaFlags, CacheRamInMiB) {
    auto r = parse({"-m", "x.gguf", "--cache-ram", "0"});
    ASSERT_FALSE(r.config);
    EXPECT_NE(r.output.find("--cache-ram '0': expected a number of MiB >= 1, or -1 (unset)"), std::string::npos)
        << r.output;
    r = parse({"-m", "x.gguf", "--cache-ram", "-2"});
    EXPECT_FALSE(r.config);
    r = parse({"-m", "x.gguf", "--cache-ram", "-1"});
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_EQ(r.config->sched.cache.kv_capacity_bytes, 0u);
    r = parse({"-m", "x.gguf", "--cache-ram", "2048", "--cache-ram-bytes", "1GiB"});
    ASSERT_FALSE(r.config);
    EXPECT_NE(r.output.find("--cache-ram 2048 and --prompt-cache-capacity-bytes"), std::string::npos) << r.output;
    r = parse({"-m", "x.gguf"}, {{"LINEAGE_CACHE_RAM", "3"}});
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_EQ(r.config->sched.cache.snapshot_capacity_bytes, 3ull << 20);
}

TEST(ConfigLlamaFlags, AliasCommaListAsLlamaServer) {
    auto r = parse({"-m", "x.gguf", "-a", "gpt-tiny, other ,gpt-tiny", "--model-alias", "third"});
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_EQ(r.config->alias, "gpt-tiny");
    EXPECT_EQ(r.config->model_aliases, (std::vector<std::string>{"third", "other"}));
}

TEST(ConfigLlamaFlags, JinjaFalseIsRefused) {
    auto r = parse({"-m", "x.gguf", "--no-jinja"});
    ASSERT_FALSE(r.config);
    EXPECT_NE(r.output.find("--jinja false (or --no-jinja)"), std::string::npos) << r.output;
}

TEST(ConfigLlamaFlags, ThreadsBatchAndDeviceBytesBounds) {
    auto r = parse({"-m", "x.gguf", "-tb", "513"});
    ASSERT_FALSE(r.config);
    EXPECT_NE(r.output.find("--threads-batch '513'"), std::string::npos) << r.output;
    r = parse({"-m", "x.gguf", "--cache-device-bytes", "12GiB"});
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_EQ(r.config->sched.device_budget_bytes, 12ull << 30);
    r = parse({"-m", "x.gguf", "--cache-device-bytes", "-1"});
    EXPECT_FALSE(r.config);
}

TEST(ConfigLlamaFlags, HelpNamesTheShortForms) {
    const std::string help = lineage::server::config_help();
    for (const char * s : {"(llama-server's -np)", "(llama-server's -ngl)", "(llama-server's -tb)",
                           "(llama-server's -fa)", "(llama-server's -ctk)", "(llama-server's -ctv)",
                           "(llama-server's -cram)"}) {
        EXPECT_NE(help.find(s), std::string::npos) << s;
    }
    for (const char * s : {"-a,", "--jinja", "--mlock", "--no-mmap", "--cache-device-bytes", "--gpu-layers"}) {
        EXPECT_NE(help.find(s), std::string::npos) << s;
    }
}
