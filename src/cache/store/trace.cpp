// cache::tracer: the decision trace's sink and formatting helpers.
#include "cache/store/trace.h"

#include <spdlog/spdlog.h>

namespace lineage::cache {

tracer::sink tracer::log_sink() {
    return [](std::string_view line) { spdlog::info("cache-trace: {}", line); };
}

void tracer::emit(const std::string & line) const {
    if (context_.empty()) {
        sink_(line);
    } else {
        sink_(context_ + ": " + line);
    }
}

trace_scope::trace_scope(tracer & t, uint64_t request_id, bool warmup) : t_(t) {
    if (t_.on()) {
        saved_ = t_.context();
        t_.set_context((warmup ? "warm-up " : "request ") + std::to_string(request_id));
    }
}

trace_scope::~trace_scope() {
    if (t_.on()) {
        t_.set_context(std::move(saved_));
    }
}

std::string human_bytes(uint64_t bytes) {
    const double b = static_cast<double>(bytes);
    if (bytes < 1024) {
        return fmt::format("{} B", bytes);
    }
    if (bytes < (1ull << 20)) {
        return fmt::format("{:.1f} KiB", b / 1024.0);
    }
    if (bytes < (1ull << 30)) {
        return fmt::format("{:.1f} MiB", b / (1024.0 * 1024.0));
    }
    return fmt::format("{:.2f} GiB", b / (1024.0 * 1024.0 * 1024.0));
}

std::string quote_for_log(std::string_view s) {
    if (s.empty()) {
        return "(anonymous)";
    }
    constexpr size_t max_chars = 40;
    std::string out = "\"";
    for (size_t i = 0; i < s.size() && i < max_chars; ++i) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7f) {
            out += fmt::format("\\x{:02x}", c);
        } else {
            out += static_cast<char>(c);
        }
    }
    out += s.size() > max_chars ? "\"..." : "\"";
    return out;
}

}  // namespace lineage::cache
