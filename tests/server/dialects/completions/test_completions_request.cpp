// Tests of server::completions_request: string and token prompts, defaults, and the exact 400s
// of what /v1/completions refuses.
#include "server/dialects/completions/completions_request.h"

#include <gtest/gtest.h>

using namespace lineage::server;

namespace {

completions_request ok(const std::string & body) {
    completions_request r;
    auto err = parse_completions_request(body, r);
    EXPECT_FALSE(err) << (err ? err->message : "");
    return r;
}

api_error bad(const std::string & body) {
    completions_request r;
    auto err = parse_completions_request(body, r);
    EXPECT_TRUE(err) << body;
    return err ? *err : api_error{};
}

}  // namespace

TEST(CompletionsRequest, StringPromptAndDefaults) {
    auto r = ok(R"({"model":"m","prompt":"Once"})");
    EXPECT_FALSE(r.prompt_is_tokens);
    EXPECT_EQ(r.prompt, "Once");
    EXPECT_EQ(r.sampling.max_tokens, 16);
    EXPECT_FALSE(r.stream);
    EXPECT_TRUE(r.cache_prompt);
}

TEST(CompletionsRequest, TokenPromptsAndOptions) {
    auto r = ok(R"({"prompt":[1,2,3],"max_tokens":5,"temperature":0,"top_p":0.5,"seed":7,"stop":["\n"],
        "stream":true,"stream_options":{"include_usage":true},"user":"u","prompt_cache_key":"k","echo":false,"n":1})");
    EXPECT_TRUE(r.prompt_is_tokens);
    EXPECT_EQ(r.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
    EXPECT_EQ(r.sampling.max_tokens, 5);
    EXPECT_FLOAT_EQ(r.sampling.temperature, 0.0f);
    EXPECT_EQ(r.sampling.seed, 7);
    EXPECT_EQ(r.stop, std::vector<std::string>{"\n"});
    EXPECT_TRUE(r.include_usage);
    EXPECT_EQ(r.prompt_cache_key, "k");
    auto one = ok(R"({"prompt":[[4,5]]})");  // a list of one token prompt
    EXPECT_EQ(one.prompt_tokens, (std::vector<int32_t>{4, 5}));
    auto one_text = ok(R"({"prompt":["x"]})");
    EXPECT_EQ(one_text.prompt, "x");
}

TEST(CompletionsRequest, RefusalsNameTheField) {
    EXPECT_EQ(bad(R"({"prompt":"x","echo":true})").param, "echo");
    EXPECT_EQ(bad(R"({"prompt":"x","suffix":"y"})").param, "suffix");
    auto several = bad(R"({"prompt":["a","b"]})");
    EXPECT_EQ(several.param, "prompt");
    EXPECT_EQ(several.message, "this server completes one prompt per request: send 'prompt' as one string or one array "
                               "of token ids, and one request per prompt");
    EXPECT_EQ(bad(R"({"prompt":[[1],[2]]})").param, "prompt");
    EXPECT_EQ(bad(R"({"prompt":[1,-2]})").param, "prompt[1]");
    EXPECT_EQ(bad(R"({"prompt":""})").param, "prompt");
    EXPECT_EQ(bad(R"({})").param, "prompt");
    EXPECT_EQ(bad(R"({"prompt":"x","n":2})").param, "n");
    EXPECT_EQ(bad(R"({"prompt":"x","max_tokens":0})").param, "max_tokens");
    EXPECT_EQ(bad(R"({"prompt":"x","logprobs":2})").param, "logprobs");
    EXPECT_EQ(bad(R"({"prompt":"x","stop":["a","b","c","d","e"]})").param, "stop");
}
