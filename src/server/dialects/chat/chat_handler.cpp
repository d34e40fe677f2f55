// server::chat_handler: one chat completion from request body to response.
#include "server/dialects/chat/chat_handler.h"

#include "engine/model.h"
#include "scheduler/scheduler.h"
#include "server/prepare/chat_prepare.h"
#include "server/dialects/chat/chat_request.h"
#include "server/dialects/chat/chat_response.h"
#include "server/run/generation.h"
#include "server/http/routes.h"
#include "server/http/sse.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <ctime>
#include <memory>

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

}  // namespace

void handle_chat_completions(const httplib::Request & req, httplib::Response & res, server_context & ctx) {
    chat_request cr;
    if (auto err = parse_chat_request(req.body, cr)) {
        spdlog::debug("chat request rejected: {}", err->message);
        send_json_body(res, to_json(*err), err->status);
        return;
    }
    if (!cr.add_generation_prompt) {
        const api_error err = invalid_request(
            "'add_generation_prompt': false is served by POST /apply-template only; a chat completion always "
            "generates a new assistant turn",
            "add_generation_prompt");
        send_json_body(res, to_json(err), err.status);
        return;
    }
    cr.tenant = ctx.tenant_of(req);
    prepared_chat prep;
    if (auto err = ctx.preparer.prepare(cr, ctx.sched.max_sequence_tokens(), prep)) {
        spdlog::debug("chat request rejected: {}", err->message);
        send_json_body(res, to_json(*err), err->status);
        return;
    }

    const scheduler::sampling_params & sampling = cr.sampling;
    auto gr = make_generation_request(ctx, prep, sampling);
    completion_meta meta;
    meta.id = random_id("chatcmpl-");
    meta.model = ctx.model_id;
    meta.created = static_cast<int64_t>(std::time(nullptr));
    token_text_fn token_text;
    if (sampling.logprobs) {
        const engine::model & m = ctx.model;
        token_text = [&m](int32_t tok) { return m.token_to_piece(tok, false); };
    }
    auto writer = std::make_unique<chat_writer>(std::move(meta), prep, cr.include_usage, std::move(token_text));
    const bool stream = cr.stream;
    run_generation(req, res, ctx, std::move(gr), prep.preserved_tokens, stream, std::move(writer), "chat",
                   std::make_shared<const chat_request>(std::move(cr)));
}

}  // namespace lineage::server
