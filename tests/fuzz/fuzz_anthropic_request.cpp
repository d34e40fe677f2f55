// libFuzzer target: the Anthropic Messages body (server/dialects/anthropic/anthropic_request.h and
// anthropic_messages.h: POST /v1/messages and /v1/messages/count_tokens). Any input
// is a raw body taken through the body limit and parse_anthropic_request as the routes take it,
// in both modes (messages, count_tokens): a rejection must be a 400/413 error value, never an
// exception, crash or UB; an accepted request keeps what the conversion promises (breakpoints
// within the conversation, each cut renderable, tool schemas and tool_use inputs parse and
// nest within --max-json-depth, sampling within range).
// Build and run: docs/prompt-cache.md "Security and failure model" > "Fuzzing".
// With LINEAGE_FUZZ_SEEDS=DIR set, writes the seeds that need this server's thinking signature
// (signed with the key below) to DIR and exits; the other seeds are hand-written files.
#include "fuzz_request.h"

#include "server/dialects/anthropic/anthropic_request.h"
#include "server/dialects/anthropic/thinking_signature.h"

#include <cstdlib>
#include <fstream>

using namespace lineage;

namespace {

const server::thinking_signer & signer() {
    static const server::thinking_signer s("fuzz-model", "fuzz-key");
    return s;
}

void write_seeds(const std::string & dir) {
    const std::string sig = signer().sign("The user greets me; I answer briefly.");
    const std::string bodies[] = {
        R"({"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[)"
        R"({"type":"thinking","thinking":"The user greets me; I answer briefly.","signature":")" + sig +
            R"("},{"type":"text","text":"Hello."}]},{"role":"user","content":"again"}]})",
        R"({"model":"m","max_tokens":16,"thinking":{"type":"enabled","budget_tokens":64,"display":"omitted"},)"
        R"("messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"thinking","thinking":"",)"
        R"("signature":")" + sig + R"("},{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]},)"
        R"({"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"2"}]}]})",
        R"({"max_tokens":8,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[)"
        R"({"type":"redacted_thinking","data":")" + sig + R"("}]}]})",
    };
    int i = 0;
    for (const auto & b : bodies) {
        std::ofstream(dir + "/signed-" + std::to_string(i++) + ".json", std::ios::binary) << b;
    }
}

void check_accepted(const server::anthropic_request & r) {
    const size_t n = r.chat.messages.size();
    for (const auto & b : r.breakpoints) {
        if (b.n_before > n) {
            fuzz::finding("a breakpoint after the conversation's end");
        }
        const server::chat_request cut = server::breakpoint_conversation(r, b);
        if (cut.messages.size() != b.n_before + 1) {
            fuzz::finding("a breakpoint's conversation has the wrong length");
        }
    }
    for (const auto & t : r.chat.tools) {
        fuzz::check_json_text(t.parameters, "tools[].input_schema");
    }
    for (const auto & m : r.chat.messages) {
        for (const auto & c : m.tool_calls) {
            fuzz::check_json_text(c.arguments, "tool_use input");
        }
    }
    for (const auto & s : r.stop_sequences) {
        if (s.empty()) {
            fuzz::finding("accepted an empty stop sequence");
        }
    }
    fuzz::check_sampling(r.chat.sampling);
    fuzz::check_work_limits(r.chat);
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
    if (auto e = fuzz::body_limit(body, "/v1/messages")) {
        fuzz::check_rejection(*e);
        return 0;
    }
    for (const bool count_tokens : {false, true}) {
        server::anthropic_request r;
        const auto err = fuzz::no_throw("parse_anthropic_request", [&] {
            return server::parse_anthropic_request(body, signer(), count_tokens, r);
        });
        if (err) {
            fuzz::check_rejection(*err);
        } else {
            check_accepted(r);
        }
    }
    return 0;
}
