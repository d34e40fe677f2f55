// server::responses_response: response objects and streaming events of the Responses API.
#include "server/dialects/responses/responses_response.h"

#include "server/run/generation.h"
#include "server/dialects/responses/reasoning_seal.h"

#include <algorithm>

namespace lineage::server {

json responses_usage_json(const scheduler::request_stats & s, int32_t prompt_tokens, int32_t reasoning_tokens) {
    const int32_t prompt = s.prompt_tokens > 0 ? s.prompt_tokens : prompt_tokens;
    json in = json::object();
    in["cached_tokens"] = s.cached_tokens;
    json out = json::object();
    // The reasoning text tokenized again can exceed the tokens generated (a text may tokenize to
    // more tokens than the model sampled for it): reasoning is part of the output, never more.
    out["reasoning_tokens"] = std::min(reasoning_tokens, s.completion_tokens);
    json u = json::object();
    u["input_tokens"] = prompt;
    u["input_tokens_details"] = std::move(in);
    u["output_tokens"] = s.completion_tokens;
    u["output_tokens_details"] = std::move(out);
    u["total_tokens"] = prompt + s.completion_tokens;
    return u;
}

std::string sse_named_event(const json & ev) {
    return "event: " + ev.value("type", std::string("message")) + "\ndata: " + dump(ev) + "\n\n";
}

responses_output::responses_output(responses_meta meta, engine::chat_parse_params parser,
                                   std::vector<std::string> stops, int32_t prompt_tokens)
    : meta_(std::move(meta)), pump_(std::move(stops), std::move(parser)), prompt_tokens_(prompt_tokens) {}

bool responses_output::add(std::string_view piece) {
    return pump_.add(piece);
}

json responses_output::event(const char * type) {
    json e = json::object();
    e["type"] = type;
    e["sequence_number"] = seq_++;
    return e;
}

json responses_output::item_json(size_t i, const char * status) const {
    const response_item & it = items_[i];
    json j = json::object();
    j["id"] = it.id;
    switch (it.type) {
        case response_item::kind::reasoning: {
            j["type"] = "reasoning";
            j["summary"] = json::array();
            json part = json::object();
            part["type"] = "reasoning_text";
            part["text"] = it.reasoning_text;
            j["content"] = json::array({std::move(part)});
            if (!it.encrypted_content.empty()) {
                j["encrypted_content"] = it.encrypted_content;
            }
            j["status"] = status;
            break;
        }
        case response_item::kind::message: {
            j["type"] = "message";
            j["role"] = "assistant";
            j["status"] = status;
            json content = json::array();
            for (const auto & p : it.parts) {
                json part = json::object();
                part["type"] = "output_text";
                part["text"] = p;
                part["annotations"] = json::array();
                part["logprobs"] = json::array();
                content.push_back(std::move(part));
            }
            j["content"] = std::move(content);
            break;
        }
        case response_item::kind::function_call:
            j["type"] = "function_call";
            j["status"] = status;
            j["arguments"] = it.arguments;
            j["call_id"] = it.call_id;
            j["name"] = it.name;
            if (!it.ns.empty()) {
                j["namespace"] = it.ns;
            }
            break;
        case response_item::kind::function_call_output:
            break;  // never an output
    }
    return j;
}

json responses_output::response_object() const {
    json r = json::object();
    r["id"] = meta_.id;
    r["object"] = "response";
    r["created_at"] = meta_.created_at;
    r["status"] = status_;
    r["error"] = nullptr;
    r["incomplete_details"] = nullptr;
    if (status_ == "incomplete") {
        json d = json::object();
        d["reason"] = "max_output_tokens";
        r["incomplete_details"] = std::move(d);
    }
    r["model"] = meta_.model;
    json output = json::array();
    if (status_ != "in_progress") {
        for (size_t i = 0; i < items_.size(); ++i) {
            output.push_back(item_json(i, item_status_[i].c_str()));
        }
    }
    r["output"] = std::move(output);
    for (auto it = meta_.echo.begin(); it != meta_.echo.end(); ++it) {
        r[it.key()] = it.value();
    }
    r["usage"] = usage_;
    return r;
}

void responses_output::start() {
    if (started_) {
        return;
    }
    started_ = true;
    json created = event("response.created");
    created["response"] = response_object();
    events_.push_back(std::move(created));
    json progress = event("response.in_progress");
    progress["response"] = response_object();
    events_.push_back(std::move(progress));
}

void responses_output::open_item(open_kind k, size_t tool_index, const engine::chat_delta * d) {
    close_open();
    response_item it;
    const size_t index = items_.size();
    json part = json::object();
    switch (k) {
        case open_kind::reasoning:
            it.type = response_item::kind::reasoning;
            it.id = random_id("rs_");
            part["type"] = "reasoning_text";
            part["text"] = "";
            break;
        case open_kind::message:
            it.type = response_item::kind::message;
            it.role = "assistant";
            it.id = random_id("msg_");
            it.content_is_parts = true;
            it.parts.emplace_back();
            part["type"] = "output_text";
            part["text"] = "";
            part["annotations"] = json::array();
            part["logprobs"] = json::array();
            break;
        case open_kind::function_call:
            it.type = response_item::kind::function_call;
            it.id = random_id("fc_");
            it.call_id = d && !d->tool_call_id.empty() ? d->tool_call_id : random_id("call_", 24);
            it.name = d ? d->tool_call_name : "";
            if (auto ns = meta_.tool_namespaces.find(it.name); ns != meta_.tool_namespaces.end()) {
                it.ns = ns->second;
            }
            tool_items_[tool_index] = index;
            break;
        case open_kind::none:
            return;
    }
    items_.push_back(std::move(it));
    item_status_.emplace_back("in_progress");
    open_ = k;
    json added = event("response.output_item.added");
    added["output_index"] = index;
    json item = item_json(index, "in_progress");
    if (k == open_kind::reasoning || k == open_kind::message) {
        item["content"] = json::array();  // parts arrive with content_part.added
    }
    added["item"] = std::move(item);
    events_.push_back(std::move(added));
    if (k == open_kind::reasoning || k == open_kind::message) {
        json pa = event("response.content_part.added");
        pa["item_id"] = items_[index].id;
        pa["output_index"] = index;
        pa["content_index"] = 0;
        pa["part"] = std::move(part);
        events_.push_back(std::move(pa));
    }
}

void responses_output::close_open() {
    if (open_ == open_kind::none) {
        return;
    }
    const size_t index = items_.size() - 1;
    response_item & it = items_[index];
    const char * status = length_ ? "incomplete" : "completed";
    if (open_ == open_kind::reasoning || open_ == open_kind::message) {
        const bool reasoning = open_ == open_kind::reasoning;
        const std::string & text = reasoning ? it.reasoning_text : it.parts[0];
        json done = event(reasoning ? "response.reasoning_text.done" : "response.output_text.done");
        done["item_id"] = it.id;
        done["output_index"] = index;
        done["content_index"] = 0;
        done["text"] = text;
        if (!reasoning) {
            done["logprobs"] = json::array();
        }
        events_.push_back(std::move(done));
        json pd = event("response.content_part.done");
        pd["item_id"] = it.id;
        pd["output_index"] = index;
        pd["content_index"] = 0;
        pd["part"] = item_json(index, status)["content"][0];
        events_.push_back(std::move(pd));
        if (reasoning && meta_.include_encrypted_reasoning && meta_.seal) {
            it.encrypted_content = meta_.seal->seal(it.reasoning_text);
        }
    } else {
        if (it.arguments.empty()) {
            it.arguments = "{}";
        }
        json done = event("response.function_call_arguments.done");
        done["item_id"] = it.id;
        done["output_index"] = index;
        done["name"] = it.name;
        done["arguments"] = it.arguments;
        events_.push_back(std::move(done));
    }
    item_status_[index] = status;
    json idone = event("response.output_item.done");
    idone["output_index"] = index;
    idone["item"] = item_json(index, status);
    events_.push_back(std::move(idone));
    open_ = open_kind::none;
}

void responses_output::apply(const std::vector<engine::chat_delta> & deltas) {
    start();
    for (const auto & d : deltas) {
        if (d.tool_call_index != std::string::npos) {
            auto known = tool_items_.find(d.tool_call_index);
            if (known == tool_items_.end() || known->second != items_.size() - 1 || open_ != open_kind::function_call) {
                if (known != tool_items_.end()) {
                    continue;  // a delta for a call already closed: the parser never sends one
                }
                open_item(open_kind::function_call, d.tool_call_index, &d);
            }
            response_item & it = items_.back();
            if (it.name.empty() && !d.tool_call_name.empty()) {
                it.name = d.tool_call_name;
            }
            if (!d.tool_call_arguments.empty()) {
                it.arguments += d.tool_call_arguments;
                json ev = event("response.function_call_arguments.delta");
                ev["item_id"] = it.id;
                ev["output_index"] = items_.size() - 1;
                ev["delta"] = d.tool_call_arguments;
                events_.push_back(std::move(ev));
            }
        } else if (!d.reasoning_content.empty()) {
            if (open_ != open_kind::reasoning) {
                open_item(open_kind::reasoning, 0, nullptr);
            }
            response_item & it = items_.back();
            it.reasoning_text += d.reasoning_content;
            json ev = event("response.reasoning_text.delta");
            ev["item_id"] = it.id;
            ev["output_index"] = items_.size() - 1;
            ev["content_index"] = 0;
            ev["delta"] = d.reasoning_content;
            events_.push_back(std::move(ev));
        } else if (!d.content.empty()) {
            if (open_ != open_kind::message) {
                open_item(open_kind::message, 0, nullptr);
            }
            response_item & it = items_.back();
            it.parts[0] += d.content;
            json ev = event("response.output_text.delta");
            ev["item_id"] = it.id;
            ev["output_index"] = items_.size() - 1;
            ev["content_index"] = 0;
            ev["delta"] = d.content;
            ev["logprobs"] = json::array();
            events_.push_back(std::move(ev));
        }
    }
}

std::vector<json> responses_output::take_events() {
    start();
    apply(pump_.take());
    std::vector<json> out;
    out.swap(events_);
    return out;
}

std::string responses_output::finish_reason(const scheduler::generation_event & done) const {
    if (!pump_.text().stopped() && done.finish == scheduler::finish_reason::length) {
        return "length";
    }
    return pump_.message().tool_calls.empty() ? "stop" : "tool_calls";
}

void responses_output::finish(const scheduler::generation_event & done) {
    start();
    apply(pump_.finish());
    length_ = finish_reason(done) == "length";
    if (items_.empty()) {
        open_item(open_kind::message, 0, nullptr);  // an empty answer is still a message
    }
    close_open();
    status_ = length_ ? "incomplete" : "completed";
    int32_t reasoning_tokens = 0;
    if (meta_.count_tokens) {
        for (const auto & it : items_) {
            if (it.type == response_item::kind::reasoning && !it.reasoning_text.empty()) {
                reasoning_tokens += meta_.count_tokens(it.reasoning_text);
            }
        }
    }
    usage_ = responses_usage_json(done.stats, prompt_tokens_, reasoning_tokens);
}

std::vector<json> responses_output::final_events(const scheduler::generation_event & done) {
    finish(done);
    json last = event(status_ == "completed" ? "response.completed" : "response.incomplete");
    last["response"] = response_object();
    events_.push_back(std::move(last));
    std::vector<json> out;
    out.swap(events_);
    return out;
}

json responses_output::final_response(const scheduler::generation_event & done) {
    finish(done);
    events_.clear();
    return response_object();
}

json responses_output::error_event(const api_error & e) {
    json ev = event("error");
    ev["code"] = e.code.empty() ? json(e.type) : json(e.code);
    ev["message"] = e.message;
    ev["param"] = string_or_null(e.param);
    return ev;
}

}  // namespace lineage::server
