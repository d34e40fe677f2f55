// Tests of server::cache_view (the cache page's JSON, docs/prompt-cache.md "Cache page"): the
// exact shape of GET /v1/cache/entries and /v1/cache/requests, a tenant's view holding only its
// own entries, and the page itself being one self-contained document.
#include "server/ops/cache_view.h"

#include <gtest/gtest.h>

using namespace lineage;
using namespace lineage::server;

namespace {

cache::entry_view view(uint64_t id, std::string tenant, bool anchor, cache::tier where, int32_t n, uint64_t device,
                       uint64_t ram, std::vector<std::pair<int32_t, cache::point_kind>> cps = {}) {
    cache::entry_view v;
    v.id = id;
    v.k.tenant = std::move(tenant);
    v.k.session = anchor ? "" : "s" + std::to_string(id);
    v.anchor = anchor;
    v.where = where;
    v.n_tokens = n;
    v.device_bytes = device;
    v.ram_bytes = ram;
    v.bytes = device + ram;
    v.checkpoints = std::move(cps);
    return v;
}

}  // namespace

TEST(CacheView, EntriesListEveryRestorePointInTheTierThatHoldsIt) {
    using cache::point_kind;
    std::vector<cache::entry_view> v = {
        view(7, "", false, cache::tier::device, 120, 4096, 300, {{40, point_kind::turn}, {119, point_kind::guard}}),
        view(3, "", true, cache::tier::ram, 40, 0, 2000, {{16, point_kind::ladder}}),
    };
    v[0].tier_copy = 12;
    v[0].warmed = 0;
    const json j = entries_json(v, nullptr, "hybrid");
    EXPECT_EQ(dump(j),
              R"({"family":"hybrid","entries":[)"
              R"({"id":7,"anchor":false,"tier":"device","on_disk":true,"tokens":120,"session":"s7","warmed":0,)"
              R"("bytes":{"device":4096,"ram":300},"points":[{"tokens":40,"kind":"turn","tier":"ram"},)"
              R"({"tokens":119,"kind":"guard","tier":"ram"},{"tokens":120,"kind":"full","tier":"device"}]},)"
              R"({"id":3,"anchor":true,"tier":"ram","on_disk":false,"tokens":40,"session":"","warmed":0,)"
              R"("bytes":{"device":0,"ram":2000},"points":[{"tokens":16,"kind":"ladder","tier":"ram"},)"
              R"({"tokens":40,"kind":"anchor","tier":"ram"}]}],)"
              R"("totals":{"entries":1,"anchors":1,"points":5,"bytes":{"device":4096,"ram":2300}}})");
}

TEST(CacheView, ATenantSeesOnlyItsEntriesTheAdminSeesWhose) {
    std::vector<cache::entry_view> v = {
        view(1, "alice", false, cache::tier::ram, 10, 0, 100),
        view(2, "bob", false, cache::tier::device, 20, 500, 0),
        view(3, "alice", true, cache::tier::ram, 5, 0, 50),
    };
    const std::string alice = "alice";
    const json a = entries_json(v, &alice, "dense");
    EXPECT_EQ(a["tenant"], "alice");
    ASSERT_EQ(a["entries"].size(), 2u);
    EXPECT_EQ(a["entries"][0]["id"], 1);
    EXPECT_EQ(a["entries"][1]["id"], 3);
    EXPECT_FALSE(a["entries"][0].contains("tenant"));
    EXPECT_EQ(dump(a["totals"]), R"({"entries":1,"anchors":1,"points":2,"bytes":{"device":0,"ram":150}})");
    const json all = entries_json(v, nullptr, "dense");
    EXPECT_FALSE(all.contains("tenant"));
    ASSERT_EQ(all["entries"].size(), 3u);
    EXPECT_EQ(all["entries"][1]["tenant"], "bob");
    EXPECT_EQ(dump(all["totals"]), R"({"entries":2,"anchors":1,"points":3,"bytes":{"device":500,"ram":150}})");
}

TEST(CacheView, RequestsGiveEachRecordAndTheBucketsWithTheirSum) {
    scheduler::request_log log(4, 10, 20);
    scheduler::request_record a;
    a.id = 1;
    a.at_s = 1000.5;
    a.tenant = "alice";
    a.finish = "stop";
    a.prompt_tokens = 60;
    a.prefilled_tokens = 60;
    a.completion_tokens = 8;
    a.ttft_s = 0.25;
    a.hit_kind = "miss";
    a.miss_cause = "no_shared_prefix";
    log.record(a);
    scheduler::request_record b = a;
    b.id = 2;
    b.at_s = 1012.0;
    b.prompt_tokens = 80;
    b.cached_tokens = 68;
    b.prefilled_tokens = 12;
    b.ttft_s = 0.125;
    b.hit_kind = "turn";
    b.miss_cause = "";
    b.restored_from = "device";
    log.record(b);
    const json j = requests_json(log.snapshot(nullptr, 1013.0), true);
    EXPECT_EQ(dump(j["recent"]),
              R"([{"id":2,"at":1012.0,"tenant":"alice","finish":"stop","prompt_tokens":80,"cached_tokens":68,)"
              R"("computed_tokens":12,"completion_tokens":8,"ttft_ms":125.0,"hit":"turn","tier":"device",)"
              R"("miss_reason":null},)"
              R"({"id":1,"at":1000.5,"tenant":"alice","finish":"stop","prompt_tokens":60,"cached_tokens":0,)"
              R"("computed_tokens":60,"completion_tokens":8,"ttft_ms":250.0,"hit":"miss","tier":null,)"
              R"("miss_reason":"no_shared_prefix"}])");
    EXPECT_EQ(j["bucket_s"], 10);
    ASSERT_EQ(j["buckets"].size(), 2u);
    EXPECT_EQ(dump(j["buckets"][0]),
              R"({"requests":1,"hits":0,"misses":1,"tokens_restored":0,"tokens_computed":60,"hits_by_kind":{},)"
              R"("misses_by_cause":{"no_shared_prefix":1},"short_hits_by_cause":{},"start":1000})");
    EXPECT_EQ(j["buckets"][1]["start"], 1010);
    EXPECT_EQ(dump(j["window"]),
              R"({"requests":2,"hits":1,"misses":1,"tokens_restored":68,"tokens_computed":72,)"
              R"("hits_by_kind":{"turn":1},"misses_by_cause":{"no_shared_prefix":1},"short_hits_by_cause":{}})");
    // A tenant's own view does not name the tenant on each row.
    EXPECT_FALSE(requests_json(log.snapshot(nullptr, 1013.0), false)["recent"][0].contains("tenant"));
}

TEST(CacheView, ThePageIsOneDocumentThatLoadsNothingFromElsewhere) {
    const std::string_view html = cache_page_html();
    EXPECT_EQ(html.substr(0, 15), "<!doctype html>");
    EXPECT_NE(html.find("/v1/cache/entries"), std::string_view::npos);
    EXPECT_NE(html.find("/v1/cache/requests"), std::string_view::npos);
    EXPECT_NE(html.find("/v1/cache/stats"), std::string_view::npos);
    for (const char * external : {"http://", "https://", "<link", "src=", "@import", "url("}) {
        const size_t at = html.find(external);
        // The SVG namespace is a name, not a fetch.
        const bool svg_ns = at != std::string_view::npos && html.substr(at, 26) == "http://www.w3.org/2000/svg";
        EXPECT_TRUE(at == std::string_view::npos || svg_ns) << external << " at " << at;
    }
}
