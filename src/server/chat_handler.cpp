// server::chat_handler: one chat completion from request body to response.
#include "server/chat_handler.h"

#include "engine/model.h"
#include "scheduler/scheduler.h"
#include "server/chat_response.h"
#include "server/routes.h"
#include "server/sse.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <random>

namespace lineage::server {

namespace {

using scheduler::generation_event;
using ev_kind = scheduler::generation_event::kind;

constexpr std::chrono::milliseconds poll_interval{100};

std::string completion_id() {
    static const char alphabet[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::uniform_int_distribution<size_t> pick(0, sizeof(alphabet) - 2);
    std::string id = "chatcmpl-";
    for (int i = 0; i < 29; ++i) {
        id += alphabet[pick(rng)];
    }
    return id;
}

void send_error(httplib::Response & res, const api_error & e) {
    res.status = e.status;
    res.set_content(dump(to_json(e)), "application/json");
}

// One request's state, shared by the handler and (when streaming) the content provider.
struct chat_session {
    chat_session(server_context & c, std::shared_ptr<scheduler::generation_request> r, prepared_chat p,
                 completion_meta meta, bool include_usage)
        : ctx(c),
          req(std::move(r)),
          prep(std::move(p)),
          out(std::move(meta), prep.parser, prep.stops, include_usage, static_cast<int32_t>(prep.prompt.size())) {}

    server_context & ctx;
    std::shared_ptr<scheduler::generation_request> req;
    prepared_chat prep;
    chat_output out;
    std::optional<generation_event> pending;  ///< first event, read before the stream started
    bool finished = false;
    bool stream = false;
    std::chrono::steady_clock::time_point last_client_check = std::chrono::steady_clock::now();
    std::function<bool()> client_closed;  ///< streaming: the request's socket probe

    void cancel() { req->cancelled->store(true); }

    // Adds a token's text; asks the scheduler to stop when a stop string matched.
    void on_token(const generation_event & e) {
        if (out.text().stopped()) {
            return;  // tokens decoded before the scheduler saw stop_requested
        }
        if (e.tok >= 0 && ctx.model.is_eog(e.tok)) {
            return;
        }
        std::string piece = e.piece;
        if (e.tok >= 0 && prep.preserved_tokens.count(e.tok)) {
            piece = ctx.model.token_to_piece(e.tok, /*special=*/true);
        }
        if (out.add(piece)) {
            req->stop_requested->store(true);
        }
    }

    void log_done(int status, const scheduler::request_stats & s, const std::string & finish) const {
        const double tps = s.completion_tokens > 1 && s.decode_s > 0 ? (s.completion_tokens - 1) / s.decode_s : 0.0;
        spdlog::info("req {} {} {}: prompt={} cached={} completion={} ttft={:.1f}ms decode={:.1f}tok/s hit={} finish={}",
                     req->id, stream ? "stream" : "json", status,
                     s.prompt_tokens > 0 ? s.prompt_tokens : static_cast<int32_t>(prep.prompt.size()), s.cached_tokens,
                     s.completion_tokens, s.ttft_s * 1e3, tps, s.hit_kind.empty() ? "miss" : s.hit_kind, finish);
    }

    api_error error_of(const generation_event & e) const {
        api_error err;
        err.status = e.http_status > 0 ? e.http_status : 500;
        err.type = e.error_type.empty() ? (err.status >= 500 ? "server_error" : "invalid_request_error") : e.error_type;
        err.message = e.message.empty() ? "generation failed" : e.message;
        return err;
    }

    // The error a done event stands for: cancelled (we cancel only when the client is gone,
    // so this is the server shutting down) or finished with an error.
    static std::optional<api_error> done_error(const generation_event & e) {
        if (e.finish == scheduler::finish_reason::cancelled) {
            api_error err;
            err.status = 503;
            err.type = "server_error";
            err.message = "the request was cancelled because the server is shutting down; retry on a running server";
            return err;
        }
        if (e.finish == scheduler::finish_reason::error) {
            return server_error(e.message.empty() ? "generation failed" : e.message);
        }
        return std::nullopt;
    }
};

// Waits for the next event while watching the client; nullopt when the client went away (the
// request is then cancelled).
std::optional<generation_event> wait_event(chat_session & s, const httplib::Request & req) {
    for (;;) {
        // Look at the socket every poll_interval even while events keep coming.
        const auto now = std::chrono::steady_clock::now();
        const bool check_now = now - s.last_client_check >= poll_interval;
        if (!check_now) {
            if (auto ev = s.req->events->pop(poll_interval)) {
                return ev;
            }
        }
        s.last_client_check = std::chrono::steady_clock::now();
        if (req.is_connection_closed()) {
            s.cancel();
            spdlog::info("req {} client disconnected; cancelled", s.req->id);
            return std::nullopt;
        }
    }
}

void respond_json(chat_session & s, const httplib::Request & req, httplib::Response & res) {
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
                if (auto err = chat_session::done_error(*ev)) {
                    send_error(res, *err);
                    s.log_done(err->status, ev->stats, "error");
                    return;
                }
                res.status = 200;
                res.set_content(dump(s.out.final_response(*ev)), "application/json");
                s.log_done(200, ev->stats, s.out.finish_reason(*ev));
                return;
            case ev_kind::error: {
                const api_error err = s.error_of(*ev);
                send_error(res, err);
                s.log_done(err.status, ev->stats, "error");
                return;
            }
        }
    }
}

// Content provider step: writes what the next events produced. False ends the stream with an
// error (client gone).
bool stream_step(const std::shared_ptr<chat_session> & s, httplib::DataSink & sink) {
    if (s->finished) {
        sink.done();
        return true;
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
        if (!sink.is_writable() || (s->client_closed && s->client_closed())) {
            s->cancel();
            spdlog::info("req {} client disconnected during the stream; cancelled", s->req->id);
            s->finished = true;  // already logged: the releaser stays quiet
            return false;
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
    for (const auto & ev : evs) {
        if (ev.type == ev_kind::token) {
            s->on_token(ev);
        } else if (ev.type == ev_kind::done) {
            if (auto err = chat_session::done_error(ev)) {
                buf += sse_error(*err);
                s->log_done(err->status, ev.stats, "error");
            } else {
                buf += sse_events(s->out.final_chunks(ev));
                buf += sse_done();
                s->log_done(200, ev.stats, s->out.finish_reason(ev));
            }
            s->finished = true;
            break;
        } else {
            const api_error err = s->error_of(ev);
            buf += sse_error(err);
            s->log_done(err.status, ev.stats, "error");
            s->finished = true;
            break;
        }
    }
    if (!s->finished) {
        buf += sse_events(s->out.take_chunks());
    }
    if (!buf.empty() && !sink.write(buf.data(), buf.size())) {
        s->cancel();
        return false;
    }
    if (s->finished) {
        sink.done();
    }
    return true;
}

void respond_stream(const std::shared_ptr<chat_session> & s, const httplib::Request & req, httplib::Response & res) {
    // Wait for the first event before sending headers, so an error before any output (e.g. the
    // scheduler refusing the request) still gets its HTTP status.
    auto first = wait_event(*s, req);
    if (!first) {
        return;
    }
    if (first->type == ev_kind::error) {
        const api_error err = s->error_of(*first);
        send_error(res, err);
        s->log_done(err.status, first->stats, "error");
        return;
    }
    s->pending = std::move(first);
    s->client_closed = req.is_connection_closed;  // valid while the provider runs
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [s](size_t /*offset*/, httplib::DataSink & sink) { return stream_step(s, sink); },
        [s](bool /*success*/) {
            if (!s->finished) {
                s->cancel();
                spdlog::info("req {} client disconnected during the stream; cancelled", s->req->id);
            }
        });
}

}  // namespace

void handle_chat_completions(const httplib::Request & req, httplib::Response & res, server_context & ctx) {
    chat_request cr;
    if (auto err = parse_chat_request(req.body, cr)) {
        spdlog::debug("chat request rejected: {}", err->message);
        send_error(res, *err);
        return;
    }
    prepared_chat prep;
    if (auto err = ctx.preparer.prepare(cr, ctx.sched.max_sequence_tokens(), prep)) {
        spdlog::debug("chat request rejected: {}", err->message);
        send_error(res, *err);
        return;
    }

    auto gr = std::make_shared<scheduler::generation_request>();
    gr->id = ctx.next_id.fetch_add(1);
    gr->prompt = prep.prompt;
    gr->sampling = cr.sampling;
    gr->cache = prep.cache;
    spdlog::debug("req {} format={} prompt={} anchor={} history={} tools_anchor={} session='{}' bucket={}", gr->id,
                  prep.format, gr->prompt.size(), gr->cache.anchor_tokens, gr->cache.history_tokens,
                  gr->cache.tools_anchor_tokens, gr->cache.session_key, gr->cache.bucket.substr(0, 12));

    completion_meta meta;
    meta.id = completion_id();
    meta.model = ctx.model_id;
    meta.created = static_cast<int64_t>(std::time(nullptr));
    auto session = std::make_shared<chat_session>(ctx, gr, std::move(prep), std::move(meta), cr.include_usage);
    session->stream = cr.stream;

    ctx.sched.submit(gr);
    if (cr.stream) {
        respond_stream(session, req, res);
    } else {
        respond_json(*session, req, res);
    }
}

}  // namespace lineage::server
