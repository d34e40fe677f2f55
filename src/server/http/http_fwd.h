// server::http_fwd: forward declarations of cpp-httplib's request and response (the engine
// bundle's vendor/cpp-httplib), for handler headers that take them by reference: the handlers'
// .cpp files include <httplib.h> itself, the headers stay free of it.
#pragma once

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib
