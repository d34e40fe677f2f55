// server::anthropic_handler: one Messages API request from body to response.
#include "server/dialects/anthropic/anthropic_handler.h"

#include "engine/model.h"
#include "scheduler/scheduler.h"
#include "server/dialects/anthropic/anthropic_request.h"
#include "server/dialects/anthropic/anthropic_response.h"
#include "server/prepare/chat_prepare.h"
#include "server/run/generation.h"
#include "server/app/routes.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <optional>

namespace lineage::server {

namespace {

void send_error(http_response & res, const api_error & e) {
    send_json_body(res, anthropic_error_json(e), e.status);
}

// Parses the body.
std::optional<api_error> parse(const http_request & req, server_context & ctx, bool count_tokens,
                               anthropic_request & out) {
    if (auto err = parse_anthropic_request(req.body, ctx.signer, count_tokens, out)) {
        return err;
    }
    if (!ctx.preparer.supports_thinking()) {
        out.chat.chat_template_kwargs.erase("enable_thinking");
    }
    if (!out.ignored_tools.empty()) {
        std::string names;
        for (const auto & n : out.ignored_tools) {
            names += (names.empty() ? "" : ", ") + n;
        }
        spdlog::info("messages: ignored {} server tool(s) this server cannot run: {}", out.ignored_tools.size(), names);
    }
    return std::nullopt;
}

// The prompt length at each cache_control mark (docs/prompt-cache.md "cache_control"), in
// ascending order without duplicates, into `all`; the last client-marked one (not implicit),
// -1 when none, is returned. Each mark's render and tokenization are added to `work`.
int32_t breakpoint_tokens(const server_context & ctx, const anthropic_request & ar, const std::vector<int32_t> & prompt,
                          std::vector<int32_t> & all, scheduler::prepare_work & work) {
    int32_t last_marked = -1;
    for (const auto & b : ar.breakpoints) {
        const int32_t n = ctx.preparer.prefix_tokens(breakpoint_conversation(ar, b), prompt, work);
        if (n <= 0) {
            continue;
        }
        if (!b.implicit) {
            last_marked = std::max(last_marked, n);
        }
        if (std::find(all.begin(), all.end(), n) == all.end()) {
            all.push_back(n);
        }
    }
    std::sort(all.begin(), all.end());
    return last_marked;
}

std::optional<api_error> prepare_messages(const http_request & req, server_context & ctx, generation_job & job) {
    anthropic_request ar;
    if (auto err = parse(req, ctx, /*count_tokens=*/false, ar)) {
        return err;
    }
    ar.chat.tenant = ctx.tenant_of(req);
    prepared_chat & prep = job.prep;
    if (auto err = ctx.preparer.prepare(ar.chat, ctx.sched.max_sequence_tokens(), prep)) {
        return err;
    }
    int32_t marked = -1;  // the last client mark: cache_creation_input_tokens counts up to it
    if (prep.cache.cache_prompt) {
        marked = breakpoint_tokens(ctx, ar, prep.prompt, prep.cache.breakpoint_tokens, prep.work);
    }
    messages_meta meta;
    meta.id = random_id("msg_", 24);
    meta.model = ar.chat.model.empty() ? ctx.model_id : ar.chat.model;
    meta.prompt_tokens = static_cast<int32_t>(prep.prompt.size());
    meta.breakpoint_tokens = marked;
    meta.cache_prompt = prep.cache.cache_prompt;
    meta.thinking_omitted = ar.thinking_omitted;
    meta.stop_sequences = ar.stop_sequences;
    job.finish(std::make_unique<messages_writer>(std::move(meta), prep.parser, prep.stops, ctx.signer),
               std::move(ar.chat));
    return std::nullopt;
}

// Parses the body of a request that only counts or renders (count_tokens, apply-template: no
// generation fields required); false after logging and sending the error.
bool parse_or_reject(const http_request & req, http_response & res, server_context & ctx, anthropic_request & ar) {
    if (auto err = parse(req, ctx, /*count_tokens=*/true, ar)) {
        spdlog::debug("messages request rejected: {}", err->message);
        send_error(res, *err);
        return false;
    }
    return true;
}

}  // namespace

const dialect messages_dialect{.name = "messages", .errors = error_shape::anthropic, .prepare = prepare_messages};

void handle_messages_apply_template(const http_request & req, http_response & res, server_context & ctx) {
    anthropic_request ar;
    if (!parse_or_reject(req, res, ctx, ar)) {
        return;
    }
    std::string prompt;
    if (auto err = ctx.preparer.render_prompt(ar.chat, prompt)) {
        send_error(res, *err);
        return;
    }
    json j = json::object();
    j["prompt"] = std::move(prompt);
    send_json_body(res, j, 200);
}

void handle_count_tokens(const http_request & req, http_response & res, server_context & ctx) {
    anthropic_request ar;
    if (!parse_or_reject(req, res, ctx, ar)) {
        return;
    }
    // The prompt as /v1/messages would run it (images in as their embedding tokens, and refused
    // as there without --mmproj), but counted even past the context length.
    prepared_chat prep;
    if (auto err = ctx.preparer.prepare(ar.chat, std::numeric_limits<int32_t>::max(), prep)) {
        send_error(res, *err);
        return;
    }
    json j = json::object();
    j["input_tokens"] = prep.prompt.size();
    send_json_body(res, j, 200);
}

}  // namespace lineage::server
