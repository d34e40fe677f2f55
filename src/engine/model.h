// engine::model: a loaded GGUF model and its vocabulary (llama.cpp's llama_model).
// Why: the only place outside src/engine that needs model facts (tokenize, detokenize,
// architecture, template) goes through this class, so no other folder includes llama.h.
// Thread safety: every const member is safe to call from any thread (llama.cpp's vocab and
// model are read-only after load). Ownership: move-only; owns the llama_model.
#pragma once

#include "util/status.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct llama_model;
struct llama_vocab;

namespace lineage::engine {

using token = int32_t;

/** Family of the model's memory, which decides what a restore point can be. */
enum class memory_family {
    dense,   ///< attention KV only: every prefix of a stored KV is a restore point
    hybrid,  ///< KV + recurrent state (Gated DeltaNet, KDA, Mamba2): restore points need snapshots
    recurrent,  ///< recurrent state only (no KV)
};

const char * to_string(memory_family f);

/** The process-wide engine setup, once (later calls return at once): llama.cpp's and the common
 *  library's logs routed into spdlog, ggml's backends loaded where the engine was built with them
 *  as modules (GGML_BACKEND_DL: the directory of libggml is searched, so the build tree and the
 *  package both work), one INFO line naming the backends and their devices, llama_backend_init.
 *  Called by model's constructor and read_device_memory; never fails (no backend module found
 *  leaves ggml without devices, and loading a model then fails with its own message). */
void init_backends();

struct model_params {
    std::string path;        ///< GGUF file
    int32_t n_gpu_layers = -1;  ///< -1: as many as fit (engine default); 0: CPU only
    /** Memory-map the weights (llama.cpp's load mode mmap; --mmap / --no-mmap). True leaves the
     *  choice to llama.cpp (auto: mmap unless a device cannot use it). */
    bool use_mmap = true;
    /** Lock the weights in RAM so that they are never swapped out (--mlock). */
    bool use_mlock = false;
    /** llama.cpp's extra CPU buffer types for the weights (repacked layouts, Intel AMX tiles;
     *  llama_model_params::use_extra_bufts; --repack / --no-repack, llama-server's -nr). The
     *  server turns them on by default, as llama-server does (bench-qwen35 on a Xeon with AMX: a
     *  prefill 6-8% faster: docs/benchmarks/README.md "Repacked weights"); off here, for the
     *  engine's own tests: with them a batch of several sequences runs other kernels than one
     *  sequence alone, so a request computed beside others can part from the same request computed
     *  alone (tiny-qwen35's first generated token, tests/e2e/parallel.test.mjs), docs/prompt-
     *  cache.md "What a hit guarantees". Off for the architectures in no_repack_architectures
     *  whatever this says. */
    bool use_repack = false;
};

/** Architectures (GGUF general.architecture) loaded without the extra CPU buffer types: at the
 *  engine pin, on a CPU with Intel AMX (a Xeon Sapphire Rapids, 2026-12-06), llama.cpp places a
 *  kimi-linear weight in the AMX buffer type that an operation other than its matrix product
 *  reads; no backend then supports that operation and the context aborts while reserving its
 *  graph (ggml-backend.cpp GGML_ASSERT(*cur_backend_id != -1)). llama-server at the pin aborts the
 *  same way on the same model, and starts with --no-repack. */
inline constexpr const char * no_repack_architectures[] = {"kimi-linear"};

/** While alive, model::tokenize() on the constructing thread asks `stop` between windows of a
 *  long text and, when it says true, fails with "tokenization stopped: the client closed the
 *  connection" (the HTTP thread's "has my client gone" probe, so a departed client's megabytes
 *  are not tokenized to the end; the caller that set the probe asks it again to tell this
 *  failure from another). Scopes nest: the innermost one is asked. Thread safety: thread-local;
 *  `stop` runs on this thread. */
class tokenize_stop_scope {
public:
    explicit tokenize_stop_scope(std::function<bool()> stop);
    ~tokenize_stop_scope();
    tokenize_stop_scope(const tokenize_stop_scope &) = delete;
    tokenize_stop_scope & operator=(const tokenize_stop_scope &) = delete;

private:
    std::function<bool()> stop_;
    const std::function<bool()> * outer_;
};

class model {
public:
    /** Loads `p.path`. Throws std::runtime_error naming the file when llama.cpp refuses it. */
    explicit model(const model_params & p);
    ~model();
    model(model &&) noexcept;
    model & operator=(model &&) noexcept;
    model(const model &) = delete;
    model & operator=(const model &) = delete;

    /** Tokenizes UTF-8 `text`; `parse_special` turns "<|im_start|>" etc. into control tokens.
     *  Adds BOS/EOS only when `add_special` (and the vocabulary asks for them); chat templates
     *  carry their own, so the server never does. A text over tokenize_window_bytes (BPE or SPM,
     *  without add_special) is tokenized a window at a time, each cut at its last special token
     *  as tokenize_reusing() cuts (the same tokens): llama.cpp's cut at special tokens
     *  (tokenizer_st_partition) walks its fragment list from the start for every special token
     *  it finds, so its time grows with the square of their count (40,000 "<|im_start|>" took
     *  2.8 s, 330,000 no answer in 120 s); a window bounds that count. An error saying why
     *  when llama.cpp refuses the text or the tokenize_stop_scope stops it (never throws: what
     *  llama.cpp throws is caught here). */
    util::expected<std::vector<token>> tokenize(const std::string & text, bool parse_special = true,
                                                bool add_special = false) const;

    /** The window of tokenize(), bytes: at most ~1,400 special tokens of 12 bytes each in one
     *  llama_tokenize call (~3 ms), and a few % of a window tokenized twice where special tokens
     *  are a few hundred bytes apart (chat turns). 330,000 "<|im_start|>" (3.96 MB): 2.0 s with
     *  32 KiB windows, measured on 2 busy cores. */
    static constexpr size_t tokenize_window_bytes = 16 * 1024;

    /** One llama_tokenize call over `text`: tokenize() without windows (what it must equal;
     *  tests/engine/test_tokenize_reusing.cpp). Fails as tokenize(). */
    util::expected<std::vector<token>> tokenize_whole(std::string_view text, bool parse_special,
                                                      bool add_special) const;

    /** tokenize(text, true, false), reusing `prev_tokens` (that call's result for `prev_text`)
     *  up to a special token both texts hold at the same byte offset: only the text from there
     *  is tokenized. Exact by construction of llama.cpp's tokenizer (llama-vocab.cpp
     *  tokenizer_st_partition): with parse_special the text is cut at its special tokens
     *  (control, user-defined, unknown) and each piece between them is tokenized alone, so the
     *  tokens before a special token that two texts share depend on the bytes before it only.
     *  The cut is taken where the texts still agree for twice the longest special token's bytes
     *  after it (no special token that overlaps it can match in one text and not the other).
     *  Falls back to the whole text for a tokenizer other than BPE or SPM, or when `prev_tokens`
     *  do not spell `prev_text` byte for byte. `reused` (may be null): how many of
     *  `prev_tokens` were kept (0: the whole text was tokenized). Fails as tokenize(). */
    util::expected<std::vector<token>> tokenize_reusing(const std::string & text, const std::string & prev_text,
                                                        const std::vector<token> & prev_tokens,
                                                        size_t * reused = nullptr) const;

    /** The bytes of one token (may be a partial UTF-8 sequence). Control tokens render as
     *  their text when `special` is true, else as "". */
    std::string token_to_piece(token t, bool special = false) const;

    /** Detokenizes a whole sequence (special tokens rendered); an error saying why when
     *  llama.cpp cannot (never throws). */
    util::expected<std::string> detokenize(const std::vector<token> & tokens, bool special = true) const;

    /** Positions in `toks` where a line begins: i such that toks[i-1]'s text (special tokens
     *  rendered) holds a newline, ascending. Where the cache puts its ladder rungs and
     *  divergence checkpoints (cache/rule/ladder.h). Cost: one table lookup a token (the table is
     *  built once, at load). */
    std::vector<int32_t> line_starts(const std::vector<token> & toks) const;

    /** How many leading tokens of `toks` end at or before byte `offset` of their text (each
     *  token's token_to_piece with special tokens rendered, concatenated), or -1 when that text
     *  is not `text_bytes` long (the tokens do not spell the text they came from byte for byte:
     *  a BOS added, a normalising tokenizer). A token that straddles `offset` is not counted.
     *  Cost: one table lookup a token (the table is built once, at load). */
    int32_t tokens_before_byte(const std::vector<token> & toks, size_t offset, size_t text_bytes) const;

    /** True for end-of-generation tokens (EOS, <|im_end|>, ...). */
    bool is_eog(token t) const;

    /** The token that ends an assistant turn: the vocabulary's end-of-turn token (EOT) where it
     *  has one, else its EOS; -1 when it has neither. is_eog() holds for it. */
    token end_of_turn() const;

    int32_t n_vocab() const;
    int32_t n_ctx_train() const;
    memory_family family() const;
    /** True when some of the model's layers were offloaded to a GPU (--n-gpu-layers not 0 and
     *  llama.cpp found a GPU device); false when everything, the KV cache included, lives in
     *  host RAM. */
    bool offloaded() const { return offloaded_; }
    /** Loaded with llama.cpp's extra CPU buffer types asked for (model_params::use_repack, not
     *  turned off for the architecture) and no layer offloaded: the weights they hold were copied
     *  out of the mapped file, so a pass does not read those file ranges. */
    bool repacked() const { return repacked_; }

    /** Byte ranges of the model file holding the weights a forward pass reads whole: every
     *  tensor's data but the token embeddings', of which a pass reads only its tokens' rows
     *  (token_embd.weight; kept where the file has no output.weight, as the output projection
     *  then reads the whole table). From the GGUF's tensor table (gguf_get_data_offset +
     *  gguf_get_tensor_offset, gguf_get_tensor_size), tensors lying back to back merged into one
     *  range, in file order; empty when it cannot be read. For engine::map_file_ranges. */
    std::vector<std::pair<uint64_t, uint64_t>> pass_weight_ranges() const;

    /** general.architecture, e.g. "qwen35". */
    std::string architecture() const;
    /** The model's description from llama.cpp, e.g. "qwen35 ?B F16". */
    std::string description() const;
    /** Display id: the file name without directory and ".gguf". */
    const std::string & id() const { return id_; }
    const std::string & path() const { return path_; }
    /** Size of the weights in bytes. */
    uint64_t size_bytes() const;
    /** The GGUF's tokenizer.chat_template, or "" when the file has none. */
    std::string chat_template() const;

    llama_model * raw() const { return model_; }  // for src/engine only

private:
    llama_model * model_ = nullptr;
    std::string path_;
    std::string id_;
    bool offloaded_ = false;
    bool repacked_ = false;
    std::vector<uint32_t> piece_bytes_;  // by token id: the length of its text, special tokens rendered
    std::vector<bool> newline_;  // by token id: its text holds '\n
    std::vector<bool> special_;  // by token id: control, user-defined or unknown (the tokenizer cuts at them)
    uint32_t max_special_bytes_ = 0;  // the longest special token's text, bytes
    bool reuse_tokens_ = false;       // BPE or SPM: tokenize_reusing may cut at a special token
};

}  // namespace lineage::engine
