// server::chat_request options: output-shaping fields of a chat completion body.
#include "server/dialects/chat/chat_request_options.h"

#include "server/http/json_fields.h"
#include "server/http/request_limits.h"

#include <algorithm>
#include <charconv>
#include <iterator>
#include <limits>

namespace lineage::server {

namespace {

using namespace fields;

// response_format: text | json_object | json_schema ({name, description, schema, strict}).
void parse_response_format(const json & rf, chat_request & r) {
    static const char * expected = "expected \"text\", \"json_object\" or \"json_schema\"";
    if (!rf.is_object()) {
        fail("response_format", "'response_format' must be an object like {\"type\": \"json_object\"}, got " +
                                    std::string(type_name(rf)));
    }
    const json * type = field(rf, "type");
    if (!type || !type->is_string()) {
        fail("response_format", "'response_format.type' is required: " + std::string(expected));
    }
    const std::string t = type->get<std::string>();
    if (t == "text") {
        return;
    }
    if (t == "json_object") {
        r.json_schema = R"({"type":"object"})";
        return;
    }
    if (t != "json_schema") {
        fail("response_format", "'response_format.type' is '" + t + "'; " + expected);
    }
    const json * js = field(rf, "json_schema");
    if (!js || !js->is_object()) {
        fail("response_format", "'response_format.json_schema' is required with type \"json_schema\": "
                                "{\"name\": ..., \"schema\": {...}, \"strict\": true}");
    }
    if (const json * n = field(*js, "name")) {
        (void) get_string(*n, "response_format.json_schema.name");
    }
    if (const json * st = field(*js, "strict")) {
        (void) get_bool(*st, "response_format.json_schema.strict");
    }
    const json * schema = field(*js, "schema");
    if (!schema) {
        r.json_schema = R"({"type":"object"})";
        return;
    }
    if (!schema->is_object()) {
        fail("response_format", "'response_format.json_schema.schema' must be a JSON Schema object, got " +
                                    std::string(type_name(*schema)));
    }
    r.json_schema = schema->empty() ? R"({"type":"object"})" : dump(*schema);
}

// logit_bias: {"<token id>": bias in [-100, 100]} (ids are checked against the vocabulary later).
void parse_logit_bias(const json & lb, chat_request & r) {
    if (!lb.is_object()) {
        fail("logit_bias", "'logit_bias' must be an object mapping token ids to biases, got " + std::string(type_name(lb)));
    }
    if (auto err = check_logit_bias_count(lb.size())) {
        throw fields::bad_field{*err};
    }
    for (auto it = lb.begin(); it != lb.end(); ++it) {
        const std::string & k = it.key();
        int64_t id = -1;
        const auto [p, ec] = std::from_chars(k.data(), k.data() + k.size(), id);
        if (k.empty() || ec != std::errc() || p != k.data() + k.size() || id < 0 || id > std::numeric_limits<int32_t>::max()) {
            fail("logit_bias", "'logit_bias' key '" + k + "' is not a token id (a non-negative integer as a string)");
        }
        const double v = get_number(it.value(), "logit_bias." + k);
        if (!(v >= -100.0 && v <= 100.0)) {
            fail("logit_bias", "'logit_bias." + k + "' is " + fmt_number(v) + "; a bias must be between -100 and 100");
        }
        r.sampling.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(v));
    }
}

// OpenAI request fields this server does not honour: a 400 naming them, never a silent 200.
void refuse_unsupported(const json & body) {
    struct refusal {
        const char * name;
        const char * why;
    };
    static const refusal refused[] = {
        {"audio", "audio output is not supported; this server generates text only"},
        {"prediction", "predicted outputs are not supported"},
        {"web_search_options", "web search is not supported"},
        {"functions", "the deprecated 'functions' field is not supported; send 'tools'"},
        {"function_call", "the deprecated 'function_call' field is not supported; send 'tool_choice'"},
        {"verbosity", "'verbosity' is not supported by this server's models; leave it out"},
    };
    for (const auto & f : refused) {
        if (field(body, f.name)) {
            fail(f.name, "'" + std::string(f.name) + "': " + f.why);
        }
    }
    if (const json * m = field(body, "modalities")) {
        if (!m->is_array()) {
            fail("modalities", "'modalities' must be an array, got " + std::string(type_name(*m)));
        }
        for (const auto & x : *m) {
            if (!x.is_string() || x.get<std::string>() != "text") {
                fail("modalities", "'modalities' may only hold \"text\"; this server generates text only");
            }
        }
    }
}

}  // namespace

void parse_output_options(const json & body, chat_request & r) {
    using namespace fields;
    if (const json * v = field(body, "presence_penalty")) {
        r.sampling.presence_penalty = static_cast<float>(number_in(*v, "presence_penalty", -2.0, 2.0));
    }
    if (const json * v = field(body, "frequency_penalty")) {
        r.sampling.frequency_penalty = static_cast<float>(number_in(*v, "frequency_penalty", -2.0, 2.0));
    }
    if (const json * v = field(body, "repeat_penalty")) {
        r.sampling.repeat_penalty = static_cast<float>(number_in(*v, "repeat_penalty", 0.0, 10.0));
        if (r.sampling.repeat_penalty <= 0.0f) {
            fail("repeat_penalty", "'repeat_penalty' must be greater than 0 (1 = off)");
        }
    }
    if (const json * v = field(body, "top_k")) {
        const int64_t k = get_int(*v, "top_k");
        if (k < 0 || k > std::numeric_limits<int32_t>::max()) {
            fail("top_k", "'top_k' is " + std::to_string(k) + "; it must be >= 0 (0 = off)");
        }
        r.sampling.top_k = static_cast<int32_t>(k);
    }
    if (const json * v = field(body, "min_p")) {
        r.sampling.min_p = static_cast<float>(number_in(*v, "min_p", 0.0, 1.0));
    }
    if (const json * lb = field(body, "logit_bias")) {
        parse_logit_bias(*lb, r);
    }
    if (const json * lp = field(body, "logprobs")) {
        r.sampling.logprobs = get_bool(*lp, "logprobs");
    }
    if (const json * tl = field(body, "top_logprobs")) {
        const int64_t n = get_int(*tl, "top_logprobs");
        if (n < 0 || n > max_top_logprobs) {
            fail("top_logprobs", "'top_logprobs' is " + std::to_string(n) + "; it must be between 0 and " +
                                     std::to_string(max_top_logprobs));
        }
        if (!r.sampling.logprobs) {
            fail("top_logprobs", "'top_logprobs' requires 'logprobs': true");
        }
        r.sampling.top_logprobs = static_cast<int32_t>(n);
    }
    if (const json * np = field(body, "n_probs")) {  // llama-server: logprobs with n alternatives
        const int64_t n = get_int(*np, "n_probs");
        if (n < 0 || n > max_top_logprobs) {
            fail("n_probs", "'n_probs' is " + std::to_string(n) + "; it must be between 0 and " +
                                std::to_string(max_top_logprobs));
        }
        if (n > 0) {
            r.sampling.logprobs = true;
            r.sampling.top_logprobs = static_cast<int32_t>(n);
        }
    }
    if (const json * rf = field(body, "response_format")) {
        parse_response_format(*rf, r);
    }
    if (const json * g = field(body, "grammar")) {
        r.grammar = get_string(*g, "grammar");
        if (!r.grammar.empty() && !r.json_schema.empty()) {
            fail("grammar", "'grammar' and a JSON 'response_format' both constrain the reply; send one of them");
        }
        if (!r.grammar.empty() && !r.tools.empty() && r.tool_choice != "none") {
            fail("grammar", "'grammar' cannot be combined with 'tools' (the tool-call grammar applies); "
                            "send tool_choice \"none\" or leave 'grammar' out");
        }
    }
    if (const json * re = field(body, "reasoning_effort")) {
        r.reasoning_effort = get_string(*re, "reasoning_effort");
        static const char * efforts[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
        if (std::find(std::begin(efforts), std::end(efforts), r.reasoning_effort) == std::end(efforts)) {
            fail("reasoning_effort", "'reasoning_effort' is '" + r.reasoning_effort +
                                         "'; expected none, minimal, low, medium, high or xhigh");
        }
    }
    refuse_unsupported(body);
}

}  // namespace lineage::server
