// server::http_message: the request and response every handler takes, our own structs (the shape
// of llama.cpp's server-http.h `server_http_req` / `server_http_res`). routes.cpp copies what
// cpp-httplib parsed into an http_request and writes the handler's http_response back into
// httplib's, streaming included, so that no handler sees httplib and every handler can be called
// from a unit test without a socket (tests/server/http/test_http_message.cpp, and the
// generation handler's tests in tests/server/run/). docs/architecture.md "The HTTP seam".
// Thread safety: one request and its response belong to the request's thread; `next` runs on it
// too, after the handler returned.
#pragma once

#include "server/http/errors.h"

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lineage::server {

/** One HTTP request as a handler sees it. */
struct http_request {
    std::string method;  ///< "GET", "POST", "DELETE"; a HEAD is routed to the GET handler with method "HEAD"
    std::string path;    ///< the path without the query, e.g. "/v1/responses/resp_1"
    std::string body;    ///< the body as received (empty for a GET)
    /** Header fields in arrival order; names are compared case-insensitively (RFC 9110
     *  section 5.1), so "authorization" finds "Authorization". */
    std::vector<std::pair<std::string, std::string>> headers;
    std::vector<std::pair<std::string, std::string>> query;  ///< query parameters in order, decoded
    std::map<std::string, std::string> path_params;          ///< the ":name" segments of the route, by name
    /** True once the client has closed the connection (a handler then cancels its work);
     *  unset = the client never goes away (a unit test). */
    std::function<bool()> connection_closed;

    bool has_header(std::string_view name) const;
    /** The first value of header `name`, "" when absent. */
    std::string header(std::string_view name) const;
    bool has_param(std::string_view name) const;
    /** The first value of query parameter `name`, "" when absent. */
    std::string param(std::string_view name) const;
    /** The route's ":name" segment; "" when the route has none of that name. */
    std::string path_param(const std::string & name) const;
    /** connection_closed(), false when unset. */
    bool closed() const { return connection_closed && connection_closed(); }
};

/** Where a streamed response writes its bytes (routes.cpp: httplib's DataSink; tests: a string). */
class stream_sink {
public:
    virtual ~stream_sink() = default;
    /** Sends `bytes`; false when the client is gone. */
    virtual bool write(std::string_view bytes) = 0;
    /** False once the connection can take no more bytes (the client went away). */
    virtual bool writable() const = 0;
    /** Ends the stream (the last chunk); `next` is not called again. */
    virtual void done() = 0;
};

/** One HTTP response as a handler fills it: a whole body, or a stream when `next` is set. */
struct http_response {
    int status = 200;
    std::string body;                                          ///< the whole body (unused when streaming)
    std::string content_type;                                  ///< e.g. "application/json", "text/event-stream"
    std::vector<std::pair<std::string, std::string>> headers;  ///< added response header fields
    /** Streaming: called on the request's thread after the handler returned, again and again,
     *  until it calls `sink.done()` or returns false (the stream then ends without its last
     *  chunk: the client is gone or the writer gave up). The status and headers are sent before
     *  the first call. */
    std::function<bool(stream_sink & sink)> next;
    /** Streaming: called once when the stream is over; `completed` is false when it ended
     *  early (the client went away, or `next` returned false). */
    std::function<void(bool completed)> on_close;

    void set_content(std::string content, std::string type) {
        body = std::move(content);
        content_type = std::move(type);
    }
    /** Adds a header field (an existing one of the same name stays). */
    void set_header(std::string name, std::string value) { headers.emplace_back(std::move(name), std::move(value)); }
    /** The first value of header `name`, "" when absent (case-insensitive). */
    std::string header(std::string_view name) const;
};

/** Sends `body` with `status` (200 unless given) as application/json. */
void send_json_body(http_response & res, const json & body, int status = 200);

}  // namespace lineage::server
