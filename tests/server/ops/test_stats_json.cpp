// Tests of server::stats_json (GET /v1/cache/stats): every counter map by kind, cause or reason
// lists exactly the keys /metrics lists, at 0 before the first event, in /metrics' order; a
// key the cache counts that is not known yet still shows up.
#include "server/ops/prometheus.h"
#include "server/ops/stats_json.h"

#include "cache/tier/disk/disk_tier.h"
#include "cache/tier/redis/redis_tier.h"

#include <gtest/gtest.h>

using namespace lineage;
using namespace lineage::server;

namespace {

std::vector<std::string> keys(const json & j) {
    std::vector<std::string> out;
    for (auto it = j.begin(); it != j.end(); ++it) {
        out.push_back(it.key());
    }
    return out;
}

/** A fresh cache's stats with both tiers off, as scheduler::tier_link reports them. */
cache::stats fresh() {
    cache::stats s;
    s.tiers = {cache::describe(cache::disk_stats{}, 0), cache::describe(cache::redis_stats{})};
    return s;
}

}  // namespace

TEST(StatsJson, EveryKnownKeyAtZeroOnAFreshCache) {
    const json j = stats_json(fresh());
    EXPECT_EQ(dump(j["hits"]),
              R"({"full":0,"prefix":0,"turn":0,"guard":0,"anchor":0,"divergence":0,"ladder":0,"message":0,"reply":0})");
    EXPECT_EQ(dump(j["misses_by_cause"]), R"({"no_shared_prefix":0,"below_min_prefix":0,"key_differs":0,)"
                                          R"("before_first_restore_point":0,"evicted":0,"bypassed":0})");
    EXPECT_EQ(dump(j["short_hits_by_cause"]), dump(j["misses_by_cause"]));
    EXPECT_EQ(dump(j["key_differs"]),
              R"({"tenant":0,"model_id":0,"lora_id":0,"rope_regime":0,"mm_digest":0,"kv_type":0})");
    EXPECT_EQ(dump(j["evictions"]), R"({"lru":0,"ttl":0,"capacity":0,"superseded":0,"anchor_cap":0,"released":0})");
    EXPECT_EQ(dump(j["rejections"]), R"({"too_large":0,"budget":0,"min_prefix":0,"disabled":0,)"
                                     R"("anchor_too_large":0,"abandoned":0,"disk_damaged":0,"redis_failed":0,"not_admitted":0})");
    EXPECT_EQ(dump(j["disk"]["damage"]),
              R"({"corrupt":0,"truncated":0,"bad_magic":0,"identity":0,"not_regular":0,"index_row":0,"index":0})");
    EXPECT_EQ(dump(j["redis"]["damage"]), R"({"corrupt":0,"truncated":0,"bad_magic":0,"identity":0,"other_format":0,)"
                                          R"("index":0,"counter":0,"wrong_type":0,"too_large":0})");
    EXPECT_EQ(dump(j["warmup"]["skipped"]),
              R"({"not_needed":0,"replaced":0,"queue_full":0,"preempted_too_often":0,"superseded":0,"reset":0})");
}

TEST(StatsJson, CountsGoUnderTheirKeysAndNewKeysFollow) {
    cache::stats s;
    s.hits = {{"turn", 2}, {"anchor", 1}};
    s.evictions = {{"ttl", 1}, {"brand_new", 7}};
    s.warmup.skipped = {{"replaced", 3}};
    s.warmup.renders = 4;
    s.warmup.tokenizations = 4;
    const json j = stats_json(s);
    EXPECT_EQ(j["hits"]["turn"], 2);
    EXPECT_EQ(j["hits"]["anchor"], 1);
    EXPECT_EQ(j["hits"]["full"], 0);
    EXPECT_EQ(keys(j["evictions"]),
              (std::vector<std::string>{"lru", "ttl", "capacity", "superseded", "anchor_cap", "released", "brand_new"}));
    EXPECT_EQ(j["evictions"]["brand_new"], 7);
    EXPECT_EQ(dump(j["warmup"]["skipped"]),
              R"({"not_needed":0,"replaced":3,"queue_full":0,"preempted_too_often":0,"superseded":0,"reset":0})");
    EXPECT_EQ(j["warmup"]["renders"], 4);
    EXPECT_EQ(j["warmup"]["tokenizations"], 4);
}

// The stats keys are /metrics' label values (the same lists).
TEST(StatsJson, KeysAreTheMetricsLabels) {
    const json j = stats_json(cache::stats{});
    EXPECT_EQ(keys(j["hits"]), cache::stats::restore_kinds);
    EXPECT_EQ(keys(j["misses_by_cause"]), cache::stats::miss_causes);
    EXPECT_EQ(keys(j["warmup"]["skipped"]), cache::warmup_stats::skip_causes);
    const std::string m = render_metrics(cache::stats{}, scheduler::metrics_snapshot{});
    for (const auto & k : keys(j["warmup"]["skipped"])) {
        EXPECT_NE(m.find("lineage_prompt_cache_warmup_skipped_total{cause=\"" + k + "\"} 0"), std::string::npos) << k;
    }
    for (const auto & k : keys(j["hits"])) {
        EXPECT_NE(m.find("lineage_prompt_cache_restore_point_hits_total{kind=\"" + k + "\"} 0"), std::string::npos)
            << k;
    }
}

// The warm-ups and the buffer pool describe themselves (cache/figure.h): each JSON key once, in
// the order of describe(), with its value; /metrics shows the same values.
TEST(StatsJson, WarmupAndBufferPoolAreTheirOwnFiguresInOrder) {
    cache::stats s = fresh();
    s.warmup.queued = 9;
    s.warmup.renders = 18;
    s.warmup.tokenizations = 17;
    s.warmup.runs = 5;
    s.warmup.preempted = 2;
    s.warmup.active = 1;
    s.warmup.tokens = 1234;
    s.warmup.hits = 3;
    s.warmup.wasted = 1;
    s.buffer_pool.reused = 40;
    s.buffer_pool.allocated = 6;
    s.buffer_pool.idle_buffers = 2;
    s.buffer_pool.idle_bytes = 10485760;
    s.buffer_pool.max_idle_bytes = 67108864;
    const json j = stats_json(s);
    EXPECT_EQ(keys(j["warmup"]), (std::vector<std::string>{"queued", "renders", "tokenizations", "runs", "preempted",
                                                           "active", "tokens", "hits", "wasted", "skipped"}));
    EXPECT_EQ(dump(j["warmup"]), R"({"queued":9,"renders":18,"tokenizations":17,"runs":5,"preempted":2,"active":1,)"
                                 R"("tokens":1234,"hits":3,"wasted":1,"skipped":{"not_needed":0,"replaced":0,)"
                                 R"("queue_full":0,"preempted_too_often":0,"superseded":0,"reset":0}})");
    EXPECT_EQ(dump(j["buffer_pool"]), R"({"reused":40,"allocated":6,"idle_buffers":2,"idle_bytes":10485760,)"
                                      R"("max_idle_bytes":67108864})");
    const std::string m = render_metrics(s, scheduler::metrics_snapshot{});
    for (const char * line : {"lineage_prompt_cache_warmups_total{outcome=\"stored\"} 5",
                              "lineage_prompt_cache_warmups_total{outcome=\"preempted\"} 2",
                              "lineage_prompt_cache_warmups_active 1", "lineage_prompt_cache_warmup_tokens_total 1234",
                              "lineage_prompt_cache_warmup_hits_total 3", "lineage_prompt_cache_warmup_wasted_total 1",
                              "lineage_prompt_cache_state_buffers_total{source=\"reused\"} 40",
                              "lineage_prompt_cache_state_buffers_total{source=\"allocated\"} 6",
                              "lineage_prompt_cache_state_buffer_idle_bytes 10485760"}) {
        EXPECT_NE(m.find(std::string(line) + "\n"), std::string::npos) << line;
    }
    // JSON-only figures are not metrics.
    EXPECT_EQ(m.find("idle_buffers"), std::string::npos);
    EXPECT_EQ(m.find("max_idle_bytes"), std::string::npos);
}

TEST(StatsJson, EachTierIsItsFiguresInOrderUnderItsName) {
    cache::stats s = fresh();
    s.requests_committed = 4;
    s.tier_hits = {{"disk", 2}, {"mem", 5}};
    cache::disk_stats d;
    d.enabled = true;
    d.dir = "/var/cache/x";
    d.files = 3;
    d.bytes_written = 1000;
    d.damage = {{"identity", 1}};
    s.tiers[0] = cache::describe(d, s.requests_committed);
    // A tier none of this file names: a key, a map with its known keys, a JSON-only string.
    s.tiers.push_back(cache::tier_report{
        .name = "mem",
        .enabled = true,
        .hits_help = "Restores served from memory.",
        .figures = {cache::figure("copies", int64_t{7}, "copies", "Copies held."),
                    cache::figure("where", std::string("here")),
                    cache::figure_map("lost", {{"z", 1}}, "lost_total", "Copies lost, by cause.", "cause", {"a", "b"})}});
    const json j = stats_json(s);
    EXPECT_EQ(j["disk_hits"], 2);
    EXPECT_EQ(j["redis_hits"], 0);
    EXPECT_EQ(j["mem_hits"], 5);
    EXPECT_EQ(j["disk"]["enabled"], true);
    EXPECT_EQ(j["disk"]["dir"], "/var/cache/x");
    EXPECT_EQ(j["disk"]["files"], 3);
    EXPECT_EQ(j["disk"]["bytes_written_per_request"], 250);
    EXPECT_EQ(j["disk"]["damage"]["identity"], 1);
    EXPECT_EQ(j["disk"]["damaged"], 0);
    EXPECT_EQ(j["redis"]["enabled"], false);
    EXPECT_EQ(dump(j["mem"]), R"({"enabled":true,"copies":7,"where":"here","lost":{"a":0,"b":0,"z":1}})");
    EXPECT_EQ(keys(j["redis"]), (std::vector<std::string>{"enabled", "url", "namespace", "connected", "entries",
                                                          "writes", "bytes_written", "chunks_written",
                                                          "write_failures", "loads", "bytes_read", "errors",
                                                          "timeouts", "connects", "vanished", "damaged", "damage",
                                                          "index_resets", "queued"}));
}

// The cache's own figures (cache::stats::describe): every key once, in order, then the tiers, the
// warm-ups and the buffer pool; largest_lineage an object of its four figures; checkpoints and
// bytes as the store holds them (no tier or kind before it holds something), while /metrics lists
// their known keys and the sums no JSON key shows.
TEST(StatsJson, TheCacheIsItsOwnFiguresInOrder) {
    cache::stats s = fresh();
    s.mode = "lineage";
    s.family = "hybrid";
    s.entries = 3;
    s.checkpoints = {{"turn", 2}};
    s.checkpoint_bytes = {{"turn", 200}};
    s.bytes = {{"device", 1000}, {"ram", 4396}};
    s.largest_lineage.bytes = 5000;
    s.largest_lineage.checkpoints = 2;
    s.largest_lineage.message_rungs = 1;
    s.hits = {{"turn", 2}, {"anchor", 1}};
    s.tokens_prefilled = 77;
    s.requests_committed = 4;
    s.apc_enabled = true;
    s.total_blocks_stored = 40;
    s.tier_reads_declined = {{"disk", 1}};
    s.tier_cost_prefill_tokens_per_s = 700.5;
    s.tier_cost_read_bytes_per_s = 1048576;
    const json j = stats_json(s);
    EXPECT_EQ(keys(j), (std::vector<std::string>{
                           "enabled", "mode", "family", "entries", "anchors", "anchor_bytes", "shared_prefix_entries",
                           "shared_prefix_bytes", "checkpoints",
                           "checkpoint_bytes", "bytes", "largest_lineage", "budget_bytes", "lookups", "misses", "hits",
                           "tokens_reused", "tokens_restored", "captures", "capture_splits", "capture_bytes",
                           "cross_template_hits", "live_hits", "prefix_holds", "tokens_prefilled",
                           "rejections", "misses_by_cause", "short_hits_by_cause", "key_differs", "ghosts",
                           "evictions", "evictions_by_uses", "ladder_rungs_evicted", "ladder_rungs_not_planned", "ladder_deferred_rungs", "eviction", "tier_hits", "tier_reads_declined", "tier_writes_declined", "tier_cost", "requests_committed", "apc_enabled", "total_blocks_stored",
                           "unique_block_hashes", "apc_active_entries", "disk_hits", "disk", "redis_hits", "redis",
                           "warmup", "buffer_pool"}));
    EXPECT_EQ(dump(j["checkpoints"]), R"({"turn":2})");
    EXPECT_EQ(dump(j["tier_reads_declined"]), R"({"disk":1})");
    EXPECT_EQ(j["tier_writes_declined"], 0);
    EXPECT_EQ(dump(j["tier_cost"]),
              R"({"prefill_tokens_per_s":700.5,"read_bytes_per_s":1048576.0,"write_bytes_per_s":0.0})");
    EXPECT_EQ(dump(j["checkpoint_bytes"]), R"({"turn":200})");
    EXPECT_EQ(dump(j["bytes"]), R"({"device":1000,"ram":4396})");
    EXPECT_EQ(dump(j["largest_lineage"]),
              R"({"bytes":5000,"checkpoints":2,"message_rungs":1,"reply_checkpoints":0})");
    EXPECT_EQ(j["enabled"], true);
    EXPECT_EQ(j["family"], "hybrid");
    EXPECT_EQ(j["tokens_prefilled"], 77);
    EXPECT_EQ(j["requests_committed"], 4);
    EXPECT_EQ(j["apc_enabled"], true);
    EXPECT_EQ(j["total_blocks_stored"], 40);
    const std::string m = render_metrics(s, scheduler::metrics_snapshot{});
    for (const char * line : {"lineage_prompt_cache_info{enabled=\"true\",mode=\"lineage\",family=\"hybrid\",eviction=\"value\"} 1",
                              "lineage_prompt_cache_hits_total 3", "lineage_prompt_cache_bytes 5396",
                              "lineage_prompt_cache_tier_bytes{tier=\"disk\"} 0",
                              "lineage_prompt_cache_checkpoints{kind=\"guard\"} 0",
                              "lineage_prompt_cache_apc_enabled 1", "lineage_prompt_cache_apc_blocks 40"}) {
        EXPECT_NE(m.find(std::string(line) + "\n"), std::string::npos) << line;
    }
    // JSON-only figures are not metrics.
    EXPECT_EQ(m.find("largest_lineage"), std::string::npos);
    EXPECT_EQ(m.find("prompt_cache_tokens_prefilled"), std::string::npos);
    EXPECT_EQ(m.find("requests_committed"), std::string::npos);
}
