// Tier 3's layout in Redis (redis_format.h): key names, the entry key, chunking with each
// chunk's header and checksum, the index entry, the in-memory disk format they carry, and a
// tier whose Redis is down (every call fails fast, counted; nothing throws). No Redis server:
// the e2e tests (tests/e2e/redis.test.mjs) run one.
#include "cache/blob_patch.h"
#include "cache/tier/disk/disk_tier.h"
#include "cache/tier/redis/redis_format.h"
#include "cache/tier/redis/redis_tier.h"

#include "disk_fixture.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <fstream>
#include <iterator>

namespace lineage::cache {
namespace {

using fakes::seq;

uint32_t u32_at(const std::string & s, size_t off) {
    uint32_t v = 0;
    std::memcpy(&v, s.data() + off, sizeof v);
    return v;
}

uint64_t u64_at(const std::string & s, size_t off) {
    uint64_t v = 0;
    std::memcpy(&v, s.data() + off, sizeof v);
    return v;
}

TEST(RedisFormat, KeyNames) {
    const redis_keys k{"team-a"};
    EXPECT_EQ(k.seq(), "team-a:seq");
    EXPECT_EQ(k.index(), "team-a:index");
    EXPECT_EQ(k.meta("abc"), "team-a:meta:abc");
    EXPECT_EQ(k.chunk("abc", 7), "team-a:chunk:abc:7");
}

TEST(RedisFormat, EntryKeyIsContentAddressed) {
    const std::string a = redis_entry_key("model-a", "bucket-1", {1, 2, 3});
    EXPECT_EQ(a.size(), 32u);
    EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
    EXPECT_EQ(a, redis_entry_key("model-a", "bucket-1", {1, 2, 3}));  // two replicas, one key
    EXPECT_NE(a, redis_entry_key("model-b", "bucket-1", {1, 2, 3}));
    EXPECT_NE(a, redis_entry_key("model-a", "bucket-2", {1, 2, 3}));
    EXPECT_NE(a, redis_entry_key("model-a", "bucket-1", {1, 2, 4}));
    // Length-prefixed fields: moving a byte from one field to the next changes the key.
    EXPECT_NE(redis_entry_key("ab", "c", {1}), redis_entry_key("a", "bc", {1}));
}

TEST(RedisFormat, ChunksCarryHeaderAndChecksum) {
    const std::string ek = "0123456789abcdef0123456789abcdef";
    const auto chunks = split_chunks(ek, "0123456789", 4);
    ASSERT_EQ(chunks.size(), 3u);
    const size_t sizes[] = {4, 4, 2};
    for (uint32_t i = 0; i < 3; ++i) {
        const std::string & c = chunks[i];
        ASSERT_EQ(c.size(), 44 + ek.size() + sizes[i]);
        EXPECT_EQ(c.substr(0, 8), "LNGCHUNK");
        EXPECT_EQ(u32_at(c, 8), redis_format_version);
        EXPECT_EQ(u32_at(c, 12), i);                  // index
        EXPECT_EQ(u32_at(c, 16), 3u);                 // count
        EXPECT_EQ(u64_at(c, 20), 10u);                // total payload bytes
        EXPECT_EQ(u32_at(c, 28), 32u);                // entry key length
        EXPECT_EQ(c.substr(32, 32), ek);
        EXPECT_EQ(u32_at(c, 64), sizes[i]);           // data length
        EXPECT_EQ(c.substr(68, sizes[i]), std::string("0123456789").substr(i * 4, sizes[i]));
    }
    std::vector<std::optional<std::string>> back(chunks.begin(), chunks.end());
    std::string payload;
    const auto r = join_chunks(ek, 10, 3, back, payload);
    EXPECT_EQ(r.error, tier_load_error::none) << r.detail;
    EXPECT_EQ(payload, "0123456789");
}

TEST(RedisFormat, EmptyPayloadIsOneChunk) {
    const auto chunks = split_chunks("k", "", 4);
    ASSERT_EQ(chunks.size(), 1u);
    EXPECT_EQ(chunks[0].size(), 45u);
    std::string payload = "x";
    std::vector<std::optional<std::string>> back(chunks.begin(), chunks.end());
    EXPECT_EQ(join_chunks("k", 0, 1, back, payload).error, tier_load_error::none);
    EXPECT_EQ(payload, "");
}

TEST(RedisFormat, DamagedMissingOrForeignChunksAreRejected) {
    const std::string ek = "entry-a";
    const auto chunks = split_chunks(ek, "0123456789", 4);
    std::string payload;
    auto join = [&](std::vector<std::optional<std::string>> cs) {
        return join_chunks(ek, 10, 3, cs, payload).error;
    };
    std::vector<std::optional<std::string>> ok(chunks.begin(), chunks.end());

    auto flipped = ok;
    (*flipped[1])[44 + ek.size()] ^= 0x01;  // one payload bit
    EXPECT_EQ(join(flipped), tier_load_error::corrupt);

    auto missing = ok;
    missing[2].reset();
    EXPECT_EQ(join(missing), tier_load_error::missing);

    auto swapped = ok;
    std::swap(swapped[0], swapped[1]);
    EXPECT_EQ(join(swapped), tier_load_error::identity);

    auto foreign = ok;
    foreign[1] = split_chunks("entry-b", "0123456789", 4)[1];  // sound, another entry's
    EXPECT_EQ(join(foreign), tier_load_error::identity);

    auto cut = ok;
    cut[0]->resize(20);
    EXPECT_EQ(join(cut), tier_load_error::truncated);

    auto magic = ok;
    (*magic[0])[0] = 'X';
    EXPECT_EQ(join(magic), tier_load_error::bad_magic);

    EXPECT_EQ(join({ok[0], ok[1]}), tier_load_error::identity);  // fewer chunks than the index says
    EXPECT_TRUE(payload.empty());
}

TEST(RedisFormat, ACopyOfAPatchedStateHoldsTheWholeState) {
    // A RAM entry held as a patch over its anchor's state (copy_record::base) is written whole:
    // the same bytes as the record of its whole state; a patch over another base writes nothing.
    copy_record whole = record({1, 2, 3, 4, 5, 6}, 300, {{2, point_kind::turn, fake(40)}});
    blob state(300, 0x44);
    std::fill(state.begin(), state.begin() + 50, uint8_t{0x55});
    whole.full = make_blob(state);
    const blob anchor_state(500, 0x44);
    copy_record patched = whole;
    patched.base = make_blob(anchor_state);
    patched.full = make_blob(*make_patch(state, {{50, 100, 250}}));
    EXPECT_LT(patched.full->size(), 150u);
    EXPECT_EQ(copy_record_size(patched), copy_record_size(whole));
    EXPECT_EQ(encode_copy_record(patched), encode_copy_record(whole));
    copy_record wrong = patched;
    wrong.base = make_blob(blob(100, 0x44));  // the patch names bytes past its end
    EXPECT_THROW(encode_copy_record(wrong), std::bad_alloc);
}

TEST(RedisFormat, PayloadIsTheDiskFileBytes) {
    // Tier 3 stores exactly what tier 2 writes to a file: one format, one set of checks.
    const copy_record rec = record({1, 2, 3, 4, 5, 6}, 300, {{2, point_kind::turn, fake(40)}, {4, point_kind::guard, fake(40)}});
    const std::string bytes = encode_copy_record(rec);
    EXPECT_EQ(bytes.size(), copy_record_size(rec));
    const std::string path = (fs::temp_directory_path() / ("lineage-redis-fmt-" + std::to_string(::getpid()))).string();
    ASSERT_TRUE(write_disk_file(path, rec).is_ok());
    std::ifstream in(path, std::ios::binary);
    const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    fs::remove(path);
    EXPECT_EQ(file, bytes);

    const auto back = decode_copy_record(bytes, "model-a");
    ASSERT_EQ(back.error, tier_load_error::none) << back.detail;
    EXPECT_EQ(back.record->toks, rec.toks);
    EXPECT_EQ(*back.record->full, *rec.full);
    ASSERT_EQ(back.record->checkpoints.size(), 2u);
    EXPECT_EQ(back.record->checkpoints[1].n_tokens, 4);
    EXPECT_EQ(*back.record->checkpoints[1].recurrent, *rec.checkpoints[1].recurrent);
    EXPECT_EQ(decode_copy_record(bytes, "model-b").error, tier_load_error::other_model);
    std::string bad = bytes;
    bad[bad.size() / 2] ^= 0x10;
    EXPECT_EQ(decode_copy_record(bad, "model-a").error, tier_load_error::corrupt);
}

TEST(RedisFormat, IndexEntryHasNoStates) {
    copy_record rec = record({7, 8, 9, 10}, 5000, {{2, point_kind::ladder, fake(700)}});
    rec.tenant = "bob";  // a tenant's reset finds its entries in the index by it
    const std::string m = encode_redis_meta(123456, 3, rec);
    EXPECT_EQ(m.substr(0, 8), "LNGRMETA");
    EXPECT_EQ(u32_at(m, 8), redis_format_version);
    EXPECT_EQ(u64_at(m, 12), 123456u);
    EXPECT_EQ(u32_at(m, 20), 3u);
    copy_record bare = rec;
    bare.full = nullptr;
    bare.checkpoints[0].recurrent = nullptr;
    EXPECT_EQ(m.size(), 24 + copy_record_size(bare));  // no state bytes

    redis_meta out;
    const auto r = decode_redis_meta(m, "model-a", out);
    ASSERT_EQ(r.error, tier_load_error::none) << r.detail;
    EXPECT_EQ(out.payload_bytes, 123456u);
    EXPECT_EQ(out.n_chunks, 3u);
    EXPECT_EQ(out.rec.toks, rec.toks);
    EXPECT_EQ(out.rec.bucket, "bucket-1");
    EXPECT_EQ(out.rec.session, "s1");
    EXPECT_EQ(out.rec.tenant, "bob");
    EXPECT_EQ(out.rec.history, 2);
    ASSERT_EQ(out.rec.checkpoints.size(), 1u);
    EXPECT_EQ(out.rec.checkpoints[0].n_tokens, 2);
    EXPECT_EQ(out.rec.checkpoints[0].kind, point_kind::ladder);

    EXPECT_EQ(decode_redis_meta(m, "model-b", out).error, tier_load_error::other_model);
    EXPECT_EQ(decode_redis_meta(m.substr(0, 15), "model-a", out).error, tier_load_error::truncated);
    EXPECT_EQ(decode_redis_meta("LNGCHUNK" + m.substr(8), "model-a", out).error, tier_load_error::bad_magic);
}

// Issue #56: Redis is storage anyone with write access can fill. Every number read from it is
// checked before it sizes anything.
TEST(RedisHostile, ChunkCountsAnIndexEntryCannotHoldAreRejectedBeforeAnyRead) {
    copy_record rec = record({7, 8, 9, 10}, 5000, {});
    redis_meta out;
    // The measured attack: the count set to 10,000,000 (a 30 s wait and 5 GB of RSS) and to 2^32-1
    // (a bad_alloc), the payload left as it was.
    for (uint32_t n : {10'000'000u, 0xFFFFFFFFu, 0u}) {
        const auto r = decode_redis_meta(encode_redis_meta(123456, n, rec), "model-a", out);
        EXPECT_EQ(r.error, tier_load_error::corrupt) << n;
        EXPECT_NE(r.detail.find("chunks"), std::string::npos) << r.detail;
    }
    // A payload past 1 TiB, or more chunks than any chunk size of 1 KiB..512 MiB makes.
    EXPECT_EQ(decode_redis_meta(encode_redis_meta(uint64_t{1} << 41, 4096, rec), "model-a", out).error,
              tier_load_error::corrupt);
    EXPECT_EQ(decode_redis_meta(encode_redis_meta(4096, 5, rec), "model-a", out).error, tier_load_error::corrupt);
    EXPECT_EQ(decode_redis_meta(encode_redis_meta(uint64_t{2} << 30, 2, rec), "model-a", out).error,
              tier_load_error::corrupt);  // two chunks of 1 GiB
    EXPECT_EQ(decode_redis_meta(encode_redis_meta(4096, 4, rec), "model-a", out).error, tier_load_error::none);
    EXPECT_EQ(decode_redis_meta(encode_redis_meta(0, 1, rec), "model-a", out).error, tier_load_error::none);
}

TEST(RedisHostile, GeometryAcceptsEveryWritersSplitAndNothingElse) {
    for (uint64_t chunk : {uint64_t{1024}, uint64_t{4096}, uint64_t{4} << 20}) {
        for (uint64_t payload : {uint64_t{0}, uint64_t{1}, chunk - 1, chunk, chunk + 1, 10 * chunk, 10 * chunk + 7}) {
            const uint64_t n = std::max<uint64_t>(1, (payload + chunk - 1) / chunk);
            EXPECT_EQ(check_redis_geometry(payload, static_cast<uint32_t>(n)), "") << payload << " / " << chunk;
        }
    }
    EXPECT_NE(check_redis_geometry(0, 2), "");
    EXPECT_EQ(check_redis_geometry(3000, 3), "");  // 1,024 + 1,024 + 952
    EXPECT_NE(check_redis_geometry(2000, 3), "");  // chunks under 1 KiB
    EXPECT_NE(check_redis_geometry(uint64_t{513} << 20, 1), "");
    EXPECT_NE(check_redis_geometry(uint64_t{1} << 40, redis_max_chunks + 1), "");
}

TEST(RedisHostile, ChunkZeroMustAgreeWithTheIndexEntryBeforeAnotherIsRead) {
    const std::string ek = "entry-a";
    const auto chunks = split_chunks(ek, "0123456789", 4);  // 4 + 4 + 2
    uint64_t size = 0;
    std::string_view data;
    EXPECT_EQ(check_chunk(ek, 10, 3, 0, chunks[0], size, data).error, tier_load_error::none);
    EXPECT_EQ(size, 4u);
    EXPECT_EQ(data, "0123");
    EXPECT_EQ(check_chunk(ek, 10, 3, 2, chunks[2], size, data).error, tier_load_error::none);
    EXPECT_EQ(data, "89");
    // The index entry's count or size changed: chunk 0's checksummed header disagrees.
    EXPECT_EQ(check_chunk(ek, 10, 10'000'000, 0, chunks[0], size, data).error, tier_load_error::identity);
    EXPECT_EQ(check_chunk(ek, 11, 3, 0, chunks[0], size, data).error, tier_load_error::identity);
    // A forged but self-consistent set (checksums recomputed) of a count its chunk size cannot
    // make: 3 chunks of 4 bytes cannot hold 20.
    const auto forged = split_chunks(ek, std::string(20, 'x'), 4);  // 5 chunks
    EXPECT_EQ(check_chunk(ek, 20, 5, 0, forged[0], size, data).error, tier_load_error::none);
    std::string lie = split_chunks(ek, std::string(20, 'x'), 4)[0];
    // The same chunk 0 rewritten to claim 3 chunks (count at offset 16), checksum recomputed.
    const uint32_t three = 3;
    std::memcpy(lie.data() + 16, &three, 4);
    const uint64_t sum = XXH3_64bits(lie.data(), lie.size() - 8);
    std::memcpy(lie.data() + lie.size() - 8, &sum, 8);
    EXPECT_EQ(check_chunk(ek, 20, 3, 0, lie, size, data).error, tier_load_error::identity);
    // No chunks at all (found by fuzz_redis_format): no writer makes it.
    std::string payload;
    EXPECT_EQ(join_chunks(ek, 0, 0, {}, payload).error, tier_load_error::corrupt);
    // A later chunk of another length than the chunk size.
    EXPECT_EQ(check_chunk(ek, 10, 3, 0, chunks[0], size, data).error, tier_load_error::none);
    const auto other = split_chunks(ek, "0123456789", 5);
    EXPECT_NE(check_chunk(ek, 10, 3, 1, other[1], size, data).error, tier_load_error::none);
}

TEST(RedisHostile, SequencesAreWholeNumbersInRange) {
    EXPECT_EQ(parse_redis_sequence("1"), 1);
    EXPECT_EQ(parse_redis_sequence("9007199254740992"), redis_max_sequence);
    for (const char * bad : {"", "0", "-1", "inf", "+inf", "-inf", "nan", "1.5", "abc", "9007199254740993",
                             "18446744073709551616", "1e300", "5 ", " 5", "0x10"}) {
        EXPECT_EQ(parse_redis_sequence(bad), std::nullopt) << bad;
    }
    EXPECT_EQ(parse_redis_sequence("1e+3"), 1000);  // Redis may write a whole double so
}

TEST(RedisHostile, EntryKeysHaveOneShape) {
    copy_record rec = record({1, 2, 3}, 10, {});
    EXPECT_TRUE(valid_redis_entry_key(redis_entry_key("model-a", rec.bucket, rec.toks)));
    EXPECT_FALSE(valid_redis_entry_key(""));
    EXPECT_FALSE(valid_redis_entry_key("entry-a"));
    EXPECT_FALSE(valid_redis_entry_key(std::string(32, 'A')));
    EXPECT_FALSE(valid_redis_entry_key(std::string(33, 'a')));
    EXPECT_FALSE(valid_redis_entry_key(std::string(1 << 20, 'a')));
}

TEST(RedisUrl, Parses) {
    auto u = parse_redis_url("redis://127.0.0.1:6380/2");
    ASSERT_TRUE(u);
    EXPECT_EQ(u->host, "127.0.0.1");
    EXPECT_EQ(u->port, 6380);
    EXPECT_EQ(u->db, 2);
    u = parse_redis_url("redis://cache.internal");
    ASSERT_TRUE(u);
    EXPECT_EQ(u->host, "cache.internal");
    EXPECT_EQ(u->port, 6379);
    EXPECT_EQ(u->db, 0);
    EXPECT_FALSE(parse_redis_url("http://x:1"));
    EXPECT_FALSE(parse_redis_url("redis://:6379"));
    EXPECT_FALSE(parse_redis_url("redis://h:0"));
    EXPECT_FALSE(parse_redis_url("redis://h:99999"));
    EXPECT_FALSE(parse_redis_url("redis://h:1/x"));
    EXPECT_FALSE(parse_redis_url("redis://user:pw@h:1"));
}

TEST(RedisTier, DownNeverThrowsAndCounts) {
    redis_config cfg;
    cfg.url = "redis://127.0.0.1:1";  // nothing listens on port 1
    cfg.model = "model-a";
    cfg.timeout_ms = 100;
    cfg.retry_s = 0;
    redis_tier t(cfg);
    tier_write w;
    w.entry_id = 42;
    w.rec = record({1, 2, 3});
    t.write(std::move(w));
    t.drain();
    const auto done = t.take_completions();
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].entry_id, 42u);
    EXPECT_EQ(done[0].file, 0u);
    EXPECT_FALSE(t.best("bucket-1", "s1", {1, 2, 3, 4}, 0));
    const auto r = t.load(1, {}).get();
    EXPECT_EQ(r.error, tier_load_error::missing);  // nothing mirrored
    const auto s = t.get_stats();
    EXPECT_TRUE(s.enabled);
    EXPECT_FALSE(s.connected);
    EXPECT_EQ(s.writes, 0);
    EXPECT_EQ(s.write_failures, 1);
    EXPECT_GE(s.errors, 1);
    EXPECT_EQ(s.connects, 0);
    // Declared unavailable after the failed connect: the replica is ready (GET /ready) without
    // tier 3 rather than warming for ever.
    const tier_state ready = t.readiness();
    EXPECT_EQ(ready.state, tier_readiness::unavailable);
    EXPECT_NE(ready.detail.find("redis://127.0.0.1:1"), std::string::npos) << ready.detail;
    EXPECT_THROW(redis_tier(redis_config{}), std::invalid_argument);
}

// --- the store's side: lookup order, hit accounting, write-behind -------------------------------

TEST(StoreRedis, ConsultedAfterDiskOnlyForSomethingLonger) {
    store st(hybrid_config(), true);
    fake_disk d, r;
    st.attach_tier(&d, disk_tier::kind());
    st.attach_tier(&r, redis_tier::kind());
    const key k{"b", "s"};
    park(st, k, seq(0, 40), 1, 1.0);
    d.offer = tier_candidate{5, 50, point_kind::turn, 60, 55, false, true};
    r.offer = tier_candidate{7, 58, point_kind::turn, 60, 55, false, true};
    auto p = st.plan(k, seq(0, 70), {}, 2.0);
    EXPECT_EQ(d.asked_longer_than, 40);  // the parked entry restores 40
    EXPECT_EQ(r.asked_longer_than, 50);  // the disk's 50
    EXPECT_EQ(p.op, restore_op::load_tier);
    EXPECT_EQ(p.tier, 1);
    EXPECT_EQ(p.tier_name, "redis");
    EXPECT_EQ(p.tier_copy, 7u);
    EXPECT_EQ(p.n_restore, 58);
    EXPECT_TRUE(p.absorbs);
    EXPECT_TRUE(p.tier_ancestors.empty());  // a shared entry is not one replica's to supersede
    EXPECT_NE(p.reason.find("from tier-3 (Redis) entry 7"), std::string::npos) << p.reason;
    EXPECT_EQ(st.get_stats().hits_of_tier("redis"), 1);
    EXPECT_EQ(st.get_stats().hits_of_tier("disk"), 0);
    st.tier_load_failed(p);
    EXPECT_EQ(st.get_stats().hits_of_tier("redis"), 0);
    EXPECT_EQ(st.get_stats().misses, 1);
    EXPECT_EQ(st.get_stats().rejections.at("redis_failed"), 1);
    EXPECT_EQ(st.get_stats().rejections.count("disk_damaged"), 0u);

    // Redis no longer than the disk: the disk's file.
    store st2(hybrid_config(), true);
    st2.attach_tier(&d, disk_tier::kind());
    st2.attach_tier(&r, redis_tier::kind());
    r.offer->n = 50;
    auto q = st2.plan(k, seq(0, 70), {}, 2.0);
    EXPECT_EQ(q.tier, 0);
    EXPECT_EQ(q.tier_name, "disk");
    EXPECT_EQ(q.tier_copy, 5u);
    EXPECT_EQ(st2.get_stats().hits_of_tier("disk"), 1);
    EXPECT_EQ(st2.get_stats().hits_of_tier("redis"), 0);
}

TEST(StoreRedis, WritesBehindWithoutADiskAndAnchorsOnceThePinIsMade) {
    store st(hybrid_config(), true);
    fake_disk r;
    st.attach_tier(&r, redis_tier::kind());
    const key k{"b", "s"};
    park(st, k, seq(0, 40), 3, 10.0);
    auto jobs = st.take_idle_writes(41.0, 30);
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_EQ(jobs[0].toks, seq(0, 40));
    st.tier_written(jobs[0].entry_id, 1);  // Redis's completion when there is no disk tier
    EXPECT_TRUE(st.take_idle_writes(100.0, -1).empty());

    ASSERT_TRUE(st.reserve(100));
    st.commit_anchor(k, seq(0, 20), fake(100), 100, 11.0);
    auto spills = st.take_spills();
    ASSERT_EQ(spills.size(), 1u);  // at once, not when idle
    EXPECT_TRUE(spills[0].anchor);
    EXPECT_EQ(spills[0].toks, seq(0, 20));
    st.check_invariants();

    // Disk only: an anchor waits for the write-behind's triggers, as before.
    store st2(hybrid_config(), true);
    fake_disk d;
    st2.attach_tier(&d, disk_tier::kind());
    ASSERT_TRUE(st2.reserve(100));
    st2.commit_anchor(k, seq(0, 20), fake(100), 100, 11.0);
    EXPECT_TRUE(st2.take_spills().empty());
}

}  // namespace
}  // namespace lineage::cache
