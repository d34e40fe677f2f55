// model_check: load, prefill timing, greedy-decode sanity, and the hybrid checkpoint property.
// Every decode uses the same chunking (n_batch from the start of each range), so a replay is
// split exactly like the cold run it is compared with.
// Thread safety: see model_check.h. Ownership: the model, context and batch are freed on return.
#include "model_check.h"

#include <llama.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace lineage::mkmodel {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

struct model_deleter {
    void operator()(llama_model * m) const { llama_model_free(m); }
};
struct context_deleter {
    void operator()(llama_context * c) const { llama_free(c); }
};
using model_ptr = std::unique_ptr<llama_model, model_deleter>;
using context_ptr = std::unique_ptr<llama_context, context_deleter>;

// Decoding on sequence 0 of one context, with logits kept for the last token of a range.
class runner {
public:
    runner(llama_context * ctx, int n_batch, int n_vocab)
        : ctx_(ctx), n_batch_(n_batch), n_vocab_(n_vocab), batch_(llama_batch_init(n_batch, 0, 1)) {}
    ~runner() { llama_batch_free(batch_); }
    runner(const runner &) = delete;
    runner & operator=(const runner &) = delete;

    // Decodes tokens[p0, p1) at positions p0.. in chunks of n_batch; returns false on failure.
    bool decode(const std::vector<llama_token> & tokens, int p0, int p1) {
        for (int c0 = p0; c0 < p1; c0 += n_batch_) {
            const int c1 = std::min(p1, c0 + n_batch_);
            batch_.n_tokens = c1 - c0;
            for (int i = 0; i < batch_.n_tokens; ++i) {
                batch_.token[i] = tokens[size_t(c0 + i)];
                batch_.pos[i] = c0 + i;
                batch_.n_seq_id[i] = 1;
                batch_.seq_id[i][0] = 0;
                batch_.logits[i] = c0 + i == p1 - 1;
            }
            const int32_t rc = llama_decode(ctx_, batch_);
            if (rc != 0) {
                std::printf("check: FAIL llama_decode returned %d for tokens [%d, %d)\n", rc, c0, c1);
                return false;
            }
        }
        return true;
    }

    // Logits of the last decoded token (n_vocab floats).
    std::vector<float> last_logits() const {
        const float * l = llama_get_logits_ith(ctx_, -1);
        return std::vector<float>(l, l + n_vocab_);
    }

private:
    llama_context * ctx_;
    int n_batch_;
    int n_vocab_;
    llama_batch batch_;
};

bool all_finite(const std::vector<float> & v) {
    return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

llama_token argmax(const std::vector<float> & v) {
    return llama_token(std::max_element(v.begin(), v.end()) - v.begin());
}

std::vector<llama_token> tokenize(const llama_vocab * vocab, const std::string & text) {
    int32_t n = llama_tokenize(vocab, text.c_str(), int32_t(text.size()), nullptr, 0, false, true);
    std::vector<llama_token> out(size_t(n < 0 ? -n : n));
    n = llama_tokenize(vocab, text.c_str(), int32_t(text.size()), out.data(), int32_t(out.size()), false, true);
    out.resize(size_t(std::max(n, 0)));
    return out;
}

std::string render_chat(const char * tmpl, const std::string & system, const std::string & user) {
    const llama_chat_message msgs[] = {{"system", system.c_str()}, {"user", user.c_str()}};
    std::vector<char> buf(2 * (system.size() + user.size()) + 256);
    int32_t n = llama_chat_apply_template(tmpl, msgs, 2, true, buf.data(), int32_t(buf.size()));
    if (n > int32_t(buf.size())) {
        buf.resize(size_t(n));
        n = llama_chat_apply_template(tmpl, msgs, 2, true, buf.data(), int32_t(buf.size()));
    }
    return n < 0 ? std::string() : std::string(buf.data(), size_t(n));
}

// A chat-templated conversation of at least n_tokens tokens, and the template's tail after
// the user content ("<|im_end|>\n<|im_start|>assistant\n" for ChatML).
struct prompt {
    std::vector<llama_token> tokens;
    std::vector<llama_token> tail;
};

prompt make_prompt(const llama_model * model, int n_tokens) {
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const char * tmpl = llama_model_chat_template(model, nullptr);
    const std::string system = "You are a coding agent. Use the tools to answer.";
    const std::string marker = "\x01";
    const std::string with_marker = render_chat(tmpl, system, marker);
    const size_t at = with_marker.find(marker);

    prompt p;
    p.tail = tokenize(vocab, at == std::string::npos ? std::string() : with_marker.substr(at + 1));
    std::string user;
    for (int i = 0; int(p.tokens.size()) < n_tokens; ++i) {
        for (int j = 0; j < 16; ++j) {
            user += "Step " + std::to_string(i * 16 + j) + ": read src/file_" + std::to_string((i * 7 + j) % 13) +
                    ".cpp, then run the tests and report what failed.\n";
        }
        p.tokens = tokenize(vocab, render_chat(tmpl, system, user));
    }
    return p;
}

std::string piece(const llama_vocab * vocab, llama_token t) {
    char buf[128];
    const int32_t n = llama_token_to_piece(vocab, t, buf, sizeof(buf), 0, true);
    std::string s = n > 0 ? std::string(buf, size_t(n)) : std::string();
    for (char & c : s) {
        c = (c == '\n') ? ' ' : c;
    }
    return s;
}

std::vector<uint8_t> get_state(llama_context * ctx, llama_state_seq_flags flags) {
    std::vector<uint8_t> buf(llama_state_seq_get_size_ext(ctx, 0, flags));
    buf.resize(llama_state_seq_get_data_ext(ctx, buf.data(), buf.size(), 0, flags));
    return buf;
}

}  // namespace

bool run_check(const check_options & opts) {
    const int n = opts.n_tokens;
    const int c = n / 2;      // checkpoint
    const int m = 3 * n / 4;  // where the first pass stops and every replay splits

    llama_model_params mparams = llama_model_default_params();
    const auto t_load = clock_type::now();
    model_ptr model(llama_model_load_from_file(opts.path.c_str(), mparams));
    const double load_s = seconds_since(t_load);
    if (!model) {
        std::printf("check: FAIL cannot load %s\n", opts.path.c_str());
        return false;
    }
    const llama_vocab * vocab = llama_model_get_vocab(model.get());
    const int n_vocab = llama_vocab_n_tokens(vocab);
    const char * tmpl = llama_model_chat_template(model.get(), nullptr);
    char desc[128];
    llama_model_desc(model.get(), desc, sizeof(desc));
    std::printf("check: loaded %s in %.3f s: %s, %.1f M params, n_vocab %d, chat template %zu bytes\n",
                opts.path.c_str(), load_s, desc, double(llama_model_n_params(model.get())) / 1e6, n_vocab,
                tmpl ? std::strlen(tmpl) : size_t(0));
    if (tmpl == nullptr || n_vocab < 1000) {
        std::printf("check: FAIL the model lacks its chat template or tokenizer\n");
        return false;
    }

    const prompt p = make_prompt(model.get(), n);
    llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx = uint32_t((n + int(p.tail.size()) + 16 + 255) / 256 * 256);
    cparams.n_batch = uint32_t(opts.n_batch);
    cparams.n_ubatch = uint32_t(opts.n_batch);
    cparams.n_seq_max = 1;
    cparams.n_threads = opts.n_threads;
    cparams.n_threads_batch = opts.n_threads;
    context_ptr ctx(llama_init_from_model(model.get(), cparams));
    if (!ctx) {
        std::printf("check: FAIL cannot create a context\n");
        return false;
    }
    llama_memory_t mem = llama_get_memory(ctx.get());
    runner run(ctx.get(), opts.n_batch, n_vocab);
    bool ok = true;

    // 1. Cold prefill (nothing cached) twice: the first also pages the weights in from the
    //    file mapping. Then close the user turn and decode greedily.
    double prefill_s[2] = {0.0, 0.0};
    for (double & s : prefill_s) {
        llama_memory_clear(mem, true);
        const auto t_prefill = clock_type::now();
        if (!run.decode(p.tokens, 0, n)) {
            return false;
        }
        s = seconds_since(t_prefill);
    }
    const std::vector<float> unsplit = run.last_logits();
    std::printf("check: cold prefill of %d tokens (n_batch %d, %d threads): %.3f s, %.0f tokens/s "
                "(first run, paging weights in: %.3f s)\n",
                n, opts.n_batch, opts.n_threads, prefill_s[1], n / prefill_s[1], prefill_s[0]);
    std::vector<llama_token> seq(p.tokens.begin(), p.tokens.begin() + n);
    seq.insert(seq.end(), p.tail.begin(), p.tail.end());
    if (!run.decode(seq, n, int(seq.size()))) {
        return false;
    }
    int n_eog = 0;
    std::string text;
    for (int i = 0; i < 16; ++i) {
        const std::vector<float> logits = run.last_logits();
        if (!all_finite(logits)) {
            std::printf("check: FAIL non-finite logits at position %zu\n", seq.size());
            return false;
        }
        const llama_token t = argmax(logits);
        if (i == 0) {
            std::printf("check: first greedy token after the generation prompt: %d '%s'%s\n", t,
                        piece(vocab, t).c_str(), llama_vocab_is_eog(vocab, t) ? " (END OF GENERATION)" : "");
        }
        n_eog += llama_vocab_is_eog(vocab, t) ? 1 : 0;
        text += piece(vocab, t);
        seq.push_back(t);
        if (!run.decode(seq, int(seq.size()) - 1, int(seq.size()))) {
            return false;
        }
    }
    std::printf("check: 16 greedy tokens, %d end-of-generation: \"%s\"\n", n_eog, text.c_str());

    // 2. Cold reference split at c and m.
    llama_memory_clear(mem, true);
    if (!run.decode(p.tokens, 0, c) || !run.decode(p.tokens, c, m) || !run.decode(p.tokens, m, n)) {
        return false;
    }
    const std::vector<float> ref = run.last_logits();
    const size_t full_n = llama_state_seq_get_size_ext(ctx.get(), 0, 0);
    float max_diff = 0.0f;
    for (size_t i = 0; i < ref.size(); ++i) {
        max_diff = std::max(max_diff, std::fabs(ref[i] - unsplit[i]));
    }
    std::printf("check: cold run split at %d and %d vs unsplit: max |logit difference| %g%s\n", c, m, max_diff,
                max_diff == 0.0f ? " (bit-identical)" : " (only runs split alike are compared bitwise)");

    // 3. Checkpoint at c, decode on to m, restore, trim, replay c..n.
    llama_memory_clear(mem, true);
    if (!run.decode(p.tokens, 0, c)) {
        return false;
    }
    const std::vector<uint8_t> partial = get_state(ctx.get(), LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
    const size_t full_c = llama_state_seq_get_size_ext(ctx.get(), 0, 0);
    std::printf("check: state at %d tokens: PARTIAL_ONLY %zu bytes, full %zu bytes; full at %d tokens %zu bytes\n",
                c, partial.size(), full_c, n, full_n);
    if (!run.decode(p.tokens, c, m)) {
        return false;
    }
    const bool rm_early = llama_memory_seq_rm(mem, 0, c, -1);
    std::printf("check: seq_rm(0, %d, -1) at %d tokens, before any restore: %s\n", c, m,
                rm_early ? "accepted" : "refused");
    const bool is_hybrid = llama_model_is_hybrid(model.get()) || llama_model_is_recurrent(model.get());
    int n_equal = 0;
    for (int r = 0; r < opts.n_restore; ++r) {
        if (is_hybrid) {
            const size_t read = llama_state_seq_set_data_ext(ctx.get(), partial.data(), partial.size(), 0,
                                                             LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
            if (read == 0) {
                std::printf("check: FAIL restoring the PARTIAL_ONLY state (%zu bytes)\n", partial.size());
                return false;
            }
        }
        if (!llama_memory_seq_rm(mem, 0, c, -1)) {
            std::printf("check: FAIL seq_rm(0, %d, -1) refused after %s\n", c,
                        is_hybrid ? "restoring the checkpoint" : "decoding");
            return false;
        }
        if (!run.decode(p.tokens, c, m) || !run.decode(p.tokens, m, n)) {
            return false;
        }
        const std::vector<float> got = run.last_logits();
        n_equal += std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)) == 0 ? 1 : 0;
        if (r == 0 && !all_finite(got)) {
            std::printf("check: FAIL non-finite logits after restore\n");
            ok = false;
        }
    }
    const bool equal = n_equal == opts.n_restore;
    std::printf("check: %s at %d, trim, replay to %d: logits %s the cold run in %d/%d replays\n",
                is_hybrid ? "restore PARTIAL_ONLY checkpoint" : "no restore (dense)", c, n,
                equal ? "bit-identical to" : "DIFFER from", n_equal, opts.n_restore);
    ok = ok && equal;
    std::printf("check: %s\n", ok ? "OK" : "FAIL");
    return ok;
}

}  // namespace lineage::mkmodel
