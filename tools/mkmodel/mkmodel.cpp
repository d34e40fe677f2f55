// lineage-mkmodel: writes a GGUF model with deterministic random weights (same --seed, same
// bytes) for engine tests and the prompt-cache benchmark, carrying the real Qwen3.5 tokenizer
// and chat template. Pipeline: metadata (model_spec) -> llama_model_init_from_user ->
// llama_model_save_to_file -> finalize (the saver regenerates tokenizer.* from its vocab, drops
// the chat template, and keeps optional tensors no real checkpoint has) -> atomic rename.
// Optional --check runs model_check on the result.
// Thread safety: single-threaded program. Ownership: RAII wrappers free every engine object.
#include "gguf_io.h"
#include "lora_writer.h"
#include "projector_writer.h"
#include "model_check.h"
#include "model_spec.h"

#include <CLI/CLI.hpp>
#include <ggml.h>
#include <gguf.h>
#include <llama.h>
#ifdef LINEAGE_ENGINE_BACKEND_DL
#include <dlfcn.h>
#include <ggml-backend.h>
#include <filesystem>
#endif

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace lineage::mkmodel {
namespace {

struct model_deleter {
    void operator()(llama_model * m) const { llama_model_free(m); }
};
using model_ptr = std::unique_ptr<llama_model, model_deleter>;

// A data file the build names (the engine source tree's), else the installed copy beside the
// binary: <bin>/../share/lineage/<name> (cmake/package.cmake installs it there).
std::string data_file(const char * built, const char * name) {
    if (access(built, R_OK) == 0) {
        return built;
    }
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) {
        return built;
    }
    std::string dir(exe, static_cast<size_t>(n));
    dir = dir.substr(0, dir.rfind('/'));
    const std::string installed = dir + "/../share/lineage/" + name;
    return access(installed.c_str(), R_OK) == 0 ? installed : std::string(built);
}

struct options {
    std::string arch;
    std::string preset = "tiny";
    uint64_t seed = 0;
    std::string output;
    std::string vocab = data_file(LINEAGE_DEFAULT_VOCAB, "ggml-vocab-qwen35.gguf");
    std::string chat_template = data_file(LINEAGE_DEFAULT_TEMPLATE, "Qwen3.5-4B.jinja");
    bool check = false;
    bool check_only = false;
    int check_tokens = 1000;
    int threads = 2;
    bool verbose = false;
    std::string lora_out;
    std::optional<uint64_t> lora_seed;
    bool lora_only = false;
    std::string mmproj_out;
};

bool g_verbose = false;

// Engine log filter: errors always, everything with --verbose.
void log_callback(ggml_log_level level, const char * text, void *) {
    static ggml_log_level last = GGML_LOG_LEVEL_NONE;
    if (level != GGML_LOG_LEVEL_CONT) {
        last = level;
    }
    if (g_verbose || last == GGML_LOG_LEVEL_ERROR) {
        std::fputs(text, stderr);
    }
}

bool silent_progress(float, void *) {
    return true;
}

// The tokenizer.* pairs of the vocab GGUF, without its chat template; nullptr (and a message
// on stderr) when the file is unreadable or has no token list.
gguf_ptr load_tokenizer_kv(const std::string & path) {
    gguf_ptr g = read_gguf_meta(path);
    if (!g) {
        std::fprintf(stderr, "lineage-mkmodel: cannot read the vocab GGUF %s (set --vocab)\n", path.c_str());
        return nullptr;
    }
    for (int64_t i = gguf_get_n_kv(g.get()) - 1; i >= 0; --i) {
        const std::string key = gguf_get_key(g.get(), i);
        if (key.rfind("tokenizer.", 0) != 0 || key == "tokenizer.chat_template") {
            gguf_remove_key(g.get(), key.c_str());
        }
    }
    if (gguf_find_key(g.get(), "tokenizer.ggml.tokens") < 0) {
        std::fprintf(stderr, "lineage-mkmodel: %s has no tokenizer.ggml.tokens\n", path.c_str());
        return nullptr;
    }
    return g;
}

bool read_file(const std::string & path, std::string & out) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        return false;
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    out = ss.str();
    return !out.empty();
}

// Copies n bytes from `in` to `out`; false on a short read or write.
bool copy_bytes(std::FILE * in, std::FILE * out, size_t n) {
    std::vector<char> buf(1 << 20);
    while (n > 0) {
        const size_t k = std::min(n, buf.size());
        if (std::fread(buf.data(), 1, k, in) != k || std::fwrite(buf.data(), 1, k, out) != k) {
            return false;
        }
        n -= k;
    }
    return true;
}

// Writes `dst` from the GGUF the engine saved at `src`: all of src's keys except tokenizer.*,
// which come from `tok`, plus tokenizer.chat_template and general.file_type; all of src's
// tensors except the spurious ones (is_spurious_tensor), their bytes copied verbatim.
// Streams tensor data, so memory stays small. Returns false, with a message on stderr, on
// any read or write error.
bool finalize_gguf(const std::string & src, const std::string & dst, const gguf_context * tok,
                   const std::string & chat_template) {
    gguf_ptr in_meta = read_gguf_meta(src);
    if (!in_meta) {
        std::fprintf(stderr, "lineage-mkmodel: cannot read back %s\n", src.c_str());
        return false;
    }
    gguf_ptr out_meta(gguf_init_empty());
    gguf_set_kv(out_meta.get(), in_meta.get());
    for (int64_t i = gguf_get_n_kv(out_meta.get()) - 1; i >= 0; --i) {
        const std::string key = gguf_get_key(out_meta.get(), i);
        if (key.rfind("tokenizer.", 0) == 0) {
            gguf_remove_key(out_meta.get(), key.c_str());
        }
    }
    gguf_set_kv(out_meta.get(), tok);
    gguf_set_val_str(out_meta.get(), "tokenizer.chat_template", chat_template.c_str());
    gguf_set_val_u32(out_meta.get(), "general.file_type", LLAMA_FTYPE_MOSTLY_F16);

    std::vector<int64_t> kept;
    for (int64_t i = 0; i < gguf_get_n_tensors(in_meta.get()); ++i) {
        const char * name = gguf_get_tensor_name(in_meta.get(), i);
        if (is_spurious_tensor(name)) {
            continue;
        }
        ggml_tensor t{};
        t.type = gguf_get_tensor_type(in_meta.get(), i);
        const int64_t * ne = gguf_get_tensor_ne(in_meta.get(), i);
        for (int d = 0; d < GGML_MAX_DIMS; ++d) {
            t.ne[d] = ne[d];
        }
        t.nb[0] = ggml_type_size(t.type);
        t.nb[1] = t.nb[0] * (t.ne[0] / ggml_blck_size(t.type));
        for (int d = 2; d < GGML_MAX_DIMS; ++d) {
            t.nb[d] = t.nb[d - 1] * t.ne[d - 1];
        }
        ggml_set_name(&t, name);
        gguf_add_tensor(out_meta.get(), &t);
        kept.push_back(i);
    }

    const size_t in_data = gguf_get_data_offset(in_meta.get());
    const size_t align = gguf_get_alignment(out_meta.get());
    const std::vector<char> zeros(align, 0);
    std::FILE * in = std::fopen(src.c_str(), "rb");
    std::FILE * out = std::fopen(dst.c_str(), "wb");
    bool ok = in != nullptr && out != nullptr && gguf_write_to_file_ptr(out_meta.get(), out, /*only_meta =*/true);
    for (size_t k = 0; ok && k < kept.size(); ++k) {
        const size_t size = gguf_get_tensor_size(in_meta.get(), kept[k]);
        const size_t pad = (align - size % align) % align;
        ok = std::fseek(in, long(in_data + gguf_get_tensor_offset(in_meta.get(), kept[k])), SEEK_SET) == 0 &&
             copy_bytes(in, out, size) && std::fwrite(zeros.data(), 1, pad, out) == pad;
    }
    ok = (in != nullptr && std::fclose(in) == 0) && ok;
    ok = (out != nullptr && std::fclose(out) == 0) && ok;
    if (!ok) {
        std::fprintf(stderr, "lineage-mkmodel: writing %s failed: %s\n", dst.c_str(), std::strerror(errno));
    }
    return ok;
}

// Builds the model in memory and writes it to opts.output. Returns the exit status.
int write_model(const options & opts, model_arch arch, model_preset preset) {
    std::string chat_template;
    if (!read_file(opts.chat_template, chat_template)) {
        std::fprintf(stderr, "lineage-mkmodel: cannot read the chat template %s (set --template)\n",
                     opts.chat_template.c_str());
        return 1;
    }
    gguf_ptr tok = load_tokenizer_kv(opts.vocab);
    if (!tok) {
        return 1;
    }

    // Temporaries next to the output, so the final rename is atomic; probing the first one
    // also reports an unwritable destination before any work.
    const std::string tmp_saved = opts.output + ".tmp-" + std::to_string(getpid()) + ".saved";
    const std::string tmp_final = opts.output + ".tmp-" + std::to_string(getpid()) + ".part";
    std::FILE * probe = std::fopen(tmp_final.c_str(), "wb");
    if (probe == nullptr) {
        std::fprintf(stderr, "lineage-mkmodel: cannot write next to %s: %s\n", opts.output.c_str(),
                     std::strerror(errno));
        return 1;
    }
    std::fclose(probe);
    auto cleanup = [&] {
        std::remove(tmp_saved.c_str());
        std::remove(tmp_final.c_str());
    };

    gguf_ptr meta(gguf_init_empty());
    const std::string name = "lineage-mkmodel " + opts.arch + " " + opts.preset + " seed " + std::to_string(opts.seed);
    add_model_metadata(meta.get(), arch, preset, name);
    gguf_set_kv(meta.get(), tok.get());
    gguf_set_val_str(meta.get(), "tokenizer.chat_template", chat_template.c_str());

    llama_model_params mparams = llama_model_default_params();
    mparams.progress_callback = silent_progress;
    uint64_t seed = opts.seed;
    {
        model_ptr model(llama_model_init_from_user(meta.get(), fill_tensor, &seed, mparams));
        if (!model) {
            std::fprintf(stderr, "lineage-mkmodel: the engine rejected the %s metadata (rerun with --verbose)\n",
                         opts.arch.c_str());
            cleanup();
            return 1;
        }
        llama_model_save_to_file(model.get(), tmp_saved.c_str());
    }
    if (!finalize_gguf(tmp_saved, tmp_final, tok.get(), chat_template)) {
        cleanup();
        return 1;
    }
    if (std::rename(tmp_final.c_str(), opts.output.c_str()) != 0) {
        std::fprintf(stderr, "lineage-mkmodel: cannot rename %s to %s: %s\n", tmp_final.c_str(),
                     opts.output.c_str(), std::strerror(errno));
        cleanup();
        return 1;
    }
    cleanup();
    std::printf("wrote %s (%s, seed %llu)\n", opts.output.c_str(), describe(arch, preset).c_str(),
                static_cast<unsigned long long>(opts.seed));
    return 0;
}

}  // namespace
}  // namespace lineage::mkmodel

int main(int argc, char ** argv) {
    using namespace lineage::mkmodel;
    options opts;
    CLI::App app{
        "lineage-mkmodel: write a GGUF model with deterministic random weights (the same --seed gives the "
        "same bytes) for testing and benchmarking the prompt cache. Every model carries the tokenizer of "
        "--vocab (the engine's Qwen3.5 test vocab: 151,936 tokens) and the Qwen3.5 chat template; greedy "
        "generation yields random tokens.\n\n"
        "  qwen35          Gated DeltaNet + gated attention, one full-attention layer in four\n"
        "  qwen3           dense transformer (the control: KV cache only)\n"
        "  kimi-linear     Kimi Delta Attention + MLA, one MLA layer in four, MoE FFN\n"
        "  granite-hybrid  Mamba2 + NoPE attention (Granite-4.0-H layout)\n\n"
        "Presets: tiny (4 layers, n_embd 64, ~45 MB: tests; 1,000 tokens prefill in well under a second)\n"
        "bench (16-24 layers, n_embd 512, ~0.5 GB: a cold 3,000-token prefill takes seconds on 2 cores)\n"
        "and large (qwen35 and qwen3 only: 24 layers, n_embd 2048, 2.0B parameters, 4.0 GB: for a GPU)."};
    app.add_option("--arch", opts.arch, "model architecture (required unless --check-only)")
        ->check(CLI::IsMember(arch_names()));
    app.add_option("--preset", opts.preset, "size preset")->check(CLI::IsMember(preset_names()))->capture_default_str();
    app.add_option("--seed", opts.seed, "seed of the weights (the file is a pure function of arch, preset, seed, "
                                        "vocab and template)")
        ->capture_default_str();
    app.add_option("-o,--output", opts.output, "GGUF file to write (replaced atomically)")->required();
    app.add_option("--vocab", opts.vocab, "GGUF whose tokenizer.* keys are copied")->capture_default_str();
    app.add_option("--template", opts.chat_template, "Jinja chat template stored as tokenizer.chat_template")
        ->capture_default_str();
    app.add_flag("--check", opts.check,
                 "after writing, load the file, time a cold prefill, decode greedily, and verify that a "
                 "restored PARTIAL_ONLY checkpoint replays bit-identically (exit 1 if not)");
    app.add_flag("--check-only", opts.check_only, "do not write; run --check on the existing -o file");
    app.add_option("--check-tokens", opts.check_tokens, "prompt tokens for --check (>= 16)")
        ->check(CLI::Range(16, 1 << 20))
        ->capture_default_str();
    app.add_option("--threads", opts.threads, "decode threads for --check")->check(CLI::Range(1, 1024))->capture_default_str();
    app.add_flag("--verbose", opts.verbose, "print the engine's log");
    app.add_option("--lora-out", opts.lora_out,
                   "also write a LoRA adapter GGUF for the model (random rank-4 adapters of its attention-output, "
                   "FFN and output matrices) to this file");
    app.add_option("--lora-seed", opts.lora_seed, "seed of the adapter's weights (default: --seed)");
    app.add_flag("--lora-only", opts.lora_only,
                 "do not write the model; write --lora-out / --mmproj-out for the existing -o file");
    app.add_option("--mmproj-out", opts.mmproj_out,
                   "also write a multimodal projector GGUF for the model (random-weight LLaVA-style 'mlp' projector: "
                   "32x32 images, 16 tokens each; libmtmd loads it with --mmproj) to this file");
    CLI11_PARSE(app, argc, argv);
    if (opts.lora_only && opts.lora_out.empty() && opts.mmproj_out.empty()) {
        std::fprintf(stderr, "--lora-only needs --lora-out FILE or --mmproj-out FILE\n");
        return 1;
    }
    if (opts.arch.empty() && !opts.check_only && !opts.lora_only) {
        std::fprintf(stderr, "--arch is required\nRun with --help for more information.\n");
        return 1;
    }

    g_verbose = opts.verbose;
    llama_log_set(log_callback, nullptr);
#ifdef LINEAGE_ENGINE_BACKEND_DL
    // An engine built with its backends as loadable modules (the CUDA build) has none until they
    // are loaded: from libggml's own directory, as engine::init_backends does (the model check
    // below loads the model it wrote).
    if (Dl_info info{}; dladdr(reinterpret_cast<void *>(&ggml_backend_load_all_from_path), &info) != 0 &&
                        info.dli_fname != nullptr) {
        ggml_backend_load_all_from_path(std::filesystem::path(info.dli_fname).parent_path().c_str());
    } else {
        ggml_backend_load_all();
    }
#endif
    llama_backend_init();
    int rc = 0;
    if (!opts.check_only && !opts.lora_only) {
        if (!has_shape(*parse_arch(opts.arch), *parse_preset(opts.preset))) {
            std::fprintf(stderr, "lineage-mkmodel: no %s preset for --arch %s (large: qwen35 or qwen3)\n",
                         opts.preset.c_str(), opts.arch.c_str());
            return 1;
        }
        rc = write_model(opts, *parse_arch(opts.arch), *parse_preset(opts.preset));
    }
    if (rc == 0 && !opts.lora_out.empty()) {
        rc = write_lora(opts.output, opts.lora_out, opts.lora_seed.value_or(opts.seed));
    }
    if (rc == 0 && !opts.mmproj_out.empty()) {
        rc = write_projector(opts.output, opts.mmproj_out, opts.seed);
    }
    if (rc == 0 && (opts.check || opts.check_only)) {
        check_options copts;
        copts.path = opts.output;
        copts.n_tokens = opts.check_tokens;
        copts.n_threads = opts.threads;
        rc = run_check(copts) ? 0 : 1;
    }
    llama_backend_free();
    return rc;
}
