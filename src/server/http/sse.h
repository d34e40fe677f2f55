// server::sse: Server-Sent Events framing of the chat completion stream (one "data: <json>"
// event per chunk, a blank line after each, "data: [DONE]" last), as OpenAI streams it.
// Thread safety: pure functions.
#pragma once

#include "server/http/errors.h"

#include <string>
#include <vector>

namespace lineage::server {

/** "data: <json>\n\n" */
std::string sse_event(const json & j);

/** The events of `chunks`, concatenated. */
std::string sse_events(const std::vector<json> & chunks);

/** "data: [DONE]\n\n" */
const std::string & sse_done();

/** An error after the stream started: "data: {"error": {...}}\n\n" (OpenAI's in-stream shape). */
std::string sse_error(const api_error & e);

}  // namespace lineage::server
