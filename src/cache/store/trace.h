// cache::tracer: the prompt cache's decision trace (--cache-trace, env LINEAGE_CACHE_TRACE=1):
// one line per decision: which restore point a request took and why the other entries were
// not taken, what was captured, absorbed, thinned, demoted and evicted, with reasons
// (docs/prompt-cache.md "The decision trace"). Off by default. When off, on() is a null
// check and callers build no text: wrap any work beyond the call itself in `if (t.on())`.
// Thread safety: none; one tracer per cache store, used on the engine thread only.
// Ownership: owns its sink.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

namespace lineage::cache {

class tracer {
public:
    /** Receives one finished line (no trailing newline, no "cache-trace:" prefix). */
    using sink = std::function<void(std::string_view line)>;

    /** Starts tracing into `s`; a null sink stops it. */
    void set_sink(sink s) { sink_ = std::move(s); }
    bool on() const noexcept { return static_cast<bool>(sink_); }

    /** Text put before every following line, e.g. "request 12" ("" for none). */
    void set_context(std::string c) { context_ = std::move(c); }
    const std::string & context() const { return context_; }

    /** Formats and emits one line (nothing when off; the arguments are still evaluated: on a
     *  hot path use LINEAGE_TRACE). */
    template <typename... A>
    void operator()(fmt::format_string<A...> f, A &&... args) const {
        if (sink_) {
            emit(fmt::format(f, std::forward<A>(args)...));
        }
    }

    /** The server's sink: spdlog at INFO, each line prefixed "cache-trace: " so operators
     *  can grep for it. */
    static sink log_sink();

private:
    void emit(const std::string & line) const;

    sink sink_;
    std::string context_;
};

/** Emits one trace line through `t` when it is on, without evaluating the arguments when it is
 *  off (the way to trace on a hot path: the cost when off is one null check). */
#define LINEAGE_TRACE(t, ...)        \
    do {                             \
        if ((t).on()) {              \
            (t)(__VA_ARGS__);        \
        }                            \
    } while (false)

/** Sets a tracer's context for one scope, "request 12" (or "warm-up 12" for a warm-up job, as
 *  the INFO log names it), and restores the previous one. */
class trace_scope {
public:
    trace_scope(tracer & t, uint64_t request_id, bool warmup = false);
    ~trace_scope();
    trace_scope(const trace_scope &) = delete;
    trace_scope & operator=(const trace_scope &) = delete;

private:
    tracer & t_;
    std::string saved_;
};

/** Bytes for a trace line: "812 B", "4.9 KiB", "23.0 MiB", "1.20 GiB". */
std::string human_bytes(uint64_t bytes);

/** A client-supplied string for a trace line: quoted, control characters escaped, at most 40
 *  characters ("(anonymous)" when empty). */
std::string quote_for_log(std::string_view s);

}  // namespace lineage::cache
