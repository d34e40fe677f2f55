// Engine tests of LoRA adapters on the tiny generated models: an adapter from lineage-mkmodel
// --lora-out loads, changes the logits when applied, and leaves them bit-identical to the base
// model's when removed again; a file that is not an adapter is refused with its name.
#include "engine/context.h"
#include "engine/lora.h"
#include "engine/model.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

namespace lineage::engine {
namespace {

std::string model_path(const std::string & arch) {
    return std::string(LINEAGE_TEST_MODELS_DIR) + "/tiny-" + arch + ".gguf";
}

std::string make_adapter(const std::string & arch, int seed) {
    const std::string out = ::testing::TempDir() + "lora-" + arch + "-" + std::to_string(seed) + "-" +
                            std::to_string(getpid()) + ".gguf";
    const std::string cmd = std::string(LINEAGE_MKMODEL) + " -o " + model_path(arch) + " --lora-only --lora-out " +
                            out + " --lora-seed " + std::to_string(seed) + " > /dev/null";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return out;
}

std::vector<float> last_logits(context & ctx, const std::vector<token> & t) {
    ctx.clear();
    std::vector<batch_token> b;
    for (size_t i = 0; i < t.size(); ++i) {
        b.push_back({t[i], static_cast<int32_t>(i), 0, i + 1 == t.size()});
    }
    EXPECT_EQ(ctx.decode(b), decode_result::ok);
    const float * l = ctx.logits(static_cast<int32_t>(b.size()) - 1);
    return std::vector<float>(l, l + ctx.get_model().n_vocab());
}

class LoraTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LoraTest, AppliedChangesLogitsRemovedRestoresThem) {
    model m(model_params{model_path(GetParam()), 0});
    const std::string path = make_adapter(GetParam(), 2);
    lora_adapter a(m, path);
    EXPECT_EQ(a.path(), path);
    EXPECT_EQ(a.alpha(), 4.0f);
    context_params cp;
    cp.n_ctx = 512;
    cp.n_threads = 2;
    context ctx(m, cp);
    const auto t = m.tokenize("<|im_start|>user\nHello, adapter.<|im_end|>\n<|im_start|>assistant\n").value();
    const auto base = last_logits(ctx, t);
    ctx.set_loras({&a}, {1.0f});
    const auto adapted = last_logits(ctx, t);
    EXPECT_NE(base, adapted);
    ctx.set_loras({&a}, {0.5f});
    const auto half = last_logits(ctx, t);
    EXPECT_NE(half, adapted);
    EXPECT_NE(half, base);
    ctx.set_loras({&a}, {1.0f});
    EXPECT_EQ(last_logits(ctx, t), adapted);  // deterministic
    ctx.set_loras({}, {});
    EXPECT_EQ(last_logits(ctx, t), base);
    std::remove(path.c_str());
}

TEST_P(LoraTest, RefusesAFileThatIsNotAnAdapter) {
    model m(model_params{model_path(GetParam()), 0});
    try {
        lora_adapter bad(m, model_path(GetParam()));  // a model, not an adapter
        FAIL() << "a model file was loaded as an adapter";
    } catch (const std::runtime_error & e) {
        EXPECT_NE(std::string(e.what()).find(model_path(GetParam())), std::string::npos) << e.what();
    }
}

INSTANTIATE_TEST_SUITE_P(Tiny, LoraTest, ::testing::Values("qwen35", "qwen3"));

}  // namespace
}  // namespace lineage::engine
