// libFuzzer target: the legacy completions body (server/dialects/completions/completions_request.h: POST
// /v1/completions). Any input is a raw body taken through the body limit and
// parse_completions_request as the route takes it: a rejection must be a 400/413 error value,
// never an exception, crash or UB; an accepted request has one prompt (text, or token ids that
// are non-negative 32-bit integers), sampling within range and non-empty stop strings.
// Build and run: docs/prompt-cache.md "Security and failure model" > "Fuzzing".
#include "fuzz_request.h"

#include "server/dialects/completions/completions_request.h"

using namespace lineage;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    const std::string_view body(reinterpret_cast<const char *>(data), size);
    if (auto e = fuzz::body_limit(body, "/v1/completions")) {
        fuzz::check_rejection(*e);
        return 0;
    }
    server::completions_request r;
    const auto err =
        fuzz::no_throw("parse_completions_request", [&] { return server::parse_completions_request(body, r); });
    if (err) {
        fuzz::check_rejection(*err);
        return 0;
    }
    if (r.prompt_is_tokens) {
        if (!r.prompt.empty()) {
            fuzz::finding("a token prompt that also has text");
        }
        for (const int32_t t : r.prompt_tokens) {
            if (t < 0) {
                fuzz::finding("accepted a negative token id " + std::to_string(t));
            }
        }
    } else if (!r.prompt_tokens.empty()) {
        fuzz::finding("a text prompt that also has tokens");
    } else if (r.prompt.size() > fuzz::small_request_limits().max_prompt_bytes) {
        fuzz::finding("accepted a text prompt of " + std::to_string(r.prompt.size()) + " bytes");
    }
    for (const auto & s : r.stop) {
        if (s.empty()) {
            fuzz::finding("accepted an empty stop string");
        }
    }
    fuzz::check_sampling(r.sampling);
    return 0;
}
