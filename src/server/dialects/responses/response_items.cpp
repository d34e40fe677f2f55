// server::response_items: item parsing, the chat mapping and the stored form.
#include "server/dialects/responses/response_items.h"

#include "engine/multimodal.h"
#include "server/dialects/responses/reasoning_seal.h"
#include "server/http/json_body.h"
#include "server/http/json_fields.h"
#include "server/request/message_checks.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace lineage::server {

using namespace fields;

namespace {

// An input_image part at `pp`: {"type": "input_image", "image_url": "data:image/...;base64,...",
// "detail": ...}; the part becomes the image marker in it.parts.
void parse_image(const json & part, const std::string & pp, response_item & it) {
    if (it.role == "assistant") {
        fail(pp + ".type", "'" + pp + ".type' is 'input_image' in an assistant message; images go in user messages");
    }
    const json * url = field(part, "image_url");
    if (!url) {
        if (field(part, "file_id")) {
            fail(pp + ".file_id", "'" + pp + ".file_id' names an uploaded file, but this server has no Files API: "
                                  "send the image inline as 'image_url' with a data URI (data:image/png;base64,...)");
        }
        fail(pp + ".image_url", "'" + pp + ".image_url' is required: a data URI (data:image/png;base64,...)");
    }
    response_image im;
    im.part = it.parts.size();
    im.url = get_string(*url, pp + ".image_url");
    if (const json * d = field(part, "detail")) {
        im.detail = get_string(*d, pp + ".detail");  // low | high | auto: the projector decides; ignored
    }
    std::string why;
    auto bytes = image_from_url(im.url, why);
    if (!bytes) {
        fail(pp + ".image_url", "'" + pp + ".image_url' " + why);
    }
    im.input = {std::move(*bytes), pp + ".image_url"};
    it.images.push_back(std::move(im));
    it.parts.push_back(engine::projector::marker());
}

void parse_content(const json & c, const std::string & p, response_item & it) {
    if (c.is_string()) {
        it.text = c.get<std::string>();
        return;
    }
    if (!c.is_array()) {
        fail(p, "'" + p + "' must be a string or an array of input_text/input_image/output_text parts, got " +
                    type_name(c));
    }
    it.content_is_parts = true;
    for (size_t i = 0; i < c.size(); ++i) {
        const std::string pp = p + "[" + std::to_string(i) + "]";
        const std::string t =
            content_part_type(c[i], pp, "an object like {\"type\": \"input_text\", \"text\": \"...\"}", "");
        if (t == "input_text" || t == "output_text" || t == "text") {
            it.parts.push_back(get_string(require(c[i], "text", pp + ".text", ""), pp + ".text"));
        } else if (t == "refusal") {
            it.parts.push_back(get_string(require(c[i], "refusal", pp + ".refusal", ""), pp + ".refusal"));
        } else if (t == "input_image") {
            parse_image(c[i], pp, it);
        } else if (t == "input_file" || t == "input_audio") {
            fail(pp + ".type", "'" + pp + ".type' is '" + t + "'; this server reads text and images: send input_text "
                                                               "or input_image parts");
        } else {
            fail(pp + ".type", "'" + pp + ".type' is '" + t + "'; expected input_text, input_image or output_text");
        }
    }
}

// Text of a string or an array of {type, text} parts (function_call_output.output).
std::string text_of(const json & v, const std::string & p) {
    if (v.is_string()) {
        return v.get<std::string>();
    }
    if (!v.is_array()) {
        fail(p, "'" + p + "' must be a string or an array of input_text parts, got " + type_name(v));
    }
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) {
        const std::string pp = p + "[" + std::to_string(i) + "]";
        if (!v[i].is_object() || !field(v[i], "text")) {
            fail(pp, "'" + pp + "' must be an input_text part {\"type\": \"input_text\", \"text\": \"...\"}");
        }
        out += get_string(*field(v[i], "text"), pp + ".text");
    }
    return out;
}

}  // namespace

response_item parse_response_item(const json & j, const std::string & p) {
    if (!j.is_object()) {
        fail(p, "'" + p + "' must be an object (a message, function_call, function_call_output or reasoning item), got " +
                    type_name(j));
    }
    response_item it;
    std::string type = "message";  // an EasyInputMessage has no type
    if (const json * t = field(j, "type")) {
        type = get_string(*t, p + ".type");
    }
    if (const json * id = field(j, "id")) {
        it.id = get_string(*id, p + ".id");
    }
    if (type == "message") {
        it.type = response_item::kind::message;
        it.role = message_role(j, p, {"user", "assistant", "system", "developer"},
                               "one of user, assistant, system, developer");
        parse_content(require(j, "content", p + ".content", ""), p + ".content", it);
    } else if (type == "function_call") {
        it.type = response_item::kind::function_call;
        it.call_id = get_string(require(j, "call_id", p + ".call_id", "the id the function_call_output refers to"), p + ".call_id");
        it.name = get_string(require(j, "name", p + ".name", ""), p + ".name");
        it.arguments = get_string(require(j, "arguments", p + ".arguments", "JSON text"), p + ".arguments");
        check_arguments_nesting(it.arguments, p + ".arguments");  // as a chat tool call's
        if (const json * ns = field(j, "namespace")) {
            it.ns = get_string(*ns, p + ".namespace");
        }
    } else if (type == "function_call_output") {
        it.type = response_item::kind::function_call_output;
        it.call_id = get_string(require(j, "call_id", p + ".call_id", "the call_id of the function_call it answers"), p + ".call_id");
        it.output = text_of(require(j, "output", p + ".output", ""), p + ".output");
    } else if (type == "reasoning") {
        it.type = response_item::kind::reasoning;
        if (const json * c = field(j, "content")) {
            if (!c->is_array()) {
                fail(p + ".content", "'" + p + ".content' must be an array of reasoning_text parts, got " + type_name(*c));
            }
            for (size_t i = 0; i < c->size(); ++i) {
                const std::string pp = p + ".content[" + std::to_string(i) + "]";
                if (!(*c)[i].is_object()) {
                    fail(pp, "'" + pp + "' must be an object {\"type\": \"reasoning_text\", \"text\": \"...\"}");
                }
                it.reasoning_text += get_string(require((*c)[i], "text", pp + ".text", ""), pp + ".text");
            }
        }
        if (const json * e = field(j, "encrypted_content")) {
            it.encrypted_content = get_string(*e, p + ".encrypted_content");
        }
    } else if (type == "item_reference") {
        fail(p + ".type", "'" + p + ".type' is 'item_reference'; this server does not resolve item references: "
                          "send the items themselves or continue with 'previous_response_id'");
    } else {
        fail(p + ".type", "'" + p + ".type' is '" + type +
                              "'; this server accepts message, function_call, function_call_output and reasoning items");
    }
    return it;
}

namespace {

std::string joined(const response_item & it, const char * sep) {
    if (!it.content_is_parts) {
        return it.text;
    }
    std::string out;
    for (size_t i = 0; i < it.parts.size(); ++i) {
        out += (i ? sep : "") + it.parts[i];
    }
    return out;
}

engine::chat_message message_of(const response_item & it, const std::string & role) {
    engine::chat_message m;
    m.role = role;
    if (it.content_is_parts) {
        m.content_is_parts = true;
        m.parts = it.parts;
    } else {
        m.content = it.text;
    }
    return m;
}

bool is_system_item(const response_item & it) {
    return it.type == response_item::kind::message && (it.role == "system" || it.role == "developer");
}

}  // namespace

std::optional<api_error> chat_messages_of(const std::string & instructions, bool has_instructions,
                                          const std::vector<const response_item *> & all, const reasoning_seal * seal,
                                          std::vector<engine::chat_message> & msgs, std::vector<image_input> & images) {
    msgs.clear();
    // The markers appear in the messages in item order, and in part order within an item: the
    // leading system items are joined first, then every other item in turn.
    images.clear();
    for (const auto * it : all) {
        for (const auto & im : it->images) {
            images.push_back(im.input);
        }
    }

    // The one leading system message: instructions, then the leading developer/system items.
    size_t i = 0;
    std::vector<const response_item *> lead;
    while (i < all.size() && is_system_item(*all[i])) {
        lead.push_back(all[i++]);
    }
    if (!has_instructions && lead.size() == 1) {
        msgs.push_back(message_of(*lead[0], lead[0]->role));  // as sent: same tokens as the chat dialect
    } else if (has_instructions || !lead.empty()) {
        engine::chat_message m;
        m.role = has_instructions ? "system" : lead[0]->role;
        m.content = instructions;
        for (const auto * it : lead) {
            m.content += (m.content.empty() ? "" : "\n\n") + joined(*it, "");
        }
        msgs.push_back(std::move(m));
    }

    // Assistant turn being assembled from reasoning / message / function_call items, in that
    // order: an item that comes back in the order (a second reasoning or message, a reasoning or
    // message after a call) starts a new assistant turn. Content may be empty, so what a turn
    // has seen is kept in flags.
    engine::chat_message * turn = nullptr;
    bool has_reasoning = false;
    bool has_message = false;
    auto open_turn = [&]() -> engine::chat_message & {
        has_reasoning = false;
        has_message = false;
        engine::chat_message m;
        m.role = "assistant";
        msgs.push_back(std::move(m));
        turn = &msgs.back();
        return *turn;
    };
    for (; i < all.size(); ++i) {
        const response_item & it = *all[i];
        switch (it.type) {
            case response_item::kind::reasoning: {
                std::string text = it.reasoning_text;
                if (!it.encrypted_content.empty()) {
                    if (auto opened = seal ? seal->open(it.encrypted_content) : std::nullopt) {
                        text = std::move(*opened);
                    } else {
                        spdlog::warn("responses: a reasoning item's encrypted_content does not open with this server's "
                                     "key (another server, or its store was reset); its reasoning is left out");
                    }
                }
                if (!turn || has_reasoning || has_message || !turn->tool_calls.empty()) {
                    open_turn();
                }
                turn->reasoning_content = std::move(text);
                has_reasoning = true;
                break;
            }
            case response_item::kind::message:
                if (it.role == "assistant") {
                    if (!turn || has_message || !turn->tool_calls.empty()) {
                        open_turn();
                    }
                    turn->content = joined(it, "");
                    has_message = true;
                } else {
                    turn = nullptr;
                    // A developer/system message after the start: templates accept one system
                    // message, first; it is given to the model as a user message.
                    msgs.push_back(message_of(it, "user"));
                }
                break;
            case response_item::kind::function_call: {
                if (!turn) {
                    open_turn();
                }
                engine::chat_tool_call call;
                call.id = it.call_id;
                call.name = it.name;
                call.arguments = it.arguments;
                turn->tool_calls.push_back(std::move(call));
                break;
            }
            case response_item::kind::function_call_output: {
                turn = nullptr;
                engine::chat_message m;
                m.role = "tool";
                m.tool_call_id = it.call_id;
                m.content = it.output;
                msgs.push_back(std::move(m));
                break;
            }
        }
    }
    if (msgs.empty()) {
        return invalid_request("the conversation is empty: send 'input' (a string or items)", "input");
    }
    return std::nullopt;
}

json item_to_json(const response_item & it) {
    json j = json::object();
    switch (it.type) {
        case response_item::kind::message: {
            j["type"] = "message";
            if (!it.id.empty()) {
                j["id"] = it.id;
            }
            j["role"] = it.role;
            if (it.content_is_parts) {
                json parts = json::array();
                size_t next_image = 0;
                for (size_t k = 0; k < it.parts.size(); ++k) {
                    const std::string & p = it.parts[k];
                    json part = json::object();
                    if (next_image < it.images.size() && it.images[next_image].part == k) {
                        const response_image & im = it.images[next_image++];
                        part["type"] = "input_image";
                        part["image_url"] = im.url;
                        if (!im.detail.empty()) {
                            part["detail"] = im.detail;
                        }
                        parts.push_back(std::move(part));
                        continue;
                    }
                    part["type"] = it.role == "assistant" ? "output_text" : "input_text";
                    part["text"] = p;
                    if (it.role == "assistant") {
                        part["annotations"] = json::array();
                        part["logprobs"] = json::array();
                    }
                    parts.push_back(std::move(part));
                }
                j["content"] = std::move(parts);
            } else {
                j["content"] = it.text;
            }
            break;
        }
        case response_item::kind::function_call:
            j["type"] = "function_call";
            if (!it.id.empty()) {
                j["id"] = it.id;
            }
            j["call_id"] = it.call_id;
            j["name"] = it.name;
            if (!it.ns.empty()) {
                j["namespace"] = it.ns;
            }
            j["arguments"] = it.arguments;
            break;
        case response_item::kind::function_call_output:
            j["type"] = "function_call_output";
            if (!it.id.empty()) {
                j["id"] = it.id;
            }
            j["call_id"] = it.call_id;
            j["output"] = it.output;
            break;
        case response_item::kind::reasoning: {
            j["type"] = "reasoning";
            if (!it.id.empty()) {
                j["id"] = it.id;
            }
            j["summary"] = json::array();
            json part = json::object();
            part["type"] = "reasoning_text";
            part["text"] = it.reasoning_text;
            j["content"] = json::array({std::move(part)});
            break;
        }
    }
    return j;
}

std::optional<std::vector<response_item>> items_from_json_text(std::string_view text) {
    json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_array()) {
        return std::nullopt;
    }
    std::vector<response_item> out;
    try {
        for (size_t i = 0; i < j.size(); ++i) {
            out.push_back(parse_response_item(j[i], "items[" + std::to_string(i) + "]"));
        }
    } catch (const fields::bad_field &) {
        return std::nullopt;
    }
    return out;
}

std::optional<api_error> input_items_page(const std::vector<response_item> & items, const input_items_query & q,
                                          json & out) {
    std::vector<const response_item *> ordered;
    for (const auto & it : items) {
        ordered.push_back(&it);
    }
    if (!q.ascending) {
        std::reverse(ordered.begin(), ordered.end());
    }
    size_t start = 0;
    if (!q.after.empty()) {
        const auto at =
            std::find_if(ordered.begin(), ordered.end(), [&](const response_item * it) { return it->id == q.after; });
        if (at == ordered.end()) {
            const std::string what =
                "which is not the id of one of this response's input items; pass the id of "
                "an item of a page you were given (its last_id)";
            return invalid_request("'after' is '" + q.after + "', " + what, "after");
        }
        start = static_cast<size_t>(at - ordered.begin()) + 1;
    }
    const size_t end = std::min(ordered.size(), start + static_cast<size_t>(q.limit));
    json data = json::array();
    for (size_t i = start; i < end; ++i) {
        json j = item_to_json(*ordered[i]);
        if (j["type"] == "message" && j["content"].is_string()) {
            json part = json::object();
            part["type"] = ordered[i]->role == "assistant" ? "output_text" : "input_text";
            part["text"] = ordered[i]->text;
            if (ordered[i]->role == "assistant") {
                part["annotations"] = json::array();
                part["logprobs"] = json::array();
            }
            j["content"] = json::array({std::move(part)});
        }
        if (j["type"] != "reasoning") {
            j["status"] = "completed";
        }
        data.push_back(std::move(j));
    }
    const json first = data.empty() ? json(nullptr) : data.front()["id"];
    const json last = data.empty() ? json(nullptr) : data.back()["id"];
    out = json::object();
    out["object"] = "list";
    out["data"] = std::move(data);
    out["first_id"] = first;
    out["last_id"] = last;
    out["has_more"] = end < ordered.size();
    return std::nullopt;
}

}  // namespace lineage::server
