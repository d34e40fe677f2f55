// Tests of server::input_items_page (GET /v1/responses/{id}/input_items): the list object's
// exact shape, the order (desc by default, asc), the limit with has_more, the `after` cursor
// paging through every item once, and the 400 for an unknown cursor.
#include "server/dialects/responses/response_items.h"

#include <gtest/gtest.h>

using namespace lineage::server;

namespace {

// A conversation as stored: a user message sent as a string, an assistant message with parts,
// a function call and its output.
std::vector<response_item> conversation() {
    auto items = *items_from_json_text(
        R"([{"type":"message","id":"msg_1","role":"user","content":"hi"},)"
        R"({"type":"message","id":"msg_2","role":"assistant","content":[{"type":"output_text","text":"hello"}]},)"
        R"({"type":"function_call","id":"fc_3","call_id":"call_a","name":"f","arguments":"{}"},)"
        R"({"type":"function_call_output","id":"fco_4","call_id":"call_a","output":"42"}])");
    return items;
}

json page(const input_items_query & q) {
    json out;
    auto err = input_items_page(conversation(), q, out);
    EXPECT_FALSE(err) << (err ? err->message : "");
    return out;
}

std::vector<std::string> ids(const json & p) {
    std::vector<std::string> out;
    for (const auto & it : p["data"]) {
        out.push_back(it["id"].get<std::string>());
    }
    return out;
}

}  // namespace

TEST(InputItems, AscendingListsTheItemsInTheirApiShape) {
    const json p = page({.limit = 20, .ascending = true, .after = ""});
    EXPECT_EQ(
        dump(p),
        R"({"object":"list","data":[)"
        R"({"type":"message","id":"msg_1","role":"user","content":[{"type":"input_text","text":"hi"}],"status":"completed"},)"
        R"({"type":"message","id":"msg_2","role":"assistant","content":[{"type":"output_text","text":"hello",)"
        R"("annotations":[],"logprobs":[]}],"status":"completed"},)"
        R"({"type":"function_call","id":"fc_3","call_id":"call_a","name":"f","arguments":"{}","status":"completed"},)"
        R"({"type":"function_call_output","id":"fco_4","call_id":"call_a","output":"42","status":"completed"}],)"
        R"("first_id":"msg_1","last_id":"fco_4","has_more":false})");
}

TEST(InputItems, DescendingIsTheDefaultNewestFirst) {
    const json p = page({});
    EXPECT_EQ(ids(p), (std::vector<std::string>{"fco_4", "fc_3", "msg_2", "msg_1"}));
    EXPECT_EQ(p["first_id"], "fco_4");
    EXPECT_EQ(p["last_id"], "msg_1");
}

TEST(InputItems, LimitAndAfterPageThroughEveryItemOnce) {
    json p = page({.limit = 3, .ascending = false, .after = ""});
    EXPECT_EQ(ids(p), (std::vector<std::string>{"fco_4", "fc_3", "msg_2"}));
    EXPECT_TRUE(p["has_more"].get<bool>());
    p = page({.limit = 3, .ascending = false, .after = "msg_2"});
    EXPECT_EQ(ids(p), (std::vector<std::string>{"msg_1"}));
    EXPECT_FALSE(p["has_more"].get<bool>());
    p = page({.limit = 2, .ascending = true, .after = "msg_2"});
    EXPECT_EQ(ids(p), (std::vector<std::string>{"fc_3", "fco_4"}));
    EXPECT_FALSE(p["has_more"].get<bool>());
    // After the last item: an empty page.
    p = page({.limit = 2, .ascending = true, .after = "fco_4"});
    EXPECT_EQ(dump(p), R"({"object":"list","data":[],"first_id":null,"last_id":null,"has_more":false})");
}

TEST(InputItems, UnknownCursorIs400) {
    json out;
    auto err = input_items_page(conversation(), {.limit = 20, .ascending = false, .after = "msg_x"}, out);
    ASSERT_TRUE(err);
    EXPECT_EQ(err->status, 400);
    EXPECT_EQ(err->param, "after");
    EXPECT_EQ(err->message,
              "'after' is 'msg_x', which is not the id of one of this response's input items; pass the "
              "id of an item of a page you were given (its last_id)");
}

// The stored form keeps a function_call_output's id (input items are listed by id).
TEST(InputItems, StoredFormKeepsEveryItemsId) {
    const auto items = conversation();
    ASSERT_EQ(items.size(), 4u);
    EXPECT_EQ(item_to_json(items[3])["id"], "fco_4");
    EXPECT_EQ((*items_from_json_text(dump(json::array({item_to_json(items[3])}))))[0].id, "fco_4");
}
