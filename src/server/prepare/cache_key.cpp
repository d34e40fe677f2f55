// server::cache_key: SHA-256 (or XXH3) digests of the cache key dimensions (docs/prompt-cache.md
// "Lookup").
#include "server/prepare/cache_key.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <stdexcept>

namespace lineage::server {

using cache::hasher;
using cache::hash_algo;

std::string sha256_hex(std::string_view data) {
    hasher h;
    h.raw(data);
    return h.hex();
}

std::string canonical_json(const std::string & json_text) {
    // nlohmann::json (not ordered_json) stores objects in a std::map: keys come out sorted.
    auto j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
        return json_text;
    }
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string tools_digest(const std::vector<engine::chat_tool> & tools, hash_algo algo) {
    hasher h(algo);
    h.field("lineage:tools:v1");
    h.u64(tools.size());
    for (const auto & t : tools) {
        h.field("function");
        h.field(t.name);
        h.field(t.description);
        h.field(t.parameters);
    }
    return h.hex();
}

std::string template_sig(const std::string & template_source, const std::map<std::string, std::string> & kwargs,
                         const std::string & tool_choice, const std::vector<engine::chat_tool> & tools,
                         hash_algo algo) {
    hasher h(algo);
    h.field("lineage:template-sig:v1");
    h.field(template_source);
    h.u64(kwargs.size());
    for (const auto & [k, v] : kwargs) {  // std::map: sorted by key
        h.field(k);
        h.field(canonical_json(v));
    }
    h.field(tool_choice);
    h.field(tools_digest(tools, algo));
    return h.hex();
}

const std::string & text_only_mm_digest() {
    static const std::string digest = [] {
        hasher h;
        h.raw("lineage:prompt-cache:multimodal:v1");
        h.u64(0);
        h.u64(0);
        return h.bytes();
    }();
    return digest;
}

std::string kv_type_dimension(const std::string & type_k, const std::string & type_v) {
    return type_k == "f16" && type_v == "f16" ? std::string() : type_k + "/" + type_v;
}

std::string bucket_digest(const bucket_inputs & in, hash_algo algo) {
    // Only what changes the state computed for a token sequence (docs/prompt-cache.md "Key
    // dimensions"): template_sig is not here (v2) since the template and the tools only decide
    // which tokens a request has, and the trie matches tokens.
    hasher h(algo);
    h.raw("lineage:prompt-cache:v2");
    h.field(in.model_id);
    h.field(in.lora_id);
    const char rope[2] = {static_cast<char>(in.rope_regime ? 1 : 0), static_cast<char>(in.rope_regime.value_or(0))};
    h.raw(std::string_view(rope, 2));
    h.field(in.mm_digest);
    if (!in.tenant.empty()) {
        // After the last length-prefixed field: an empty tenant leaves the digest as it was,
        // and no other input can produce these extra fields.
        h.field("tenant");
        h.field(in.tenant);
    }
    if (!in.kv_type.empty()) {
        h.field("kv_type");
        h.field(in.kv_type);
    }
    return h.hex();
}

cache::key_dims key_dims_of(const bucket_inputs & b, const std::string & template_source,
                            const std::map<std::string, std::string> & kwargs, const std::string & tool_choice,
                            const std::vector<engine::chat_tool> & tools) {
    cache::key_dims d;
    d.model_id = b.model_id;
    d.lora_id = b.lora_id;
    d.template_sig = b.template_sig;
    d.rope = b.rope_regime ? std::to_string(*b.rope_regime) : "";
    d.mm = cache::to_hex(b.mm_digest);
    d.tenant = b.tenant;
    d.kv_type = b.kv_type;
    d.template_source = sha256_hex(template_source);
    hasher h;
    h.field("lineage:kwargs:v1");
    for (const auto & [k, v] : kwargs) {
        h.field(k);
        h.field(canonical_json(v));
    }
    d.kwargs = h.hex();
    d.tool_choice = tool_choice;
    d.tools = tools_digest(tools);
    return d;
}

std::string session_key(const std::string & prompt_cache_key, const std::string & user) {
    if (!prompt_cache_key.empty()) {
        return prompt_cache_key;
    }
    return user;
}

int32_t anchor_tokens(const std::vector<int32_t> & prompt, const std::vector<int32_t> & anchor_render) {
    const size_t n = std::min(prompt.size(), anchor_render.size());
    size_t common = 0;
    while (common < n && prompt[common] == anchor_render[common]) {
        ++common;
    }
    return common >= 1 ? static_cast<int32_t>(common) : -1;
}

int32_t history_tokens(const std::vector<int32_t> & prompt, const std::vector<int32_t> & generation_prompt_tokens) {
    const size_t g = generation_prompt_tokens.size();
    if (g == 0 || g >= prompt.size()) {
        return -1;
    }
    if (!std::equal(generation_prompt_tokens.begin(), generation_prompt_tokens.end(), prompt.end() - static_cast<std::ptrdiff_t>(g))) {
        return -1;
    }
    return static_cast<int32_t>(prompt.size() - g);
}

}  // namespace lineage::server
