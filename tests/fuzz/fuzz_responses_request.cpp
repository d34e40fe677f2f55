// libFuzzer target: the Responses API body and its items (server/dialects/responses/responses_request.h,
// response_items.h: POST /v1/responses). Any input is (1) a raw body taken through the
// body limit, parse_responses_request and build_chat_messages as the route takes it, and (2) a
// candidate stored conversation read by items_from_json_text (what previous_response_id
// continues from). A rejection must be a 400/413 error value, never an exception, crash or UB;
// an accepted request keeps its JSON texts (tool parameters, kwargs, function_call arguments)
// within --max-json-depth and its sampling in range; items read back from their stored form
// re-store identically, and a sealed reasoning item opens with the server's key.
// Build and run: docs/prompt-cache.md "Security and failure model" > "Fuzzing".
// With LINEAGE_FUZZ_SEEDS=DIR set, writes the seeds that carry sealed reasoning (sealed with the
// key below) to DIR and exits; the other seeds are hand-written files.
#include "fuzz_request.h"

#include "server/dialects/responses/reasoning_seal.h"
#include "server/dialects/responses/response_items.h"
#include "server/dialects/responses/responses_request.h"

#include <cstdlib>
#include <fstream>

using namespace lineage;

namespace {

const server::reasoning_seal & seal() {
    static const server::reasoning_seal s(std::string(32, 'k'));
    return s;
}

void write_seeds(const std::string & dir) {
    const std::string sealed = seal().seal("I should call the tool.");
    const std::string bodies[] = {
        R"({"model":"m","store":false,"include":["reasoning.encrypted_content"],"input":[)"
        R"({"role":"user","content":"add 1 and 2"},{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":")" +
            sealed +
            R"("},{"type":"function_call","call_id":"c1","name":"add","arguments":"{\"a\":1,\"b\":2}"},)"
            R"({"type":"function_call_output","call_id":"c1","output":"3"}],)"
            R"("tools":[{"type":"function","name":"add","parameters":{"type":"object"}}]})",
        R"([{"type":"message","role":"user","content":"hi"},{"type":"reasoning","summary":[],"encrypted_content":")" +
            sealed + R"("},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"hello"}]}])",
    };
    int i = 0;
    for (const auto & b : bodies) {
        std::ofstream(dir + "/sealed-" + std::to_string(i++) + ".json", std::ios::binary) << b;
    }
}

// The items' stored form, as the store writes it.
std::string stored_form(const std::vector<server::response_item> & items) {
    server::json j = server::json::array();
    for (const auto & it : items) {
        j.push_back(server::item_to_json(it));
    }
    return server::dump(j);
}

void check_messages(const std::vector<server::response_item> & items, const std::string & instructions,
                    bool has_instructions) {
    std::vector<const server::response_item *> ptrs;
    for (const auto & it : items) {
        ptrs.push_back(&it);
    }
    std::vector<engine::chat_message> messages;
    std::vector<server::image_input> images;
    const auto err = fuzz::no_throw("chat_messages_of", [&] {
        return server::chat_messages_of(instructions, has_instructions, ptrs, &seal(), messages, images);
    });
    if (err) {
        fuzz::check_rejection(*err);
    }
}

// (2) the body as a stored conversation.
void stored_conversation(std::string_view text) {
    std::optional<std::vector<server::response_item>> items;
    try {
        items = server::items_from_json_text(text);
    } catch (const std::exception & ex) {
        fuzz::finding(std::string("items_from_json_text threw ") + ex.what());
    }
    if (!items) {
        return;
    }
    const std::string once = stored_form(*items);
    const auto again = server::items_from_json_text(once);
    if (!again || stored_form(*again) != once) {
        fuzz::finding("stored items do not read back as themselves");
    }
    check_messages(*items, "", false);
}

// (1) the body as a request.
void request(std::string_view body) {
    server::responses_request r;
    const auto err = fuzz::no_throw("parse_responses_request", [&] { return server::parse_responses_request(body, r); });
    if (err) {
        fuzz::check_rejection(*err);
        return;
    }
    for (const auto & t : r.chat.tools) {
        fuzz::check_json_text(t.parameters, "tools[].parameters");
    }
    for (const auto & [k, v] : r.chat.chat_template_kwargs) {
        fuzz::check_json_text(v, "chat_template_kwargs value");
    }
    fuzz::check_json_text(r.chat.json_schema, "text.format schema");
    for (const auto & it : r.input) {
        if (it.type == server::response_item::kind::function_call) {
            const auto j = server::json::parse(it.arguments, nullptr, /*allow_exceptions=*/false);
            if (!j.is_discarded() && fuzz::depth_of(j) > server::default_json_limits().max_depth) {
                fuzz::finding("function_call arguments nest deeper than the body limit");
            }
        }
    }
    fuzz::check_sampling(r.chat.sampling);
    const auto built =
        fuzz::no_throw("build_chat_messages", [&] { return server::build_chat_messages(r, {}, &seal()); });
    if (built) {
        fuzz::check_rejection(*built);
    } else {
        fuzz::check_work_limits(r.chat);
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    if (const char * dir = std::getenv("LINEAGE_FUZZ_SEEDS")) {
        write_seeds(dir);
        std::exit(0);
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    const std::string_view body(reinterpret_cast<const char *>(data), size);
    stored_conversation(body);
    if (auto e = fuzz::body_limit(body, "/v1/responses")) {
        fuzz::check_rejection(*e);
        return 0;
    }
    request(body);
    return 0;
}
