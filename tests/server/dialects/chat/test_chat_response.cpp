// Tests of server::chat_response and server::sse: response shapes, streamed deltas (UTF-8 safe,
// stop strings never shown), usage and timings. Uses the plain-content parser (no model).
#include "server/dialects/chat/chat_response.h"
#include "server/http/sse.h"

#include "done_event.h"

#include <gtest/gtest.h>

using namespace lineage::server;
using lineage::scheduler::finish_reason;
using lineage::scheduler::generation_event;

namespace {

completion_meta meta() {
    return {"chatcmpl-test", "tiny", 1700000000};
}

generation_event done(finish_reason f, int32_t prompt = 10, int32_t cached = 6, int32_t completion = 5) {
    generation_event e = test_events::done_event(f, prompt, cached, completion);
    e.stats.prefill_s = 0.004;
    e.stats.ttft_s = 0.010;
    e.stats.decode_s = 0.5;
    e.stats.prefill_passes = 3;
    e.stats.prefill_splits = 2;
    e.stats.hit_kind = "turn";
    e.stats.restored_from = "ram";
    return e;
}

// Concatenated "content" of every chunk's delta.
std::string streamed_content(const std::vector<json> & chunks) {
    std::string s;
    for (const auto & c : chunks) {
        if (c.contains("choices") && !c["choices"].empty()) {
            const auto & d = c["choices"][0]["delta"];
            if (d.contains("content") && d["content"].is_string()) {
                s += d["content"].get<std::string>();
            }
        }
    }
    return s;
}

}  // namespace

TEST(ChatResponse, NonStreamingCompletionShape) {
    chat_output out(meta(), {}, {}, false, 10);
    out.add("Hello");
    out.add(" world");
    const json r = out.final_response(done(finish_reason::stop));
    EXPECT_EQ(dump(r),
              R"({"id":"chatcmpl-test","object":"chat.completion","created":1700000000,"model":"tiny",)"
              R"("choices":[{"index":0,"message":{"role":"assistant","content":"Hello world"},"logprobs":null,)"
              R"("finish_reason":"stop"}],)"
              R"("usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,)"
              R"("prompt_tokens_details":{"cached_tokens":6}},)"
              R"("timings":{"prompt_n":4,"cached_n":6,"prompt_ms":4.0,"ttft_ms":10.0,"predicted_n":5,)"
              R"("predicted_ms":500.0,"predicted_per_second":8.0,"prefill_passes":3,"prefill_splits":2,"cache_hit":"turn",)"
              R"("cache_tier":"ram","cache_miss_reason":null}})");
}

TEST(ChatResponse, LengthFinish) {
    chat_output out(meta(), {}, {}, false, 10);
    out.add("abc");
    EXPECT_EQ(out.final_response(done(finish_reason::length))["choices"][0]["finish_reason"], "length");
}

TEST(ChatResponse, StopStringGivesStopEvenIfTheSchedulerSaysLength) {
    chat_output out(meta(), {}, {"###"}, false, 10);
    EXPECT_FALSE(out.add("abc#"));
    EXPECT_TRUE(out.add("##def"));
    const json r = out.final_response(done(finish_reason::length));
    EXPECT_EQ(r["choices"][0]["message"]["content"], "abc");
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
}

TEST(ChatResponse, UsageFallsBackToThePromptLengthWhenStatsAreEmpty) {
    lineage::scheduler::request_stats s;
    const json u = usage_json(s, 33);
    EXPECT_EQ(dump(u), R"({"prompt_tokens":33,"completion_tokens":0,"total_tokens":33,"prompt_tokens_details":{"cached_tokens":0}})");
    EXPECT_EQ(timings_json(s, 33)["cache_hit"], "miss");
    EXPECT_TRUE(timings_json(s, 33)["cache_tier"].is_null());
    EXPECT_TRUE(timings_json(s, 33)["cache_miss_reason"].is_null());
}

// A miss or a short hit says why in the response, the key dimension included.
TEST(ChatResponse, TimingsCarryTheTierAndTheMissReason) {
    lineage::scheduler::request_stats s;
    s.prompt_tokens = 40;
    s.hit_kind = "miss";
    s.miss_cause = "key_differs:tenant";
    json t = timings_json(s, 40);
    EXPECT_EQ(t["cache_miss_reason"], "key_differs:tenant");
    EXPECT_TRUE(t["cache_tier"].is_null());
    s.cached_tokens = 16;
    s.hit_kind = "anchor";
    s.restored_from = "disk";
    s.miss_cause = "evicted";  // a short hit: an evicted entry shared more
    t = timings_json(s, 40);
    EXPECT_EQ(t["cache_tier"], "disk");
    EXPECT_EQ(t["cache_miss_reason"], "evicted");
    EXPECT_EQ(t["cached_n"], 16);
    EXPECT_EQ(t["prompt_n"], 24);
}

TEST(ChatResponse, StreamStartsWithRoleThenContentThenFinishThenUsage) {
    chat_output out(meta(), {}, {}, /*include_usage=*/true, 10);
    std::vector<json> all;
    out.add("Hi");
    for (auto & c : out.take_chunks()) {
        all.push_back(c);
    }
    out.add(" there");
    for (auto & c : out.take_chunks()) {
        all.push_back(c);
    }
    for (auto & c : out.final_chunks(done(finish_reason::stop))) {
        all.push_back(c);
    }
    ASSERT_EQ(all.size(), 5u);
    EXPECT_EQ(dump(all[0]),
              R"({"id":"chatcmpl-test","object":"chat.completion.chunk","created":1700000000,"model":"tiny",)"
              R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],)"
              R"("usage":null})");
    EXPECT_EQ(all[1]["choices"][0]["delta"]["content"], "Hi");
    EXPECT_EQ(all[2]["choices"][0]["delta"]["content"], " there");
    EXPECT_EQ(all[3]["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(all[3]["choices"][0]["delta"], json::object());
    EXPECT_TRUE(all[3]["usage"].is_null());  // usage comes in its own chunk
    EXPECT_EQ(all[3]["timings"]["cached_n"], 6);
    EXPECT_EQ(all[4]["choices"], json::array());
    EXPECT_EQ(all[4]["usage"]["prompt_tokens_details"]["cached_tokens"], 6);
    EXPECT_EQ(all[4]["usage"]["total_tokens"], 15);
}

TEST(ChatResponse, StreamWithoutIncludeUsageCarriesNoUsage) {
    // Usage on the finish chunk without stream_options.include_usage was a bug (the API sends
    // usage only when asked, in its own last chunk).
    chat_output out(meta(), {}, {}, false, 10);
    out.add("x");
    std::vector<json> all = out.take_chunks();
    for (auto & c : out.final_chunks(done(finish_reason::stop))) {
        all.push_back(c);
    }
    ASSERT_FALSE(all.empty());
    EXPECT_EQ(all.back()["choices"][0]["finish_reason"], "stop");
    for (const auto & c : all) {
        EXPECT_FALSE(c.contains("usage")) << dump(c);
    }
}

TEST(ChatResponse, StreamWithIncludeUsageHasUsageNullOnEveryOtherChunk) {
    chat_output out(meta(), {}, {}, true, 10);
    out.add("x");
    std::vector<json> all = out.take_chunks();
    for (auto & c : out.final_chunks(done(finish_reason::stop))) {
        all.push_back(c);
    }
    ASSERT_GE(all.size(), 3u);
    for (size_t i = 0; i + 1 < all.size(); ++i) {
        ASSERT_TRUE(all[i].contains("usage")) << dump(all[i]);
        EXPECT_TRUE(all[i]["usage"].is_null()) << dump(all[i]);
    }
    EXPECT_EQ(all.back()["choices"], json::array());
    EXPECT_EQ(all.back()["usage"]["completion_tokens"], 5);
}

TEST(ChatResponse, LogprobsFollowTheTokensKeptInTheReply) {
    const auto text_of = [](int32_t tok) { return "<" + std::to_string(tok) + ">"; };
    chat_output out(meta(), {}, {"STOP"}, false, 10, text_of);
    auto ev = [](int32_t tok, float lp) {
        generation_event e;
        e.tok = tok;
        e.logprob = lp;
        e.top_logprobs = {{tok, lp}, {99, -3.5f}};
        return e;
    };
    const auto e1 = ev(1, -0.25f), e2 = ev(2, -0.5f), e3 = ev(3, -1.0f);
    EXPECT_FALSE(out.add("Hi", &e1));
    EXPECT_FALSE(out.add(" \xC3", &e2));  // half a character: token text sanitized, bytes raw
    EXPECT_TRUE(out.add(" STOP", &e3));   // cut away with its leading space: no entry
    const json r = out.final_response(done(finish_reason::stop));
    const json & lp = r["choices"][0]["logprobs"];
    ASSERT_EQ(lp["content"].size(), 2u) << dump(lp);
    EXPECT_EQ(lp["content"][0]["token"], "Hi");
    EXPECT_EQ(lp["content"][0]["logprob"], -0.25);
    EXPECT_EQ(lp["content"][0]["bytes"], json::array({72, 105}));
    EXPECT_EQ(lp["content"][0]["top_logprobs"][0]["token"], "Hi");
    EXPECT_EQ(lp["content"][0]["top_logprobs"][1]["token"], "<99>");
    EXPECT_EQ(lp["content"][0]["top_logprobs"][1]["logprob"], -3.5);
    EXPECT_EQ(lp["content"][1]["token"], " \xEF\xBF\xBD");
    EXPECT_EQ(lp["content"][1]["bytes"], json::array({32, 0xC3}));
    EXPECT_TRUE(lp["refusal"].is_null());
}

TEST(ChatResponse, StreamNeverSplitsACharacterNorShowsAStopString) {
    chat_output out(meta(), {}, {"<|end|>"}, false, 10);
    std::vector<json> all;
    const std::vector<std::string> pieces = {"caf", "\xC3", "\xA9 ", "\xF0\x9F", "\x98\x80", " <|", "end", "|> junk"};
    for (const auto & p : pieces) {
        out.add(p);
        for (auto & c : out.take_chunks()) {
            const std::string s = streamed_content({c});
            // Each delta is valid UTF-8 on its own: dumping without replacement must not throw.
            EXPECT_NO_THROW((void) c.dump()) << s;
            all.push_back(c);
        }
    }
    for (auto & c : out.final_chunks(done(finish_reason::stop))) {
        all.push_back(c);
    }
    // The stop string starts in the piece " <|": its leading space goes with it.
    EXPECT_EQ(streamed_content(all), "caf\xC3\xA9 \xF0\x9F\x98\x80");
    EXPECT_EQ(all.back()["choices"][0]["finish_reason"], "stop");
}

TEST(ChatResponse, FinalChunksAloneStillStartWithTheRole) {
    chat_output out(meta(), {}, {}, false, 10);
    auto fin = out.final_chunks(done(finish_reason::stop, 10, 0, 0));
    ASSERT_EQ(fin.size(), 2u);
    EXPECT_EQ(fin[0]["choices"][0]["delta"]["role"], "assistant");
    EXPECT_EQ(fin[1]["choices"][0]["finish_reason"], "stop");
}

TEST(ChatResponse, DeltaJsonForToolCalls) {
    lineage::engine::chat_delta d;
    d.tool_call_index = 0;
    d.tool_call_id = "call_1";
    d.tool_call_name = "get";
    d.tool_call_arguments = "{\"a\"";
    EXPECT_EQ(dump(delta_json(d)),
              R"({"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get","arguments":"{\"a\""}}]})");
    lineage::engine::chat_delta more;
    more.tool_call_index = 0;
    more.tool_call_arguments = ":1}";
    EXPECT_EQ(dump(delta_json(more)), R"({"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]})");
    lineage::engine::chat_delta r;
    r.reasoning_content = "hmm";
    EXPECT_EQ(dump(delta_json(r)), R"({"reasoning_content":"hmm"})");
}

TEST(ChatResponse, MessageJsonWithToolCallsHasNullContent) {
    lineage::engine::chat_parsed m;
    m.tool_calls.push_back({"call_9", "f", "{}"});
    EXPECT_EQ(dump(message_json(m)),
              R"({"role":"assistant","content":null,"tool_calls":[{"id":"call_9","type":"function","function":{"name":"f","arguments":"{}"}}]})");
}

TEST(Sse, Framing) {
    json j = json::object();
    j["a"] = 1;
    EXPECT_EQ(sse_event(j), "data: {\"a\":1}\n\n");
    EXPECT_EQ(sse_events({j, j}), "data: {\"a\":1}\n\ndata: {\"a\":1}\n\n");
    EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
    EXPECT_EQ(sse_error(server_error("boom")),
              "data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n");
}

TEST(Sse, InvalidUtf8IsReplacedNotThrown) {
    json j = json::object();
    j["s"] = std::string("a\xFF");
    EXPECT_EQ(sse_event(j), "data: {\"s\":\"a\xEF\xBF\xBD\"}\n\n");
}

TEST(ChatResponse, InvalidBytesInTheMiddleAreReplacedInStreamAndFinalAlike) {
    const std::vector<std::string> pieces = {"ab", "\xE2", "cd", "\xF0\x9F", "\x98\x80", "!"};
    chat_output streamed(meta(), {}, {}, false, 10);
    std::vector<json> all;
    for (const auto & p : pieces) {
        streamed.add(p);
        for (auto & c : streamed.take_chunks()) {
            EXPECT_NO_THROW((void) c.dump());
            all.push_back(c);
        }
    }
    for (auto & c : streamed.final_chunks(done(finish_reason::stop))) {
        all.push_back(c);
    }
    chat_output plain(meta(), {}, {}, false, 10);
    for (const auto & p : pieces) {
        plain.add(p);
    }
    const json r = plain.final_response(done(finish_reason::stop));
    EXPECT_EQ(r["choices"][0]["message"]["content"], "ab\xEF\xBF\xBD" "cd\xF0\x9F\x98\x80!");
    EXPECT_EQ(streamed_content(all), r["choices"][0]["message"]["content"].get<std::string>());
}
