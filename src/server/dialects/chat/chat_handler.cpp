// server::chat_handler: one chat completion from request body to response.
#include "server/dialects/chat/chat_handler.h"

#include "engine/model.h"
#include "scheduler/scheduler.h"
#include "server/prepare/chat_prepare.h"
#include "server/dialects/chat/chat_request.h"
#include "server/dialects/chat/chat_response.h"
#include "server/run/generation.h"
#include "server/app/routes.h"
#include "server/http/sse.h"

#include <ctime>
#include <memory>
#include <optional>

namespace lineage::server {

namespace {

// The chat.completion / chat.completion.chunk dialect over chat_output.
class chat_writer final : public response_writer {
public:
    chat_writer(completion_meta meta, const prepared_chat & prep, bool include_usage, token_text_fn token_text)
        : out_(std::move(meta), prep.parser, prep.stops, include_usage, static_cast<int32_t>(prep.prompt.size()),
               std::move(token_text)) {}

    bool add(const scheduler::generation_event & ev, std::string_view piece) override { return out_.add(piece, &ev); }
    std::string take_stream() override { return sse_events(out_.take_chunks()); }
    std::string end_stream(const scheduler::generation_event & done) override {
        return sse_events(out_.final_chunks(done)) + sse_done();
    }
    std::string stream_error(const api_error & e) override { return sse_error(e); }
    json body(const scheduler::generation_event & done) override { return out_.final_response(done); }
    std::string finish_reason(const scheduler::generation_event & done) const override {
        return out_.finish_reason(done);
    }
    const engine::chat_parsed * reply() const override { return &out_.message(); }

private:
    chat_output out_;
};

std::optional<api_error> prepare_chat(const http_request & req, server_context & ctx, generation_job & job) {
    chat_request cr;
    if (auto err = parse_chat_request(req.body, cr)) {
        return err;
    }
    if (!cr.add_generation_prompt) {
        return invalid_request(
            "'add_generation_prompt': false is served by POST /apply-template only; a chat completion always "
            "generates a new assistant turn",
            "add_generation_prompt");
    }
    cr.tenant = ctx.tenant_of(req);
    if (auto err = ctx.preparer.prepare(cr, ctx.sched.max_sequence_tokens(), job.prep)) {
        return err;
    }
    completion_meta meta;
    meta.id = random_id("chatcmpl-");
    meta.model = ctx.model_id;
    meta.created = static_cast<int64_t>(std::time(nullptr));
    token_text_fn token_text;
    if (cr.sampling.logprobs) {
        const engine::model & m = ctx.model;
        token_text = [&m](int32_t tok) { return m.token_to_piece(tok, false); };
    }
    job.finish(std::make_unique<chat_writer>(std::move(meta), job.prep, cr.include_usage, std::move(token_text)),
               std::move(cr));
    return std::nullopt;
}

}  // namespace

const dialect chat_dialect{.name = "chat", .errors = error_shape::openai, .prepare = prepare_chat};

}  // namespace lineage::server
