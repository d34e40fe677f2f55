// server::cache_key: the digests that place a request in the prompt cache (docs/prompt-cache.md
// "Lookup"): template_sig, the bucket (model, lora, rope regime, multimodal digest, tenant), the
// session key, and the anchor length (docs/prompt-cache.md "Restore points").
// Why here: they are computed on the HTTP thread from the request before it is queued.
// Digests are SHA-256 (OpenSSL EVP) by default, XXH3-128 with --prompt-cache-hash xxh3 (cache::digest),
// with domain separators, as lowercase hex (docs/architecture.md "Keys: one vocabulary").
// Thread safety: pure functions.
#pragma once

#include "cache/rule/digest.h"
#include "cache/rule/key.h"
#include "engine/chat_template.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lineage::server {

/** SHA-256 of `data` as 64 lowercase hex characters. */
std::string sha256_hex(std::string_view data);

/** Canonical JSON text of `json_text` (object keys sorted, no whitespace); the input itself
 *  when it is not valid JSON. */
std::string canonical_json(const std::string & json_text);

/** Order-preserving digest of the tools (type, name, description, parameters of each), hex. */
std::string tools_digest(const std::vector<engine::chat_tool> & tools, cache::hash_algo algo = cache::hash_algo::sha256);

/** template_sig: digest of everything besides the messages that decides the rendered tokens:
 *  the template source, the merged chat_template_kwargs (values as JSON text; canonicalised, so
 *  key order does not matter), the effective tool_choice ("auto", "none", "required" or
 *  "function:NAME") and tools_digest (order matters: it changes the prompt). Hex. */
std::string template_sig(const std::string & template_source,
                         const std::map<std::string, std::string> & kwargs,
                         const std::string & tool_choice,
                         const std::vector<engine::chat_tool> & tools,
                         cache::hash_algo algo = cache::hash_algo::sha256);

/** Multimodal digest of a text-only request: SHA-256("lineage:prompt-cache:multimodal:v1" ||
 *  u64 0 || u64 0), 32 raw bytes (docs/prompt-cache.md "Lookup": key dimensions). */
const std::string & text_only_mm_digest();

struct bucket_inputs {
    std::string model_id;
    std::string lora_id;                  ///< "" for the base model
    std::string template_sig;
    std::optional<uint8_t> rope_regime;   ///< nullopt: the model's RoPE does not depend on length
    std::string mm_digest = text_only_mm_digest();  ///< 32 raw bytes
    std::string tenant;                   ///< the API key's tenant; "" without API keys
    /** The KV cache types as "K/V", e.g. "q8_0/q8_0"; "" for llama.cpp's default
     *  f16/f16. A state holds its KV in these types and llama.cpp restores it into no other. */
    std::string kv_type;
};

/** bucket_inputs::kv_type of the KV cache types `type_k`, `type_v` (ggml names): "" for
 *  f16/f16 (llama.cpp's default, so that the digests of a default server stay as they were),
 *  else "K/V", e.g. "q8_0/q8_0", "f16/q4_0". */
std::string kv_type_dimension(const std::string & type_k, const std::string & type_v);

/** Bucket digest: `algo` (SHA-256: 64 hex characters; XXH3-128: 32) of "lineage:prompt-cache:v1"
 *  then each dimension (strings length-prefixed with a u64 little-endian; rope as presence byte
 *  + tag byte), then, for a non-empty tenant, the field "tenant" and the tenant's name (so a
 *  server without API keys keeps the digests it always had), then, for a non-empty kv_type, the
 *  field "kv_type" and its value (so f16/f16 keeps them too). Hex. */
std::string bucket_digest(const bucket_inputs & in, cache::hash_algo algo = cache::hash_algo::sha256);

/** The bucket's dimensions one by one, for the decision trace (cache::key_dims): the values of
 *  `b` (rope as "" or its tag, mm as hex, the tenant) and template_sig's inputs (the template source and
 *  the merged kwargs as digests, tool_choice as is, tools_digest). */
cache::key_dims key_dims_of(const bucket_inputs & b, const std::string & template_source,
                            const std::map<std::string, std::string> & kwargs, const std::string & tool_choice,
                            const std::vector<engine::chat_tool> & tools);

/** session_key = prompt_cache_key if non-empty, else user, else "" (anonymous). */
std::string session_key(const std::string & prompt_cache_key, const std::string & user);

/** Anchor length in tokens: the common prefix of `prompt` and `anchor_render` (the tokens of
 *  the leading system messages + tools rendered without a generation prompt); -1 when empty.
 *  The cache takes cache::config::anchor_slack tokens off it (BPE slack at the seam). */
int32_t anchor_tokens(const std::vector<int32_t> & prompt, const std::vector<int32_t> & anchor_render);

/** History length in tokens: `prompt` without the tokens of its generation prompt, when the
 *  prompt's last tokens are exactly `generation_prompt_tokens`; -1 otherwise (also when they
 *  are empty or the whole prompt). */
int32_t history_tokens(const std::vector<int32_t> & prompt, const std::vector<int32_t> & generation_prompt_tokens);

}  // namespace lineage::server
