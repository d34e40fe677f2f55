// server::sse: SSE framing.
#include "server/http/sse.h"

namespace lineage::server {

std::string sse_event(const json & j) {
    return "data: " + dump(j) + "\n\n";
}

std::string sse_events(const std::vector<json> & chunks) {
    std::string out;
    for (const auto & c : chunks) {
        out += sse_event(c);
    }
    return out;
}

const std::string & sse_done() {
    static const std::string done = "data: [DONE]\n\n";
    return done;
}

std::string sse_error(const api_error & e) {
    return sse_event(to_json(e));
}

}  // namespace lineage::server
