// server::delta_pump: the generated text of one request turned into the chat parser's deltas, for
// every dialect's writer (chat completions, Anthropic messages, responses). Pieces go into a
// text_stream (stop strings; never half a UTF-8 character, never the start of a possible stop
// string); what became stable since the last take() is parsed as a partial message, and at the
// end finish() parses the whole text as the final one. The writers only turn the deltas into
// their dialect's chunks or events. Why one: the three writers used to repeat this loop.
// Thread safety: none; one per request, used by the request's HTTP thread.
#pragma once

#include "engine/chat_template.h"
#include "server/run/text_stream.h"

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace lineage::server {

class delta_pump {
public:
    /** `stops`: strings that end generation (text_stream); `parser`: how the model's output is
     *  parsed (engine::chat_output_parser). */
    delta_pump(std::vector<std::string> stops, engine::chat_parse_params parser)
        : parser_(std::move(parser)), text_(std::move(stops)) {}

    /** Appends a piece (one token's text). True when it completed a stop string
     *  (text_stream::append): generation should stop. */
    bool add(std::string_view piece) { return text_.append(piece); }

    /** The deltas of the text that became stable since the last call, parsed as a partial
     *  message (invalid UTF-8 replaced); none when nothing became stable. */
    std::vector<engine::chat_delta> take();

    /** The deltas of the whole text parsed as the final message (the parser falls back to the
     *  whole text as content when it does not match the template's format). Call once, at the
     *  end; message() is then the reply. */
    std::vector<engine::chat_delta> finish();

    /** Bytes of text() given to the parser so far: take()'s stable length, all of it after
     *  finish(). */
    size_t parsed() const { return parsed_; }

    const text_stream & text() const { return text_; }
    /** The message as of the last take() or finish(). */
    const engine::chat_parsed & message() const { return parser_.message(); }

private:
    engine::chat_output_parser parser_;
    text_stream text_;
    size_t parsed_ = 0;
};

}  // namespace lineage::server
