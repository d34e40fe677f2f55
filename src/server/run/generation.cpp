// server::generation: the dialect-neutral request run (submission, event loop, cancellation).
#include "server/run/generation.h"

#include "engine/model.h"
#include "scheduler/scheduler.h"
#include "server/request/chat_request.h"
#include "server/prepare/chat_prepare.h"
#include "server/http/request_limits.h"
#include "util/thread_priority.h"
#include "server/app/routes.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <random>
#include <vector>

namespace lineage::server {

namespace {

using scheduler::generation_event;
using ev_kind = scheduler::generation_event::kind;

constexpr std::chrono::milliseconds poll_interval{100};

// One request's state, shared by the handler and (when streaming) the content provider.
struct run_state {
    run_state(server_context & c, std::shared_ptr<scheduler::generation_request> r, std::unordered_set<int32_t> p,
              std::unique_ptr<response_writer> w, bool s, const dialect & d, std::shared_ptr<const chat_request> conv)
        : ctx(c),
          req(std::move(r)),
          preserved(std::move(p)),
          out(std::move(w)),
          stream(s),
          api(d),
          conversation(std::move(conv)) {}

    server_context & ctx;
    std::shared_ptr<scheduler::generation_request> req;
    std::unordered_set<int32_t> preserved;
    std::unique_ptr<response_writer> out;
    bool stream = false;
    const dialect & api;
    std::optional<generation_event> pending;  ///< first event, read before the stream started
    bool finished = false;
    bool stopped = false;  ///< a stop string matched: later tokens are dropped
    int32_t kept_tokens = 0;  ///< tokens received up to and including the one a stop string matched in
    std::chrono::steady_clock::time_point last_client_check = std::chrono::steady_clock::now();
    std::function<bool()> client_closed;  ///< streaming: the request's socket probe
    /** Streaming: when bytes last went to the client (the headers count), for the keep-alive. */
    std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
    std::shared_ptr<const chat_request> conversation;  ///< for the warm-up; null: none

    void cancel() { req->cancelled->store(true); }

    // The scheduler asks whether the client is still there (a request repeating this one's
    // prompt is waiting: the retry hold): cancel when it is gone, else say alive. False when
    // the client is gone.
    bool answer_probe(const std::function<bool()> & closed) {
        if (req->probe->load() != scheduler::probe_state::asked) {
            return true;
        }
        if (closed && closed()) {
            cancel();
            spdlog::info("req {} client disconnected (found when a retry came); cancelled", req->id);
            return false;
        }
        req->probe->store(scheduler::probe_state::alive);
        return true;
    }

    // A reply was sent whole: warm the conversation's next turn.
    void after_reply(const generation_event & done) const {
        // With images too: the warm-up places the conversation's images as the request did.
        if (conversation && ctx.warm && out->reply() != nullptr &&
            (done.finish == scheduler::finish_reason::stop || done.finish == scheduler::finish_reason::length)) {
            ctx.warm->after_reply(conversation, *out->reply(), req->cache, req->lora, req->lora_epoch);
        }
    }

    // Adds a token's text; asks the scheduler to stop when a stop string matched.
    void on_token(const generation_event & e) {
        if (stopped) {
            return;  // tokens decoded before the scheduler saw stop_requested
        }
        if (e.tok >= 0 && ctx.model.is_eog(e.tok)) {
            return;
        }
        kept_tokens++;
        std::string piece = e.piece;
        if (e.tok >= 0 && preserved.count(e.tok)) {
            piece = ctx.model.token_to_piece(e.tok, /*special=*/true);
        }
        if (out->add(e, piece)) {
            stopped = true;
            req->stop_requested->store(true);
        }
    }

    // The reply's token count as the client sees it: a stop string ends the reply at the token
    // that completed it, and the tokens the scheduler decoded before it saw stop_requested (a
    // number that depends on timing) are not counted.
    void settle(generation_event & done) const {
        if (stopped) {
            done.stats.completion_tokens = std::min(done.stats.completion_tokens, kept_tokens);
        }
    }

    void log_done(int status, const scheduler::request_stats & s, const std::string & finish) const {
        const double tps = s.completion_tokens > 1 && s.decode_s > 0 ? (s.completion_tokens - 1) / s.decode_s : 0.0;
        spdlog::info(
            "req {} {} {} {}: prompt={} cached={} completion={} ttft={:.1f}ms decode={:.1f}tok/s hit={} finish={}",
            req->id, api.name, stream ? "stream" : "json", status,
            s.prompt_tokens > 0 ? s.prompt_tokens : static_cast<int32_t>(req->prompt.size()), s.cached_tokens,
            s.completion_tokens, s.ttft_s * 1e3, tps, s.hit_kind.empty() ? "miss" : s.hit_kind, finish);
    }

    static api_error error_of(const generation_event & e) { return to_api_error(e.failure); }

    // The error a done event stands for: cancelled (we cancel only when the client is gone,
    // so this is the server shutting down) or finished with an error.
    static std::optional<api_error> done_error(const generation_event & e) {
        if (e.finish == scheduler::finish_reason::cancelled) {
            return to_api_error({scheduler::failure_kind::shutting_down,
                                 "the request was cancelled because the server is shutting down; retry on a "
                                 "running server"});
        }
        if (e.finish == scheduler::finish_reason::error) {
            return to_api_error({scheduler::failure_kind::decode_failed, e.failure.message});
        }
        return std::nullopt;
    }

    void send_error(http_response & res, const api_error & e) const {
        send_json_body(res, error_json(api.errors, e), e.status);
    }
};

// Waits for the next event while watching the client; nullopt when the client went away (the
// request is then cancelled) or, with `until`, when that time came first (`gone` tells which).
std::optional<generation_event> wait_event(run_state & s, const http_request & req,
                                           std::optional<std::chrono::steady_clock::time_point> until = std::nullopt,
                                           bool * gone = nullptr) {
    const std::function<bool()> closed = [&req] { return req.closed(); };
    if (gone != nullptr) {
        *gone = true;
    }
    for (;;) {
        if (!s.answer_probe(closed)) {
            return std::nullopt;
        }
        if (until && std::chrono::steady_clock::now() >= *until) {
            if (gone != nullptr) {
                *gone = false;
            }
            return std::nullopt;
        }
        // Look at the socket every poll_interval even while events keep coming.
        const auto now = std::chrono::steady_clock::now();
        const bool check_now = now - s.last_client_check >= poll_interval;
        if (!check_now) {
            if (auto ev = s.req->events->pop(poll_interval)) {
                return ev;
            }
        }
        s.last_client_check = std::chrono::steady_clock::now();
        if (req.closed()) {
            s.cancel();
            spdlog::info("req {} client disconnected; cancelled", s.req->id);
            return std::nullopt;
        }
    }
}

void respond_json(run_state & s, const http_request & req, http_response & res) {
    for (;;) {
        auto ev = wait_event(s, req);
        if (!ev) {
            return;
        }
        switch (ev->type) {
            case ev_kind::token:
                s.on_token(*ev);
                break;
            case ev_kind::done:
                s.settle(*ev);
                if (auto err = run_state::done_error(*ev)) {
                    s.send_error(res, *err);
                    s.log_done(err->status, ev->stats, "error");
                    return;
                }
                send_json_body(res, s.out->body(*ev), 200);
                s.log_done(200, ev->stats, s.out->finish_reason(*ev));
                s.after_reply(*ev);
                return;
            case ev_kind::error: {
                const api_error err = run_state::error_of(*ev);
                s.send_error(res, err);
                s.log_done(err.status, ev->stats, "error");
                return;
            }
        }
    }
}

// Content provider step: writes what the next events produced. False ends the stream with an
// error (client gone).
bool stream_step(const std::shared_ptr<run_state> & s, stream_sink & sink) {
    if (s->finished) {
        sink.done();
        return true;
    }
    if (!s->answer_probe(s->client_closed)) {
        s->finished = true;
        return false;
    }
    std::vector<generation_event> evs;
    if (s->pending) {
        evs.push_back(std::move(*s->pending));
        s->pending.reset();
    } else if (auto ev = s->req->events->pop(poll_interval)) {
        evs.push_back(std::move(*ev));
    } else {
        // Nothing to write (queued, or a long prefill): probe the socket, a dead client would
        // otherwise go unnoticed until the first write.
        if (!sink.writable() || (s->client_closed && s->client_closed())) {
            s->cancel();
            spdlog::info("req {} client disconnected during the stream; cancelled", s->req->id);
            s->finished = true;  // already logged: the releaser stays quiet
            return false;
        }
        // Before the output starts, a comment line (SSE: ignored by every client) every
        // --stream-keepalive seconds, for the proxies between.
        const double keepalive_s = s->ctx.cfg.stream_keepalive_s;
        if (keepalive_s > 0 && std::chrono::steady_clock::now() - s->last_write >=
                                   std::chrono::duration<double>(keepalive_s)) {
            if (!sink.write(": waiting for the first token\n\n")) {
                s->cancel();
                return false;
            }
            s->last_write = std::chrono::steady_clock::now();
        }
        return true;
    }
    // Drain what is already queued, so a burst of tokens goes out in one write.
    while (evs.back().type == ev_kind::token) {
        auto more = s->req->events->pop(std::chrono::milliseconds(0));
        if (!more) {
            break;
        }
        evs.push_back(std::move(*more));
    }

    std::string buf;
    const generation_event * done = nullptr;
    for (auto & ev : evs) {
        if (ev.type == ev_kind::token) {
            s->on_token(ev);
        } else if (ev.type == ev_kind::done) {
            s->settle(ev);
            if (auto err = run_state::done_error(ev)) {
                buf += s->out->stream_error(*err);
                s->log_done(err->status, ev.stats, "error");
            } else {
                buf += s->out->end_stream(ev);
                s->log_done(200, ev.stats, s->out->finish_reason(ev));
                done = &ev;
            }
            s->finished = true;
            break;
        } else {
            const api_error err = run_state::error_of(ev);
            buf += s->out->stream_error(err);
            s->log_done(err.status, ev.stats, "error");
            s->finished = true;
            break;
        }
    }
    if (!s->finished) {
        buf += s->out->take_stream();
    }
    if (!buf.empty()) {
        if (!sink.write(buf)) {
            s->cancel();
            return false;
        }
        s->last_write = std::chrono::steady_clock::now();
    }
    if (s->finished) {
        sink.done();
        if (done != nullptr) {
            s->after_reply(*done);
        }
    }
    return true;
}

void respond_stream(const std::shared_ptr<run_state> & s, const http_request & req, http_response & res) {
    // Wait for the first event before sending headers, so an error before any output (e.g. the
    // scheduler refusing the request) still gets its HTTP status; but no longer than
    // --stream-keepalive: a request queued or prefilling longer gets its headers then (clients
    // and proxies give up on a response whose headers do not come), and a later error comes in
    // the stream.
    const double keepalive_s = s->ctx.cfg.stream_keepalive_s;
    std::optional<std::chrono::steady_clock::time_point> until;
    if (keepalive_s > 0) {
        until = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(keepalive_s));
    }
    bool gone = true;
    auto first = wait_event(*s, req, until, &gone);
    if (!first && gone) {
        return;
    }
    if (first && first->type == ev_kind::error) {
        const api_error err = run_state::error_of(*first);
        s->send_error(res, err);
        s->log_done(err.status, first->stats, "error");
        return;
    }
    if (!first) {
        spdlog::debug("req {}: no output after {:.1f} s: response headers sent, keep-alive comments until it starts",
                      s->req->id, keepalive_s);
    }
    s->pending = std::move(first);
    s->last_write = std::chrono::steady_clock::now();
    s->client_closed = req.connection_closed;  // valid while the stream runs
    res.status = 200;
    res.content_type = "text/event-stream";
    res.set_header("Cache-Control", "no-cache");
    res.next = [s](stream_sink & sink) { return stream_step(s, sink); };
    res.on_close = [s](bool /*completed*/) {
        if (!s->finished) {
            s->cancel();
            spdlog::info("req {} client disconnected during the stream; cancelled", s->req->id);
        }
    };
}

// --test-reply-script: the request's reply from the script, as the tokens its sampler is forced to.
std::optional<api_error> force_scripted_reply(reply_script & script, const generation_job & job,
                                              scheduler::generation_request & gr) {
    script_pick pick;
    if (auto err = job.conversation ? script.pick(*job.conversation, pick) : script.pick_raw(gr.prompt, pick)) {
        return err;
    }
    spdlog::info("req {} scripted reply {}: {} tokens forced (test instrument)", gr.id, pick.label, pick.tokens.size());
    gr.sampling.forced = std::move(pick.tokens);
    return std::nullopt;
}

}  // namespace

std::string random_id(std::string_view prefix, int n) {
    static const char alphabet[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::uniform_int_distribution<size_t> pick(0, sizeof(alphabet) - 2);
    std::string id(prefix);
    for (int i = 0; i < n; ++i) {
        id += alphabet[pick(rng)];
    }
    return id;
}

std::shared_ptr<scheduler::generation_request> make_generation_request(server_context & ctx, const prepared_chat & prep,
                                                                       const scheduler::sampling_params & sampling) {
    auto gr = std::make_shared<scheduler::generation_request>();
    gr->id = ctx.next_id.fetch_add(1);
    gr->prompt = prep.prompt;
    gr->media = prep.media;
    gr->sampling = sampling;
    if (gr->sampling.max_tokens < 0 && ctx.cfg.n_predict > 0) {
        gr->sampling.max_tokens = ctx.cfg.n_predict;  // --n-predict: the default cap
    }
    gr->sampling.grammar = prep.grammar;  // response_format / tool-call / client grammar, from the render
    if (!gr->sampling.grammar.empty()) {
        gr->sampling.max_step_s = default_request_limits().max_grammar_ms / 1e3;  // --max-grammar-ms
    }
    gr->cache = prep.cache;
    gr->prepared = prep.work;
    gr->lora = prep.lora.scales;
    gr->lora_epoch = prep.lora.epoch;
    spdlog::debug("req {} format={} prompt={} anchor={} history={} tools_anchor={} last_user={} session='{}' bucket={}",
                  gr->id, prep.format, gr->prompt.size(), gr->cache.anchor_tokens, gr->cache.history_tokens,
                  gr->cache.tools_anchor_tokens, gr->cache.last_user_tokens, gr->cache.session_key,
                  gr->cache.bucket.substr(0, 12));
    if (!gr->cache.breakpoint_tokens.empty()) {  // Anthropic's cache_control marks, in tokens
        std::string list;
        for (const int32_t n : gr->cache.breakpoint_tokens) {
            list += (list.empty() ? "" : ",") + std::to_string(n);
        }
        spdlog::debug("req {} cache_control breakpoints at {} tokens", gr->id, list);
    }
    return gr;
}

void generation_job::finish(std::unique_ptr<response_writer> w, chat_request && chat) {
    writer = std::move(w);
    sampling = chat.sampling;
    stream = chat.stream;
    conversation = std::make_shared<const chat_request>(std::move(chat));
}

void handle_generation(const dialect & d, const http_request & req, http_response & res, server_context & ctx) {
    // Before the render: a reset that runs while it is prepared or queued is after its arrival.
    const uint64_t reset_epoch = ctx.sched.reset_epoch();
    generation_job job;
    std::optional<api_error> failed;
    // A large or constrained body is prepared below the engine's priority (--http-nice), so a
    // client sending costly bodies slows the engine's compute threads less on few cores.
    util::run_at_lower_priority(prepare_at_low_priority(req.body) ? ctx.cfg.http_nice : 0, [&] {
        // A long text's tokenization stops between windows once the client has gone.
        const engine::tokenize_stop_scope stop_when_gone([&req] { return req.closed(); });
        failed = d.prepare(req, ctx, job);
    });
    if (auto err = failed) {
        if (req.closed()) {
            spdlog::info("{} request: the client closed the connection while it was prepared", d.name);
            return;
        }
        spdlog::debug("{} request rejected: {}", d.name, err->message);
        send_json_body(res, error_json(d.errors, *err), err->status);
        return;
    }
    auto gr = make_generation_request(ctx, job.prep, job.sampling);
    gr->answers_probe = true;
    gr->cache.reset_epoch = reset_epoch;
    if (ctx.script) {
        if (auto err = force_scripted_reply(*ctx.script, job, *gr)) {
            spdlog::info("req {} {}: no scripted reply: {}", gr->id, d.name, err->message);
            send_json_body(res, error_json(d.errors, *err), err->status);
            return;
        }
    }
    auto s = std::make_shared<run_state>(ctx, gr, std::move(job.prep.preserved_tokens), std::move(job.writer),
                                         job.stream, d, std::move(job.conversation));
    ctx.sched.submit(gr);
    if (s->stream) {
        respond_stream(s, req, res);
    } else {
        respond_json(*s, req, res);
    }
}

}  // namespace lineage::server
