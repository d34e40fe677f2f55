// A GoogleTest fixture for the server tests that need a real chat template: the tiny generated
// qwen3 model (build/models/tiny-qwen3.gguf, made by lineage-mkmodel) and its template, loaded
// once per test suite and shared by its tests (model_, tmpl_); each test is skipped when the
// model file is absent. Tests derive from it (ChatTemplateTest, AnthropicTemplateTest).
// Single-threaded: GoogleTest runs a suite's set-up, tests and tear-down in turn.
#pragma once

#include "engine/chat_template.h"
#include "engine/model.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

class Qwen3TemplateTest : public ::testing::Test {
protected:
    static inline const std::string model_file = std::string(LINEAGE_TEST_MODELS_DIR) + "/tiny-qwen3.gguf";

    static void SetUpTestSuite() {
        if (std::filesystem::exists(model_file)) {
            model_ = std::make_unique<lineage::engine::model>(lineage::engine::model_params{model_file, 0});
            tmpl_ = std::make_unique<lineage::engine::chat_template>(*model_, "");
        }
    }
    static void TearDownTestSuite() {
        tmpl_.reset();
        model_.reset();
    }
    void SetUp() override {
        if (!model_) {
            GTEST_SKIP() << model_file << " missing (make it with lineage-mkmodel --arch qwen3 --preset tiny)";
        }
    }

    static inline std::unique_ptr<lineage::engine::model> model_;
    static inline std::unique_ptr<lineage::engine::chat_template> tmpl_;
};
