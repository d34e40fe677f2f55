// server::reply_script: scripted replies for test models, a TEST INSTRUMENT
// (--test-reply-script FILE). The test models have random weights, so a real agent never sees a
// reply that calls its tools; with a script, each request is answered by a reply picked from the
// script, which the engine then generates token by token (the sampler forced to the reply's tokens,
// engine::sampler_params::forced): the sequence, the cache and the warm-up hold exactly what was
// generated, as with a real model, and the server's own parser turns the reply into each dialect's
// text, reasoning and tool calls. docs/testing.md "Scripted replies" gives the file format.
// Thread safety: pick() may run on many HTTP threads at once (locked). Ownership: borrows the model
// and the preparer, which must outlive it.
#pragma once

#include "engine/chat_template.h"
#include "server/http/errors.h"
#include "util/thread_annotations.h"

#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

namespace lineage::engine {
class model;
}

namespace lineage::server {

class chat_preparer;
struct chat_request;

/** One reply of a script: when it applies, and what the model generates. */
struct scripted_reply {
    std::string label;  ///< named in the log and in errors; "" = "#INDEX"

    // When (every condition given must hold; none given: any request).
    /** A substring of the request's new input: the text of its messages after the last assistant
     *  message (all of them when there is none), i.e. the user text and tool results the model
     *  has not answered yet. For a raw prompt (POST /v1/completions): the prompt's text. */
    std::string input;
    /** A substring of the request's system text (its leading system and developer messages). */
    std::string system;
    std::optional<bool> tools;  ///< the request offers tools (true) or none (false)
    std::string tool;           ///< the request offers a tool of this name
    bool repeat = false;        ///< false: used once, then skipped

    // What (either `text`, or content / reasoning / tool calls).
    /** The model's raw output after the generation prompt, special tokens as text (e.g.
     *  "<tool_call>\n<function=read>..."); an end-of-turn token is appended when it has none. */
    std::optional<std::string> text;
    std::string content;
    std::string reasoning;
    std::vector<engine::chat_tool_call> tool_calls;  ///< arguments as JSON text
};

/** What a request was given by the script. */
struct script_pick {
    std::string label;            ///< the reply's label ("#INDEX" when it has none)
    std::vector<int32_t> tokens;  ///< what the sampler is forced to, ending in an end-of-generation token
};

/** The parsed script file: {"replies": [REPLY, ...]} or a bare array. Errors: what is wrong and
 *  where (the reply's index and field). */
std::optional<std::string> parse_reply_script(const std::string & json_text, std::vector<scripted_reply> & out);

/** What a request offers the script to match on (chat: from the chat_request; raw: the prompt). */
struct script_view {
    std::string input;
    std::string system;
    std::vector<std::string> tools;
};

/** The view of a chat request (script_view's fields as scripted_reply documents them). */
script_view view_of(const chat_request & r);

/** The first reply of `replies` not yet used (or repeatable) whose conditions hold for `v`; -1 when
 *  none. `used` is indexed like `replies`. Pure. */
int32_t match_reply(const std::vector<scripted_reply> & replies, const std::vector<bool> & used, const script_view & v);

/** The text the model generates for `reply` after `r`'s prompt: `text` as given, or else the
 *  assistant message (content, reasoning, tool calls) rendered by the chat template after `r`'s
 *  conversation, less the prompt `r` renders with its generation prompt. Errors: 400 when the
 *  template cannot render it or renders it without the generation prompt in front (e.g.
 *  reasoning after a generation prompt with thinking off). */
std::optional<api_error> reply_text(const chat_preparer & p, const chat_request & r, const scripted_reply & reply,
                                    std::string & out);

class reply_script {
public:
    /** Reads `path` now (and again whenever its modification time or size changes: a test writes
     *  a new script with a rename, and the replies' used marks start over). Throws
     *  std::runtime_error naming the file when it cannot be read or parsed. */
    reply_script(std::string path, const engine::model & m, const chat_preparer & p);

    /** The reply for chat request `r` (a copy of its conversation is rendered for structured
     *  replies), marked used. Errors: 400 "no_scripted_reply" when no reply matches (the message
     *  says how many the script has and how many are used); 400 when it cannot be rendered; 500
     *  when the file changed and no longer parses. */
    std::optional<api_error> pick(const chat_request & r, script_pick & out);

    /** The reply for a raw prompt (POST /v1/completions): only `text` replies serve it. Errors as
     *  pick(). */
    std::optional<api_error> pick_raw(const std::vector<int32_t> & prompt, script_pick & out);

    const std::string & path() const { return path_; }

private:
    /** Re-reads the file when it changed; an error when it no longer parses. */
    std::optional<api_error> refresh() REQUIRES(mu_);
    /** Picks and marks a reply for `v`; an error when none matches. */
    std::optional<api_error> choose(const script_view & v, scripted_reply & reply, std::string & label) REQUIRES(mu_);
    /** `text` as tokens ending in an end-of-generation token, into `out`; a 500 when the
     *  tokenizer fails. */
    std::optional<api_error> forced_tokens(const std::string & text, std::vector<int32_t> & out) const;

    std::string path_;
    const engine::model & model_;
    const chat_preparer & preparer_;
    util::mutex mu_;
    std::vector<scripted_reply> replies_ GUARDED_BY(mu_);
    std::vector<bool> used_ GUARDED_BY(mu_);
    std::timespec mtime_ GUARDED_BY(mu_) = {};
    int64_t size_ GUARDED_BY(mu_) = -1;
    std::string load_error_ GUARDED_BY(mu_);  ///< the last reload's parse error; "" = none
};

}  // namespace lineage::server
