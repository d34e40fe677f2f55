// Tests of server::cache_key: the digests that place a request in the prompt cache
// (docs/prompt-cache.md "Lookup").
#include "server/prepare/cache_key.h"
#include "server/prepare/chat_prepare.h"

#include <gtest/gtest.h>

#include <set>

using namespace lineage::server;
using lineage::engine::chat_tool;

namespace {

bucket_inputs bucket(std::string model_id, std::string tsig) {
    bucket_inputs b;
    b.model_id = std::move(model_id);
    b.template_sig = std::move(tsig);
    return b;
}

std::vector<chat_tool> two_tools() {
    return {{"get_weather", "weather", R"({"type":"object"})"}, {"search", "web", R"({"type":"object","x":1})"}};
}

}  // namespace

TEST(CacheKey, Sha256KnownVectors) {
    EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(CacheKey, EqualInputsGiveEqualDigests) {
    const std::map<std::string, std::string> kw = {{"enable_thinking", "false"}};
    EXPECT_EQ(template_sig("tmpl", kw, "auto", two_tools()), template_sig("tmpl", kw, "auto", two_tools()));
    bucket_inputs a = bucket("m", "t");
    bucket_inputs b = bucket("m", "t");
    EXPECT_EQ(bucket_digest(a), bucket_digest(b));
    EXPECT_EQ(bucket_digest(a).size(), 64u);
}

TEST(CacheKey, KwargsKeyOrderDoesNotMatter) {
    // Top-level kwargs arrive in a std::map; nested objects are canonicalised.
    const std::map<std::string, std::string> a = {{"x", R"({"b":1,"a":[1,{"d":2,"c":3}]})"}, {"y", "true"}};
    const std::map<std::string, std::string> b = {{"y", "true"}, {"x", R"({ "a" : [1, {"c":3,"d":2}], "b" : 1 })"}};
    EXPECT_EQ(template_sig("tmpl", a, "auto", {}), template_sig("tmpl", b, "auto", {}));
    EXPECT_EQ(canonical_json(R"({"b":1,"a":2})"), R"({"a":2,"b":1})");
    EXPECT_EQ(canonical_json("not json"), "not json");
}

TEST(CacheKey, ToolsOrderMatters) {
    auto tools = two_tools();
    auto swapped = std::vector<chat_tool>{tools[1], tools[0]};
    EXPECT_NE(tools_digest(tools), tools_digest(swapped));
    EXPECT_NE(template_sig("t", {}, "auto", tools), template_sig("t", {}, "auto", swapped));
}

TEST(CacheKey, EveryTemplateSigDimensionChangesTheDigest) {
    const std::map<std::string, std::string> kw = {{"enable_thinking", "false"}};
    const std::string base = template_sig("tmpl", kw, "auto", two_tools());
    std::set<std::string> seen = {base};
    auto differs = [&](const std::string & d) {
        EXPECT_TRUE(seen.insert(d).second) << "digest collided with an earlier variant";
    };
    differs(template_sig("tmpl ", kw, "auto", two_tools()));  // whitespace in the template
    differs(template_sig("tmpl", {{"enable_thinking", "true"}}, "auto", two_tools()));
    differs(template_sig("tmpl", {}, "auto", two_tools()));
    differs(template_sig("tmpl", kw, "required", two_tools()));
    differs(template_sig("tmpl", kw, "function:search", two_tools()));
    differs(template_sig("tmpl", kw, "auto", {}));
    auto t = two_tools();
    t[0].description = "weather!";
    differs(template_sig("tmpl", kw, "auto", t));
    t = two_tools();
    t[1].parameters = R"({"type":"object","x":2})";
    differs(template_sig("tmpl", kw, "auto", t));
    t = two_tools();
    t[0].name = "get_weather2";
    differs(template_sig("tmpl", kw, "auto", t));
}

TEST(CacheKey, LengthPrefixesKeepFieldsApart) {
    // "ab"+"c" and "a"+"bc" must not collide.
    EXPECT_NE(tools_digest({{"ab", "c", "{}"}}), tools_digest({{"a", "bc", "{}"}}));
    bucket_inputs a = bucket("ab", "t");
    a.lora_id = "c";
    bucket_inputs b = bucket("a", "t");
    b.lora_id = "bc";
    EXPECT_NE(bucket_digest(a), bucket_digest(b));
}

TEST(CacheKey, EveryBucketDimensionChangesTheDigest) {
    const bucket_inputs base = bucket("m", "t");
    std::set<std::string> seen = {bucket_digest(base)};
    auto differs = [&](bucket_inputs b) { EXPECT_TRUE(seen.insert(bucket_digest(b)).second); };
    auto b = base;
    b.model_id = "m2";
    differs(b);
    b = base;
    b.lora_id = "lora";
    differs(b);
    b = base;
    b.rope_regime = 0;  // present with tag 0 differs from absent
    differs(b);
    b = base;
    b.rope_regime = 1;
    differs(b);
    b = base;
    b.mm_digest = std::string(32, '\0');
    differs(b);
    // Not template_sig: the template and the tools decide which tokens a request has, not the
    // state those tokens give; the trie matches tokens (docs/prompt-cache.md "Key dimensions").
    b = base;
    b.template_sig = "t2";
    EXPECT_EQ(bucket_digest(b), bucket_digest(base));
}

TEST(CacheKey, TextOnlyMultimodalDigestIsAStable32ByteConstant) {
    EXPECT_EQ(text_only_mm_digest().size(), 32u);
    EXPECT_EQ(&text_only_mm_digest(), &text_only_mm_digest());
    EXPECT_EQ(bucket_inputs{}.mm_digest, text_only_mm_digest());
}

TEST(CacheKey, SessionKeyPrecedence) {
    EXPECT_EQ(session_key("pk", "user"), "pk");
    EXPECT_EQ(session_key("", "user"), "user");
    EXPECT_EQ(session_key("", ""), "");
}

TEST(CacheKey, AnchorIsTheCommonPrefix) {
    const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
    EXPECT_EQ(anchor_tokens(prompt, {1, 2, 3, 4, 5, 9}), 5);
    EXPECT_EQ(anchor_tokens(prompt, {1, 2, 3, 4, 5}), 5);  // render is a prefix
    EXPECT_EQ(anchor_tokens(prompt, prompt), 8);
    EXPECT_EQ(anchor_tokens(prompt, {1, 2, 3, 4, 5, 6, 7, 8, 9}), 8);
    EXPECT_EQ(anchor_tokens(prompt, {9}), -1);
    EXPECT_EQ(anchor_tokens(prompt, {}), -1);
}

TEST(CacheKey, HistoryIsThePromptWithoutItsGenerationPrompt) {
    const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6};
    EXPECT_EQ(history_tokens(prompt, {5, 6}), 4);
    EXPECT_EQ(history_tokens(prompt, {6}), 5);
    EXPECT_EQ(history_tokens(prompt, {4, 6}), -1);  // the tail differs (merged across the seam)
    EXPECT_EQ(history_tokens(prompt, {}), -1);      // no generation prompt
    EXPECT_EQ(history_tokens(prompt, prompt), -1);  // nothing before it
    EXPECT_EQ(history_tokens({1}, {1, 1}), -1);
}

TEST(CacheKey, KeyDimsNameTheInputThatChanged) {
    const std::map<std::string, std::string> kw = {{"enable_thinking", "false"}};
    bucket_inputs b = bucket("m", template_sig("tmpl", kw, "auto", two_tools()));
    const auto a = key_dims_of(b, "tmpl", kw, "auto", two_tools());
    EXPECT_EQ(a.model_id, "m");
    EXPECT_EQ(a.rope, "");
    EXPECT_EQ(a.mm.size(), 64u);
    EXPECT_EQ(a.tools, tools_digest(two_tools()));
    EXPECT_EQ(lineage::cache::key_difference(a, key_dims_of(b, "tmpl", kw, "auto", two_tools())), "");

    auto one_tool = two_tools();
    one_tool.pop_back();
    bucket_inputs b2 = bucket("m", template_sig("tmpl", kw, "auto", one_tool));
    // Other tools: the same bucket; the trace names the template inputs that changed.
    const auto a2 = key_dims_of(b2, "tmpl", kw, "auto", one_tool);
    EXPECT_EQ(lineage::cache::key_difference(a, a2), "");
    EXPECT_EQ(lineage::cache::template_difference(a, a2), "template_sig differs (tools)");
    EXPECT_EQ(lineage::cache::template_difference(a, key_dims_of(b, "tmpl", kw, "auto", two_tools())), "");
    const std::map<std::string, std::string> kw2 = {{"enable_thinking", "true"}};
    bucket_inputs b3 = bucket("other", template_sig("tmpl2", kw2, "auto", two_tools()));
    const auto a3 = key_dims_of(b3, "tmpl2", kw2, "auto", two_tools());
    EXPECT_EQ(lineage::cache::key_difference(a, a3), "model_id differs");
    EXPECT_EQ(lineage::cache::template_difference(a, a3), "template_sig differs (template, kwargs)");
}

TEST(CacheKey, Xxh3IsTheFastOption) {
    const std::map<std::string, std::string> kw = {{"enable_thinking", "false"}};
    const auto x = lineage::cache::hash_algo::xxh3;
    const bucket_inputs a = bucket("m", "t");
    EXPECT_EQ(bucket_digest(a, x).size(), 32u);
    EXPECT_EQ(bucket_digest(a, x), bucket_digest(bucket("m", "t"), x));
    EXPECT_NE(bucket_digest(a, x), bucket_digest(bucket("m2", "t"), x));
    EXPECT_NE(bucket_digest(a, x), bucket_digest(a).substr(0, 32));
    EXPECT_EQ(template_sig("tmpl", kw, "auto", two_tools(), x), template_sig("tmpl", kw, "auto", two_tools(), x));
    EXPECT_NE(template_sig("tmpl", kw, "auto", two_tools(), x), template_sig("tmpl2", kw, "auto", two_tools(), x));
    EXPECT_EQ(tools_digest(two_tools(), x).size(), 32u);
}

TEST(CacheKey, PreserveThinkingByDefaultWhenTheCacheIsOnAndTheTemplateKnowsIt) {
    const std::string qwen36 = "{%- if preserve_thinking %}{{ reasoning }}{%- endif %}";
    using kwargs = std::map<std::string, std::string>;
    EXPECT_EQ(default_template_kwargs(qwen36, true),
              (kwargs{{"preserve_reasoning", "true"}, {"preserve_thinking", "true"}}));
    EXPECT_EQ(default_template_kwargs(qwen36, false), (kwargs{{"preserve_reasoning", "true"}}));
    EXPECT_EQ(default_template_kwargs("{{ messages }}", true), (kwargs{{"preserve_reasoning", "true"}}));
    // The default is part of template_sig through the merged kwargs: overriding it is another key.
    kwargs merged = default_template_kwargs(qwen36, true);
    kwargs overridden = merged;
    overridden["preserve_thinking"] = "false";
    EXPECT_NE(template_sig(qwen36, merged, "auto", {}), template_sig(qwen36, overridden, "auto", {}));
}

// The KV cache types are a bucket dimension (a state restores only into its own types),
// absent for f16/f16 so that a default server keeps the digests (and the disk files) it had.
TEST(CacheKey, KvTypeIsABucketDimensionOnlyWhenNotF16) {
    EXPECT_EQ(kv_type_dimension("f16", "f16"), "");
    EXPECT_EQ(kv_type_dimension("q8_0", "q8_0"), "q8_0/q8_0");
    EXPECT_EQ(kv_type_dimension("f16", "q4_0"), "f16/q4_0");
    EXPECT_EQ(kv_type_dimension("q4_0", "f16"), "q4_0/f16");
    const bucket_inputs base = bucket("m", "t");
    // A fixed digest: f16/f16 ("" here) must keep this value across versions.
    const std::string f16 = bucket_digest(base);
    auto b = base;
    b.kv_type = "q8_0/q8_0";
    const std::string q8 = bucket_digest(b);
    b.kv_type = "f16/q8_0";
    const std::string mixed = bucket_digest(b);
    EXPECT_NE(q8, f16);
    EXPECT_NE(mixed, f16);
    EXPECT_NE(mixed, q8);
    // The tenant and the KV type are separate fields: neither can stand in for the other.
    b = base;
    b.tenant = "q8_0/q8_0";
    EXPECT_NE(bucket_digest(b), q8);
    // The trace names the dimension.
    const auto da = key_dims_of(base, "tmpl", {}, "auto", {});
    b = base;
    b.kv_type = "q8_0/q8_0";
    const auto db = key_dims_of(b, "tmpl", {}, "auto", {});
    EXPECT_EQ(db.kv_type, "q8_0/q8_0");
    EXPECT_EQ(lineage::cache::key_difference(da, db), "kv_type differs");
}
