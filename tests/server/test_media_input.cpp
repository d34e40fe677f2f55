// Unit tests of the images a request carries (server/media_input.h): data URIs and base64, and
// the dialects that accept them: chat completions' image_url parts and Anthropic image blocks
// become the image marker in the message text plus the decoded bytes, in order.
#include "engine/multimodal.h"
#include "server/anthropic_request.h"
#include "server/chat_request.h"
#include "server/media_input.h"
#include "server/thinking_signature.h"

#include <gtest/gtest.h>

namespace lineage::server {
namespace {

TEST(MediaInput, Base64) {
    EXPECT_EQ(base64_decode("aGVsbG8="), "hello");
    EXPECT_EQ(base64_decode("aGk="), "hi");
    EXPECT_EQ(base64_decode("AAEC"), std::string("\x00\x01\x02", 3));
    EXPECT_FALSE(base64_decode("aGVsbG8").has_value());  // not a multiple of 4
    EXPECT_FALSE(base64_decode("a$==").has_value());
    EXPECT_FALSE(base64_decode("").has_value());
}

TEST(MediaInput, DataUrisOnly) {
    std::string why;
    EXPECT_EQ(image_from_url("data:image/png;base64,aGVsbG8=", why), "hello");
    EXPECT_EQ(image_from_url("DATA:image/jpeg;base64,aGk=", why), "hi");
    EXPECT_FALSE(image_from_url("https://example.com/a.png", why).has_value());
    EXPECT_NE(why.find("fetches nothing"), std::string::npos) << why;
    EXPECT_FALSE(image_from_url("HTTP://example.com/a.png", why).has_value());
    EXPECT_NE(why.find("fetches nothing"), std::string::npos) << why;
    EXPECT_FALSE(image_from_url("data:text/plain;base64,aGk=", why).has_value());
    EXPECT_NE(why.find("'text/plain'"), std::string::npos) << why;
    EXPECT_FALSE(image_from_url("data:image/png,rawbytes", why).has_value());
    EXPECT_NE(why.find(";base64"), std::string::npos) << why;
    EXPECT_FALSE(image_from_url("data:image/png;base64,%%%%", why).has_value());
    EXPECT_NE(why.find("not valid base64"), std::string::npos) << why;
    EXPECT_FALSE(image_from_url("file:///etc/passwd", why).has_value());
}

TEST(MediaInput, ChatImagePartsBecomeMarkersAndBytesInOrder) {
    chat_request r;
    const auto err = parse_chat_request(
        R"({"messages":[{"role":"user","content":[{"type":"text","text":"Look:"},)"
        R"({"type":"image_url","image_url":{"url":"data:image/png;base64,aGVsbG8="}},)"
        R"({"type":"image_url","image_url":"data:image/jpeg;base64,aGk="}]}]})",
        r);
    ASSERT_FALSE(err.has_value()) << err->message;
    ASSERT_EQ(r.images.size(), 2u);
    EXPECT_EQ(r.images[0].bytes, "hello");
    EXPECT_EQ(r.images[0].param, "messages[0].content[1].image_url");
    EXPECT_EQ(r.images[1].bytes, "hi");
    const std::vector<std::string> parts{"Look:", engine::projector::marker(), engine::projector::marker()};
    EXPECT_EQ(r.messages[0].parts, parts);
}

TEST(MediaInput, AnthropicImageBlocksBecomeMarkersAndBytes) {
    static const thinking_signer signer("tiny-qwen35", "");
    anthropic_request r;
    const auto err = parse_anthropic_request(
        R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":[)"
        R"({"type":"image","source":{"type":"base64","media_type":"image/png","data":"aGVsbG8="}},)"
        R"({"type":"text","text":"What is it?"}]}]})",
        signer, false, r);
    ASSERT_FALSE(err.has_value()) << err->message;
    ASSERT_EQ(r.chat.images.size(), 1u);
    EXPECT_EQ(r.chat.images[0].bytes, "hello");
    EXPECT_EQ(r.chat.images[0].param, "messages[0].content[0]");
    const std::vector<std::string> parts{engine::projector::marker(), "What is it?"};
    EXPECT_EQ(r.chat.messages.back().parts, parts);
}

}  // namespace
}  // namespace lineage::server
