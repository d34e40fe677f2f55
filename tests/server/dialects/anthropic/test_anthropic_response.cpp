// Tests of server::anthropic_response: the exact SSE event sequence and non-streaming body of
// the Messages API for text (plain parser), for thinking + text + tool_use (the tiny qwen3
// model's template parser; skipped when the model is absent), stop_reason, usage mapping and
// Anthropic's error shape.
#include "server/dialects/anthropic/anthropic_handler.h"
#include "server/dialects/anthropic/anthropic_response.h"

#include "engine/chat_template.h"
#include "engine/model.h"

#include "done_event.h"
#include "qwen3_template_fixture.h"

#include <gtest/gtest.h>

using namespace lineage;
using namespace lineage::server;
using scheduler::finish_reason;
using scheduler::generation_event;

namespace {

const thinking_signer & signer() {
    static const thinking_signer s("tiny", "");
    return s;
}

generation_event done(finish_reason f, int32_t prompt = 100, int32_t cached = 60, int32_t completion = 5) {
    return test_events::done_event(f, prompt, cached, completion);
}

messages_meta meta(int32_t breakpoint = -1, bool omitted = false, std::vector<std::string> stops = {}) {
    messages_meta m;
    m.id = "msg_test";
    m.model = "claude-x";
    m.prompt_tokens = 100;
    m.breakpoint_tokens = breakpoint;
    m.thinking_omitted = omitted;
    m.stop_sequences = std::move(stops);
    return m;
}

// (event name, data) pairs of an SSE text.
std::vector<std::pair<std::string, json>> events(const std::string & sse) {
    std::vector<std::pair<std::string, json>> out;
    size_t pos = 0;
    while (pos < sse.size()) {
        const size_t end = sse.find("\n\n", pos);
        EXPECT_NE(end, std::string::npos) << "unterminated event";
        if (end == std::string::npos) {
            break;
        }
        const std::string ev = sse.substr(pos, end - pos);
        pos = end + 2;
        const size_t nl = ev.find('\n');
        EXPECT_EQ(ev.rfind("event: ", 0), 0u) << ev;
        EXPECT_EQ(ev.compare(nl + 1, 6, "data: "), 0) << ev;
        const std::string name = ev.substr(7, nl - 7);
        json data = json::parse(ev.substr(nl + 7));
        EXPECT_EQ(data["type"], name) << ev;
        out.emplace_back(name, std::move(data));
    }
    return out;
}

std::vector<std::string> names(const std::vector<std::pair<std::string, json>> & evs) {
    std::vector<std::string> n;
    for (const auto & e : evs) {
        n.push_back(e.first);
    }
    return n;
}

const generation_event tok{};

}  // namespace

TEST(AnthropicResponse, TextStreamExactEvents) {
    messages_writer w(meta(), {}, {}, signer());
    w.add(tok, "Hello");
    w.add(tok, " world");
    std::string sse = w.take_stream();
    sse += w.end_stream(done(finish_reason::stop));
    const auto evs = events(sse);
    EXPECT_EQ(names(evs), (std::vector<std::string>{"message_start", "ping", "content_block_start", "content_block_delta",
                                                    "content_block_stop", "message_delta", "message_stop"}));
    EXPECT_EQ(dump(evs[0].second),
              R"({"type":"message_start","message":{"id":"msg_test","type":"message","role":"assistant",)"
              R"("model":"claude-x","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":100,)"
              R"("cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}})");
    EXPECT_EQ(dump(evs[2].second), R"({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})");
    EXPECT_EQ(dump(evs[3].second),
              R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello world"}})");
    EXPECT_EQ(dump(evs[4].second), R"({"type":"content_block_stop","index":0})");
    EXPECT_EQ(dump(evs[5].second),
              R"({"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},)"
              R"("usage":{"input_tokens":40,"cache_creation_input_tokens":0,"cache_read_input_tokens":60,"output_tokens":5}})");
    EXPECT_EQ(dump(evs[6].second), R"({"type":"message_stop"})");
    EXPECT_EQ(w.finish_reason(done(finish_reason::stop)), "end_turn");
}

TEST(AnthropicResponse, NonStreamingBodyAndStopReasons) {
    messages_writer w(meta(80), {}, {"END"}, signer());
    w.add(tok, "Hi");
    const json b = w.body(done(finish_reason::length));
    EXPECT_EQ(dump(b), R"({"id":"msg_test","type":"message","role":"assistant","model":"claude-x",)"
                       R"("content":[{"type":"text","text":"Hi"}],"stop_reason":"max_tokens","stop_sequence":null,)"
                       R"("usage":{"input_tokens":20,"cache_creation_input_tokens":20,"cache_read_input_tokens":60,)"
                       R"("output_tokens":5}})");

    messages_writer s(meta(-1, false, {"END"}), {}, {"END", "<|im_end|>"}, signer());
    EXPECT_FALSE(s.add(tok, "one two E"));
    EXPECT_TRUE(s.add(tok, "ND three"));
    const json sb = s.body(done(finish_reason::stop));
    EXPECT_EQ(sb["content"][0]["text"], "one two ");
    EXPECT_EQ(sb["stop_reason"], "stop_sequence");
    EXPECT_EQ(sb["stop_sequence"], "END");

    messages_writer t(meta(-1, false, {"END"}), {}, {"END", "<|im_end|>"}, signer());
    EXPECT_TRUE(t.add(tok, "x<|im_end|>"));
    EXPECT_EQ(t.finish_reason(done(finish_reason::stop)), "end_turn") << "a template stop is not the client's";

    messages_writer empty(meta(), {}, {}, signer());
    const std::string sse = empty.end_stream(done(finish_reason::stop, 10, 0, 0));
    EXPECT_EQ(names(events(sse)), (std::vector<std::string>{"message_start", "ping", "message_delta", "message_stop"}));
    EXPECT_EQ(empty.body(done(finish_reason::stop))["content"], json::array());
}

TEST(AnthropicResponse, UsageMappingAddsUpToThePrompt) {
    scheduler::request_stats s;
    s.prompt_tokens = 1000;
    s.cached_tokens = 600;
    s.completion_tokens = 7;
    EXPECT_EQ(dump(anthropic_usage_json(s, 0, 900, true)),
              R"({"input_tokens":100,"cache_creation_input_tokens":300,"cache_read_input_tokens":600,"output_tokens":7})");
    EXPECT_EQ(dump(anthropic_usage_json(s, 0, 500, true)),
              R"({"input_tokens":400,"cache_creation_input_tokens":0,"cache_read_input_tokens":600,"output_tokens":7})")
        << "breakpoint inside the restored part: nothing created";
    EXPECT_EQ(dump(anthropic_usage_json(s, 0, 900, false)),
              R"({"input_tokens":400,"cache_creation_input_tokens":0,"cache_read_input_tokens":600,"output_tokens":7})");
    EXPECT_EQ(dump(anthropic_usage_json(scheduler::request_stats{}, 42, -1, true)),
              R"({"input_tokens":42,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0})");
}

TEST(AnthropicResponse, ErrorsInAnthropicShape) {
    api_error e = invalid_request("'max_tokens' is required", "max_tokens");
    EXPECT_EQ(dump(anthropic_error_json(e)),
              R"({"type":"error","error":{"type":"invalid_request_error","message":"'max_tokens' is required"}})");
    for (const auto & [status, type] : std::vector<std::pair<int, std::string>>{
             {401, "authentication_error"}, {404, "not_found_error"}, {413, "request_too_large"},
             {429, "rate_limit_error"}, {503, "overloaded_error"}, {500, "api_error"}}) {
        e.status = status;
        EXPECT_EQ(anthropic_error_type(e), type) << status;
    }
    messages_writer w(meta(), {}, {}, signer());
    EXPECT_EQ(messages_dialect.errors, error_shape::anthropic);
    EXPECT_EQ(error_json(messages_dialect.errors, server_error("boom")), anthropic_error_json(server_error("boom")));
    EXPECT_EQ(w.stream_error(server_error("boom")),
              "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"boom\"}}\n\n");
}

namespace {

class AnthropicTemplateTest : public Qwen3TemplateTest {
protected:
    // The parser of a request with one tool, thinking on.
    static engine::chat_parse_params parser() {
        engine::chat_render_inputs in;
        engine::chat_message u;
        u.role = "user";
        u.content = "Weather in Paris?";
        in.messages.push_back(u);
        in.tools.push_back({"get_weather", "Get the weather", R"({"type":"object","properties":{"city":{"type":"string"}}})"});
        in.kwargs = {{"enable_thinking", "true"}};
        return tmpl_->render(in).value().parser;
    }
};

// The tiny models carry the Qwen3.5 template: the generation prompt opens the <think> block and
// tool calls are XML.
const char * generated = "It is Paris.\n</think>\n\nLet me check.\n<tool_call>\n<function=get_weather>\n"
                         "<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>";

}  // namespace

TEST_F(AnthropicTemplateTest, ThinkingTextToolUseStreamedBlockByBlock) {
    messages_writer w(meta(), parser(), {}, signer());
    std::string sse;
    // Piece by piece, as tokens arrive: the block sequence must not depend on the split.
    const std::string text = generated;
    for (size_t i = 0; i < text.size(); i += 3) {
        w.add(tok, text.substr(i, 3));
        sse += w.take_stream();
    }
    sse += w.end_stream(done(finish_reason::stop));
    const auto evs = events(sse);
    std::vector<std::string> shape;  // block starts, delta types and stops, in order
    std::string thinking, text_out, json_in, signature;
    for (const auto & [name, d] : evs) {
        if (name == "content_block_start") {
            shape.push_back("start:" + d["content_block"]["type"].get<std::string>() + "@" + d["index"].dump());
        } else if (name == "content_block_delta") {
            const std::string t = d["delta"]["type"];
            if (shape.back() != t) {
                shape.push_back(t);
            }
            if (t == "thinking_delta") thinking += d["delta"]["thinking"].get<std::string>();
            if (t == "text_delta") text_out += d["delta"]["text"].get<std::string>();
            if (t == "input_json_delta") json_in += d["delta"]["partial_json"].get<std::string>();
            if (t == "signature_delta") signature = d["delta"]["signature"];
        } else if (name != "ping") {
            shape.push_back(name == "content_block_stop" ? "stop@" + d["index"].dump() : name);
        }
    }
    EXPECT_EQ(shape, (std::vector<std::string>{"message_start", "start:thinking@0", "thinking_delta", "signature_delta",
                                               "stop@0", "start:text@1", "text_delta", "stop@1", "start:tool_use@2",
                                               "input_json_delta", "stop@2", "message_delta", "message_stop"}));
    EXPECT_EQ(thinking.rfind("It is Paris.", 0), 0u) << thinking;
    EXPECT_EQ(signer().open(signature).value_or("<bad>"), thinking) << "the signature carries the streamed thinking";
    EXPECT_EQ(text_out.rfind("Let me check.", 0), 0u) << text_out;
    EXPECT_EQ(json::parse(json_in), json::parse(R"({"city":"Paris"})"));
    EXPECT_EQ(evs[evs.size() - 2].second["delta"]["stop_reason"], "tool_use");

    // The same text, not streamed.
    messages_writer b(meta(), parser(), {}, signer());
    b.add(tok, generated);
    const json body = b.body(done(finish_reason::stop));
    ASSERT_EQ(body["content"].size(), 3u);
    EXPECT_EQ(body["content"][0]["type"], "thinking");
    EXPECT_EQ(body["content"][0]["thinking"], thinking);
    EXPECT_EQ(body["content"][0]["signature"], signature);
    EXPECT_EQ(body["content"][1]["type"], "text");
    EXPECT_EQ(body["content"][1]["text"], text_out);
    EXPECT_EQ(body["content"][2]["type"], "tool_use");
    EXPECT_EQ(body["content"][2]["name"], "get_weather");
    EXPECT_EQ(body["content"][2]["input"], json::parse(R"({"city":"Paris"})"));
    EXPECT_EQ(body["stop_reason"], "tool_use");
}

TEST_F(AnthropicTemplateTest, OmittedThinkingCarriesTheTextInTheSignatureOnly) {
    messages_writer w(meta(-1, /*omitted=*/true), parser(), {}, signer());
    w.add(tok, generated);
    std::string sse = w.take_stream() + w.end_stream(done(finish_reason::stop));
    for (const auto & [name, d] : events(sse)) {
        if (name == "content_block_delta") {
            EXPECT_NE(d["delta"]["type"], "thinking_delta") << "display omitted streams no thinking text";
            if (d["delta"]["type"] == "signature_delta") {
                EXPECT_EQ(signer().open(d["delta"]["signature"].get<std::string>()).value_or("").rfind("It is Paris.", 0), 0u);
            }
        }
    }
    messages_writer b(meta(-1, true), parser(), {}, signer());
    b.add(tok, generated);
    const json body = b.body(done(finish_reason::stop));
    EXPECT_EQ(body["content"][0]["thinking"], "");
    EXPECT_EQ(signer().open(body["content"][0]["signature"].get<std::string>()).value_or("").rfind("It is Paris.", 0), 0u);
}
