// cache::key_dims: naming the dimension two bucket keys differ in.
#include "cache/rule/key.h"

#include <utility>
#include <vector>

namespace lineage::cache {

std::string key_difference(const key_dims & a, const key_dims & b) {
    if (a.empty() || b.empty()) {
        return "";
    }
    std::vector<std::string> dims;
    if (a.tenant != b.tenant) {
        dims.push_back("tenant differs");
    }
    if (a.model_id != b.model_id) {
        dims.push_back("model_id differs");
    }
    if (a.lora_id != b.lora_id) {
        dims.push_back("lora_id differs");
    }
    if (a.rope != b.rope) {
        dims.push_back("rope_regime differs");
    }
    if (a.mm != b.mm) {
        dims.push_back("mm_digest differs");
    }
    if (a.kv_type != b.kv_type) {
        dims.push_back("kv_type differs");
    }
    std::string out;
    for (const auto & d : dims) {
        out += (out.empty() ? "" : ", ") + d;
    }
    return out;
}

std::string template_difference(const key_dims & a, const key_dims & b) {
    if (a.empty() || b.empty() || a.template_sig == b.template_sig) {
        return "";
    }
    std::string parts;
    for (const auto & [name, diff] : {std::pair{"template", a.template_source != b.template_source},
                                      std::pair{"tools", a.tools != b.tools}, std::pair{"kwargs", a.kwargs != b.kwargs},
                                      std::pair{"tool_choice", a.tool_choice != b.tool_choice}}) {
        if (diff) {
            parts += (parts.empty() ? "" : ", ") + std::string(name);
        }
    }
    return "template_sig differs" + (parts.empty() ? std::string() : " (" + parts + ")");
}

}  // namespace lineage::cache
