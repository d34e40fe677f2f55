#include "engine/context.h"

#include "engine/resident.h"

#include "common.h"
#include "llama.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>

namespace lineage::engine {

namespace {

bool abort_callback(void * data) {
    auto * flag = static_cast<std::atomic<bool> *>(data);
    return flag != nullptr && flag->load(std::memory_order_relaxed);
}

llama_state_seq_flags flags_for(bool recurrent_only) {
    return recurrent_only ? LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY : LLAMA_STATE_SEQ_FLAGS_NONE;
}

/** The ggml type named `name` among kv_cache_types(); throws std::runtime_error otherwise. */
ggml_type kv_type_of(const std::string & name) {
    for (const ggml_type t : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0,
                              GGML_TYPE_Q4_1, GGML_TYPE_IQ4_NL, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1}) {
        if (name == ggml_type_name(t)) {
            return t;
        }
    }
    throw std::runtime_error("unknown KV cache type '" + name + "'");
}

}  // namespace

const std::vector<std::string> & kv_cache_types() {
    static const std::vector<std::string> names = {"f32",  "f16",  "bf16",   "q8_0", "q4_0",
                                                   "q4_1", "iq4_nl", "q5_0", "q5_1"};
    return names;
}

bool kv_type_is_quantized(const std::string & name) {
    const auto & all = kv_cache_types();
    return std::find(all.begin(), all.end(), name) != all.end() && ggml_is_quantized(kv_type_of(name));
}

context::context(const model & m, const context_params & p)
    : model_(m),
      n_seq_(p.n_seq),
      n_batch_(p.n_batch),
      unified_(p.kv_unified),
      share_by_state_copy_(p.share_by_state_copy && !p.kv_unified) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = static_cast<uint32_t>(p.n_ctx);
    cp.n_batch = static_cast<uint32_t>(p.n_batch);
    cp.n_ubatch = static_cast<uint32_t>(std::min(p.n_ubatch, p.n_batch));
    cp.n_seq_max = static_cast<uint32_t>(p.n_seq);
    if (p.n_outputs_max > 0) {
        cp.n_outputs_max = static_cast<uint32_t>(p.n_outputs_max);
        cp.n_outputs_max_per_seq = 1;
    }
    const int32_t threads = p.n_threads > 0 ? p.n_threads : static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
    cp.n_threads = threads;
    cp.n_threads_batch = p.n_threads_batch > 0 ? p.n_threads_batch : threads;
    cp.flash_attn_type = p.flash_attn < 0    ? LLAMA_FLASH_ATTN_TYPE_AUTO
                         : p.flash_attn == 0 ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                             : LLAMA_FLASH_ATTN_TYPE_ENABLED;
    cp.type_k = kv_type_of(p.type_k);
    cp.type_v = kv_type_of(p.type_v);
    cp.kv_unified = p.kv_unified;
    cp.n_rs_seq = static_cast<uint32_t>(std::max(0, p.n_rs_seq));
    cp.no_perf = true;
    cp.abort_callback = abort_callback;
    cp.abort_callback_data = nullptr;
    // The mappings before, to tell which ones llama.cpp makes for this context (engine/resident.h).
    const std::vector<mapping> before = p.release_zero_pages ? anonymous_mappings() : std::vector<mapping>{};
    ctx_ = llama_init_from_model(m.raw(), cp);
    if (ctx_ != nullptr && p.release_zero_pages) {
        for (const mapping & nm : new_mappings(before, anonymous_mappings(), size_t{1} << 20)) {
            released_zero_bytes_ += release_zero_pages(nm.start, nm.end);
        }
    }
    if (ctx_ == nullptr) {
        throw std::runtime_error("llama.cpp could not create a context with n_ctx=" + std::to_string(p.n_ctx) +
                                 " and " + std::to_string(p.n_seq) + " sequences (KV cache types K " + p.type_k +
                                 ", V " + p.type_v +
                                 "); lower --ctx-size or --parallel, or pick other --cache-type-k/-v (a quantized "
                                 "type needs a head size that is a multiple of its block, and flash attention)");
    }
}

context::~context() {
    if (ctx_ != nullptr) {
        llama_free(ctx_);
    }
}

void context::set_abort_flag(std::atomic<bool> * flag) {
    abort_ = flag;
    llama_set_abort_callback(ctx_, abort_callback, flag);
}

decode_result context::decode(const std::vector<batch_token> & tokens) {
    llama_batch batch = llama_batch_init(static_cast<int32_t>(tokens.size()), 0, 1);
    for (const auto & t : tokens) {
        common_batch_add(batch, t.tok, t.pos, {t.seq}, t.logits);
    }
    const int32_t rc = llama_decode(ctx_, batch);
    decode_calls_++;
    llama_batch_free(batch);
    if (rc == 0) {
        llama_synchronize(ctx_);
    }
    switch (rc) {
        case 0: return decode_result::ok;
        case 1: return decode_result::no_kv_space;
        case 2: return decode_result::aborted;
        default: return decode_result::error;
    }
}

void context::set_loras(const std::vector<const lora_adapter *> & adapters, const std::vector<float> & scales) {
    std::vector<llama_adapter_lora *> raw;
    std::vector<float> sc;
    for (size_t i = 0; i < adapters.size() && i < scales.size(); ++i) {
        if (adapters[i] != nullptr && scales[i] != 0.0f) {
            raw.push_back(adapters[i]->raw());
            sc.push_back(scales[i]);
        }
    }
    llama_set_adapters_lora(ctx_, raw.empty() ? nullptr : raw.data(), raw.size(), sc.empty() ? nullptr : sc.data());
}

bytes context::get_state(seq_id s, bool recurrent_only) const {
    bytes out;
    get_state_into(s, recurrent_only, out);
    return out;
}

void context::get_state_into(seq_id s, bool recurrent_only, bytes & out) const {
    const auto flags = flags_for(recurrent_only);
    out.resize(llama_state_seq_get_size_ext(ctx_, s, flags));
    const size_t n = llama_state_seq_get_data_ext(ctx_, out.data(), out.size(), s, flags);
    if (n != out.size()) {
        throw std::runtime_error("llama_state_seq_get_data_ext wrote " + std::to_string(n) + " of " +
                                 std::to_string(out.size()) + " bytes");
    }
}

size_t context::state_size(seq_id s, bool recurrent_only) const {
    return llama_state_seq_get_size_ext(ctx_, s, flags_for(recurrent_only));
}

bool context::set_state(seq_id s, const bytes & blob, bool recurrent_only) {
    const size_t n = llama_state_seq_set_data_ext(ctx_, blob.data(), blob.size(), s, flags_for(recurrent_only));
    if (n == 0) {
        llama_memory_seq_rm(llama_get_memory(ctx_), s, -1, -1);
        return false;
    }
    return true;
}

bool context::seq_rm(seq_id s, int32_t p0, int32_t p1) {
    return llama_memory_seq_rm(llama_get_memory(ctx_), s, p0, p1);
}

bool context::seq_cp(seq_id src, seq_id dst, int32_t p1, bytes * through) {
    if (unified_) {
        llama_memory_seq_cp(llama_get_memory(ctx_), src, dst, 0, p1);
        return true;
    }
    if (!share_by_state_copy_) {
        llama_memory_seq_cp(llama_get_memory(ctx_), src, dst, -1, -1);
        return true;
    }
    // dst holds src's cells and nothing else, as after the whole-buffer copy: llama.cpp reads a
    // state of no cells into a dense KV cache without clearing the sequence.
    llama_memory_seq_rm(llama_get_memory(ctx_), dst, -1, -1);
    bytes temporary;
    bytes & buf = through != nullptr ? *through : temporary;
    try {
        get_state_into(src, false, buf);
    } catch (const std::exception &) {
        return false;  // dst was cleared above
    }
    return set_state(dst, buf, false);
}

int32_t context::graphs_reused() const {
    return llama_perf_context(ctx_).n_reused;
}

int32_t context::rollback_depth() const {
    return static_cast<int32_t>(llama_n_rs_seq(ctx_));
}

int32_t context::seq_pos_max(seq_id s) const {
    return llama_memory_seq_pos_max(llama_get_memory(ctx_), s);
}

void context::clear() {
    llama_memory_clear(llama_get_memory(ctx_), false);
}

const float * context::logits(int32_t i) const {
    return llama_get_logits_ith(ctx_, i);
}

int32_t context::n_ctx() const {
    return static_cast<int32_t>(llama_n_ctx(ctx_));
}

}  // namespace lineage::engine
