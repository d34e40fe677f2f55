// engine::sampler over llama.cpp's common_sampler (common/sampling.h), mapped as llama-server
// maps its request fields (tools/server/server-schema.cpp), through the library.
#include "engine/sampler.h"

#include "engine/context.h"
#include "engine/model.h"

#include "common.h"
#include "json-schema-to-grammar.h"
#include "llama.h"
#include "sampling.h"

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>
#include <stdexcept>

namespace lineage::engine {

namespace {

common_grammar_trigger_type to_common(grammar_trigger::kind k) {
    switch (k) {
        case grammar_trigger::kind::token:        return COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN;
        case grammar_trigger::kind::word:         return COMMON_GRAMMAR_TRIGGER_TYPE_WORD;
        case grammar_trigger::kind::pattern:      return COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN;
        case grammar_trigger::kind::pattern_full: return COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN_FULL;
    }
    return COMMON_GRAMMAR_TRIGGER_TYPE_WORD;
}

common_grammar_type to_common(grammar_spec::kind k) {
    switch (k) {
        case grammar_spec::kind::none:          return COMMON_GRAMMAR_TYPE_NONE;
        case grammar_spec::kind::user:          return COMMON_GRAMMAR_TYPE_USER;
        case grammar_spec::kind::output_format: return COMMON_GRAMMAR_TYPE_OUTPUT_FORMAT;
        case grammar_spec::kind::tool_calls:    return COMMON_GRAMMAR_TYPE_TOOL_CALLS;
    }
    return COMMON_GRAMMAR_TYPE_NONE;
}

// The llguidance prefix selects a grammar engine this build does not have (GGML_ABORT there).
bool is_llguidance(const std::string & gbnf) {
    return gbnf.compare(0, 11, "%llguidance") == 0;
}

common_params_sampling to_common(const sampler_params & p) {
    common_params_sampling sp;
    sp.seed = p.seed;
    sp.temp = p.temperature;
    sp.top_p = p.top_p;
    // Greedy (temperature <= 0) is the first token of highest logit after the penalties, the
    // logit bias and the grammar: llama.cpp's temperature sampler at 0 keeps that one and sets
    // the rest to -inf, and its `dist` sampler still takes the softmax of the whole vocabulary
    // (152k exps a token on bench-qwen35, 248k on Qwen3.5: ~8% of a CPU decode step). top_k 1
    // keeps the same token (std::partial_sort replaces its one candidate only on a strictly
    // greater logit, so the first maximum stays) and leaves one candidate for the samplers
    // after it. top_k runs after the penalties in common_sampler's default order, so they
    // still apply.
    sp.top_k = p.temperature <= 0.0f ? 1 : p.top_k;
    sp.min_p = p.min_p;
    sp.penalty_present = p.presence_penalty;
    sp.penalty_freq = p.frequency_penalty;
    sp.penalty_repeat = p.repeat_penalty;
    sp.penalty_last_n = p.penalty_last_n;
    sp.n_probs = p.n_probs;
    sp.no_perf = true;
    for (const auto & [tok, bias] : p.logit_bias) {
        sp.logit_bias.push_back({tok, bias});
    }
    const grammar_spec & g = p.grammar;
    if (!g.empty()) {
        if (is_llguidance(g.gbnf)) {
            throw std::invalid_argument("llguidance grammars (%llguidance) are not supported by this build; send GBNF");
        }
        sp.grammar = common_grammar(to_common(g.type), g.gbnf);
        sp.grammar_lazy = g.lazy;
        for (const auto & t : g.triggers) {
            common_grammar_trigger ct;
            ct.type = to_common(t.type);
            ct.value = t.value;
            ct.token = t.tok;
            sp.grammar_triggers.push_back(std::move(ct));
        }
        sp.preserved_tokens.insert(g.preserved_tokens.begin(), g.preserved_tokens.end());
        sp.generation_prompt = g.generation_prompt;
    }
    return sp;
}

common_sampler * make(const model & m, const sampler_params & p) {
    common_params_sampling sp = to_common(p);
    common_sampler * s = nullptr;
    try {
        s = common_sampler_init(m.raw(), sp);
    } catch (const std::exception & e) {
        throw std::invalid_argument(std::string("the grammar cannot be used: ") + e.what());
    }
    if (s == nullptr) {
        throw std::invalid_argument("the sampler could not be created (a grammar that does not parse?)");
    }
    return s;
}

// A forced reply is not sampled: its chain keeps no grammar (a tool-call grammar would reject
// nothing it is never asked about, but a user grammar could fail to build for text it never sees).
sampler_params without_grammar_when_forced(const sampler_params & p) {
    if (p.forced.empty()) {
        return p;
    }
    sampler_params q = p;
    q.grammar = {};
    return q;
}

}  // namespace

sampler::sampler(const model & m, const sampler_params & p)
    : smpl_(make(m, without_grammar_when_forced(p))), n_probs_(std::max(0, p.n_probs)), forced_(p.forced) {}

sampler::~sampler() {
    if (smpl_ != nullptr) {
        common_sampler_free(smpl_);
    }
}

sampled_token sampler::sample(context & ctx, int32_t idx, bool with_probs) {
    sampled_token out;
    if (!forced_.empty()) {
        out.tok = forced_[std::min(n_forced_, forced_.size() - 1)];
        n_forced_++;
    } else {
        out.tok = common_sampler_sample(smpl_, ctx.raw(), idx);
        common_sampler_accept(smpl_, out.tok, true);
    }
    if (!with_probs) {
        return out;
    }
    // The model's distribution: log-softmax of the raw logits row.
    const float * logits = ctx.logits(idx);
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(ctx.get_model().raw()));
    if (logits == nullptr || n_vocab <= 0) {
        return out;
    }
    const float max_l = *std::max_element(logits, logits + n_vocab);
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; ++i) {
        sum += std::exp(static_cast<double>(logits[i] - max_l));
    }
    const double lse = static_cast<double>(max_l) + std::log(sum);
    out.logprob = static_cast<float>(logits[out.tok] - lse);
    const int32_t k = std::min(n_probs_, n_vocab);
    if (k > 0) {
        std::vector<int32_t> ids(static_cast<size_t>(n_vocab));
        std::iota(ids.begin(), ids.end(), 0);
        // Descending logit; ties by token id so the order is reproducible.
        std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [logits](int32_t a, int32_t b) {
            return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
        });
        out.top.reserve(static_cast<size_t>(k));
        for (int32_t i = 0; i < k; ++i) {
            out.top.push_back({ids[static_cast<size_t>(i)], static_cast<float>(logits[ids[static_cast<size_t>(i)]] - lse)});
        }
    }
    return out;
}

util::status check_grammar(const model & m, const grammar_spec & g) {
    if (g.empty()) {
        return util::status::ok();
    }
    sampler_params p;
    p.grammar = g;
    try {
        sampler s(m, p);
    } catch (const std::exception & e) {
        return util::status::error(e.what());
    }
    return util::status::ok();
}

namespace {

// Seconds llama.cpp's grammar sampler `gs` takes to filter `ids` (a candidate array built from
// them); the faster of `tries`.
double time_apply(llama_sampler * gs, const std::vector<llama_token> & ids, int tries) {
    std::vector<llama_token_data> cand;
    double best = 0.0;
    for (int attempt = 0; attempt < tries; ++attempt) {
        cand.clear();
        for (const llama_token id : ids) {
            cand.push_back({id, 0.0f, 0.0f});
        }
        llama_token_data_array arr{cand.data(), cand.size(), -1, false};
        const auto t0 = std::chrono::steady_clock::now();
        llama_sampler_apply(gs, &arr);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = attempt == 0 ? s : std::min(best, s);
    }
    return best;
}

// The ids among `ids` the grammar allows next, at most `max_n` of them, spread over the list.
std::vector<llama_token> allowed(llama_sampler * gs, const std::vector<llama_token> & ids, size_t max_n) {
    std::vector<llama_token_data> cand;
    cand.reserve(ids.size());
    for (const llama_token id : ids) {
        cand.push_back({id, 0.0f, 0.0f});
    }
    llama_token_data_array arr{cand.data(), cand.size(), -1, false};
    llama_sampler_apply(gs, &arr);
    std::vector<llama_token> all;
    for (const auto & c : cand) {
        if (c.logit != -INFINITY) {
            all.push_back(c.id);
        }
    }
    if (all.size() <= max_n) {
        return all;
    }
    std::vector<llama_token> out;
    for (size_t i = 0; i < max_n; ++i) {
        out.push_back(all[i * all.size() / max_n]);
    }
    return out;
}

// The vocabulary's tokens whose text is one byte, listed once per vocabulary (a walk of ~150k
// pieces).
const std::vector<llama_token> & one_byte_tokens(const llama_vocab * vocab) {
    static std::mutex mu;
    static std::map<const llama_vocab *, std::vector<llama_token>> lists;
    const std::lock_guard<std::mutex> lock(mu);
    auto [it, added] = lists.try_emplace(vocab);
    if (added) {
        const int32_t n = llama_vocab_n_tokens(vocab);
        for (int32_t i = 0; i < n; ++i) {
            if (common_token_to_piece(vocab, i, false).size() == 1) {
                it->second.push_back(i);
            }
        }
    }
    return it->second;
}

}  // namespace

double grammar_step_seconds(const model & m, const grammar_spec & g, double stop_above_s) {
    if (g.empty() || g.lazy) {
        return 0.0;
    }
    const llama_vocab * vocab = llama_model_get_vocab(m.raw());
    llama_sampler * gs = llama_sampler_init_grammar(vocab, g.gbnf.c_str(), "root");
    if (gs == nullptr) {
        throw std::invalid_argument("the grammar does not parse");
    }
    struct free_on_exit {
        llama_sampler * s;
        ~free_on_exit() { llama_sampler_free(s); }
    } guard{gs};
    // Where sampling starts: common_sampler_init feeds an output-format or tool-call grammar the
    // generation prompt's tokens (common/sampling.cpp, "prefill tokens"), so a grammar that
    // spells out the template's `<|im_start|>assistant\n` costs what comes after it. A grammar
    // whose costly part lies there (an enum of 20,000 values after an optional reasoning block:
    // 9 ms at its raw start, ~14 s a token once the prompt is in) was measured at the wrong place.
    try {
        if (g.type != grammar_spec::kind::user && !g.generation_prompt.empty()) {
            const std::vector<llama_token> pre = common_tokenize(vocab, g.generation_prompt, false, true);
            for (size_t i = 0; i < pre.size(); ++i) {
                const std::string piece = common_token_to_piece(vocab, pre[i], true);
                // As common_sampler_init: a space some tokenizers add before a first special token.
                if (i == 0 && !piece.empty() && std::isspace(static_cast<unsigned char>(piece[0])) &&
                    !std::isspace(static_cast<unsigned char>(g.generation_prompt[0]))) {
                    continue;
                }
                llama_sampler_accept(gs, pre[i]);
            }
        }
    } catch (const std::exception & e) {
        throw std::invalid_argument(std::string("the grammar does not accept the generation prompt: ") + e.what());
    }
    // The filter's time is a part per live alternative plus a part per token checked, so it is
    // measured on two spreads of token ids over the vocabulary (the faster of two tries each) and
    // extrapolated to the whole vocabulary along that line: the probe costs ~grammar_probe_tokens
    // / n_vocab of a step (3% on a 152k vocabulary).
    const int32_t n = llama_vocab_n_tokens(vocab);
    const auto spread = [n](int32_t k) {
        std::vector<llama_token> ids;
        const int32_t stride = std::max<int32_t>(1, n / k);
        for (int32_t i = 0; i < n; i += stride) {
            ids.push_back(i);
        }
        return ids;
    };
    const std::vector<llama_token> small = spread(16);
    const std::vector<llama_token> large = spread(grammar_probe_tokens);
    const auto estimate = [&](llama_sampler * at) {
        const double t_small = time_apply(at, small, 2);
        const double t_large = time_apply(at, large, 2);
        const double per_token = std::max(0.0, (t_large - t_small) / static_cast<double>(large.size() - small.size()));
        return t_small + per_token * static_cast<double>(n - static_cast<int32_t>(small.size()));
    };
    // A step also advances the grammar past the token it sampled (common_sampler_accept), which
    // grows with the square of the live alternatives (llama_grammar_advance_stack's duplicate
    // check): each place's cost is its filter's plus the dearest advance out of it.
    const std::vector<llama_token> & bytes = one_byte_tokens(vocab);
    double here = estimate(gs);
    double worst = here;
    for (int step = 0; step < grammar_probe_steps && worst <= stop_above_s; ++step) {
        llama_sampler * next = nullptr;
        double next_cost = -1.0;
        double next_accept_s = 0.0;
        for (const llama_token t : allowed(gs, bytes, grammar_probe_branches)) {
            if (llama_vocab_is_eog(vocab, t)) {
                continue;
            }
            llama_sampler * c = llama_sampler_clone(gs);
            const auto t0 = std::chrono::steady_clock::now();
            try {
                llama_sampler_accept(c, t);
            } catch (const std::exception &) {
                llama_sampler_free(c);  // the grammar is complete there
                continue;
            }
            const double accept_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            const double cost = accept_s + time_apply(c, small, 1);
            if (cost > next_cost) {
                if (next != nullptr) {
                    llama_sampler_free(next);
                }
                next = c;
                next_cost = cost;
                next_accept_s = accept_s;
            } else {
                llama_sampler_free(c);
            }
        }
        if (next == nullptr) {
            break;  // nothing but the end is allowed
        }
        worst = std::max(worst, here + next_accept_s);
        llama_sampler_free(guard.s);
        guard.s = gs = next;
        here = estimate(gs);
        worst = std::max(worst, here);
    }
    return worst;
}

util::status check_json_schema(const std::string & schema_json) {
    try {
        const std::string g = json_schema_to_grammar(common_json::parse(schema_json));
        if (g.empty()) {
            return util::status::error("the JSON Schema gives an empty grammar");
        }
    } catch (const std::exception & e) {
        return util::status::error(e.what());
    }
    return util::status::ok();
}

}  // namespace lineage::engine
