// Tests of the one generation handler (server/run/generation.h) through the HTTP seam, without a
// socket: a real scheduler on the tiny qwen3 model, each dialect's descriptor from the endpoint
// table, and the handlers' own request and response (server/http/http_message.h). What they pin:
// a body is answered in its dialect's shape, an error before submission in its dialect's error
// shape, a stream is driven through `next` to its terminator, and the second identical request is
// a cache hit (the positive case: with the cache off its cached_tokens would be 0).
#include "config_args.h"
#include "qwen3_template_fixture.h"
#include "engine/chat_template.h"
#include "engine/device.h"
#include "engine/model.h"
#include "scheduler/scheduler.h"
#include "server/config.h"
#include "server/dialects/anthropic/anthropic_handler.h"
#include "server/dialects/chat/chat_handler.h"
#include "server/dialects/completions/completions_handler.h"
#include "server/dialects/responses/responses_handler.h"
#include "server/http/endpoints.h"
#include "server/http/errors.h"
#include "server/app/routes.h"
#include "server/prepare/lora_registry.h"
#include "server/run/generation.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

namespace lineage::server {
namespace {

// One server without a socket: the model and template of the shared fixture (loaded once per
// suite), the scheduler and the context per test (each test starts from an empty cache).
class GenerationHandler : public Qwen3TemplateTest {
protected:
    void SetUp() override {
        Qwen3TemplateTest::SetUp();
        if (IsSkipped()) {
            return;
        }
        config_test::env_vars no_env;
        auto parsed = config_test::parse({"-m", model_file, "--ctx-size", "2048", "--parallel", "1", "--threads", "1",
                                          "--cache-disk=false", "--cache-warmup=false", "--responses-store", "memory",
                                          "--memory-trim-interval", "0"},
                                         no_env);
        ASSERT_TRUE(parsed.config) << parsed.output;
        cfg_ = std::make_unique<server_config>(*parsed.config);
        loras_ = std::make_unique<lora_registry>(cfg_->loras, cfg_->sched.cache.key_hash);
        scheduler::params p = cfg_->sched;
        p.device = engine::read_device_memory(/*gpu=*/false);  // as main.cpp: the memory plan's device
        sched_ = std::make_unique<scheduler::scheduler>(*model_, p);
        ctx_ = std::make_unique<server_context>(*cfg_, *model_, *tmpl_, *sched_, *loras_);
    }

    void TearDown() override {
        ctx_.reset();
        sched_.reset();
        loras_.reset();
        cfg_.reset();
    }

    // The dialect the endpoint table runs `method path` with; nullptr when none.
    static const dialect * dialect_of(std::string_view method, std::string_view path) {
        const endpoint * e = find_endpoint(method, path);
        return e ? e->generates : nullptr;
    }

    http_response post(std::string_view path, std::string body) {
        const dialect * d = dialect_of("POST", path);
        EXPECT_NE(d, nullptr) << "POST " << path << " generates nothing";
        http_response res;
        if (d == nullptr) {
            res.status = 0;
            return res;
        }
        http_request req;
        req.method = "POST";
        req.path = std::string(path);
        req.body = std::move(body);
        req.headers = {{"Content-Type", "application/json"}};
        handle_generation(*d, req, res, *ctx_);
        return res;
    }

    std::unique_ptr<server_config> cfg_;
    std::unique_ptr<lora_registry> loras_;
    std::unique_ptr<scheduler::scheduler> sched_;
    std::unique_ptr<server_context> ctx_;
};

// A stream's bytes, kept in a string.
class string_sink final : public stream_sink {
public:
    bool write(std::string_view bytes) override {
        out.append(bytes);
        return true;
    }
    bool writable() const override { return true; }
    void done() override { ended = true; }

    std::string out;
    bool ended = false;
};

constexpr const char * chat_body =
    R"({"model":"m","messages":[{"role":"system","content":"You answer briefly. You are a careful assistant who )"
    R"(checks each answer twice, names its sources, and says so when it does not know."},)"
    R"({"role":"user","content":"Name three colours of the rainbow."}],"max_tokens":4,"temperature":0})";

TEST_F(GenerationHandler, AChatCompletionIsAnsweredWithoutASocket) {
    const http_response res = post("/v1/chat/completions", chat_body);
    ASSERT_EQ(res.status, 200) << res.body;
    EXPECT_EQ(res.content_type, "application/json");
    EXPECT_FALSE(res.next);
    const json j = json::parse(res.body);
    EXPECT_EQ(j["object"], "chat.completion");
    EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
    // Over --prompt-cache-min-prefix (32), so that the next test's resend can hit.
    EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 32);
    EXPECT_GE(j["usage"]["completion_tokens"].get<int>(), 1);
    EXPECT_LE(j["usage"]["completion_tokens"].get<int>(), 4);
    EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);  // the first request: a miss
}

TEST_F(GenerationHandler, TheSameRequestAgainIsACacheHit) {
    const http_response first = post("/v1/chat/completions", chat_body);
    ASSERT_EQ(first.status, 200) << first.body;
    const http_response second = post("/v1/chat/completions", chat_body);
    ASSERT_EQ(second.status, 200) << second.body;
    const json a = json::parse(first.body);
    const json b = json::parse(second.body);
    const int prompt = b["usage"]["prompt_tokens"].get<int>();
    EXPECT_EQ(a["usage"]["prompt_tokens"].get<int>(), prompt);
    EXPECT_EQ(a["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    // A verbatim resend restores all but its last prompt token (the resend guard,
    // docs/prompt-cache.md): the logits of the first reply token are computed again.
    EXPECT_EQ(b["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), prompt - 1);
    EXPECT_EQ(a["choices"][0]["message"]["content"], b["choices"][0]["message"]["content"]);
}

TEST_F(GenerationHandler, AStreamIsDrivenThroughNextToItsTerminator) {
    std::string body = chat_body;
    body.insert(body.size() - 1, R"(,"stream":true,"stream_options":{"include_usage":true})");
    http_response res = post("/v1/chat/completions", body);
    ASSERT_EQ(res.status, 200) << res.body;
    EXPECT_EQ(res.content_type, "text/event-stream");
    EXPECT_EQ(res.header("Cache-Control"), "no-cache");
    ASSERT_TRUE(res.next);
    string_sink sink;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!sink.ended && std::chrono::steady_clock::now() < deadline) {
        ASSERT_TRUE(res.next(sink));
    }
    ASSERT_TRUE(sink.ended) << sink.out;
    ASSERT_TRUE(res.on_close);
    res.on_close(true);  // a finished stream: nothing to cancel
    EXPECT_NE(sink.out.find(R"("object":"chat.completion.chunk")"), std::string::npos) << sink.out;
    EXPECT_NE(sink.out.find(R"("usage":{"prompt_tokens":)"), std::string::npos) << sink.out;
    const std::string_view done = "data: [DONE]\n\n";
    ASSERT_GE(sink.out.size(), done.size());
    EXPECT_EQ(sink.out.substr(sink.out.size() - done.size()), done);
}

TEST_F(GenerationHandler, EachDialectAnswersItsOwnBodyShape) {
    const http_response msg = post("/v1/messages", R"({"model":"m","max_tokens":3,"temperature":0,)"
                                                   R"("messages":[{"role":"user","content":"Hello there."}]})");
    ASSERT_EQ(msg.status, 200) << msg.body;
    const json m = json::parse(msg.body);
    EXPECT_EQ(m["type"], "message");
    EXPECT_EQ(m["role"], "assistant");
    EXPECT_GT(m["usage"]["input_tokens"].get<int>(), 0);

    const http_response resp = post("/v1/responses", R"({"model":"m","input":"Hello there.","max_output_tokens":3,)"
                                                     R"("temperature":0})");
    ASSERT_EQ(resp.status, 200) << resp.body;
    const json r = json::parse(resp.body);
    EXPECT_EQ(r["object"], "response");
    EXPECT_EQ(r["status"] == "completed" || r["status"] == "incomplete", true) << r["status"];

    const http_response cmpl = post("/v1/completions", R"({"model":"m","prompt":"Once upon a time","max_tokens":3,)"
                                                       R"("temperature":0})");
    ASSERT_EQ(cmpl.status, 200) << cmpl.body;
    const json c = json::parse(cmpl.body);
    EXPECT_EQ(c["object"], "text_completion");
    EXPECT_EQ(c["usage"]["prompt_tokens"].get<int>() > 0, true);
}

TEST_F(GenerationHandler, AnErrorBeforeSubmissionTakesTheDialectsErrorShape) {
    const http_response chat = post("/v1/chat/completions", R"({"model":"m","messages":"not a list"})");
    EXPECT_EQ(chat.status, 400);
    const json c = json::parse(chat.body);
    ASSERT_TRUE(c.contains("error")) << chat.body;
    EXPECT_EQ(c["error"]["type"], "invalid_request_error");
    EXPECT_EQ(c["error"]["param"], "messages");

    const http_response msg = post("/v1/messages", R"({"model":"m","messages":[]})");
    EXPECT_EQ(msg.status, 400);
    const json m = json::parse(msg.body);
    EXPECT_EQ(m["type"], "error") << msg.body;
    EXPECT_EQ(m["error"]["type"], "invalid_request_error");
    EXPECT_FALSE(m["error"].contains("param"));  // Anthropic's shape has none

    const http_response bad_json = post("/v1/completions", "{");
    EXPECT_EQ(bad_json.status, 400);
    EXPECT_TRUE(json::parse(bad_json.body).contains("error")) << bad_json.body;

    // Nothing reached the scheduler.
    uint64_t ended = 0;
    for (const auto & [reason, n] : sched_->snapshot_metrics().requests) {
        ended += n;
    }
    EXPECT_EQ(ended, 0U);
}

TEST_F(GenerationHandler, AClientThatIsGoneCancelsItsRequest) {
    // 1,500 tokens that cannot end early (every end-of-generation token biased away): far longer
    // than the 100 ms after which the handler first looks at the connection.
    std::string bias;
    for (int32_t t = 0; t < model_->n_vocab(); ++t) {
        if (model_->is_eog(t)) {
            bias += (bias.empty() ? "\"" : ",\"") + std::to_string(t) + "\":-100";
        }
    }
    ASSERT_FALSE(bias.empty());
    http_request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.body = R"({"model":"m","messages":[{"role":"user","content":"Count to a thousand."}],"max_tokens":1500,)"
               R"("temperature":0,"logit_bias":{)" +
               bias + "}}";
    req.connection_closed = [] { return true; };
    http_response res;
    handle_generation(chat_dialect, req, res, *ctx_);
    EXPECT_EQ(res.body, "");  // nobody to answer
    EXPECT_EQ(res.content_type, "");
    // The scheduler ends the request as cancelled, not after its 1,500 tokens.
    uint64_t cancelled = 0;
    uint64_t ended = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (ended == 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        const auto m = sched_->snapshot_metrics();
        cancelled = m.requests.count("cancelled") ? m.requests.at("cancelled") : 0;
        ended = 0;
        for (const auto & [reason, n] : m.requests) {
            ended += n;
        }
    }
    EXPECT_EQ(ended, 1U);
    EXPECT_EQ(cancelled, 1U);
}

// The runtime bound on a sampling step (sampling_params::max_step_s, from --max-grammar-ms): a
// grammar whose step takes longer than the bound ends its request with grammar_too_costly, which
// the routes answer as a 400 of that code; the same request with no bound generates.
TEST_F(GenerationHandler, AGrammarStepOverItsBoundEndsTheRequest) {
    const auto run = [&](double max_step_s) {
        auto gr = std::make_shared<scheduler::generation_request>();
        gr->id = 1000 + static_cast<uint64_t>(max_step_s > 0);
        gr->prompt = model_->tokenize("Name a colour of the rainbow:", /*parse_special=*/false).value();
        gr->sampling.temperature = 0;
        gr->sampling.max_tokens = 4;
        gr->sampling.grammar.type = engine::grammar_spec::kind::user;
        gr->sampling.grammar.gbnf = "root ::= [a-z]+";
        gr->sampling.max_step_s = max_step_s;
        gr->cache.cache_prompt = false;
        sched_->submit(gr);
        std::vector<scheduler::generation_event> events;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (std::chrono::steady_clock::now() < deadline) {
            auto e = gr->events->pop(std::chrono::milliseconds(100));
            if (!e) {
                continue;
            }
            events.push_back(std::move(*e));
            if (events.back().type != scheduler::generation_event::kind::token) {
                break;
            }
        }
        return events;
    };
    const auto bounded = run(1e-9);  // any step takes longer
    ASSERT_FALSE(bounded.empty());
    EXPECT_EQ(bounded.size(), 1U) << "no token is emitted from the step over the bound";
    ASSERT_EQ(bounded.back().type, scheduler::generation_event::kind::error);
    EXPECT_EQ(bounded.back().failure.kind, scheduler::failure_kind::grammar_too_costly);
    EXPECT_NE(bounded.back().failure.message.find("(--max-grammar-ms)"), std::string::npos) << bounded.back().failure.message;
    const api_error e = to_api_error(bounded.back().failure);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.code, "grammar_too_costly");

    const auto free_run = run(0);  // the positive case: the same request generates
    ASSERT_FALSE(free_run.empty());
    EXPECT_EQ(free_run.back().type, scheduler::generation_event::kind::done);
    EXPECT_GE(free_run.size(), 2U);
}

// Every generating row's error shape is its dialect's (routes before any handler answer in the
// row's shape, the handler in the dialect's), and every dialect is served by a row.
TEST(EndpointTableDialects, ARowsErrorShapeIsItsDialects) {
    int generating = 0;
    for (const endpoint & e : endpoint_table()) {
        if (e.generates == nullptr) {
            EXPECT_NE(e.handler, nullptr) << e.method << " " << e.path;
            continue;
        }
        ++generating;
        EXPECT_EQ(e.handler, nullptr) << e.method << " " << e.path;
        EXPECT_EQ(e.errors, e.generates->errors) << e.method << " " << e.path;
        EXPECT_NE(e.generates->prepare, nullptr) << e.method << " " << e.path;
    }
    EXPECT_EQ(generating, 4);
    EXPECT_EQ(find_endpoint("POST", "/v1/messages")->generates, &messages_dialect);
    EXPECT_EQ(find_endpoint("POST", "/chat/completions")->generates, &chat_dialect);
    EXPECT_EQ(find_endpoint("POST", "/responses")->generates, &responses_dialect);
    EXPECT_EQ(find_endpoint("POST", "/v1/completions")->generates, &completions_dialect);
}

}  // namespace
}  // namespace lineage::server
