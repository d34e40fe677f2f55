// server::completions_handler: one text completion from request body to response.
#include "server/dialects/completions/completions_handler.h"

#include "engine/model.h"
#include "scheduler/scheduler.h"
#include "server/prepare/chat_prepare.h"
#include "server/dialects/chat/chat_response.h"
#include "server/dialects/completions/completions_request.h"
#include "server/run/generation.h"
#include "server/app/routes.h"
#include "server/http/sse.h"
#include "server/run/text_stream.h"

#include <ctime>
#include <memory>
#include <optional>

namespace lineage::server {

namespace {

// The text_completion dialect: the generated text, cut at stop strings, streamed as it
// becomes stable.
class completions_writer final : public response_writer {
public:
    completions_writer(completion_meta meta, std::vector<std::string> stops, bool include_usage, int32_t prompt_tokens)
        : meta_(std::move(meta)), text_(std::move(stops)), include_usage_(include_usage), prompt_tokens_(prompt_tokens) {}

    bool add(const scheduler::generation_event &, std::string_view piece) override { return text_.append(piece); }

    std::string take_stream() override {
        const std::string delta = next_delta(text_.stable_length());
        return delta.empty() ? std::string() : sse_event(chunk(delta, nullptr));
    }

    std::string end_stream(const scheduler::generation_event & done) override {
        const std::string reason = finish_reason(done);
        json fin = chunk(next_delta(text_.text().size()), reason.c_str());
        if (!include_usage_) {
            fin["usage"] = usage_json(done.stats, prompt_tokens_);
        }
        fin["timings"] = timings_json(done.stats, prompt_tokens_);
        std::string out = sse_event(fin);
        if (include_usage_) {
            json u = chunk("", nullptr);
            u["choices"] = json::array();
            u["usage"] = usage_json(done.stats, prompt_tokens_);
            out += sse_event(u);
        }
        return out + sse_done();
    }

    std::string stream_error(const api_error & e) override { return sse_error(e); }

    json body(const scheduler::generation_event & done) override {
        const std::string reason = finish_reason(done);
        json r = chunk(utf8_sanitize(text_.text()), reason.c_str());
        r["usage"] = usage_json(done.stats, prompt_tokens_);
        r["timings"] = timings_json(done.stats, prompt_tokens_);
        return r;
    }

    std::string finish_reason(const scheduler::generation_event & done) const override {
        return !text_.stopped() && done.finish == scheduler::finish_reason::length ? "length" : "stop";
    }

private:
    // The sanitized text in [sent_, len) (len never ends inside a UTF-8 character).
    std::string next_delta(size_t len) {
        if (len <= sent_) {
            return "";
        }
        std::string d = utf8_sanitize(std::string_view(text_.text()).substr(sent_, len - sent_));
        sent_ = len;
        return d;
    }

    json chunk(const std::string & text, const char * finish) const {
        json choice = json::object();
        choice["index"] = 0;
        choice["text"] = text;
        choice["logprobs"] = nullptr;
        choice["finish_reason"] = finish ? json(finish) : json(nullptr);
        json c = json::object();
        c["id"] = meta_.id;
        c["object"] = "text_completion";
        c["created"] = meta_.created;
        c["model"] = meta_.model;
        c["choices"] = json::array({std::move(choice)});
        return c;
    }

    completion_meta meta_;
    text_stream text_;
    bool include_usage_;
    int32_t prompt_tokens_;
    size_t sent_ = 0;
};

std::optional<api_error> prepare_completions(const http_request & req, server_context & ctx, generation_job & job) {
    completions_request cr;
    if (auto err = parse_completions_request(req.body, cr)) {
        return err;
    }
    std::vector<int32_t> tokens;
    if (cr.prompt_is_tokens) {
        const int32_t n_vocab = ctx.model.n_vocab();
        for (size_t i = 0; i < cr.prompt_tokens.size(); ++i) {
            if (cr.prompt_tokens[i] >= n_vocab) {
                const std::string p = "prompt[" + std::to_string(i) + "]";
                return invalid_request("'" + p + "' is " + std::to_string(cr.prompt_tokens[i]) +
                                           ", not a token id of this model (vocabulary size " +
                                           std::to_string(n_vocab) + ")",
                                       p);
            }
        }
        tokens = std::move(cr.prompt_tokens);
    } else {
        // As llama-server's /completion: special tokens parsed, BOS added where the model wants it.
        auto text_tokens = ctx.model.tokenize(cr.prompt, /*parse_special=*/true, /*add_special=*/true);
        if (!text_tokens) {
            return server_error("tokenization failed: " + text_tokens.error().message());
        }
        tokens = std::move(*text_tokens);
    }
    raw_prompt raw;
    raw.tokens = std::move(tokens);
    raw.stops = cr.stop;
    raw.user = cr.user;
    raw.prompt_cache_key = cr.prompt_cache_key;
    raw.tenant = ctx.tenant_of(req);
    raw.cache_prompt = cr.cache_prompt;
    raw.lora = cr.lora;
    if (auto err = ctx.preparer.prepare_raw(std::move(raw), ctx.sched.max_sequence_tokens(), job.prep)) {
        return err;
    }
    completion_meta meta;
    meta.id = random_id("cmpl-");
    meta.model = ctx.model_id;
    meta.created = static_cast<int64_t>(std::time(nullptr));
    job.writer = std::make_unique<completions_writer>(std::move(meta), job.prep.stops, cr.include_usage,
                                                      static_cast<int32_t>(job.prep.prompt.size()));
    job.sampling = cr.sampling;
    job.stream = cr.stream;
    return std::nullopt;  // a raw prompt has no conversation to warm
}

}  // namespace

const dialect completions_dialect{.name = "completions", .errors = error_shape::openai, .prepare = prepare_completions};

}  // namespace lineage::server
