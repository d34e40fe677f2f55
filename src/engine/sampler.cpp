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
#include <cmath>
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

double grammar_step_seconds(const model & m, const grammar_spec & g) {
    if (g.empty() || g.lazy) {
        return 0.0;
    }
    const llama_vocab * vocab = llama_model_get_vocab(m.raw());
    llama_sampler * gs = llama_sampler_init_grammar(vocab, g.gbnf.c_str(), "root");
    if (gs == nullptr) {
        throw std::invalid_argument("the grammar does not parse");
    }
    // Every stride-th token id (the ids spread over the vocabulary), the time scaled up: the probe
    // itself costs a few % of a step, as the grammar's cost grows with the tokens it checks.
    const int32_t n = llama_vocab_n_tokens(vocab);
    const int32_t stride = std::max<int32_t>(1, n / grammar_probe_tokens);
    std::vector<llama_token_data> cand;
    double best = 0.0;
    for (int attempt = 0; attempt < 2; ++attempt) {
        cand.clear();
        for (int32_t i = 0; i < n; i += stride) {
            cand.push_back({i, 0.0f, 0.0f});
        }
        llama_token_data_array arr{cand.data(), cand.size(), -1, false};
        const auto t0 = std::chrono::steady_clock::now();
        llama_sampler_apply(gs, &arr);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = attempt == 0 ? s : std::min(best, s);
    }
    llama_sampler_free(gs);
    return best * static_cast<double>(n) / static_cast<double>((n + stride - 1) / stride);
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
