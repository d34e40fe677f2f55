// engine::model over llama.h: load, vocabulary, metadata. Also owns the process-wide engine
// setup (init_backends: llama.cpp's log routed into spdlog, the common library's log level,
// ggml's backend modules loaded where the engine has them, llama_backend_init once).
// Thread safety: see model.h; the one-time setup is guarded by std::call_once.
#include "engine/model.h"
#include "engine/resident.h"

#include <ggml-backend.h>
#include <gguf.h>
#include <llama.h>
#include <log.h>
#include <spdlog/spdlog.h>

#ifdef LINEAGE_ENGINE_BACKEND_DL
#include <dlfcn.h>
#endif

#include <algorithm>
#include <cctype>
#include <climits>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>

namespace lineage::engine {

namespace {

// llama.cpp logs in pieces (a line may arrive as several CONT calls); lines are assembled
// per thread and emitted whole. Its INFO chatter (tensor loading) is our debug level.
void log_callback(ggml_log_level level, const char * text, void * /*user_data*/) {
    thread_local std::string line;
    thread_local spdlog::level::level_enum line_level = spdlog::level::debug;
    if (level != GGML_LOG_LEVEL_CONT) {
        switch (level) {
            case GGML_LOG_LEVEL_ERROR: line_level = spdlog::level::err; break;
            case GGML_LOG_LEVEL_WARN:  line_level = spdlog::level::warn; break;
            case GGML_LOG_LEVEL_INFO:  line_level = spdlog::level::debug; break;
            default:                   line_level = spdlog::level::trace; break;
        }
    }
    line += text ? text : "";
    size_t nl;
    while ((nl = line.find('\n')) != std::string::npos) {
        if (nl > 0) {
            spdlog::log(line_level, "llama: {}", line.substr(0, nl));
        }
        line.erase(0, nl + 1);
    }
}

/** Loads ggml's backend modules where the engine was built with them (GGML_BACKEND_DL:
 *  scripts/bootstrap's CUDA build) from the directory libggml was loaded from: the engine's
 *  build tree, or lib/lineage of the package; then one INFO line names each backend and its
 *  devices (a CUDA module on a machine without a GPU shows "no device"). */
void load_backends() {
#ifdef LINEAGE_ENGINE_BACKEND_DL
    Dl_info info{};
    std::string dir;
    if (dladdr(reinterpret_cast<void *>(&ggml_backend_load_all_from_path), &info) != 0 && info.dli_fname) {
        dir = std::filesystem::path(info.dli_fname).parent_path().string();
    }
    if (dir.empty()) {
        ggml_backend_load_all();  // the executable's directory and the working directory
    } else {
        ggml_backend_load_all_from_path(dir.c_str());
    }
    std::string where = " (loadable modules from " + (dir.empty() ? std::string("the executable's directory") : dir) + ")";
#else
    std::string where = " (built in)";
#endif
    std::string list;
    for (size_t r = 0; r < ggml_backend_reg_count(); ++r) {
        ggml_backend_reg_t reg = ggml_backend_reg_get(r);
        const size_t n = ggml_backend_reg_dev_count(reg);
        list += (list.empty() ? "" : ", ") + std::string(ggml_backend_reg_name(reg));
        if (n == 0) {
            list += ": no device";
        }
        for (size_t d = 0; d < n; ++d) {
            ggml_backend_dev_t dev = ggml_backend_reg_dev_get(reg, d);
            const auto type = ggml_backend_dev_type(dev);
            if (type == GGML_BACKEND_DEVICE_TYPE_GPU || type == GGML_BACKEND_DEVICE_TYPE_IGPU) {
                size_t free = 0;
                size_t total = 0;
                ggml_backend_dev_memory(dev, &free, &total);
                list += std::string(d == 0 ? ": " : "; ") + ggml_backend_dev_name(dev) + " " +
                        ggml_backend_dev_description(dev) + " " + std::to_string(total >> 20) + " MiB";
            }
        }
    }
#ifdef LINEAGE_ENGINE_BACKEND_DL
    // A module that is there but did not load (the CUDA one without the NVIDIA driver's
    // libcuda.so.1): named with the loader's reason, so that a GPU machine that serves on the
    // CPU says why.
    std::error_code ec;
    for (const auto & f : std::filesystem::directory_iterator(dir.empty() ? "." : dir, ec)) {
        const std::string name = f.path().filename().string();
        const std::string prefix = "libggml-";
        if (name.rfind(prefix, 0) != 0 || name.size() < prefix.size() + 4 ||
            name.compare(name.size() - 3, 3, ".so") != 0 || name == "libggml-base.so") {
            continue;
        }
        std::string backend = name.substr(prefix.size(), name.size() - prefix.size() - 3);
        const std::string family = backend.substr(0, backend.find('-'));  // cpu-haswell -> cpu
        bool loaded = false;
        for (size_t r = 0; r < ggml_backend_reg_count(); ++r) {
            std::string reg = ggml_backend_reg_name(ggml_backend_reg_get(r));
            std::transform(reg.begin(), reg.end(), reg.begin(), [](unsigned char c) { return std::tolower(c); });
            loaded = loaded || reg == family;
        }
        if (loaded) {
            continue;
        }
        std::string why = "no reason given";
        if (void * h = dlopen(f.path().c_str(), RTLD_NOW | RTLD_LOCAL)) {
            dlclose(h);
            why = "it loads but registered no backend";
        } else if (const char * e = dlerror()) {
            why = e;
        }
        list += "; not loaded: " + backend + " (" + why + ")";
    }
#endif
    spdlog::info("engine backends{}: {}", where, list.empty() ? std::string("none") : list);
}

}  // namespace

void init_backends() {
    static std::once_flag once;
    std::call_once(once, [] {
        llama_log_set(log_callback, nullptr);
        // The common library logs on its own (stderr); keep it to errors unless tracing (its
        // chat-parse warnings repeat what chat_template already reports, and its debug lines
        // quote prompts and replies). At trace its lines carry a timestamp too.
        const bool tracing = spdlog::get_level() <= spdlog::level::trace;
        common_log_set_verbosity_thold(tracing ? LOG_LEVEL_DEBUG : LOG_LEVEL_ERROR);
        if (tracing) {
            common_log_set_prefix(common_log_main(), true);
            common_log_set_timestamps(common_log_main(), true);
        }
        load_backends();
        llama_backend_init();
    });
}

namespace {

/** The GGUF file's general.architecture ("" when unreadable: llama.cpp's load then says why). */
std::string gguf_architecture(const std::string & path) {
    gguf_init_params gp{};
    gp.no_alloc = true;
    gp.ctx = nullptr;
    gguf_context * g = gguf_init_from_file(path.c_str(), gp);
    if (g == nullptr) {
        return {};
    }
    std::string arch;
    if (const int64_t k = gguf_find_key(g, "general.architecture"); k >= 0 && gguf_get_kv_type(g, k) == GGUF_TYPE_STRING) {
        arch = gguf_get_val_str(g, k);
    }
    gguf_free(g);
    return arch;
}

const llama_vocab * vocab_of(const llama_model * m) {
    const llama_vocab * v = llama_model_get_vocab(m);
    if (!v) {
        throw std::runtime_error("model has no vocabulary");
    }
    return v;
}

std::string id_from_path(const std::string & path) {
    std::string name = std::filesystem::path(path).filename().string();
    const std::string ext = ".gguf";
    if (name.size() > ext.size() && name.compare(name.size() - ext.size(), ext.size(), ext) == 0) {
        name.resize(name.size() - ext.size());
    }
    return name;
}

}  // namespace

const char * to_string(memory_family f) {
    switch (f) {
        case memory_family::dense:     return "dense";
        case memory_family::hybrid:    return "hybrid";
        case memory_family::recurrent: return "recurrent";
    }
    return "unknown";
}

model::model(const model_params & p) : path_(p.path), id_(id_from_path(p.path)) {
    std::error_code ec;
    if (p.path.empty()) {
        throw std::runtime_error("no model file given");
    }
    if (!std::filesystem::exists(p.path, ec)) {
        throw std::runtime_error("model file not found: " + p.path);
    }
    if (!std::filesystem::is_regular_file(p.path, ec)) {
        throw std::runtime_error("model path is not a regular file: " + p.path);
    }
    init_backends();

    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = p.n_gpu_layers;
    mp.load_mode = p.use_mlock ? (p.use_mmap ? LLAMA_LOAD_MODE_MMAP_MLOCK : LLAMA_LOAD_MODE_MLOCK)
                               : (p.use_mmap ? LLAMA_LOAD_MODE_AUTO : LLAMA_LOAD_MODE_NONE);
    mp.use_extra_bufts = p.use_repack;
    if (p.use_repack) {
        const std::string arch = gguf_architecture(p.path);
        for (const char * a : no_repack_architectures) {
            if (arch == a) {
                mp.use_extra_bufts = false;
                spdlog::info("model: {} is loaded without llama.cpp's extra CPU buffer types (as --no-repack): at the "
                             "engine pin they abort this architecture's context on CPUs with Intel AMX",
                             arch);
            }
        }
    }
    // With the extra buffer types llama.cpp copies (repacks) most weights out of the mapped file
    // while it loads: the file pages it read stay mapped, and the process would hold the weights
    // twice (RSS ~300 MiB more on bench-qwen35). Every 2% of the load the pages read so far are
    // unmapped (they stay in the page cache; a weight still read from the mapping is mapped again
    // when a pass reads it). The loader reads the mapping on this thread only, between calls.
    struct load_progress {
        std::string path;
        int last = -1;
    } progress{p.path, -1};
    if (mp.use_extra_bufts && p.use_mmap && !p.use_mlock) {
        mp.progress_callback = [](float done, void * user) {
            auto & pr = *static_cast<load_progress *>(user);
            const int step = static_cast<int>(done * 50.0f);
            if (step > pr.last) {
                pr.last = step;
                (void) unmap_file_pages(pr.path);
            }
            return true;
        };
        mp.progress_callback_user_data = &progress;
    }
    model_ = llama_model_load_from_file(p.path.c_str(), mp);
    offloaded_ = p.n_gpu_layers != 0 && llama_supports_gpu_offload();
    repacked_ = mp.use_extra_bufts && !offloaded_;
    if (!model_) {
        throw std::runtime_error("llama.cpp could not load " + p.path +
                                 " (not a GGUF file, unsupported architecture, or out of memory; "
                                 "run with --log-level debug for the loader's messages)");
    }
    if (!llama_model_get_vocab(model_)) {
        llama_model_free(model_);
        model_ = nullptr;
        throw std::runtime_error("model has no vocabulary: " + p.path);
    }
    const int32_t n = n_vocab();
    newline_.assign(static_cast<size_t>(std::max(n, 0)), false);
    piece_bytes_.assign(static_cast<size_t>(std::max(n, 0)), 0);
    special_.assign(static_cast<size_t>(std::max(n, 0)), false);
    const llama_vocab * v = vocab_of(model_);
    constexpr int special_attrs = LLAMA_TOKEN_ATTR_CONTROL | LLAMA_TOKEN_ATTR_USER_DEFINED | LLAMA_TOKEN_ATTR_UNKNOWN;
    for (int32_t t = 0; t < n; ++t) {
        const std::string piece = token_to_piece(t, true);
        newline_[static_cast<size_t>(t)] = piece.find('\n') != std::string::npos;
        piece_bytes_[static_cast<size_t>(t)] = static_cast<uint32_t>(piece.size());
        if ((llama_vocab_get_attr(v, t) & special_attrs) != 0) {
            special_[static_cast<size_t>(t)] = true;
            max_special_bytes_ = std::max(max_special_bytes_, static_cast<uint32_t>(piece.size()));
        }
    }
    const auto type = llama_vocab_type(v);
    reuse_tokens_ = type == LLAMA_VOCAB_TYPE_BPE || type == LLAMA_VOCAB_TYPE_SPM;
}

util::expected<std::vector<token>> model::tokenize_reusing(const std::string & text, const std::string & prev_text,
                                                           const std::vector<token> & prev_tokens,
                                                           size_t * reused) const {
    if (reused) {
        *reused = 0;
    }
    if (!reuse_tokens_ || prev_tokens.empty()) {
        return tokenize(text, true, false);
    }
    const size_t n = std::min(text.size(), prev_text.size());
    const size_t lcp = static_cast<size_t>(
        std::mismatch(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(n), prev_text.begin()).first -
        text.begin());
    // The last special token of prev_tokens that starts where both texts agree for twice the
    // longest special token after it; the tokens before it are the text's too.
    size_t offset = 0;    // byte offset of prev_tokens[i]
    size_t cut = 0;       // tokens kept: the cut special token's index
    size_t cut_byte = 0;  // its byte offset
    for (size_t i = 0; i < prev_tokens.size(); ++i) {
        const auto t = static_cast<size_t>(prev_tokens[i]);
        if (t >= piece_bytes_.size()) {
            return tokenize(text, true, false);
        }
        if (special_[t] && i > 0 && offset + 2 * static_cast<size_t>(max_special_bytes_) <= lcp) {
            cut = i;
            cut_byte = offset;
        }
        offset += piece_bytes_[t];
    }
    if (offset != prev_text.size() || cut == 0) {
        return tokenize(text, true, false);  // the tokens do not spell the text, or nothing to keep
    }
    auto rest = tokenize(text.substr(cut_byte), true, false);
    if (!rest) {
        return rest;
    }
    std::vector<token> out(prev_tokens.begin(), prev_tokens.begin() + static_cast<std::ptrdiff_t>(cut));
    out.insert(out.end(), rest->begin(), rest->end());
    if (reused) {
        *reused = cut;
    }
    return out;
}

int32_t model::tokens_before_byte(const std::vector<token> & toks, size_t offset, size_t text_bytes) const {
    size_t end = 0;  // where the text of the tokens so far ends
    int32_t before = -1;
    for (size_t i = 0; i < toks.size(); ++i) {
        const auto t = static_cast<size_t>(toks[i]);
        if (t >= piece_bytes_.size()) {
            return -1;
        }
        if (before < 0 && end + piece_bytes_[t] > offset) {
            before = static_cast<int32_t>(i);
        }
        end += piece_bytes_[t];
    }
    if (end != text_bytes) {
        return -1;
    }
    return before < 0 ? static_cast<int32_t>(toks.size()) : before;
}

std::vector<int32_t> model::line_starts(const std::vector<token> & toks) const {
    std::vector<int32_t> out;
    for (size_t i = 1; i < toks.size(); ++i) {
        const auto t = static_cast<size_t>(toks[i - 1]);
        if (t < newline_.size() && newline_[t]) {
            out.push_back(static_cast<int32_t>(i));
        }
    }
    return out;
}

model::~model() {
    if (model_) {
        llama_model_free(model_);
    }
}

model::model(model && o) noexcept
    : model_(o.model_),
      path_(std::move(o.path_)),
      id_(std::move(o.id_)),
      piece_bytes_(std::move(o.piece_bytes_)),
      newline_(std::move(o.newline_)) {
    o.model_ = nullptr;
}

model & model::operator=(model && o) noexcept {
    if (this != &o) {
        if (model_) {
            llama_model_free(model_);
        }
        model_ = o.model_;
        path_ = std::move(o.path_);
        id_ = std::move(o.id_);
        piece_bytes_ = std::move(o.piece_bytes_);
        newline_ = std::move(o.newline_);
        o.model_ = nullptr;
    }
    return *this;
}

namespace {
thread_local const std::function<bool()> * tokenize_stop = nullptr;  // the innermost scope's probe
}  // namespace

tokenize_stop_scope::tokenize_stop_scope(std::function<bool()> stop) : stop_(std::move(stop)), outer_(tokenize_stop) {
    tokenize_stop = &stop_;
}

tokenize_stop_scope::~tokenize_stop_scope() {
    tokenize_stop = outer_;
}

util::expected<std::vector<token>> model::tokenize(const std::string & text, bool parse_special,
                                                   bool add_special) const {
    if (!reuse_tokens_ || add_special || text.size() <= tokenize_window_bytes) {
        return tokenize_whole(text, parse_special, add_special);
    }
    std::vector<token> out;
    size_t at = 0;  // bytes of `text` whose tokens are in `out`; a special token starts there
    size_t window = tokenize_window_bytes;
    while (at < text.size()) {
        if (tokenize_stop != nullptr && *tokenize_stop && (*tokenize_stop)()) {
            return util::status::error("tokenization stopped: the client closed the connection");
        }
        const std::string_view rest = std::string_view(text).substr(at);
        if (rest.size() <= window) {
            auto last = tokenize_whole(rest, parse_special, false);
            if (!last) {
                return last;
            }
            out.insert(out.end(), last->begin(), last->end());
            break;
        }
        size_t end = window;  // not inside a UTF-8 sequence
        while (end > 0 && (static_cast<unsigned char>(rest[end]) & 0xC0) == 0x80) {
            --end;
        }
        const std::string_view piece = rest.substr(0, end);
        const auto piece_tokens = tokenize_whole(piece, parse_special, false);
        if (!piece_tokens) {
            return piece_tokens;
        }
        const std::vector<token> & toks = *piece_tokens;
        // Kept: the tokens before the piece's last special token (not its first) that starts
        // twice the longest special token's bytes before the piece ends, as tokenize_reusing:
        // no special token of the whole text that the piece's end cuts can change them.
        size_t offset = 0;
        size_t cut = 0;
        size_t cut_byte = 0;
        for (size_t i = 0; i < toks.size(); ++i) {
            const auto t = static_cast<size_t>(toks[i]);
            if (t >= piece_bytes_.size()) {
                return tokenize_whole(text, parse_special, false);
            }
            if (special_[t] && i > 0 && offset + 2 * static_cast<size_t>(max_special_bytes_) <= piece.size()) {
                cut = i;
                cut_byte = offset;
            }
            offset += piece_bytes_[t];
        }
        if (offset != piece.size()) {
            return tokenize_whole(text, parse_special, false);  // the tokens do not spell the text
        }
        if (cut == 0) {
            window *= 2;  // no special token to cut at: a longer window
            continue;
        }
        out.insert(out.end(), toks.begin(), toks.begin() + static_cast<std::ptrdiff_t>(cut));
        at += cut_byte;
        window = tokenize_window_bytes;
    }
    return out;
}

util::expected<std::vector<token>> model::tokenize_whole(std::string_view text, bool parse_special,
                                                         bool add_special) const {
    if (text.size() > static_cast<size_t>(INT32_MAX)) {
        return util::status::error("text too long to tokenize");
    }
    // The engine's boundary: llama.cpp's tokenizer throws (an allocation, a byte its vocabulary
    // cannot map); the caller gets the error as a value.
    try {
        const llama_vocab * v = vocab_of(model_);
        const auto len = static_cast<int32_t>(text.size());
        // A token covers at least one byte (plus possible BOS/EOS when add_special).
        std::vector<token> out(text.size() + 2);
        int32_t n = llama_tokenize(v, text.data(), len, out.data(), static_cast<int32_t>(out.size()), add_special,
                                   parse_special);
        if (n == INT32_MIN) {
            return util::status::error("tokenization overflow");
        }
        if (n < 0) {
            out.resize(static_cast<size_t>(-n));
            n = llama_tokenize(v, text.data(), len, out.data(), static_cast<int32_t>(out.size()), add_special,
                               parse_special);
            if (n < 0) {
                return util::status::error("tokenization failed");
            }
        }
        out.resize(static_cast<size_t>(n));
        return out;
    } catch (const std::exception & e) {
        return util::status::error(e.what());
    }
}

std::string model::token_to_piece(token t, bool special) const {
    const llama_vocab * v = vocab_of(model_);
    std::string out(16, '\0');
    int32_t n = llama_token_to_piece(v, t, out.data(), static_cast<int32_t>(out.size()), 0, special);
    if (n < 0) {
        out.resize(static_cast<size_t>(-n));
        n = llama_token_to_piece(v, t, out.data(), static_cast<int32_t>(out.size()), 0, special);
        if (n < 0) {
            throw std::runtime_error("token_to_piece failed for token " + std::to_string(t));
        }
    }
    out.resize(static_cast<size_t>(n));
    return out;
}

util::expected<std::string> model::detokenize(const std::vector<token> & tokens, bool special) const {
    // The engine's boundary, as tokenize_whole().
    try {
        const llama_vocab * v = vocab_of(model_);
        if (tokens.empty()) {
            return std::string();
        }
        const auto n_tokens = static_cast<int32_t>(tokens.size());
        std::string out(tokens.size() * 4 + 16, '\0');
        int32_t n = llama_detokenize(v, tokens.data(), n_tokens, out.data(), static_cast<int32_t>(out.size()),
                                     /*remove_special=*/false, special);
        if (n < 0) {
            out.resize(static_cast<size_t>(-n));
            n = llama_detokenize(v, tokens.data(), n_tokens, out.data(), static_cast<int32_t>(out.size()), false,
                                 special);
            if (n < 0) {
                return util::status::error("detokenize failed");
            }
        }
        out.resize(static_cast<size_t>(n));
        return out;
    } catch (const std::exception & e) {
        return util::status::error(e.what());
    }
}

bool model::is_eog(token t) const {
    return llama_vocab_is_eog(vocab_of(model_), t);
}

token model::end_of_turn() const {
    const llama_vocab * v = vocab_of(model_);
    const token eot = llama_vocab_eot(v);
    return eot != LLAMA_TOKEN_NULL ? eot : llama_vocab_eos(v);
}

int32_t model::n_vocab() const {
    return llama_vocab_n_tokens(vocab_of(model_));
}

int32_t model::n_ctx_train() const {
    return llama_model_n_ctx_train(model_);
}

memory_family model::family() const {
    // llama.cpp: hybrid = attention KV + recurrent layers; recurrent = recurrent layers only.
    if (llama_model_is_hybrid(model_)) {
        return memory_family::hybrid;
    }
    if (llama_model_is_recurrent(model_)) {
        return memory_family::recurrent;
    }
    return memory_family::dense;
}

std::string model::architecture() const {
    char buf[128];
    int32_t n = llama_model_meta_val_str(model_, "general.architecture", buf, sizeof(buf));
    if (n < 0) {
        return "unknown";
    }
    if (static_cast<size_t>(n) >= sizeof(buf)) {
        std::string big(static_cast<size_t>(n) + 1, '\0');
        n = llama_model_meta_val_str(model_, "general.architecture", big.data(), big.size());
        if (n < 0) {
            return "unknown";
        }
        big.resize(static_cast<size_t>(n));
        return big;
    }
    return std::string(buf, static_cast<size_t>(n));
}

std::string model::description() const {
    char buf[256];
    int32_t n = llama_model_desc(model_, buf, sizeof(buf));
    if (n < 0) {
        return "";
    }
    return std::string(buf, std::min(static_cast<size_t>(n), sizeof(buf) - 1));
}

uint64_t model::size_bytes() const {
    return llama_model_size(model_);
}

std::string model::chat_template() const {
    const char * t = llama_model_chat_template(model_, nullptr);
    return t ? std::string(t) : std::string();
}

std::vector<std::pair<uint64_t, uint64_t>> model::pass_weight_ranges() const {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    gguf_init_params gp{};
    gp.no_alloc = true;
    gp.ctx = nullptr;
    gguf_context * g = gguf_init_from_file(path_.c_str(), gp);
    if (g == nullptr) {
        return out;
    }
    const int64_t n = gguf_get_n_tensors(g);
    const bool tied = gguf_find_tensor(g, "output.weight") < 0;
    const uint64_t data = gguf_get_data_offset(g);
    const uint64_t alignment = gguf_get_alignment(g);
    for (int64_t i = 0; i < n; ++i) {
        if (!tied && std::string(gguf_get_tensor_name(g, i)) == "token_embd.weight") {
            continue;
        }
        const uint64_t begin = data + gguf_get_tensor_offset(g, i);
        out.emplace_back(begin, begin + gguf_get_tensor_size(g, i));
    }
    gguf_free(g);
    // Tensors lie back to back (up to their alignment): one range per run of them.
    std::sort(out.begin(), out.end());
    std::vector<std::pair<uint64_t, uint64_t>> runs;
    for (const auto & r : out) {
        if (!runs.empty() && r.first <= runs.back().second + alignment) {
            runs.back().second = std::max(runs.back().second, r.second);
        } else {
            runs.push_back(r);
        }
    }
    return runs;
}

}  // namespace lineage::engine
