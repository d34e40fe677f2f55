// server::completions_request: validation of a text completion body.
#include "server/dialects/completions/completions_request.h"

#include "server/http/json_fields.h"
#include "server/http/request_limits.h"

#include <limits>

namespace lineage::server {

using namespace fields;

namespace {

void parse_prompt(const json & p, completions_request & r) {
    const char * several = "this server completes one prompt per request: send 'prompt' as one string or one array "
                           "of token ids, and one request per prompt";
    if (p.is_string()) {
        r.prompt = p.get<std::string>();
        if (r.prompt.empty()) {
            fail("prompt", "'prompt' must not be empty");
        }
        return;
    }
    if (!p.is_array()) {
        fail("prompt", "'prompt' must be a string or an array of token ids");
    }
    if (p.empty()) {
        fail("prompt", "'prompt' must not be empty");
    }
    if (p.size() == 1 && (p[0].is_string() || p[0].is_array())) {
        parse_prompt(p[0], r);  // a list of one prompt
        return;
    }
    for (size_t i = 0; i < p.size(); ++i) {
        if (p[i].is_string() || p[i].is_array()) {
            fail("prompt", several);
        }
        const int64_t t = get_int(p[i], "prompt[" + std::to_string(i) + "]");
        if (t < 0 || t > std::numeric_limits<int32_t>::max()) {
            fail("prompt[" + std::to_string(i) + "]", "'prompt[" + std::to_string(i) + "]' is not a token id");
        }
        r.prompt_tokens.push_back(static_cast<int32_t>(t));
    }
    r.prompt_is_tokens = true;
}

void parse_body(const json & body, completions_request & r) {
    if (!body.is_object()) {
        fail("", "the request body must be a JSON object");
    }
    const json * prompt = field(body, "prompt");
    if (!prompt) {
        fail("prompt", "'prompt' is required: a string or an array of token ids");
    }
    parse_prompt(*prompt, r);
    if (const json * e = field(body, "echo"); e && get_bool(*e, "echo")) {
        fail("echo", "'echo' is not supported: the response holds the completion only; the prompt is what you sent");
    }
    if (const json * s = field(body, "suffix"); s && !get_string(*s, "suffix").empty()) {
        fail("suffix", "'suffix' (fill-in-the-middle) is not supported; send the text before the cursor as 'prompt'");
    }
    for (const char * one : {"n", "best_of"}) {
        if (const json * n = field(body, one); n && get_int(*n, one) != 1) {
            fail(one, "'" + std::string(one) + "' must be 1: this server generates one choice per request");
        }
    }
    if (const json * lp = field(body, "logprobs"); lp && !(lp->is_number_integer() && lp->get<int64_t>() == 0)) {
        fail("logprobs", "'logprobs' is not supported on /v1/completions; leave it out");
    }
    if (const json * s = field(body, "stream")) {
        r.stream = get_bool(*s, "stream");
    }
    if (const json * so = field(body, "stream_options")) {
        if (!so->is_object()) {
            fail("stream_options", "'stream_options' must be an object");
        }
        if (const json * iu = field(*so, "include_usage")) {
            r.include_usage = get_bool(*iu, "stream_options.include_usage");
        }
    }
    r.sampling.max_tokens = 16;  // OpenAI's default for this endpoint
    if (const json * m = field(body, "max_tokens")) {
        r.sampling.max_tokens = get_token_limit(*m, "max_tokens");
    }
    if (const json * t = field(body, "temperature")) {
        r.sampling.temperature = static_cast<float>(get_number(*t, "temperature", 0.0, 2.0));
    }
    if (const json * t = field(body, "top_p")) {
        r.sampling.top_p = static_cast<float>(get_number(*t, "top_p", 0.0, 1.0));
    }
    if (const json * s = field(body, "seed")) {
        r.sampling.seed = get_int(*s, "seed");
    }
    if (const json * s = field(body, "stop")) {
        if (s->is_string()) {
            r.stop.push_back(s->get<std::string>());
        } else if (s->is_array() && s->size() <= 4) {
            for (size_t i = 0; i < s->size(); ++i) {
                r.stop.push_back(get_string((*s)[i], "stop[" + std::to_string(i) + "]"));
            }
        } else {
            fail("stop", "'stop' must be a string or an array of at most 4 strings");
        }
        for (const auto & x : r.stop) {
            if (x.empty()) {
                fail("stop", "'stop' strings must not be empty");
            }
        }
    }
    if (const json * m = field(body, "model")) {
        r.model = get_string(*m, "model");
    }
    if (const json * u = field(body, "user")) {
        r.user = get_string(*u, "user");
    }
    if (const json * k = field(body, "prompt_cache_key")) {
        r.prompt_cache_key = get_string(*k, "prompt_cache_key");
    }
    if (const json * c = field(body, "cache_prompt")) {
        r.cache_prompt = get_bool(*c, "cache_prompt");
    }
    if (const json * l = field(body, "lora")) {
        r.lora = parse_lora_list(*l, "lora");
    }
}

}  // namespace

std::optional<api_error> parse_completions_request(std::string_view body, completions_request & out) {
    return parse_request(body, out, [](const json & j, completions_request & r) {
        parse_body(j, r);
        if (auto e = check_prompt_bytes(r.prompt.size(), "'prompt'", "prompt")) {  // before it is tokenized
            throw bad_field{*e};
        }
    });
}

}  // namespace lineage::server
