// Tests of server::responses_response: the exact streaming event sequence of the Responses API
// (types, sequence numbers, indices, item shapes) for reasoning, text and function calls, the
// incomplete ending, usage, sealed reasoning, and the non-streaming response object. Parser
// deltas are applied directly (no model); plain text goes through the plain-content parser.
#include "server/dialects/responses/reasoning_seal.h"
#include "server/dialects/responses/responses_response.h"

#include "done_event.h"

#include <gtest/gtest.h>

using namespace lineage::server;
using lineage::engine::chat_delta;
using lineage::scheduler::finish_reason;
using lineage::scheduler::generation_event;

namespace {

responses_meta meta(const reasoning_seal * seal = nullptr) {
    responses_meta m;
    m.id = "resp_test";
    m.model = "tiny";
    m.created_at = 1700000000;
    m.echo = json::object({{"store", true}});
    m.include_encrypted_reasoning = seal != nullptr;
    m.seal = seal;
    m.tool_namespaces = {{"fetch", "mcp"}};
    m.count_tokens = [](const std::string & s) { return static_cast<int32_t>(s.size()); };
    return m;
}

generation_event done(finish_reason f) {
    return test_events::done_event(f, /*prompt=*/40, /*cached=*/32, /*completion=*/9);
}

chat_delta reasoning(const std::string & s) {
    chat_delta d;
    d.reasoning_content = s;
    return d;
}

chat_delta content(const std::string & s) {
    chat_delta d;
    d.content = s;
    return d;
}

chat_delta call(size_t index, const std::string & id, const std::string & name, const std::string & args) {
    chat_delta d;
    d.tool_call_index = index;
    d.tool_call_id = id;
    d.tool_call_name = name;
    d.tool_call_arguments = args;
    return d;
}

std::vector<std::string> types(const std::vector<json> & evs) {
    std::vector<std::string> t;
    for (size_t i = 0; i < evs.size(); ++i) {
        EXPECT_EQ(evs[i]["sequence_number"], static_cast<int64_t>(i)) << evs[i]["type"];
        t.push_back(evs[i]["type"].get<std::string>());
    }
    return t;
}

}  // namespace

TEST(ResponsesResponse, StreamedReasoningTextAndFunctionCallsInOrder) {
    const reasoning_seal seal(reasoning_seal::random_key());
    responses_output out(meta(&seal), {}, {}, 40);
    out.apply({reasoning("Let me "), reasoning("think."), content("Calling."), call(0, "call_1", "read", "{\"p\""),
               call(0, "", "", ":1}"), call(1, "call_2", "fetch", "{}")});
    std::vector<json> evs = out.take_events();
    for (auto & e : out.final_events(done(finish_reason::stop))) {
        evs.push_back(std::move(e));
    }
    EXPECT_EQ(types(evs), (std::vector<std::string>{
                              "response.created", "response.in_progress",
                              "response.output_item.added", "response.content_part.added",
                              "response.reasoning_text.delta", "response.reasoning_text.delta",
                              "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
                              "response.output_item.added", "response.content_part.added", "response.output_text.delta",
                              "response.output_text.done", "response.content_part.done", "response.output_item.done",
                              "response.output_item.added", "response.function_call_arguments.delta",
                              "response.function_call_arguments.delta", "response.function_call_arguments.done",
                              "response.output_item.done",
                              "response.output_item.added", "response.function_call_arguments.delta",
                              "response.function_call_arguments.done", "response.output_item.done",
                              "response.completed"}));
    EXPECT_EQ(evs[0]["response"]["status"], "in_progress");
    EXPECT_EQ(evs[0]["response"]["output"], json::array());
    EXPECT_EQ(evs[0]["response"]["store"], true);
    // Reasoning item: output_index 0, reasoning_text part, sealed on done.
    EXPECT_EQ(dump(evs[2]["item"]["content"]), "[]");
    EXPECT_EQ(evs[2]["item"]["type"], "reasoning");
    EXPECT_EQ(dump(evs[3]["part"]), R"({"type":"reasoning_text","text":""})");
    EXPECT_EQ(evs[5]["delta"], "think.");
    EXPECT_EQ(evs[5]["output_index"], 0);
    EXPECT_EQ(evs[5]["content_index"], 0);
    EXPECT_EQ(evs[6]["text"], "Let me think.");
    const json & rs = evs[8]["item"];
    EXPECT_EQ(rs["status"], "completed");
    EXPECT_EQ(rs["content"][0]["text"], "Let me think.");
    EXPECT_EQ(seal.open(rs["encrypted_content"].get<std::string>()), "Let me think.");
    // Message item at output_index 1.
    EXPECT_EQ(evs[11]["output_index"], 1);
    EXPECT_EQ(evs[11]["item_id"], evs[9]["item"]["id"]);
    EXPECT_EQ(evs[12]["text"], "Calling.");
    EXPECT_EQ(dump(evs[14]["item"]["content"]),
              R"([{"type":"output_text","text":"Calling.","annotations":[],"logprobs":[]}])");
    // Function calls at output_index 2 and 3; the namespaced one says so.
    EXPECT_EQ(evs[15]["item"]["call_id"], "call_1");
    EXPECT_EQ(evs[15]["item"]["arguments"], "");
    EXPECT_EQ(evs[18]["arguments"], "{\"p\":1}");
    EXPECT_EQ(evs[18]["name"], "read");
    EXPECT_EQ(evs[19]["item"]["arguments"], "{\"p\":1}");
    EXPECT_FALSE(evs[19]["item"].contains("namespace"));
    EXPECT_EQ(evs[20]["output_index"], 3);
    EXPECT_EQ(evs[23]["item"]["namespace"], "mcp");
    EXPECT_EQ(evs[23]["item"]["name"], "fetch");
    // The completed response holds the same items and the usage.
    const json & r = evs[24]["response"];
    EXPECT_EQ(r["status"], "completed");
    ASSERT_EQ(r["output"].size(), 4u);
    EXPECT_EQ(r["output"][0], evs[8]["item"]);
    EXPECT_EQ(r["output"][1], evs[14]["item"]);
    EXPECT_EQ(r["output"][3], evs[23]["item"]);
    EXPECT_EQ(dump(r["usage"]), R"({"input_tokens":40,"input_tokens_details":{"cached_tokens":32},"output_tokens":9,)"
                                R"("output_tokens_details":{"reasoning_tokens":9},"total_tokens":49})");
    EXPECT_EQ(out.output_items().size(), 4u);
    EXPECT_EQ(out.finish_reason(done(finish_reason::stop)), "stop");
}

TEST(ResponsesResponse, PlainTextThroughTheParserEndsIncompleteOnLength) {
    responses_output out(meta(), {}, {}, 40);
    out.add("Hel");
    auto first = out.take_events();
    EXPECT_EQ(types(first), (std::vector<std::string>{"response.created", "response.in_progress",
                                                       "response.output_item.added", "response.content_part.added",
                                                       "response.output_text.delta"}));
    EXPECT_EQ(first[4]["delta"], "Hel");
    out.add("lo");
    auto last = out.final_events(done(finish_reason::length));
    std::vector<std::string> t;
    for (const auto & e : last) {
        t.push_back(e["type"]);
    }
    EXPECT_EQ(t, (std::vector<std::string>{"response.output_text.delta", "response.output_text.done",
                                           "response.content_part.done", "response.output_item.done",
                                           "response.incomplete"}));
    EXPECT_EQ(last[0]["sequence_number"], 5);
    EXPECT_EQ(last[0]["delta"], "lo");
    EXPECT_EQ(last[1]["text"], "Hello");
    EXPECT_EQ(last[3]["item"]["status"], "incomplete");
    const json & r = last[4]["response"];
    EXPECT_EQ(r["status"], "incomplete");
    EXPECT_EQ(dump(r["incomplete_details"]), R"({"reason":"max_output_tokens"})");
    EXPECT_EQ(out.finish_reason(done(finish_reason::length)), "length");
}

TEST(ResponsesResponse, NonStreamingResponseObject) {
    responses_output out(meta(), {}, {"STOP"}, 40);
    out.add("Hi STOP there");
    const json r = out.final_response(done(finish_reason::stop));
    EXPECT_EQ(r["id"], "resp_test");
    EXPECT_EQ(r["object"], "response");
    EXPECT_EQ(r["created_at"], 1700000000);
    EXPECT_EQ(r["status"], "completed");
    EXPECT_EQ(r["error"], nullptr);
    EXPECT_EQ(r["incomplete_details"], nullptr);
    EXPECT_EQ(r["model"], "tiny");
    EXPECT_EQ(r["store"], true);
    ASSERT_EQ(r["output"].size(), 1u);
    const json & m = r["output"][0];
    EXPECT_EQ(m["type"], "message");
    EXPECT_EQ(m["role"], "assistant");
    EXPECT_EQ(m["status"], "completed");
    EXPECT_EQ(m["id"].get<std::string>().rfind("msg_", 0), 0u);
    EXPECT_EQ(m["content"][0]["text"], "Hi ");
    EXPECT_EQ(r["usage"]["output_tokens_details"]["reasoning_tokens"], 0);
    EXPECT_EQ(r["usage"]["input_tokens_details"]["cached_tokens"], 32);
}

TEST(ResponsesResponse, EmptyAnswerIsAnEmptyMessage) {
    responses_output out(meta(), {}, {}, 40);
    auto evs = out.final_events(done(finish_reason::stop));
    EXPECT_EQ(types(evs), (std::vector<std::string>{"response.created", "response.in_progress",
                                                     "response.output_item.added", "response.content_part.added",
                                                     "response.output_text.done", "response.content_part.done",
                                                     "response.output_item.done", "response.completed"}));
    EXPECT_EQ(evs.back()["response"]["output"][0]["content"][0]["text"], "");
}

TEST(ResponsesResponse, NamedSseEvent) {
    json e = json::object({{"type", "response.created"}, {"sequence_number", 0}});
    EXPECT_EQ(sse_named_event(e), "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0}\n\n");
}

// Reasoning is part of the output: its count (the reasoning text tokenized again) never exceeds
// output_tokens, which a text that tokenizes to more tokens than were sampled used to break.
TEST(ResponsesResponse, ReasoningTokensNeverExceedOutputTokens) {
    lineage::scheduler::request_stats s;
    s.prompt_tokens = 30;
    s.completion_tokens = 4;
    const json u = responses_usage_json(s, 0, 5);
    EXPECT_EQ(u["output_tokens"], 4);
    EXPECT_EQ(u["output_tokens_details"]["reasoning_tokens"], 4);
    EXPECT_EQ(responses_usage_json(s, 0, 3)["output_tokens_details"]["reasoning_tokens"], 3);
    EXPECT_EQ(u["total_tokens"], 34);
}
