// server::cache_key: SHA-256 digests of the cache key dimensions (seed 001).
#include "server/cache_key.h"

#include <nlohmann/json.hpp>
#include <openssl/evp.h>

#include <algorithm>
#include <memory>
#include <stdexcept>

namespace lineage::server {

namespace {

// Incremental SHA-256 with length-prefixed fields; throws on an OpenSSL failure.
class hasher {
public:
    hasher() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
        if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1) {
            throw std::runtime_error("SHA-256 unavailable (OpenSSL EVP)");
        }
    }
    void raw(std::string_view s) {
        if (!s.empty() && EVP_DigestUpdate(ctx_.get(), s.data(), s.size()) != 1) {
            throw std::runtime_error("SHA-256 update failed");
        }
    }
    void u64(uint64_t v) {
        char b[8];
        for (int i = 0; i < 8; ++i) {
            b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
        }
        raw(std::string_view(b, 8));
    }
    void field(std::string_view s) {
        u64(s.size());
        raw(s);
    }
    std::string bytes() {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int n = 0;
        if (EVP_DigestFinal_ex(ctx_.get(), md, &n) != 1) {
            throw std::runtime_error("SHA-256 final failed");
        }
        return std::string(reinterpret_cast<const char *>(md), n);
    }
    std::string hex() { return to_hex(bytes()); }

    static std::string to_hex(const std::string & b) {
        static const char digits[] = "0123456789abcdef";
        std::string out;
        out.reserve(b.size() * 2);
        for (unsigned char c : b) {
            out += digits[c >> 4];
            out += digits[c & 0xf];
        }
        return out;
    }

private:
    std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX *)> ctx_;
};

}  // namespace

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

std::string tools_digest(const std::vector<engine::chat_tool> & tools) {
    hasher h;
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
                         const std::string & tool_choice, const std::vector<engine::chat_tool> & tools) {
    hasher h;
    h.field("lineage:template-sig:v1");
    h.field(template_source);
    h.u64(kwargs.size());
    for (const auto & [k, v] : kwargs) {  // std::map: sorted by key
        h.field(k);
        h.field(canonical_json(v));
    }
    h.field(tool_choice);
    h.field(tools_digest(tools));
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

std::string bucket_digest(const bucket_inputs & in) {
    hasher h;
    h.raw("lineage:prompt-cache:v1");
    h.field(in.model_id);
    h.field(in.lora_id);
    h.field(in.template_sig);
    const char rope[2] = {static_cast<char>(in.rope_regime ? 1 : 0), static_cast<char>(in.rope_regime.value_or(0))};
    h.raw(std::string_view(rope, 2));
    h.field(in.mm_digest);
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
    d.mm = hasher::to_hex(b.mm_digest);
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
