// cache::key: the one key vocabulary of the prompt cache (docs/architecture.md "Keys").
// - bucket key: a digest of the dimensions that must match for two states to be interchangeable
//   (model_id, lora_id, rope_regime, mm_digest, the KV cache types, and the tenant: the API key's
//   owner, so that no state is shared across tenants); entries only match in a bucket. template_sig (chat
//   template, kwargs, tool_choice, tools) is not one: it decides which tokens a request has,
//   not what state those tokens give, and the trie matches tokens;
// - key dimensions (key_dims): those dimensions one by one, so that the decision trace can say
//   which one made two requests land in different buckets ("lora_id differs"), and template_sig
//   with its inputs, so that it can say a hit crossed templates ("template_sig differs
//   (tools)"); never used for matching;
// - session key: prompt_cache_key > user > anonymous; decides the two-tier precedence only.
// Digests are computed on the HTTP thread (src/server/prepare/cache_key.h, cache/rule/digest.h).
// Thread safety: value types and pure functions.
#pragma once

#include <string>
#include <utility>

namespace lineage::cache {

/** Per-dimension values of a bucket, filled by the HTTP layer when the decision trace is on
 *  (all empty otherwise: nothing to explain, nothing computed). */
struct key_dims {
    std::string model_id;      ///< display model id
    std::string lora_id;       ///< "" for the base model
    std::string template_sig;  ///< hex digest of the four inputs below
    std::string rope;          ///< "" when the model's RoPE does not depend on length, else the tag
    std::string mm;            ///< hex digest of the multimodal inputs
    std::string tenant;        ///< the API key's tenant ("" without API keys)
    std::string kv_type;       ///< the KV cache types "K/V" ("" for f16/f16)
    // template_sig's inputs (docs/prompt-cache.md "Lookup")
    std::string template_source;  ///< hex digest of the Jinja source
    std::string kwargs;           ///< hex digest of the merged, canonicalised chat_template_kwargs
    std::string tool_choice;      ///< effective tool_choice ("auto", "none", "required", "function:NAME")
    std::string tools;            ///< tools_digest, hex

    bool empty() const { return model_id.empty() && template_sig.empty(); }
};

/** A request's or an entry's cache key. */
struct key {
    key() = default;
    key(std::string b, std::string s, key_dims d = {}) : bucket(std::move(b)), session(std::move(s)), dims(std::move(d)) {}

    std::string bucket;   ///< bucket key (hex digest); states match only within one
    std::string session;  ///< session key ("" = anonymous)
    /** The tenant whose API key made the entry ("" without API keys). Also a bucket dimension
     *  (so never a match across tenants); kept in the clear for per-tenant stats and reset. */
    std::string tenant;
    key_dims dims;        ///< the bucket's dimensions, for the decision trace only (may be empty)
};

/** Names the bucket dimensions in which `a` and `b` differ, most significant first, e.g.
 *  "tenant differs", "model_id differs", "lora_id differs, mm_digest differs"; "" when they are
 *  equal or when either side is empty (not recorded). */
std::string key_difference(const key_dims & a, const key_dims & b);

/** "template_sig differs (tools, kwargs)" when the two were rendered under other template
 *  inputs (template, tools, kwargs, tool_choice), else "" (also when either side is empty). Not
 *  a bucket dimension: a hit may cross it when the tokens agree. */
std::string template_difference(const key_dims & a, const key_dims & b);

}  // namespace lineage::cache
