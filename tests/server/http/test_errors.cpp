// Unit tests of the one mapping from a scheduler failure to an HTTP error (errors.h
// to_api_error): every failure kind's status, type and message, and the OpenAI body.
#include "server/http/endpoints.h"
#include "server/http/errors.h"

#include <gtest/gtest.h>

namespace lineage::server {
namespace {

using scheduler::failure_kind;

TEST(ToApiError, EveryFailureKindHasItsStatusAndType) {
    struct row {
        failure_kind kind;
        int status;
        const char * type;
    };
    for (const row & r : {row{failure_kind::prompt_too_long, 400, "invalid_request_error"},
                          row{failure_kind::bad_grammar, 400, "invalid_request_error"},
                          row{failure_kind::no_free_sequence, 503, "server_error"},
                          row{failure_kind::kv_full, 503, "server_error"},
                          row{failure_kind::decode_failed, 500, "server_error"},
                          row{failure_kind::shutting_down, 503, "server_error"}}) {
        const api_error e = to_api_error({r.kind, "what was wrong; what to do"});
        EXPECT_EQ(e.status, r.status) << scheduler::to_string(r.kind);
        EXPECT_EQ(e.type, r.type) << scheduler::to_string(r.kind);
        EXPECT_EQ(e.message, "what was wrong; what to do");
        EXPECT_EQ(e.param, "");
        EXPECT_EQ(e.code, "");
    }
}

TEST(ToApiError, RendersTheOpenAiShape) {
    const api_error e = to_api_error({failure_kind::prompt_too_long, "the prompt has 9000 tokens"});
    EXPECT_EQ(dump(to_json(e)),
              R"({"error":{"message":"the prompt has 9000 tokens","type":"invalid_request_error","param":null,"code":null}})");
    EXPECT_EQ(to_api_error({failure_kind::decode_failed, ""}).message, "generation failed");
}

TEST(FailureKind, Names) {
    EXPECT_EQ(scheduler::to_string(failure_kind::prompt_too_long), "prompt_too_long");
    EXPECT_EQ(scheduler::to_string(failure_kind::bad_grammar), "bad_grammar");
    EXPECT_EQ(scheduler::to_string(failure_kind::no_free_sequence), "no_free_sequence");
    EXPECT_EQ(scheduler::to_string(failure_kind::kv_full), "kv_full");
    EXPECT_EQ(scheduler::to_string(failure_kind::decode_failed), "decode_failed");
    EXPECT_EQ(scheduler::to_string(failure_kind::shutting_down), "shutting_down");
}

}  // namespace
}  // namespace lineage::server

// What httplib answers on its own: an unknown path is a 404 listing every endpoint; a served
// path with another method is a 405 naming the methods it takes.
TEST(ErrorForStatus, UnknownPathsAndWrongMethods) {
    const auto nf = lineage::server::error_for_status(404, "GET", "/v2/nothing", 1024);
    EXPECT_EQ(nf.status, 404);
    EXPECT_EQ(nf.code, "not_found");
    for (const char * ep : {"POST /tokenize", "POST /apply-template", "GET /metrics", "POST /v1/messages/count_tokens",
                            "GET /lora-adapters", "POST /lora-adapters", "DELETE /v1/responses/:id",
                            "POST /v1/responses/:id/cancel", "GET /v1/responses/:id/input_items"}) {
        EXPECT_NE(nf.message.find(ep), std::string::npos) << ep << " missing from: " << nf.message;
    }
    const auto wrong = lineage::server::error_for_status(404, "GET", "/v1/chat/completions", 1024);
    EXPECT_EQ(wrong.status, 405);
    EXPECT_EQ(wrong.message, "method GET is not allowed on /v1/chat/completions; it takes POST");
    const auto lora = lineage::server::error_for_status(404, "PUT", "/lora-adapters", 1024);
    EXPECT_EQ(lora.message, "method PUT is not allowed on /lora-adapters; it takes GET or POST");
    const auto id = lineage::server::error_for_status(404, "POST", "/v1/responses/resp_1", 1024);
    EXPECT_EQ(id.message, "method POST is not allowed on /v1/responses/resp_1; it takes GET or DELETE");
    // The endpoints under :id: each takes its own method; deeper or other paths are no endpoint.
    EXPECT_EQ(lineage::server::error_for_status(404, "GET", "/v1/responses/resp_1/cancel", 1024).message,
              "method GET is not allowed on /v1/responses/resp_1/cancel; it takes POST");
    EXPECT_EQ(lineage::server::error_for_status(404, "POST", "/v1/responses/resp_1/input_items", 1024).message,
              "method POST is not allowed on /v1/responses/resp_1/input_items; it takes GET");
    EXPECT_EQ(lineage::server::error_for_status(404, "GET", "/v1/responses/resp_1/other", 1024).status, 404);
    EXPECT_EQ(lineage::server::error_for_status(404, "GET", "/v1/responses/a/b/input_items", 1024).status, 404);
    EXPECT_EQ(lineage::server::error_for_status(404, "POST", "/v1/responses//cancel", 1024).status, 404);
}
