// cache::key_dims: the dimensions a bucket digest combines (seed 001 "Cache Key Composition":
// model_id, lora_id, template_sig, rope_regime, mm_digest; and template_sig's own inputs),
// each kept as a value or a digest beside the bucket so that the decision trace can say which
// dimension made two requests land in different buckets ("template_sig differs (tools)").
// The bucket digest alone decides matching; these are for explanation only.
// Thread safety: value types and pure functions.
#pragma once

#include <string>

namespace lineage::cache {

/** Per-dimension values of a bucket, filled by the HTTP layer when the decision trace is on
 *  (all empty otherwise: nothing to explain, nothing computed). */
struct key_dims {
    std::string model_id;      ///< display model id
    std::string lora_id;       ///< "" for the base model
    std::string template_sig;  ///< hex digest of the four inputs below
    std::string rope;          ///< "" when the model's RoPE does not depend on length, else the tag
    std::string mm;            ///< hex digest of the multimodal inputs
    // template_sig's inputs (seed 001 "template_sig")
    std::string template_source;  ///< hex digest of the Jinja source
    std::string kwargs;           ///< hex digest of the merged, canonicalised chat_template_kwargs
    std::string tool_choice;      ///< effective tool_choice ("auto", "none", "required", "function:NAME")
    std::string tools;            ///< tools_digest, hex

    bool empty() const { return model_id.empty() && template_sig.empty(); }
};

/** Names the dimensions in which `a` and `b` differ, most significant first, e.g.
 *  "model_id differs", "template_sig differs (tools, kwargs)", "mm_digest differs"; "" when
 *  they are equal or when either side is empty (not recorded). */
std::string key_difference(const key_dims & a, const key_dims & b);

}  // namespace lineage::cache
