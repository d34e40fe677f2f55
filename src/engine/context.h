// engine::context: the llama_context that holds every live and parked sequence (one unified
// KV pool plus one recurrent-state slot per sequence id), and the sequence-state operations the
// cache needs: snapshots (whole or recurrent-only), restore, trim, share.
// Thread safety: not thread-safe; owned and used by the engine thread only.
// Ownership: move-only; owns the llama_context; the model must outlive it.
#pragma once

#include "engine/lora.h"
#include "engine/model.h"
#include "engine/sampler.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct llama_context;

namespace lineage::engine {

using seq_id = int32_t;
using bytes = std::vector<uint8_t>;

struct context_params {
    int32_t n_ctx = 4096;     ///< KV cells in the unified pool, shared by all sequences
    int32_t n_seq = 1;        ///< sequence ids (live + parked)
    int32_t n_batch = 512;    ///< max tokens per decode()
    int32_t n_ubatch = 512;
    int32_t n_threads = 0;    ///< 0 = hardware concurrency
    int32_t n_threads_batch = 0;  ///< threads of a prefill (a batch of several tokens); 0 = n_threads
    /** Flash attention: -1 auto (llama.cpp decides per device), 0 off, 1 on (llama.cpp's
     *  llama_flash_attn_type). A quantized V cache needs it: auto then turns it on, off fails. */
    int32_t flash_attn = -1;
    /** KV cache data types of K and V, by ggml name (one of kv_cache_types()). A state blob
     *  holds the cache in this type: blobs of another type do not restore (set_state fails), so
     *  the cache key carries it (server/prepare/cache_key.h bucket_inputs::kv_type). */
    std::string type_k = "f16";
    std::string type_v = "f16";
    /** One KV pool for all sequences (cells shared through seq_cp, no copies) instead of one
     *  buffer per sequence. Off by default: in a shared pool a sequence's attention runs over
     *  a view whose layout depends on the other sequences held, so its logits can differ in
     *  the low bits from a run on an empty server (greedy near-ties flip); per-sequence
     *  buffers make a restored sequence compute exactly as a cold one. */
    bool kv_unified = false;
    /** Recurrent-state snapshots kept per sequence for rollback (llama.cpp's n_rs_seq, marked
     *  experimental there): after a decode, seq_rm(s, end - k) for k <= n_rs_seq takes the
     *  recurrent state back k tokens instead of being refused. Costs (1 + n_rs_seq) x the
     *  recurrent memory. llama.cpp clamps it to 0 for architectures without the support
     *  (see rollback_depth()). */
    int32_t n_rs_seq = 0;
    /** Logits rows one decode() may ask for, over all sequences (llama.cpp's n_outputs_max;
     *  0 = n_batch). The scheduler asks for one per sequence a step (the last prompt token or
     *  the decoded one), so it passes n_seq, as llama-server passes --parallel: llama.cpp sizes
     *  its worst-case prefill graph for this many output rows, and at n_batch = 512 rows of a
     *  152k vocabulary that graph's compute buffer was 300 MiB against 28 MiB (bench-qwen35). */
    int32_t n_outputs_max = 0;
    /** Give the all-zero pages of the buffers llama.cpp allocates for this context (KV cache,
     *  recurrent state, compute) back to the kernel right after it creates them (engine/resident.h):
     *  RSS then counts a sequence's KV cache as far as tokens are written, not its whole n_ctx.
     *  For buffers in host memory only (the model on the CPU alone). */
    bool release_zero_pages = false;
    /** With per-sequence buffers, seq_cp copies the source sequence's state at its used length
     *  (llama_state_seq_get_data_ext, then llama_state_seq_set_data_ext) instead of llama.cpp's
     *  cross-stream copy, which copies the source's whole buffer of n_ctx cells
     *  (llama-kv-cache.cpp llama_kv_cache::update, "cross-stream sequence copies require to copy
     *  the actual buffer data"). In host memory the whole copy writes, and so makes resident
     *  again, every page of the destination's KV buffer whatever the prompt's length, and costs
     *  a memcpy of n_ctx cells per restore. For buffers in host memory (the model on the CPU
     *  alone); on a GPU the device-to-device copy of the whole stream is faster than two trips
     *  through host memory. */
    bool share_by_state_copy = false;
};

/** The KV cache data types llama.cpp accepts (llama-server's -ctk/-ctv list, common/arg.cpp):
 *  f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1. */
const std::vector<std::string> & kv_cache_types();

/** True for a block-quantized KV type (q8_0, q4_0, ...), which llama.cpp stores only with flash
 *  attention for V. False for f32, f16, bf16 and for names not in kv_cache_types(). */
bool kv_type_is_quantized(const std::string & name);

/** One token of a batch: `logits` asks for its output distribution. */
struct batch_token {
    token tok;
    int32_t pos;
    seq_id seq;
    bool logits;
};

/** Outcome of decode(). */
enum class decode_result { ok, no_kv_space, aborted, error };

class context {
public:
    /** Throws std::runtime_error when llama.cpp cannot create the context. */
    context(const model & m, const context_params & p);
    ~context();
    context(const context &) = delete;
    context & operator=(const context &) = delete;

    /** Runs one llama_decode over `tokens` (<= n_batch) and, when it succeeds, waits for the
     *  backend to finish it (llama_synchronize): llama_decode returns once a GPU backend has
     *  queued the last ubatch, so a caller's timing would be the launch's, not the computation's
     *  (the scheduler's prefill_s and the tier cost rule's prefill rate; a no-op on the CPU). On
     *  no_kv_space or error the memory is as before the call (llama.cpp contract); on aborted,
     *  processed ubatches remain. */
    decode_result decode(const std::vector<batch_token> & tokens);

    /** Applies LoRA adapters[i] with scales[i] (same sizes; a zero scale leaves it out) to every
     *  decode() from now on; empty vectors: the base model. Cheap when the set is unchanged
     *  (llama.cpp compares); a change makes the next decode rebuild its graph. */
    void set_loras(const std::vector<const lora_adapter *> & adapters, const std::vector<float> & scales);

    /** Set from another thread to abort a running decode() at the next ubatch boundary. */
    void set_abort_flag(std::atomic<bool> * flag);

    /** Snapshot of one sequence. recurrent_only: PARTIAL_ONLY (the recurrent state; on dense
     *  models llama.cpp returns the whole KV, so callers do not ask for it there). */
    bytes get_state(seq_id s, bool recurrent_only) const;
    /** As get_state, into `out` (resized to the state's size: no allocation when its capacity
     *  holds it, as for a recycled buffer). Throws std::runtime_error as get_state. */
    void get_state_into(seq_id s, bool recurrent_only, bytes & out) const;
    /** Size in bytes that get_state would return, without copying. */
    size_t state_size(seq_id s, bool recurrent_only) const;
    /** Restores a snapshot into `s` (replacing what `s` held for that part). False on failure
     *  (e.g. no KV space, or a blob from another model); `s` is then cleared. */
    bool set_state(seq_id s, const bytes & blob, bool recurrent_only);

    /** Removes positions [p0, p1) of `s` (p1 < 0: to the end). Returns false when refused
     *  (recurrent memory cannot drop a partial range it has already absorbed, except the last
     *  k <= rollback_depth() tokens of the last decode, once between decodes). */
    bool seq_rm(seq_id s, int32_t p0, int32_t p1 = -1);
    /** Gives `dst` src's KV for positions [0, p1) and src's recurrent state, replacing what
     *  `dst` held. Unified pool: shares the cells (metadata only). Per-sequence buffers: copies
     *  src's whole buffer on the device (llama.cpp copies only whole streams), or, with
     *  context_params::share_by_state_copy, src's state at its used length through `through`
     *  (resized to the state's size: no allocation when its capacity holds it; a temporary when
     *  null). The caller trims [p1, end) after putting the recurrent state of p1 in place.
     *  False when the state copy fails (dst is then cleared). */
    bool seq_cp(seq_id src, seq_id dst, int32_t p1, bytes * through = nullptr);
    /** True when seq_cp copies states (context_params::share_by_state_copy, per-sequence buffers). */
    bool shares_by_state_copy() const { return share_by_state_copy_; }
    /** Last position held by `s`, -1 when empty. */
    int32_t seq_pos_max(seq_id s) const;
    void clear();

    /** Logits row of the i-th token of the last decode() that asked for logits. */
    const float * logits(int32_t i) const;

    int32_t n_ctx() const;
    /** Tokens a hybrid sequence's recurrent state can be taken back after a decode (the
     *  n_rs_seq llama.cpp kept: 0 when not asked for or not supported by the architecture). */
    int32_t rollback_depth() const;
    /** Compute graphs of this context that llama.cpp reused instead of building again
     *  (llama_perf_context's n_reused): a decode step of the same shape as the last reuses its
     *  graph; one that does not pays for building and allocating it. */
    int32_t graphs_reused() const;
    /** llama_decode calls so far (this wrapper's count). */
    int64_t decode_calls() const { return decode_calls_; }
    /** Bytes of all-zero pages given back after the context was created (context_params::
     *  release_zero_pages; 0 when off). */
    uint64_t released_zero_bytes() const { return released_zero_bytes_; }
    int32_t n_seq() const { return n_seq_; }
    int32_t n_batch() const { return n_batch_; }
    const model & get_model() const { return model_; }
    llama_context * raw() const { return ctx_; }

private:
    const model & model_;
    llama_context * ctx_ = nullptr;
    int32_t n_seq_ = 1;
    int32_t n_batch_ = 512;
    bool unified_ = false;
    bool share_by_state_copy_ = false;
    std::atomic<bool> * abort_ = nullptr;
    int64_t decode_calls_ = 0;
    uint64_t released_zero_bytes_ = 0;
};

}  // namespace lineage::engine
