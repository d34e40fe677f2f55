// Tests of server::chat_request: what a valid body becomes, and the exact error (message,
// param, code) for each kind of bad body.
#include "server/dialects/chat/chat_request.h"

#include <gtest/gtest.h>

#include <string>

using lineage::server::api_error;
using lineage::server::chat_request;
using lineage::server::parse_chat_request;

namespace {

chat_request ok(const std::string & body) {
    chat_request r;
    auto err = parse_chat_request(body, r);
    EXPECT_FALSE(err) << (err ? err->message : "");
    return r;
}

api_error bad(const std::string & body) {
    chat_request r;
    auto err = parse_chat_request(body, r);
    EXPECT_TRUE(err) << body;
    return err ? *err : api_error{};
}

const std::string user_hi = R"({"role":"user","content":"hi"})";

std::string with(const std::string & fields) {
    return R"({"messages":[)" + user_hi + "]" + (fields.empty() ? "" : "," + fields) + "}";
}

}  // namespace

TEST(ChatRequest, MinimalRequestGetsDefaults) {
    auto r = ok(with(""));
    ASSERT_EQ(r.messages.size(), 1u);
    EXPECT_EQ(r.messages[0].role, "user");
    EXPECT_EQ(r.messages[0].content, "hi");
    EXPECT_FALSE(r.messages[0].content_is_parts);
    EXPECT_FALSE(r.stream);
    EXPECT_FALSE(r.include_usage);
    EXPECT_EQ(r.sampling.max_tokens, -1);
    EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
    EXPECT_FLOAT_EQ(r.sampling.top_p, 1.0f);
    EXPECT_EQ(r.sampling.seed, -1);
    EXPECT_TRUE(r.stop.empty());
    EXPECT_TRUE(r.cache_prompt);
    EXPECT_EQ(r.tool_choice, "auto");
    EXPECT_EQ(r.tool_choice_key, "auto");
    EXPECT_FALSE(r.parallel_tool_calls.has_value());
}

TEST(ChatRequest, FullConversationWithTools) {
    auto r = ok(R"({
      "model": "gpt-4o", "stream": true, "stream_options": {"include_usage": true},
      "max_tokens": 100, "temperature": 0.2, "top_p": 0.9, "seed": 42, "stop": ["END", "STOP"], "n": 1,
      "user": "u1", "parallel_tool_calls": false, "logprobs": false, "frequency_penalty": 0, "metadata": {"x": 1},
      "chat_template_kwargs": {"enable_thinking": false, "z": {"b": 1, "a": 2}},
      "messages": [
        {"role": "system", "content": "sys"},
        {"role": "developer", "content": "dev"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": null, "tool_calls": [
          {"id": "call_1", "type": "function", "function": {"name": "get", "arguments": "{\"q\":1}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "result"},
        {"role": "assistant", "content": "done", "reasoning_content": "thought"}
      ],
      "tools": [{"type": "function", "function": {"name": "get", "description": "d",
                 "parameters": {"type": "object", "properties": {"z": {}, "a": {}}}}}],
      "tool_choice": "required"
    })");
    ASSERT_EQ(r.messages.size(), 6u);
    EXPECT_EQ(r.messages[1].role, "developer");
    EXPECT_TRUE(r.messages[2].content_is_parts);
    EXPECT_EQ(r.messages[2].parts, (std::vector<std::string>{"a", "b"}));
    ASSERT_EQ(r.messages[3].tool_calls.size(), 1u);
    EXPECT_EQ(r.messages[3].tool_calls[0].id, "call_1");
    EXPECT_EQ(r.messages[3].tool_calls[0].name, "get");
    EXPECT_EQ(r.messages[3].tool_calls[0].arguments, "{\"q\":1}");
    EXPECT_EQ(r.messages[4].tool_call_id, "call_1");
    EXPECT_EQ(r.messages[5].reasoning_content, "thought");
    ASSERT_EQ(r.tools.size(), 1u);
    EXPECT_EQ(r.tools[0].name, "get");
    EXPECT_EQ(r.tools[0].description, "d");
    // Key order as sent: it is part of the rendered prompt.
    EXPECT_EQ(r.tools[0].parameters, R"({"type":"object","properties":{"z":{},"a":{}}})");
    EXPECT_EQ(r.tool_choice, "required");
    EXPECT_TRUE(r.stream);
    EXPECT_TRUE(r.include_usage);
    EXPECT_EQ(r.sampling.max_tokens, 100);
    EXPECT_FLOAT_EQ(r.sampling.temperature, 0.2f);
    EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
    EXPECT_EQ(r.sampling.seed, 42);
    EXPECT_EQ(r.stop, (std::vector<std::string>{"END", "STOP"}));
    EXPECT_EQ(r.user, "u1");
    EXPECT_EQ(r.parallel_tool_calls, false);
    EXPECT_EQ(r.chat_template_kwargs.at("enable_thinking"), "false");
    EXPECT_EQ(r.chat_template_kwargs.at("z"), R"({"b":1,"a":2})");
    EXPECT_EQ(r.model, "gpt-4o");
}

TEST(ChatRequest, MaxCompletionTokensWinsOverMaxTokens) {
    EXPECT_EQ(ok(with(R"("max_tokens": 5, "max_completion_tokens": 7)")).sampling.max_tokens, 7);
    EXPECT_EQ(ok(with(R"("max_completion_tokens": 9)")).sampling.max_tokens, 9);
}

// A limit past INT32_MAX is clamped (generation ends at the context length), as on /v1/messages;
// it used to wrap and be refused as "must be at least 1".
TEST(ChatRequest, HugeTokenLimitsAreClamped) {
    EXPECT_EQ(ok(with(R"("max_tokens": 2147483648)")).sampling.max_tokens, 2147483647);
    EXPECT_EQ(ok(with(R"("max_completion_tokens": 4294967297)")).sampling.max_tokens, 2147483647);
    EXPECT_EQ(ok(with(R"("max_tokens": 18446744073709551615)")).sampling.max_tokens, 2147483647);
    EXPECT_EQ(ok(with(R"("max_tokens": 2147483647)")).sampling.max_tokens, 2147483647);
}

TEST(ChatRequest, StopAsAString) {
    EXPECT_EQ(ok(with(R"("stop": "\n\n")")).stop, (std::vector<std::string>{"\n\n"}));
}

TEST(ChatRequest, NullMeansUnset) {
    auto r = ok(with(R"("max_tokens": null, "temperature": null, "stop": null, "tools": null, "tool_choice": null,
                        "stream_options": null, "user": null, "seed": null)"));
    EXPECT_EQ(r.sampling.max_tokens, -1);
    EXPECT_TRUE(r.stop.empty());
    EXPECT_TRUE(r.tools.empty());
}

TEST(ChatRequest, CacheFieldsAtRootOrInExtraBody) {
    auto r = ok(with(R"("prompt_cache_key": "pk", "cache_prompt": false)"));
    EXPECT_EQ(r.prompt_cache_key, "pk");
    EXPECT_FALSE(r.cache_prompt);
    r = ok(with(R"("extra_body": {"prompt_cache_key": "ek", "cache_prompt": false})"));
    EXPECT_EQ(r.prompt_cache_key, "ek");
    EXPECT_FALSE(r.cache_prompt);
    r = ok(with(R"("prompt_cache_key": "root", "extra_body": {"prompt_cache_key": "extra"})"));
    EXPECT_EQ(r.prompt_cache_key, "root");
    r = ok(with(R"("prompt_cache_key": "", "extra_body": {"prompt_cache_key": "extra"})"));
    EXPECT_EQ(r.prompt_cache_key, "extra");
}

TEST(ChatRequest, ToolChoiceNamingAFunctionKeepsOnlyThatTool) {
    auto r = ok(R"({"messages":[{"role":"user","content":"x"}],
        "tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b"}}],
        "tool_choice":{"type":"function","function":{"name":"b"}}})");
    EXPECT_EQ(r.tool_choice, "required");
    EXPECT_EQ(r.tool_choice_key, "function:b");
    ASSERT_EQ(r.tools.size(), 1u);
    EXPECT_EQ(r.tools[0].name, "b");
    EXPECT_EQ(r.tools[0].parameters, "{}");
}

TEST(ChatRequest, AssistantWithOnlyToolCallsGetsEmptyArgumentsDefault) {
    auto r = ok(R"({"messages":[{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f"}}]}]})");
    ASSERT_EQ(r.messages[0].tool_calls.size(), 1u);
    EXPECT_EQ(r.messages[0].tool_calls[0].arguments, "{}");
}

TEST(ChatRequest, MalformedJson) {
    auto e = bad(R"({"messages": [)");
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.type, "invalid_request_error");
    EXPECT_EQ(e.code, "invalid_json");
    EXPECT_EQ(e.message.rfind("the request body is not valid JSON (", 0), 0u) << e.message;
    EXPECT_NE(e.message.find("; send a JSON object"), std::string::npos);
}

TEST(ChatRequest, InvalidUtf8IsMalformed) {
    auto e = bad(std::string("{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}"));
    EXPECT_EQ(e.code, "invalid_json");
}

struct bad_case {
    std::string body;
    std::string param;
    std::string message;
};

TEST(ChatRequest, EachBadFieldGetsItsOwnError) {
    const std::string tool = R"({"type":"function","function":{"name":"f"}})";
    const std::vector<bad_case> cases = {
        {"[]", "", "the request body must be a JSON object, got an array"},
        {"{}", "messages", "'messages' is required: send a non-empty array of {\"role\", \"content\"} objects"},
        {R"({"messages":"hi"})", "messages", "'messages' must be an array, got a string"},
        {R"({"messages":[]})", "messages", "'messages' must contain at least one message"},
        {R"({"messages":[1]})", "messages[0]", "'messages[0]' must be an object with 'role' and 'content', got an integer"},
        {R"({"messages":[{"content":"x"}]})", "messages[0].role",
         "'messages[0].role' is required: one of system, developer, user, assistant, tool"},
        {R"({"messages":[{"role":5,"content":"x"}]})", "messages[0].role", "'messages[0].role' must be a string, got an integer"},
        {R"({"messages":[{"role":"robot","content":"x"}]})", "messages[0].role",
         "'messages[0].role' is 'robot'; expected one of system, developer, user, assistant, tool"},
        {R"({"messages":[{"role":"user"}]})", "messages[0].content", "'messages[0].content' is required for a user message"},
        {R"({"messages":[{"role":"system","content":null}]})", "messages[0].content",
         "'messages[0].content' is required for a system message"},
        {R"({"messages":[{"role":"user","content":5}]})", "messages[0].content",
         "'messages[0].content' must be a string or an array of text and image_url parts, got an integer"},
        {R"({"messages":[{"role":"user","content":["x"]}]})", "messages[0].content[0]",
         "'messages[0].content[0]' must be an object like {\"type\": \"text\", \"text\": \"...\"}, got a string"},
        {R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]}]})",
         "messages[0].content[0].image_url.url",
         "'messages[0].content[0].image_url.url' must be a data URI (data:image/png;base64,...)"},
        {R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/cat.png"}}]}]})",
         "messages[0].content[0].image_url.url",
         "'messages[0].content[0].image_url.url' is an http(s) URL; this server fetches nothing: send the image "
         "inline as a data URI (data:image/png;base64,...)"},
        {R"({"messages":[{"role":"user","content":[{"type":"input_audio"}]}]})",
         "messages[0].content[0].type",
         "'messages[0].content[0].type' is 'input_audio'; this server accepts \"text\" and \"image_url\" parts"},
        {R"({"messages":[{"role":"user","content":[{"text":"a"}]}]})", "messages[0].content[0].type",
         "'messages[0].content[0].type' is required; this server accepts \"text\" and \"image_url\" parts"},
        {R"({"messages":[{"role":"user","content":[{"type":"text","text":3}]}]})", "messages[0].content[0].text",
         "'messages[0].content[0].text' must be a string, got an integer"},
        {R"({"messages":[{"role":"assistant"}]})", "messages[0].content",
         "'messages[0]' is an assistant message without 'content' or 'tool_calls'; send one of them"},
        {R"({"messages":[{"role":"assistant","tool_calls":{}}]})", "messages[0].tool_calls",
         "'messages[0].tool_calls' must be an array, got an object"},
        {R"({"messages":[{"role":"assistant","tool_calls":[{"type":"function"}]}]})", "messages[0].tool_calls[0].function",
         "'messages[0].tool_calls[0].function' is required: {\"name\": ..., \"arguments\": \"<JSON text>\"}"},
        {R"({"messages":[{"role":"assistant","tool_calls":[{"type":"custom","function":{"name":"f"}}]}]})",
         "messages[0].tool_calls[0].type", "'messages[0].tool_calls[0].type' is 'custom'; only \"function\" tool calls are supported"},
        {R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"arguments":"{}"}}]}]})",
         "messages[0].tool_calls[0].function.name", "'messages[0].tool_calls[0].function.name' is required"},
        {R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]}]})",
         "messages[0].tool_calls[0].function.arguments",
         "'messages[0].tool_calls[0].function.arguments' must be a string of JSON text, got an object"},
        {R"({"messages":[{"role":"tool","content":"r"}]})", "messages[0].tool_call_id",
         "'messages[0].tool_call_id' is required for a tool message: the id of the tool call it answers"},
        {R"({"messages":[{"role":"user","content":"x","name":1}]})", "messages[0].name", "'messages[0].name' must be a string, got an integer"},
        {with(R"("tools": {})"), "tools", "'tools' must be an array, got an object"},
        {with(R"("tools": [{"type":"retrieval"}])"), "tools[0].type", "'tools[0].type' is 'retrieval'; only \"function\" tools are supported"},
        {with(R"("tools": [{"function":{"name":"f"}}])"), "tools[0].type", "'tools[0].type' is required and must be \"function\""},
        {with(R"("tools": [{"type":"function"}])"), "tools[0].function",
         "'tools[0].function' is required: {\"name\": ..., \"description\": ..., \"parameters\": {...}}"},
        {with(R"("tools": [{"type":"function","function":{"name":""}}])"), "tools[0].function.name",
         "'tools[0].function.name' must not be empty"},
        {with(R"("tools": [{"type":"function","function":{"name":"f","parameters":"{}"}}])"), "tools[0].function.parameters",
         "'tools[0].function.parameters' must be a JSON Schema object, got a string"},
        {with(R"("tool_choice": "sometimes")"), "tool_choice",
         "'tool_choice' is 'sometimes'; expected \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}"},
        {with(R"("tool_choice": "required")"), "tool_choice", "'tool_choice' asks for a tool call but no 'tools' were given"},
        {with(R"("tool_choice": {"type":"function"})"), "tool_choice",
         "'tool_choice' as an object must be {\"type\": \"function\", \"function\": {\"name\": \"...\"}}"},
        {with(R"("tools": [)" + tool + R"(], "tool_choice": {"type":"function","function":{"name":"g"}})"), "tool_choice",
         "'tool_choice' names function 'g', which is not in 'tools'"},
        {with(R"("parallel_tool_calls": "yes")"), "parallel_tool_calls",
         "'parallel_tool_calls' must be a boolean (true or false), got a string"},
        {with(R"("stream": 1)"), "stream", "'stream' must be a boolean (true or false), got an integer"},
        {with(R"("stream_options": true)"), "stream_options", "'stream_options' must be an object, got a boolean"},
        {with(R"("stream": true, "stream_options": {"include_usage": "yes"})"), "stream_options.include_usage",
         "'stream_options.include_usage' must be a boolean (true or false), got a string"},
        {with(R"("max_tokens": 0)"), "max_tokens", "'max_tokens' is 0; it must be at least 1"},
        {with(R"("max_tokens": -3)"), "max_tokens", "'max_tokens' is -3; it must be at least 1"},
        {with(R"("max_tokens": 1.5)"), "max_tokens", "'max_tokens' must be an integer, got a number"},
        {with(R"("max_completion_tokens": "10")"), "max_completion_tokens",
         "'max_completion_tokens' must be an integer, got a string"},
        {with(R"("temperature": 3)"), "temperature", "'temperature' is 3.0; it must be between 0 and 2"},
        {with(R"("temperature": -0.5)"), "temperature", "'temperature' is -0.5; it must be between 0 and 2"},
        {with(R"("temperature": "hot")"), "temperature", "'temperature' must be a number, got a string"},
        {with(R"("top_p": 1.5)"), "top_p", "'top_p' is 1.5; it must be between 0 and 1"},
        {with(R"("seed": 1.5)"), "seed", "'seed' must be an integer, got a number"},
        {with(R"("n": 2)"), "n", "'n' is 2; this server generates one choice per request, so 'n' must be 1"},
        {with(R"("stop": 5)"), "stop", "'stop' must be a string or an array of strings, got an integer"},
        {with(R"("stop": "")"), "stop", "'stop' must not be an empty string"},
        {with(R"("stop": ["a","b","c","d","e"])"), "stop", "'stop' has 5 strings; at most 4 are allowed"},
        {with(R"("stop": ["a", 1])"), "stop[1]", "'stop[1]' must be a string, got an integer"},
        {with(R"("stop": ["a", ""])"), "stop[1]", "'stop[1]' must not be an empty string"},
        {with(R"("user": 7)"), "user", "'user' must be a string, got an integer"},
        {with(R"("model": 7)"), "model", "'model' must be a string, got an integer"},
        {with(R"("prompt_cache_key": 7)"), "prompt_cache_key", "'prompt_cache_key' must be a string, got an integer"},
        {with(R"("cache_prompt": "no")"), "cache_prompt", "'cache_prompt' must be a boolean (true or false), got a string"},
        {with(R"("extra_body": [])"), "extra_body", "'extra_body' must be an object, got an array"},
        {with(R"("extra_body": {"cache_prompt": 0})"), "extra_body.cache_prompt",
         "'extra_body.cache_prompt' must be a boolean (true or false), got an integer"},
        {with(R"("chat_template_kwargs": [])"), "chat_template_kwargs", "'chat_template_kwargs' must be an object, got an array"},
        {with(R"("chat_template_kwargs": {"enable_thinking": "no"})"), "chat_template_kwargs.enable_thinking",
         "'chat_template_kwargs.enable_thinking' must be a boolean, got a string"},
    };
    for (const auto & c : cases) {
        const api_error e = bad(c.body);
        EXPECT_EQ(e.status, 400) << c.body;
        EXPECT_EQ(e.type, "invalid_request_error") << c.body;
        EXPECT_EQ(e.param, c.param) << c.body;
        EXPECT_EQ(e.message, c.message) << c.body;
        EXPECT_EQ(e.code, "") << c.body;
    }
}

TEST(ChatRequest, ErrorJsonHasOpenAIShape) {
    const api_error e = bad(with(R"("n": 3)"));
    const auto j = lineage::server::to_json(e);
    EXPECT_EQ(lineage::server::dump(j),
              R"({"error":{"message":"'n' is 3; this server generates one choice per request, so 'n' must be 1",)"
              R"("type":"invalid_request_error","param":"n","code":null}})");
}

TEST(ChatRequest, SamplingFieldsAndLlamaServerExtensionsAreRead) {
    auto r = ok(with(R"("seed":7,"presence_penalty":-1.5,"frequency_penalty":2,"logit_bias":{"15":-100,"3":2.5},)"
                     R"("logprobs":true,"top_logprobs":5,"top_k":4,"min_p":0.25,"repeat_penalty":1.25)"));
    EXPECT_EQ(r.sampling.seed, 7);
    EXPECT_FLOAT_EQ(r.sampling.presence_penalty, -1.5f);
    EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, 2.0f);
    const std::vector<std::pair<int32_t, float>> bias = {{15, -100.0f}, {3, 2.5f}};
    EXPECT_EQ(r.sampling.logit_bias, bias);
    EXPECT_TRUE(r.sampling.logprobs);
    EXPECT_EQ(r.sampling.top_logprobs, 5);
    EXPECT_EQ(r.sampling.top_k, 4);
    EXPECT_FLOAT_EQ(r.sampling.min_p, 0.25f);
    EXPECT_FLOAT_EQ(r.sampling.repeat_penalty, 1.25f);
    auto n = ok(with(R"("n_probs":3)"));
    EXPECT_TRUE(n.sampling.logprobs);
    EXPECT_EQ(n.sampling.top_logprobs, 3);
}

TEST(ChatRequest, ResponseFormatBecomesASchema) {
    EXPECT_EQ(ok(with(R"("response_format":{"type":"text"})")).json_schema, "");
    EXPECT_EQ(ok(with(R"("response_format":{"type":"json_object"})")).json_schema, R"({"type":"object"})");
    EXPECT_EQ(ok(with(R"("response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,)"
                      R"("schema":{"type":"object","properties":{"a":{"type":"integer"}}}}})"))
                  .json_schema,
              R"({"type":"object","properties":{"a":{"type":"integer"}}})");
    EXPECT_EQ(ok(with(R"("grammar":"root ::= \"x\"")")).grammar, "root ::= \"x\"");
}

TEST(ChatRequest, UnhonouredOpenAIFieldsAreRefusedByName) {
    for (const std::string f : {"audio", "prediction", "web_search_options", "functions", "function_call", "verbosity"}) {
        const api_error e = bad(with("\"" + f + "\":{}"));
        EXPECT_EQ(e.param, f);
        EXPECT_EQ(e.status, 400);
    }
    EXPECT_EQ(bad(with(R"("modalities":["text","audio"])")).param, "modalities");
    EXPECT_EQ(bad(with(R"("response_format":{"type":"xml"})")).message,
              "'response_format.type' is 'xml'; expected \"text\", \"json_object\" or \"json_schema\"");
    EXPECT_EQ(bad(with(R"("response_format":{"type":"xml"})")).param, "response_format");
    EXPECT_EQ(bad(with(R"("top_logprobs":2)")).message, "'top_logprobs' requires 'logprobs': true");
    EXPECT_EQ(bad(with(R"("logprobs":true,"top_logprobs":21)")).param, "top_logprobs");
    EXPECT_EQ(bad(with(R"("logit_bias":{"x":1})")).param, "logit_bias");
    EXPECT_EQ(bad(with(R"("logit_bias":{"1":-101})")).param, "logit_bias");
    EXPECT_EQ(bad(with(R"("presence_penalty":3)")).message, "'presence_penalty' is 3.0; it must be between -2.0 and 2.0");
    EXPECT_EQ(bad(with(R"("reasoning_effort":"max")")).param, "reasoning_effort");
    EXPECT_EQ(bad(with(R"("stream_options":{"include_usage":true})")).message,
              "'stream_options' is only allowed with \"stream\": true");
    EXPECT_TRUE(ok(with(R"("stream":true,"stream_options":{"include_usage":true})")).include_usage);
    EXPECT_EQ(bad(with(R"("grammar":"root ::= \"x\"","response_format":{"type":"json_object"})")).param, "grammar");
    // Documented no-ops and vendor extras are accepted.
    ok(with(R"("store":true,"metadata":{"k":"v"},"service_tier":"auto","modalities":["text"],"some_vendor_field":1)"));
}
