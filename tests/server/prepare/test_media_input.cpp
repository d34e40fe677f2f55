// Unit tests of the images a request carries (server/prepare/media_input.h): data URIs and base64
// (server/http/base64.h, the one codec the server has), and the dialects that accept them: chat
// completions' image_url parts, Anthropic image blocks and Responses input_image parts become
// the image marker in the message text plus the decoded bytes, in order; a stored Responses
// conversation keeps its images (the data URI) for previous_response_id.
#include "engine/multimodal.h"
#include "server/dialects/anthropic/anthropic_request.h"
#include "server/dialects/chat/chat_request.h"
#include "server/prepare/media_input.h"
#include "server/dialects/responses/reasoning_seal.h"
#include "server/dialects/responses/responses_request.h"
#include "server/dialects/anthropic/thinking_signature.h"

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
    // What OpenSSL's EVP_DecodeBlock alone lets through: whitespace around the text, padding in
    // the middle, more than two '='.
    EXPECT_FALSE(base64_decode("aGk=\n   ").has_value());
    EXPECT_FALSE(base64_decode("    aGk=").has_value());
    EXPECT_FALSE(base64_decode("aGk=    ").has_value());
    EXPECT_FALSE(base64_decode("aG==aGk=").has_value());
    EXPECT_FALSE(base64_decode("a===").has_value());
    EXPECT_FALSE(base64_decode("====").has_value());
    EXPECT_FALSE(base64_decode("aG\nk").has_value());
    EXPECT_FALSE(base64_decode("aGk-").has_value());  // the URL-safe alphabet is another encoding
    EXPECT_EQ(base64_decode("+/+/"), std::string("\xfb\xff\xbf", 3));
}

TEST(MediaInput, Base64RoundTrip) {
    std::string all;
    for (int c = 0; c < 256; ++c) {
        all.push_back(static_cast<char>(c));
    }
    for (size_t n = 1; n <= all.size(); n += 37) {
        const std::string raw = all.substr(0, n);
        const std::string text = base64_encode(raw);
        EXPECT_EQ(text.size(), 4 * ((n + 2) / 3));
        EXPECT_EQ(base64_decode(text), raw) << n;
    }
    EXPECT_EQ(base64_encode(""), "");
    EXPECT_EQ(base64_encode("hi"), "aGk=");
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

api_error responses_error(const std::string & body) {
    responses_request r;
    auto err = parse_responses_request(body, r);
    EXPECT_TRUE(err.has_value()) << body;
    return err ? *err : api_error{};
}

TEST(MediaInput, ResponsesInputImagesBecomeMarkersAndBytesInOrder) {
    responses_request r;
    auto err = parse_responses_request(
        R"({"instructions":"Describe.","input":[)"
        R"({"role":"developer","content":[{"type":"input_text","text":"Rules"},)"
        R"({"type":"input_image","image_url":"data:image/png;base64,aGk="}]},)"
        R"({"role":"user","content":[{"type":"input_text","text":"Look:"},)"
        R"({"type":"input_image","image_url":"data:image/png;base64,aGVsbG8=","detail":"high"},)"
        R"({"type":"input_image","image_url":"data:image/jpeg;base64,AAEC","detail":"low"}]}]})",
        r);
    ASSERT_FALSE(err.has_value()) << err->message;
    ASSERT_EQ(r.input[1].images.size(), 2u);
    EXPECT_EQ(r.input[1].images[0].part, 1u);
    EXPECT_EQ(r.input[1].images[0].detail, "high");
    EXPECT_EQ(r.input[1].images[0].url, "data:image/png;base64,aGVsbG8=");
    err = build_chat_messages(r, {}, nullptr);
    ASSERT_FALSE(err.has_value()) << err->message;
    // The leading developer item joins the system message; its image comes first.
    ASSERT_EQ(r.chat.messages.size(), 2u);
    EXPECT_EQ(r.chat.messages[0].content, std::string("Describe.\n\nRules") + engine::projector::marker());
    const std::vector<std::string> parts{"Look:", engine::projector::marker(), engine::projector::marker()};
    EXPECT_EQ(r.chat.messages[1].parts, parts);
    ASSERT_EQ(r.chat.images.size(), 3u);
    EXPECT_EQ(r.chat.images[0].bytes, "hi");
    EXPECT_EQ(r.chat.images[0].param, "input[0].content[1].image_url");
    EXPECT_EQ(r.chat.images[1].bytes, "hello");
    EXPECT_EQ(r.chat.images[1].param, "input[1].content[1].image_url");
    EXPECT_EQ(r.chat.images[2].bytes, std::string("\x00\x01\x02", 3));
}

TEST(MediaInput, StoredResponsesConversationKeepsItsImages) {
    responses_request first;
    ASSERT_FALSE(parse_responses_request(
        R"({"input":[{"role":"user","content":[{"type":"input_text","text":"What is it?"},)"
        R"({"type":"input_image","image_url":"data:image/png;base64,aGVsbG8=","detail":"auto"},)"
        R"({"type":"input_text","text":"One line."}]}]})",
        first));
    // The stored form (response_store's conversation column) and back.
    json stored = json::array();
    for (const auto & it : first.input) {
        stored.push_back(item_to_json(it));
    }
    EXPECT_EQ(stored[0]["content"][1],
              json::parse(R"({"type":"input_image","image_url":"data:image/png;base64,aGVsbG8=","detail":"auto"})"));
    EXPECT_EQ(stored[0]["content"][2], json::parse(R"({"type":"input_text","text":"One line."})"));
    auto prior = items_from_json_text(stored.dump());
    ASSERT_TRUE(prior.has_value());
    // A continuation renders the same messages and images, then its own.
    responses_request next;
    ASSERT_FALSE(parse_responses_request(
        R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,aGk="}]}]})",
        next));
    ASSERT_FALSE(build_chat_messages(next, *prior, nullptr));
    ASSERT_FALSE(build_chat_messages(first, {}, nullptr));
    ASSERT_EQ(next.chat.messages.size(), 2u);
    EXPECT_EQ(next.chat.messages[0].parts, first.chat.messages[0].parts);
    ASSERT_EQ(next.chat.images.size(), 2u);
    EXPECT_EQ(next.chat.images[0].bytes, "hello");
    EXPECT_EQ(next.chat.images[1].bytes, "hi");
}

TEST(MediaInput, ResponsesInputImageErrorsNameTheField) {
    auto e = responses_error(
        R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"https://example.com/a.png"}]}]})");
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.type, "invalid_request_error");
    EXPECT_EQ(e.param, "input[0].content[0].image_url");
    EXPECT_EQ(e.message, "'input[0].content[0].image_url' is an http(s) URL; this server fetches nothing: send the "
                         "image inline as a data URI (data:image/png;base64,...)");
    e = responses_error(R"({"input":[{"role":"user","content":[{"type":"input_image","file_id":"file-123"}]}]})");
    EXPECT_EQ(e.param, "input[0].content[0].file_id");
    EXPECT_EQ(e.message, "'input[0].content[0].file_id' names an uploaded file, but this server has no Files API: send "
                         "the image inline as 'image_url' with a data URI (data:image/png;base64,...)");
    e = responses_error(R"({"input":[{"role":"user","content":[{"type":"input_image"}]}]})");
    EXPECT_EQ(e.param, "input[0].content[0].image_url");
    e = responses_error(
        R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,a==="}]}]})");
    EXPECT_EQ(e.message, "'input[0].content[0].image_url' has data that is not valid base64");
    e = responses_error(R"({"input":[{"role":"assistant","content":[)"
                        R"({"type":"input_image","image_url":"data:image/png;base64,aGk="}]}]})");
    EXPECT_EQ(e.param, "input[0].content[0].type");
    EXPECT_EQ(e.message, "'input[0].content[0].type' is 'input_image' in an assistant message; images go in user messages");
    e = responses_error(R"({"input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]})");
    EXPECT_EQ(e.param, "input[0].content[0].type");
    EXPECT_EQ(e.message, "'input[0].content[0].type' is 'input_file'; this server reads text and images: send "
                         "input_text or input_image parts");
}

}  // namespace
}  // namespace lineage::server
