// server::responses_handler: one Responses API request from body to response.
#include "server/dialects/responses/responses_handler.h"

#include "engine/model.h"
#include "scheduler/scheduler.h"
#include "server/prepare/chat_prepare.h"
#include "server/run/generation.h"
#include "server/http/json_body.h"
#include "server/dialects/responses/reasoning_seal.h"
#include "server/dialects/responses/response_store.h"
#include "server/dialects/responses/responses_request.h"
#include "server/dialects/responses/responses_response.h"
#include "server/app/routes.h"

#include <spdlog/spdlog.h>

#include <charconv>
#include <ctime>
#include <memory>
#include <optional>

namespace lineage::server {

namespace {

// The Responses dialect over responses_output; stores the finished response when asked.
class responses_writer final : public response_writer {
public:
    responses_writer(responses_meta meta, const prepared_chat & prep, response_store * store,
                     std::vector<response_item> conversation, std::string tenant)
        : out_(std::move(meta), prep.parser, prep.stops, static_cast<int32_t>(prep.prompt.size())),
          store_(store),
          conversation_(std::move(conversation)),
          tenant_(std::move(tenant)) {}

    bool add(const scheduler::generation_event &, std::string_view piece) override { return out_.add(piece); }

    std::string take_stream() override { return events(out_.take_events()); }

    std::string end_stream(const scheduler::generation_event & done) override {
        std::vector<json> evs = out_.final_events(done);
        keep(evs.back()["response"]);
        return events(evs);
    }

    std::string stream_error(const api_error & e) override { return sse_named_event(out_.error_event(e)); }

    json body(const scheduler::generation_event & done) override {
        json r = out_.final_response(done);
        keep(r);
        return r;
    }

    std::string finish_reason(const scheduler::generation_event & done) const override {
        return out_.finish_reason(done);
    }
    const engine::chat_parsed * reply() const override { return &out_.message(); }

private:
    static std::string events(const std::vector<json> & evs) {
        std::string s;
        for (const auto & e : evs) {
            s += sse_named_event(e);
        }
        return s;
    }

    // Stores the finished response with its whole conversation (store: true).
    void keep(const json & response) {
        if (!store_) {
            return;
        }
        json items = json::array();
        for (const auto & it : conversation_) {
            items.push_back(item_to_json(it));
        }
        for (const auto & it : out_.output_items()) {
            items.push_back(item_to_json(it));
        }
        stored_response s;
        s.id = response["id"].get<std::string>();
        s.body = dump(response);
        s.conversation = dump(items);
        s.created_s = response["created_at"].get<double>();
        s.tenant = tenant_;
        store_->put(s);
    }

    responses_output out_;
    response_store * store_;
    std::vector<response_item> conversation_;
    std::string tenant_;  // the caller's: only it reads or continues the stored response
};

void send_error(http_response & res, const api_error & e) {
    send_json_body(res, to_json(e), e.status);
}

api_error not_found(const std::string & id, const std::string & param) {
    api_error e;
    e.status = 404;
    e.message = "no stored response with id '" + id +
                "' (it was never stored, was deleted or expired, or was created with store: false)";
    e.param = param;
    e.code = param.empty() ? "not_found" : "previous_response_not_found";
    return e;
}

// The prefix of a stored item's id by its type, as OpenAI's.
const char * id_prefix(response_item::kind k) {
    switch (k) {
        case response_item::kind::message: return "msg_";
        case response_item::kind::function_call: return "fc_";
        case response_item::kind::function_call_output: return "fco_";
        case response_item::kind::reasoning: return "rs_";
    }
    return "item_";
}

// Gives each item without an id a new one, so that a stored conversation lists its input items
// (GET /v1/responses/{id}/input_items) under ids that stay the same from read to read.
void give_ids(std::vector<response_item> & items) {
    for (auto & it : items) {
        if (it.id.empty()) {
            it.id = random_id(id_prefix(it.type));
        }
    }
}

// An integer query parameter in [lo, hi]; false after sending the 400.
bool query_int(const http_request & req, const char * name, int64_t lo, int64_t hi, int64_t & out,
               http_response & res) {
    if (!req.has_param(name)) {
        return true;
    }
    const std::string v = req.param(name);
    int64_t n = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc() || end != v.data() + v.size() || n < lo || n > hi) {
        send_error(res, invalid_request("'" + std::string(name) + "' is '" + v + "'; expected an integer from " +
                                            std::to_string(lo) + " to " + std::to_string(hi),
                                        name));
        return false;
    }
    out = n;
    return true;
}

// The request fields a response object echoes.
json echo_of(const responses_request & r) {
    json e = json::object();
    e["instructions"] = r.has_instructions ? json(r.instructions) : json(nullptr);
    e["max_output_tokens"] = r.max_output_tokens ? json(*r.max_output_tokens) : json(nullptr);
    json md = json::object();
    for (const auto & [k, v] : r.metadata) {
        md[k] = v;
    }
    e["metadata"] = std::move(md);
    e["parallel_tool_calls"] = r.chat.parallel_tool_calls.value_or(true);
    e["previous_response_id"] = string_or_null(r.previous_response_id);
    json reasoning = json::object();
    reasoning["effort"] = string_or_null(r.reasoning_effort);
    reasoning["summary"] = nullptr;
    e["reasoning"] = std::move(reasoning);
    e["store"] = r.store;
    e["temperature"] = r.temperature.value_or(1.0);
    json fmt = json::object();
    fmt["type"] = "text";
    json text = json::object();
    text["format"] = std::move(fmt);
    e["text"] = std::move(text);
    if (r.tool_choice_is_function) {
        json tc = json::object();
        tc["type"] = "function";
        tc["name"] = r.tool_choice_echo;
        e["tool_choice"] = std::move(tc);
    } else {
        e["tool_choice"] = r.tool_choice_echo;
    }
    json tools = json::array();
    for (const auto & t : r.chat.tools) {
        json tj = json::object();
        tj["type"] = "function";
        tj["name"] = t.name;
        tj["description"] = string_or_null(t.description);
        tj["parameters"] = json::parse(t.parameters, nullptr, false);
        tj["strict"] = false;
        tools.push_back(std::move(tj));
    }
    e["tools"] = std::move(tools);
    e["top_p"] = r.top_p.value_or(1.0);
    e["truncation"] = "disabled";
    e["user"] = string_or_null(r.chat.user);
    e["prompt_cache_key"] = string_or_null(r.chat.prompt_cache_key);
    return e;
}

std::optional<api_error> prepare_responses(const http_request & req, server_context & ctx, generation_job & job) {
    responses_request r;
    if (auto err = parse_responses_request(req.body, r)) {
        return err;
    }
    if (!r.ignored_tools.empty()) {
        std::string list;
        for (const auto & t : r.ignored_tools) {
            list += (list.empty() ? "" : ", ") + t;
        }
        spdlog::info("responses: ignored tools this server cannot run (the model is not told about them): {}", list);
    }
    r.chat.tenant = ctx.tenant_of(req);
    std::vector<response_item> prior;
    if (!r.previous_response_id.empty()) {
        auto stored = ctx.responses->get(r.previous_response_id, r.chat.tenant);
        if (!stored) {
            return not_found(r.previous_response_id, "previous_response_id");
        }
        auto items = items_from_json_text(stored->conversation);
        if (!items) {
            return server_error("the stored conversation of '" + r.previous_response_id +
                                "' cannot be read; start the conversation again with its items as 'input'");
        }
        prior = std::move(*items);
        // Errors about the stored conversation's images (e.g. the server now runs without
        // --mmproj) name the field the client sent it by.
        for (auto & it : prior) {
            for (auto & im : it.images) {
                im.input.param = "previous_response_id";
            }
        }
    }
    if (auto err = build_chat_messages(r, prior, ctx.seal.get())) {
        return err;
    }
    const prepared_chat & prep = job.prep;
    if (auto err = ctx.preparer.prepare(r.chat, ctx.sched.max_sequence_tokens(), job.prep)) {
        if (err->param == "messages") {
            err->param = "input";
        }
        return err;
    }

    responses_meta meta;
    meta.id = random_id("resp_");
    meta.model = ctx.model_id;
    meta.created_at = static_cast<int64_t>(std::time(nullptr));
    meta.echo = echo_of(r);
    meta.include_encrypted_reasoning = r.include_encrypted_reasoning;
    meta.seal = ctx.seal.get();
    meta.tool_namespaces = r.tool_namespaces;
    const engine::model * model = &ctx.model;
    meta.count_tokens = [model](const std::string & text) {
        const auto tokens = model->tokenize(text, /*parse_special=*/false);
        return tokens ? static_cast<int32_t>(tokens->size()) : 0;  // uncounted: as without a counter
    };
    std::vector<response_item> conversation;
    if (r.store) {
        conversation = std::move(prior);
        conversation.insert(conversation.end(), r.input.begin(), r.input.end());
        give_ids(conversation);
    }
    // finish() takes `r.chat` by reference: it is moved from only after the writer is made.
    job.finish(std::make_unique<responses_writer>(std::move(meta), prep, r.store ? ctx.responses.get() : nullptr,
                                                  std::move(conversation), r.chat.tenant),
               std::move(r.chat));
    return std::nullopt;
}

}  // namespace

const dialect responses_dialect{.name = "responses", .errors = error_shape::openai, .prepare = prepare_responses};

void handle_get_response(const http_request & req, http_response & res, server_context & ctx) {
    const std::string id = req.path_param("id");
    auto stored = ctx.responses->get(id, ctx.tenant_of(req));
    if (!stored) {
        send_error(res, not_found(id, ""));
        return;
    }
    res.status = 200;
    res.set_content(stored->body, "application/json");
}

void handle_delete_response(const http_request & req, http_response & res, server_context & ctx) {
    const std::string id = req.path_param("id");
    if (!ctx.responses->remove(id, ctx.tenant_of(req))) {
        send_error(res, not_found(id, ""));
        return;
    }
    json j = json::object();
    j["id"] = id;
    j["object"] = "response";
    j["deleted"] = true;
    send_json_body(res, j, 200);
}

void handle_cancel_response(const http_request & req, http_response & res, server_context & ctx) {
    const std::string id = req.path_param("id");
    // No body is needed; one that is sent must be a JSON object (docs/prompt-cache.md).
    if (!req.body.empty()) {
        json ignored;
        if (auto err = parse_json_body(req.body, ignored)) {
            send_error(res, *err);
            return;
        }
    }
    if (!ctx.responses->get(id, ctx.tenant_of(req))) {
        send_error(res, not_found(id, ""));
        return;
    }
    // Only background responses can be cancelled (OpenAI answers a synchronous one with 400);
    // this server runs none in the background, so every stored one has finished.
    const std::string why =
        "only responses created with background: true can be cancelled, and this server runs "
        "every response in the foreground (it has finished; GET /v1/responses/" +
        id + " returns it)";
    send_error(res, invalid_request("cannot cancel response '" + id + "': " + why));
}

void handle_list_input_items(const http_request & req, http_response & res, server_context & ctx) {
    const std::string id = req.path_param("id");
    input_items_query q;
    if (!query_int(req, "limit", 1, 100, q.limit, res)) {
        return;
    }
    if (req.has_param("order")) {
        const std::string order = req.param("order");
        if (order != "asc" && order != "desc") {
            send_error(res, invalid_request("'order' is '" + order + "'; expected asc or desc", "order"));
            return;
        }
        q.ascending = order == "asc";
    }
    q.after = req.param("after");
    auto stored = ctx.responses->get(id, ctx.tenant_of(req));
    if (!stored) {
        send_error(res, not_found(id, ""));
        return;
    }
    // The stored conversation is the input items (the previous responses' conversation, then
    // this request's input), then this response's output items.
    auto items = items_from_json_text(stored->conversation);
    const json body = json::parse(stored->body, nullptr, /*allow_exceptions=*/false);
    const auto output = body.is_object() ? body.find("output") : body.end();
    if (!items || output == body.end() || !output->is_array() || output->size() > items->size()) {
        send_error(res, server_error("the stored conversation of '" + id + "' cannot be read"));
        return;
    }
    items->resize(items->size() - output->size());
    for (size_t i = 0; i < items->size(); ++i) {
        response_item & it = (*items)[i];
        if (it.id.empty()) {  // stored before input items had ids: one derived from the position
            it.id = id_prefix(it.type) + id.substr(id.find('_') + 1) + "_" + std::to_string(i);
        }
    }
    json page;
    if (auto err = input_items_page(*items, q, page)) {
        send_error(res, *err);
        return;
    }
    send_json_body(res, page, 200);
}

}  // namespace lineage::server
