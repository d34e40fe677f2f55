// server::anthropic_messages: Messages API conversation -> chat_request messages.
#include "server/dialects/anthropic/anthropic_messages.h"

#include "engine/multimodal.h"
#include "server/http/json_fields.h"
#include "server/prepare/media_input.h"
#include "server/request/message_checks.h"

namespace lineage::server {

namespace {

using namespace fields;

std::string block_type(const json & b, const std::string & p) {
    return content_part_type(b, p, "a content block object like {\"type\": \"text\", \"text\": \"...\"}", "");
}

// A system text block made by Claude Code for Anthropic's billing ("x-anthropic-billing-header:
// cc_version=...; cc_entrypoint=...;"): routing metadata, not an instruction, and its version
// suffix changes with the user's first message, which would cut every prompt's shared prefix
// at its first tokens. Dropped (docs/prompt-cache.md).
bool is_billing_header(const std::string & text) {
    return text.rfind("x-anthropic-billing-header:", 0) == 0;
}

// One text part; a single part becomes plain content (templates render both the same, and a
// client that echoes a string gets the same tokens).
void set_parts(engine::chat_message & m, std::vector<std::string> parts) {
    m.parts.clear();
    m.content.clear();
    m.content_is_parts = false;
    if (parts.size() == 1) {
        m.content = std::move(parts[0]);
    } else if (!parts.empty()) {
        m.parts = std::move(parts);
        m.content_is_parts = true;
    }
}

bool has_cache_control(const json & block, const std::string & p) {
    const json * cc = field(block, "cache_control");
    if (!cc) {
        return false;
    }
    get_object(*cc, p + ".cache_control");
    return true;
}

std::string text_of(const json & block, const std::string & p) {
    const json * t = field(block, "text");
    if (!t) {
        fail(p + ".text", "'" + p + ".text' is required for a text block");
    }
    return get_string(*t, p + ".text");
}

[[noreturn]] void refuse_block(const std::string & type, const std::string & p, const std::string & role) {
    if (type == "image" || type == "document") {
        fail(p + ".type", "'" + p + "' is " + (type == "image" ? "an " : "a ") + type + " block in a " + role +
                              " message; images go in user messages (documents are not accepted)");
    }
    fail(p + ".type", "'" + p + ".type' is '" + type + "', which a " + role +
                          " message cannot hold here; send text, tool_use, tool_result, thinking or redacted_thinking "
                          "blocks");
}

class converter {
public:
    converter(const thinking_signer & s, anthropic_request & r) : signer_(s), r_(r) {}

    void system(const json & sys) {
        const std::string p = "system";
        if (sys.is_string()) {
            sys_parts_.push_back(sys.get<std::string>());
            return;
        }
        if (!sys.is_array()) {
            fail(p, "'system' must be a string or an array of text blocks, got " + std::string(type_name(sys)));
        }
        for (size_t i = 0; i < sys.size(); ++i) {
            const std::string bp = p + "[" + std::to_string(i) + "]";
            const std::string t = block_type(sys[i], bp);
            if (t != "text") {
                fail(bp + ".type", "'" + bp + ".type' is '" + t + "'; system blocks must be text blocks");
            }
            const std::string text = text_of(sys[i], bp);
            if (!is_billing_header(text)) {
                sys_parts_.push_back(text);
            }
            if (has_cache_control(sys[i], bp)) {
                system_marks_.push_back(sys_parts_.size());
            }
        }
    }

    void message(const json & msg, size_t index) {
        const std::string p = "messages[" + std::to_string(index) + "]";
        // A "system" message is accepted too (some clients send one), though not named.
        const std::string rl = message_role(msg, p, {"user", "assistant", "system"}, "\"user\" or \"assistant\"");
        const json * content = field(msg, "content");
        if (!content) {
            fail(p + ".content", "'" + p + ".content' is required: a string or an array of content blocks");
        }
        if (!content->is_string() && !content->is_array()) {
            fail(p + ".content", "'" + p + ".content' must be a string or an array of content blocks, got " +
                                     type_name(*content));
        }
        if (rl == "system") {
            system_message(*content, p);
        } else if (rl == "user") {
            user(*content, p);
        } else {
            assistant(*content, p);
        }
        seen_turn_ = true;
    }

    void finish() {
        std::vector<engine::chat_message> out;
        if (!sys_parts_.empty()) {
            engine::chat_message sys;
            sys.role = "system";
            set_parts(sys, sys_parts_);
            out.push_back(std::move(sys));
            for (const size_t n : system_marks_) {
                if (n == 0) {
                    continue;
                }
                cache_breakpoint b;
                b.last.role = "system";
                set_parts(b.last, std::vector<std::string>(sys_parts_.begin(), sys_parts_.begin() + static_cast<long>(n)));
                r_.breakpoints.push_back(std::move(b));
            }
        }
        const size_t shift = out.size();
        for (auto & m : msgs_) {
            out.push_back(std::move(m));
        }
        for (auto & b : marks_) {
            b.n_before += shift;
            r_.breakpoints.push_back(std::move(b));
        }
        r_.chat.messages = std::move(out);
    }

private:
    // A role "system" message: leading ones (before any user/assistant turn) extend the system
    // prompt; later ones become a user message wrapped in <system>...</system>.
    void system_message(const json & content, const std::string & p) {
        std::vector<std::string> parts;
        bool marked = false;
        if (content.is_string()) {
            parts.push_back(content.get<std::string>());
        } else {
            for (size_t i = 0; i < content.size(); ++i) {
                const std::string bp = p + ".content[" + std::to_string(i) + "]";
                const std::string t = block_type(content[i], bp);
                if (t != "text") {
                    fail(bp + ".type", "'" + bp + ".type' is '" + t + "'; a system message holds text blocks only");
                }
                parts.push_back(text_of(content[i], bp));
                marked = has_cache_control(content[i], bp) || marked;
            }
        }
        if (!seen_turn_) {
            for (auto & s : parts) {
                sys_parts_.push_back(std::move(s));
            }
            if (marked) {
                system_marks_.push_back(sys_parts_.size());
            }
            return;
        }
        std::string text;
        for (const auto & s : parts) {
            text += (text.empty() ? "" : "\n") + s;
        }
        if (!msgs_.empty()) {
            // A restore point where the conversation before this block ends: a client that adds
            // to that message (a retry, a continued session) re-sends this block after it.
            marks_.push_back(cache_breakpoint{msgs_.size() - 1, msgs_.back(), /*implicit=*/true});
        }
        engine::chat_message m;
        m.role = "user";
        m.content = std::string(mid_system_open) + text + std::string(mid_system_close);
        msgs_.push_back(std::move(m));
        if (marked) {
            mark_last();
        }
    }

    void user(const json & content, const std::string & p) {
        if (content.is_string()) {
            engine::chat_message m;
            m.role = "user";
            m.content = content.get<std::string>();
            msgs_.push_back(std::move(m));
            return;
        }
        // Consecutive text blocks form one user message; each tool_result is a tool message.
        std::vector<std::string> texts;
        auto flush = [&] {
            if (!texts.empty()) {
                engine::chat_message m;
                m.role = "user";
                set_parts(m, std::move(texts));
                msgs_.push_back(std::move(m));
                texts.clear();
            }
        };
        for (size_t i = 0; i < content.size(); ++i) {
            const std::string bp = p + ".content[" + std::to_string(i) + "]";
            const std::string t = block_type(content[i], bp);
            const bool marked = has_cache_control(content[i], bp);
            if (t == "text") {
                texts.push_back(text_of(content[i], bp));
                if (marked) {
                    engine::chat_message cut;
                    cut.role = "user";
                    set_parts(cut, texts);
                    marks_.push_back(cache_breakpoint{msgs_.size(), std::move(cut)});
                }
            } else if (t == "image") {
                // In the text where it stands: the image marker (engine::projector::marker()).
                r_.chat.images.push_back({image_of(content[i], bp), bp});
                texts.push_back(engine::projector::marker());
            } else if (t == "tool_result") {
                flush();
                msgs_.push_back(tool_result(content[i], bp));
                if (marked) {
                    mark_last();
                }
            } else {
                refuse_block(t, bp, "user");
            }
        }
        flush();
        if (content.empty()) {
            fail(p + ".content", "'" + p + ".content' must hold at least one content block");
        }
    }

    // An image block's file bytes: {"source": {"type": "base64", "media_type": "image/...",
    // "data": "..."}}; a url source is refused (the server fetches nothing).
    static std::string image_of(const json & b, const std::string & p) {
        const json * src = field(b, "source");
        if (!src || !src->is_object()) {
            fail(p + ".source", "'" + p + ".source' is required: {\"type\": \"base64\", \"media_type\": "
                                "\"image/png\", \"data\": \"...\"}");
        }
        const json * type = field(*src, "type");
        const std::string st = type ? get_string(*type, p + ".source.type") : "";
        if (st != "base64") {
            fail(p + ".source.type", "'" + p + ".source.type' is '" + st + "'; this server fetches nothing: send the "
                                     "image as {\"type\": \"base64\", \"media_type\": \"image/png\", \"data\": \"...\"}");
        }
        const json * mt = field(*src, "media_type");
        if (!mt || get_string(*mt, p + ".source.media_type").rfind("image/", 0) != 0) {
            fail(p + ".source.media_type", "'" + p + ".source.media_type' must be an image type (image/png, image/jpeg)");
        }
        const json * data = field(*src, "data");
        auto bytes = data ? base64_decode(get_string(*data, p + ".source.data")) : std::nullopt;
        if (!bytes) {
            fail(p + ".source.data", "'" + p + ".source.data' must be the image's bytes in base64");
        }
        return std::move(*bytes);
    }

    engine::chat_message tool_result(const json & b, const std::string & p) {
        engine::chat_message m;
        m.role = "tool";
        const json * id = field(b, "tool_use_id");
        if (!id) {
            fail(p + ".tool_use_id", "'" + p + ".tool_use_id' is required: the id of the tool_use block it answers");
        }
        m.tool_call_id = get_string(*id, p + ".tool_use_id");
        bool is_error = false;
        if (const json * e = field(b, "is_error")) {
            is_error = get_bool(*e, p + ".is_error");
        }
        std::vector<std::string> parts;
        if (const json * c = field(b, "content")) {
            if (c->is_string()) {
                parts.push_back(c->get<std::string>());
            } else if (c->is_array()) {
                for (size_t i = 0; i < c->size(); ++i) {
                    const std::string cp = p + ".content[" + std::to_string(i) + "]";
                    const std::string t = block_type((*c)[i], cp);
                    if (t != "text") {
                        refuse_block(t, cp, "tool_result");
                    }
                    parts.push_back(text_of((*c)[i], cp));
                }
            } else {
                fail(p + ".content", "'" + p + ".content' must be a string or an array of text blocks, got " +
                                         type_name(*c));
            }
        }
        // The templates have no error flag: an error result is rendered with an "Error: " prefix.
        if (is_error) {
            if (parts.empty()) {
                parts.emplace_back("Error");
            } else {
                parts[0] = "Error: " + parts[0];
            }
        }
        set_parts(m, std::move(parts));
        return m;
    }

    void assistant(const json & content, const std::string & p) {
        engine::chat_message m;
        m.role = "assistant";
        if (content.is_string()) {
            m.content = content.get<std::string>();
            msgs_.push_back(std::move(m));
            return;
        }
        std::vector<std::string> texts;
        for (size_t i = 0; i < content.size(); ++i) {
            const std::string bp = p + ".content[" + std::to_string(i) + "]";
            const std::string t = block_type(content[i], bp);
            const bool marked = has_cache_control(content[i], bp);
            if (t == "text") {
                texts.push_back(text_of(content[i], bp));
            } else if (t == "thinking" || t == "redacted_thinking") {
                m.reasoning_content += thinking(content[i], bp, t);
            } else if (t == "tool_use") {
                m.tool_calls.push_back(tool_use(content[i], bp));
            } else {
                refuse_block(t, bp, "assistant");
            }
            if (marked) {
                engine::chat_message cut = m;
                set_parts(cut, texts);
                marks_.push_back(cache_breakpoint{msgs_.size(), std::move(cut)});
            }
        }
        set_parts(m, std::move(texts));
        msgs_.push_back(std::move(m));
    }

    std::string thinking(const json & b, const std::string & p, const std::string & type) {
        const char * sig_field = type == "thinking" ? "signature" : "data";
        const json * sig = field(b, sig_field);
        if (!sig) {
            fail(p + "." + sig_field, "'" + p + "." + sig_field + "' is required: send " + type +
                                          " blocks back exactly as this server returned them");
        }
        const std::string s = get_string(*sig, p + "." + sig_field);
        const auto text = signer_.open(s);
        if (!text) {
            fail(p + "." + sig_field, "'" + p + "." + sig_field + "' is not a signature this server issued for this model "
                                          "(edited, or from another server or model); send " + type +
                                          " blocks back unchanged, or leave them out");
        }
        if (type == "thinking") {
            const json * th = field(b, "thinking");
            const std::string given = th ? get_string(*th, p + ".thinking") : std::string();
            if (!given.empty() && given != *text) {
                fail(p + ".thinking", "'" + p + ".thinking' differs from the text its signature was issued for; send "
                                          "thinking blocks back unchanged");
            }
        }
        return *text;
    }

    engine::chat_tool_call tool_use(const json & b, const std::string & p) {
        engine::chat_tool_call c;
        const json * id = field(b, "id");
        if (!id) {
            fail(p + ".id", "'" + p + ".id' is required for a tool_use block");
        }
        c.id = get_string(*id, p + ".id");
        const json * name = field(b, "name");
        if (!name) {
            fail(p + ".name", "'" + p + ".name' is required for a tool_use block");
        }
        c.name = get_string(*name, p + ".name");
        const json * input = field(b, "input");
        c.arguments = input ? dump(get_object(*input, p + ".input")) : "{}";
        return c;
    }

    void mark_last() {
        marks_.push_back(cache_breakpoint{msgs_.size() - 1, msgs_.back()});
    }

    const thinking_signer & signer_;
    anthropic_request & r_;
    std::vector<std::string> sys_parts_;
    std::vector<size_t> system_marks_;  ///< system parts before each marked system block
    std::vector<engine::chat_message> msgs_;
    std::vector<cache_breakpoint> marks_;  ///< n_before counts msgs_ (the system message is added last)
    bool seen_turn_ = false;
};

}  // namespace

void convert_conversation(const json & body, const thinking_signer & signer, anthropic_request & r) {
    converter conv(signer, r);
    if (const json * sys = field(body, "system")) {
        conv.system(*sys);
    }
    const json & messages = messages_array(body, "a non-empty array of {\"role\", \"content\"} objects");
    for (size_t i = 0; i < messages.size(); ++i) {
        conv.message(messages[i], i);
    }
    conv.finish();
}

}  // namespace lineage::server
