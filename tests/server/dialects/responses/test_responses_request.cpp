// Tests of server::responses_request: what a Responses API body becomes (the native
// chat_request the chat preparer renders), the conversation mapping (system merging, assistant
// turns, tool results, sealed reasoning), and the exact 400s.
#include "server/dialects/responses/reasoning_seal.h"
#include "server/dialects/responses/responses_request.h"

#include <gtest/gtest.h>

using namespace lineage::server;

namespace {

responses_request ok(const std::string & body, const reasoning_seal * seal = nullptr,
                     const std::vector<response_item> & prior = {}) {
    responses_request r;
    auto err = parse_responses_request(body, r);
    EXPECT_FALSE(err) << (err ? err->message : "");
    if (!err) {
        auto e2 = build_chat_messages(r, prior, seal);
        EXPECT_FALSE(e2) << (e2 ? e2->message : "");
    }
    return r;
}

api_error bad(const std::string & body) {
    responses_request r;
    auto err = parse_responses_request(body, r);
    EXPECT_TRUE(err) << body;
    return err ? *err : api_error{};
}

}  // namespace

TEST(ResponsesRequest, StringInputIsOneUserMessage) {
    auto r = ok(R"({"model":"m","input":"hi"})");
    ASSERT_EQ(r.chat.messages.size(), 1u);
    EXPECT_EQ(r.chat.messages[0].role, "user");
    EXPECT_EQ(r.chat.messages[0].content, "hi");
    EXPECT_FALSE(r.chat.messages[0].content_is_parts);
    EXPECT_TRUE(r.store);
    EXPECT_FALSE(r.chat.stream);
    EXPECT_EQ(r.chat.sampling.max_tokens, -1);
    EXPECT_EQ(r.chat.tool_choice, "auto");
}

TEST(ResponsesRequest, InstructionsAndLeadingSystemItemsMergeIntoOneSystemMessage) {
    auto r = ok(R"({"instructions":"Be brief.","input":[
        {"role":"developer","content":"Dev rules."},
        {"type":"message","role":"system","content":[{"type":"input_text","text":"A"},{"type":"input_text","text":"B"}]},
        {"role":"user","content":[{"type":"input_text","text":"Q"}]},
        {"role":"developer","content":"Later note."}]})");
    ASSERT_EQ(r.chat.messages.size(), 3u);
    EXPECT_EQ(r.chat.messages[0].role, "system");
    EXPECT_EQ(r.chat.messages[0].content, "Be brief.\n\nDev rules.\n\nAB");
    EXPECT_EQ(r.chat.messages[1].role, "user");
    EXPECT_TRUE(r.chat.messages[1].content_is_parts);
    EXPECT_EQ(r.chat.messages[1].parts, std::vector<std::string>{"Q"});
    // A developer message after the start is given as a user message.
    EXPECT_EQ(r.chat.messages[2].role, "user");
    EXPECT_EQ(r.chat.messages[2].content, "Later note.");
}

TEST(ResponsesRequest, OneLeadingSystemItemKeepsItsShape) {
    auto r = ok(R"({"input":[{"role":"system","content":"S"},{"role":"user","content":"U"}]})");
    ASSERT_EQ(r.chat.messages.size(), 2u);
    EXPECT_EQ(r.chat.messages[0].role, "system");
    EXPECT_EQ(r.chat.messages[0].content, "S");
    EXPECT_FALSE(r.chat.messages[0].content_is_parts);
}

TEST(ResponsesRequest, AssistantItemsFormOneTurnAndToolOutputsFollow) {
    auto r = ok(R"({"input":[
        {"role":"user","content":"list files"},
        {"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"I should call ls."}]},
        {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Calling."}]},
        {"type":"function_call","call_id":"call_1","name":"ls","arguments":"{\"path\":\".\"}"},
        {"type":"function_call","call_id":"call_2","name":"ls","arguments":"{}"},
        {"type":"function_call_output","call_id":"call_1","output":"a.txt"},
        {"type":"function_call_output","call_id":"call_2","output":[{"type":"input_text","text":"b"},{"type":"input_text","text":".txt"}]},
        {"type":"message","role":"assistant","content":"Done."}]})");
    ASSERT_EQ(r.chat.messages.size(), 5u);
    const auto & a = r.chat.messages[1];
    EXPECT_EQ(a.role, "assistant");
    EXPECT_EQ(a.reasoning_content, "I should call ls.");
    EXPECT_EQ(a.content, "Calling.");
    EXPECT_FALSE(a.content_is_parts);
    ASSERT_EQ(a.tool_calls.size(), 2u);
    EXPECT_EQ(a.tool_calls[0].id, "call_1");
    EXPECT_EQ(a.tool_calls[0].name, "ls");
    EXPECT_EQ(a.tool_calls[0].arguments, R"({"path":"."})");
    EXPECT_EQ(r.chat.messages[2].role, "tool");
    EXPECT_EQ(r.chat.messages[2].tool_call_id, "call_1");
    EXPECT_EQ(r.chat.messages[2].content, "a.txt");
    EXPECT_EQ(r.chat.messages[3].content, "b.txt");
    EXPECT_EQ(r.chat.messages[4].role, "assistant");
    EXPECT_EQ(r.chat.messages[4].content, "Done.");
    EXPECT_TRUE(r.chat.messages[4].reasoning_content.empty());
}

TEST(ResponsesRequest, AnEmptyAssistantMessageStillEndsItsTurn) {
    // A reply cut inside its reasoning (empty text), then the client's own assistant message with
    // a call: two assistant messages, as a chat client sends them.
    auto r = ok(R"({"input":[{"role":"user","content":"q"},
        {"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"hmm"}]},
        {"type":"message","role":"assistant","content":[{"type":"output_text","text":""}]},
        {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Let me look."}]},
        {"type":"function_call","call_id":"c1","name":"ls","arguments":"{}"},
        {"type":"function_call_output","call_id":"c1","output":"x"}]})");
    ASSERT_EQ(r.chat.messages.size(), 4u);
    EXPECT_EQ(r.chat.messages[1].reasoning_content, "hmm");
    EXPECT_EQ(r.chat.messages[1].content, "");
    EXPECT_TRUE(r.chat.messages[1].tool_calls.empty());
    EXPECT_EQ(r.chat.messages[2].role, "assistant");
    EXPECT_EQ(r.chat.messages[2].content, "Let me look.");
    EXPECT_EQ(r.chat.messages[2].reasoning_content, "");
    ASSERT_EQ(r.chat.messages[2].tool_calls.size(), 1u);
    EXPECT_EQ(r.chat.messages[3].role, "tool");
}

TEST(ResponsesRequest, SealedReasoningIsOpenedAndForeignSealsAreDropped) {
    const reasoning_seal seal(reasoning_seal::random_key());
    const reasoning_seal other(reasoning_seal::random_key());
    const std::string body = R"({"input":[{"role":"user","content":"q"},
        {"type":"reasoning","summary":[],"encrypted_content":")" + seal.seal("secret thoughts") + R"("},
        {"type":"message","role":"assistant","content":[{"type":"output_text","text":"A"}]},
        {"role":"user","content":"next"}]})";
    auto r = ok(body, &seal);
    ASSERT_EQ(r.chat.messages.size(), 3u);
    EXPECT_EQ(r.chat.messages[1].reasoning_content, "secret thoughts");
    EXPECT_EQ(r.chat.messages[1].content, "A");
    auto r2 = ok(body, &other);
    EXPECT_EQ(r2.chat.messages[1].reasoning_content, "");
    EXPECT_EQ(r2.chat.messages[1].content, "A");
}

TEST(ResponsesRequest, PriorConversationComesFirstAndInstructionsAreTheNewOnes) {
    auto prior = items_from_json_text(R"([{"role":"user","content":"one"},
        {"type":"message","role":"assistant","content":[{"type":"output_text","text":"two"}]}])");
    ASSERT_TRUE(prior);
    auto r = ok(R"({"instructions":"New.","previous_response_id":"resp_x","input":"three"})", nullptr, *prior);
    EXPECT_EQ(r.previous_response_id, "resp_x");
    ASSERT_EQ(r.chat.messages.size(), 4u);
    EXPECT_EQ(r.chat.messages[0].content, "New.");
    EXPECT_EQ(r.chat.messages[1].content, "one");
    EXPECT_EQ(r.chat.messages[2].content, "two");
    EXPECT_EQ(r.chat.messages[3].content, "three");
}

TEST(ResponsesRequest, ItemsRoundTripThroughTheirStoredForm) {
    auto r = ok(R"({"input":[{"role":"user","content":[{"type":"input_text","text":"q"}]},
        {"type":"function_call","call_id":"c","name":"f","namespace":"ns","arguments":"{}"},
        {"type":"function_call_output","call_id":"c","output":"out"},
        {"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"t"}]}]})");
    json items = json::array();
    for (const auto & it : r.input) {
        items.push_back(item_to_json(it));
    }
    EXPECT_EQ(dump(items),
              R"([{"type":"message","role":"user","content":[{"type":"input_text","text":"q"}]},)"
              R"({"type":"function_call","call_id":"c","name":"f","namespace":"ns","arguments":"{}"},)"
              R"({"type":"function_call_output","call_id":"c","output":"out"},)"
              R"({"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"t"}]}])");
    auto back = items_from_json_text(dump(items));
    ASSERT_TRUE(back);
    ASSERT_EQ(back->size(), 4u);
    EXPECT_EQ((*back)[1].ns, "ns");
    EXPECT_EQ((*back)[3].reasoning_text, "t");
    EXPECT_FALSE(items_from_json_text("{}"));
}

TEST(ResponsesRequest, ToolsFlattenNamespacesAndIgnoreHostedTools) {
    auto r = ok(R"({"input":"x","tool_choice":"required","parallel_tool_calls":false,"tools":[
        {"type":"function","name":"read","description":"Read.","parameters":{"type":"object","properties":{"p":{"type":"string"}}},"strict":true},
        {"type":"web_search"},
        {"type":"namespace","name":"mcp","description":"d","tools":[{"type":"function","name":"fetch"},{"type":"custom","name":"c"}]},
        {"type":"file_search","vector_store_ids":[]}]})");
    ASSERT_EQ(r.chat.tools.size(), 2u);
    EXPECT_EQ(r.chat.tools[0].name, "read");
    EXPECT_EQ(r.chat.tools[0].description, "Read.");
    EXPECT_EQ(r.chat.tools[0].parameters, R"({"type":"object","properties":{"p":{"type":"string"}}})");
    EXPECT_EQ(r.chat.tools[1].name, "fetch");
    EXPECT_EQ(r.tool_namespaces.at("fetch"), "mcp");
    EXPECT_EQ(r.ignored_tools, (std::vector<std::string>{"web_search", "mcp.custom", "file_search"}));
    EXPECT_EQ(r.chat.tool_choice, "required");
    EXPECT_EQ(r.chat.parallel_tool_calls, false);
}

TEST(ResponsesRequest, ForcedFunctionKeepsOnlyThatTool) {
    auto r = ok(R"({"input":"x","tool_choice":{"type":"function","name":"b"},
        "tools":[{"type":"function","name":"a"},{"type":"function","name":"b"}]})");
    ASSERT_EQ(r.chat.tools.size(), 1u);
    EXPECT_EQ(r.chat.tools[0].name, "b");
    EXPECT_EQ(r.chat.tool_choice, "required");
    EXPECT_EQ(r.chat.tool_choice_key, "function:b");
    EXPECT_TRUE(r.tool_choice_is_function);
}

TEST(ResponsesRequest, SamplingSessionAndOptions) {
    auto r = ok(R"({"input":"x","max_output_tokens":64,"temperature":0.5,"top_p":0.9,"user":"u",
        "prompt_cache_key":"k","store":false,"stream":true,"metadata":{"a":"b"},
        "include":["reasoning.encrypted_content"],"reasoning":{"effort":"minimal","summary":"auto"},
        "text":{"format":{"type":"text"},"verbosity":"low"},"truncation":"disabled"})");
    EXPECT_EQ(r.chat.sampling.max_tokens, 64);
    EXPECT_EQ(r.max_output_tokens, 64);
    EXPECT_FLOAT_EQ(r.chat.sampling.temperature, 0.5f);
    EXPECT_FLOAT_EQ(r.chat.sampling.top_p, 0.9f);
    EXPECT_EQ(r.chat.user, "u");
    EXPECT_EQ(r.chat.prompt_cache_key, "k");
    EXPECT_FALSE(r.store);
    EXPECT_TRUE(r.chat.stream);
    EXPECT_EQ(r.metadata.at("a"), "b");
    EXPECT_TRUE(r.include_encrypted_reasoning);
    EXPECT_EQ(r.reasoning_effort, "minimal");
    EXPECT_EQ(r.chat.chat_template_kwargs.at("enable_thinking"), "false");
    auto medium = ok(R"({"input":"x","reasoning":{"effort":"medium"}})");
    EXPECT_TRUE(medium.chat.chat_template_kwargs.empty());  // the template's default: same key as chat
}

TEST(ResponsesRequest, TextFormatIsStructuredOutput) {
    EXPECT_EQ(ok(R"({"input":"x","text":{"format":{"type":"text"}}})").chat.json_schema, "");
    EXPECT_EQ(ok(R"({"input":"x","text":{"format":{"type":"json_object"}}})").chat.json_schema, R"({"type":"object"})");
    auto r = ok(R"({"input":"x","text":{"format":{"type":"json_schema","name":"n","strict":true,
        "schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}}})");
    EXPECT_EQ(r.chat.json_schema, R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})");
    EXPECT_EQ(ok(R"({"input":"x","text":{"format":{"type":"json_schema","name":"n"}}})").chat.json_schema,
              R"({"type":"object"})");
}

TEST(ResponsesRequest, ExactErrors) {
    auto e = bad(R"({"model":"m"})");
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "input");
    EXPECT_EQ(e.message, "'input' is required: a string or a non-empty array of items");
    e = bad(R"({"input":5})");
    EXPECT_EQ(e.message, "'input' must be a string or an array of items, got an integer");
    e = bad(R"({"input":[{"role":"robot","content":"x"}]})");
    EXPECT_EQ(e.param, "input[0].role");
    e = bad(R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]})");
    EXPECT_EQ(e.param, "input[0].content[0].image_url");
    EXPECT_EQ(e.message, "'input[0].content[0].image_url' must be a data URI (data:image/png;base64,...)");
    e = bad(R"({"input":[{"type":"function_call","name":"f","arguments":"{}"}]})");
    EXPECT_EQ(e.param, "input[0].call_id");
    e = bad(R"({"input":[{"type":"item_reference","id":"x"}]})");
    EXPECT_EQ(e.param, "input[0].type");
    e = bad(R"({"input":"x","text":{"format":{"type":"json_schema","name":"s","schema":[]}}})");
    EXPECT_EQ(e.param, "text.format.schema");
    EXPECT_EQ(e.message, "'text.format.schema' must be a JSON Schema object, got an array");
    e = bad(R"({"input":"x","text":{"format":{"type":"xml"}}})");
    EXPECT_EQ(e.param, "text.format.type");
    e = bad(R"({"input":"x","max_output_tokens":0})");
    EXPECT_EQ(e.param, "max_output_tokens");
    e = bad(R"({"input":"x","temperature":3})");
    EXPECT_EQ(e.message, "'temperature' is 3.0; it must be between 0.0 and 2.0");
    e = bad(R"({"input":"x","tool_choice":"required"})");
    EXPECT_EQ(e.param, "tool_choice");
    e = bad(R"({"input":"x","tool_choice":{"type":"web_search"}})");
    EXPECT_EQ(e.param, "tool_choice");
    e = bad(R"({"input":"x","reasoning":{"effort":"max"}})");
    EXPECT_EQ(e.param, "reasoning.effort");
    e = bad(R"({"input":"x","background":true})");
    EXPECT_EQ(e.param, "background");
    e = bad("{not json");
    EXPECT_EQ(e.code, "invalid_json");
}
