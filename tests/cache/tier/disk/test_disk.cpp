// Unit tests of tier 2 (docs/prompt-cache.md "Disk tier") with fake states, no model: the blob file
// format (round trip, every check on load), the disk tier (index across restarts, crash leftovers,
// capacity LRU with anchors last, damaged files, another model's files, superseded deletion, lookup
// rules) and the store's write-behind hooks (idle writes, spills, ancestors, absorption from disk).
#include "cache/tier/disk/disk_format.h"
#include "cache/tier/disk/disk_tier.h"
#include "cache/store/store.h"

#include "disk_fixture.h"
#include "fake_states.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>

namespace lineage::cache {
namespace {

using fakes::seq;
using fakes::fake;
using fakes::cat;

namespace fs = std::filesystem;

// --- file format -------------------------------------------------------------------------------

using DiskFormat = TempDir;

TEST_F(DiskFormat, RoundTripKeepsEverySection) {
    auto r = record(seq(10, 50), 777, {{20, point_kind::turn, fake(64, 1)}, {49, point_kind::guard, fake(32, 2)}});
    r.anchor = true;
    ASSERT_TRUE(write_disk_file(path("a"), r).is_ok());
    EXPECT_EQ(fs::file_size(path("a")), copy_record_size(r));
    auto got = read_disk_file(path("a"), "model-a");
    ASSERT_EQ(got.error, tier_load_error::none) << got.detail;
    const copy_record & g = *got.record;
    EXPECT_EQ(g.toks, r.toks);
    EXPECT_EQ(g.bucket, "bucket-1");
    EXPECT_EQ(g.session, "s1");
    EXPECT_EQ(g.history, 48);
    EXPECT_TRUE(g.anchor);
    EXPECT_EQ(*g.full, *r.full);
    ASSERT_EQ(g.checkpoints.size(), 2u);
    EXPECT_EQ(g.checkpoints[0].n_tokens, 20);
    EXPECT_EQ(g.checkpoints[0].kind, point_kind::turn);
    EXPECT_EQ(*g.checkpoints[0].recurrent, blob(64, 1));
    EXPECT_EQ(g.checkpoints[1].n_tokens, 49);
    EXPECT_EQ(*g.checkpoints[1].recurrent, blob(32, 2));
}

TEST_F(DiskFormat, AFilteredReadKeepsOnlyTheNamedCheckpointsAndChecksEveryByte) {
    auto r = record(seq(10, 50), 777,
                    {{10, point_kind::ladder, fake(64, 1)},
                     {20, point_kind::ladder, fake(64, 2)},
                     {30, point_kind::ladder, fake((3 << 20) + 5, 3)}});  // read through the buffer in 4 steps
    ASSERT_TRUE(write_disk_file(path("a"), r).is_ok());
    auto got = read_disk_file(path("a"), "model-a", checkpoint_filter{.up_to = -1, .at = 20});
    ASSERT_EQ(got.error, tier_load_error::none) << got.detail;
    ASSERT_EQ(got.record->checkpoints.size(), 1u);
    EXPECT_EQ(got.record->checkpoints[0].n_tokens, 20);
    EXPECT_EQ(*got.record->checkpoints[0].recurrent, blob(64, 2));
    EXPECT_EQ(*got.record->full, *r.full);
    got = read_disk_file(path("a"), "model-a", checkpoint_filter{.up_to = 20, .at = -1});
    ASSERT_EQ(got.error, tier_load_error::none) << got.detail;
    ASSERT_EQ(got.record->checkpoints.size(), 2u);
    EXPECT_EQ(got.record->checkpoints[1].n_tokens, 20);
    // A byte of a checkpoint not kept (the last one's last, just before the checksum) is still checked.
    std::ifstream in(path("a"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    bytes[bytes.size() - 9] = static_cast<char>(bytes[bytes.size() - 9] ^ 0x10);
    std::ofstream(path("b"), std::ios::binary | std::ios::trunc) << bytes;
    got = read_disk_file(path("b"), "model-a", checkpoint_filter{.up_to = -1, .at = 20});
    EXPECT_EQ(got.error, tier_load_error::corrupt) << got.detail;
    EXPECT_FALSE(got.record.has_value());
}

TEST_F(DiskFormat, EveryFlippedByteIsCaught) {
    auto r = record(seq(0, 8), 16, {{4, point_kind::turn, fake(8)}});
    ASSERT_TRUE(write_disk_file(path("a"), r).is_ok());
    const auto size = fs::file_size(path("a"));
    std::ifstream in(path("a"), std::ios::binary);
    const std::string orig((std::istreambuf_iterator<char>(in)), {});
    for (size_t i = 0; i < size; ++i) {
        std::string bad = orig;
        bad[i] = static_cast<char>(bad[i] ^ 0x10);
        std::ofstream(path("b"), std::ios::binary | std::ios::trunc) << bad;
        auto got = read_disk_file(path("b"), "model-a");
        EXPECT_NE(got.error, tier_load_error::none) << "byte " << i << " flipped went unnoticed";
        EXPECT_FALSE(got.record.has_value());
    }
}

TEST_F(DiskFormat, TruncatedMissingForeignAndOtherFormat) {
    auto r = record(seq(0, 20), 200);
    ASSERT_TRUE(write_disk_file(path("a"), r).is_ok());
    fs::resize_file(path("a"), fs::file_size(path("a")) - 9);
    EXPECT_EQ(read_disk_file(path("a"), "model-a").error, tier_load_error::truncated);
    fs::resize_file(path("a"), 10);
    EXPECT_EQ(read_disk_file(path("a"), "model-a").error, tier_load_error::truncated);
    EXPECT_EQ(read_disk_file(path("nope"), "model-a").error, tier_load_error::missing);
    ASSERT_TRUE(write_disk_file(path("c"), r).is_ok());
    EXPECT_EQ(read_disk_file(path("c"), "model-b").error, tier_load_error::other_model);
    // Version field (bytes 8-11) of a later format.
    std::fstream f(path("c"), std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(8);
    const uint32_t v = copy_format_version + 1;
    f.write(reinterpret_cast<const char *>(&v), sizeof v);
    f.close();
    EXPECT_EQ(read_disk_file(path("c"), "model-a").error, tier_load_error::other_format);
    std::ofstream(path("d"), std::ios::binary) << "definitely not a cache file at all";
    EXPECT_EQ(read_disk_file(path("d"), "model-a").error, tier_load_error::bad_magic);
}

TEST_F(DiskFormat, ModelFingerprintDependsOnContent) {
    std::ofstream(path("m1"), std::ios::binary) << std::string(1000, 'x');
    std::ofstream(path("m2"), std::ios::binary) << std::string(999, 'x') << 'y';
    const std::string a = model_fingerprint(path("m1"));
    EXPECT_EQ(a.size(), 32u);
    EXPECT_EQ(a, model_fingerprint(path("m1")));
    EXPECT_NE(a, model_fingerprint(path("m2")));
    EXPECT_THROW(model_fingerprint(path("absent")), std::runtime_error);
}

// --- disk tier ---------------------------------------------------------------------------------

using DiskTier = TempDir;

TEST_F(DiskTier, SurvivesRestartAndLoads) {
    copy_id id = 0;
    {
        disk_tier t(cfg());
        id = put(t, record(seq(0, 40), 500, {{30, point_kind::turn, fake(50)}}));
        ASSERT_NE(id, 0u);
        EXPECT_EQ(t.get_stats().files, 1);
        EXPECT_EQ(t.get_stats().writes, 1);
    }
    disk_tier t(cfg());
    const auto st = t.get_stats();
    EXPECT_EQ(st.files, 1);
    EXPECT_EQ(st.bytes, fs::file_size(path(std::to_string(id) + ".lcache")));
    // Whole file is a prefix of the prompt: full restore at 40.
    auto c = t.best("bucket-1", "s1", seq(0, 60), 0);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->id, id);
    EXPECT_EQ(c->n, 40);
    EXPECT_EQ(c->kind, point_kind::full);
    auto r = t.load(id).get();
    ASSERT_EQ(r.error, tier_load_error::none);
    EXPECT_EQ(r.record->toks, seq(0, 40));
    EXPECT_EQ(t.get_stats().loads, 1);
}

// A load's last use reaches the index after the load is answered (a tick, or the shutdown), and
// the eviction order after a restart follows it: the file loaded last is kept, the older one goes.
TEST_F(DiskTier, ALoadsLastUseOutlivesARestart) {
    const uint64_t one = copy_record_size(record(seq(0, 10), 1000));
    copy_id a = 0;
    copy_id b = 0;
    {
        disk_tier t(cfg(2 * one));
        a = put(t, record(seq(0, 10), 1000), {}, /*last_use=*/1);
        b = put(t, record(seq(100, 10), 1000), {}, /*last_use=*/2);
        ASSERT_EQ(t.load(a).get().error, tier_load_error::none);  // a is now the most recent
    }
    disk_tier t(cfg(2 * one));
    ASSERT_EQ(t.get_stats().files, 2);
    ASSERT_NE(put(t, record(seq(200, 10), 1000), {}, 3), 0u);  // room for it: the least recent goes
    EXPECT_TRUE(fs::exists(path(std::to_string(a) + ".lcache")));
    EXPECT_FALSE(fs::exists(path(std::to_string(b) + ".lcache")));
}

TEST_F(DiskTier, LookupRules) {
    disk_tier t(cfg(1 << 20, /*hybrid=*/true));
    const copy_id a = put(t, record(seq(0, 40), 100, {{10, point_kind::turn, fake(8)}, {30, point_kind::turn, fake(8)}}));
    tokens diverged = seq(0, 35);
    diverged.push_back(-5);
    diverged.push_back(-6);
    // Hybrid: a prompt that leaves the file at 35 restores the checkpoint at 30, not 35.
    auto c = t.best("bucket-1", "s1", diverged, 0);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->id, a);
    EXPECT_EQ(c->n, 30);
    EXPECT_EQ(c->kind, point_kind::turn);
    // Only something longer than what memory offers.
    EXPECT_FALSE(t.best("bucket-1", "s1", diverged, 30));
    // Another bucket never matches.
    EXPECT_FALSE(t.best("bucket-2", "s1", diverged, 0));
    // A verbatim resend: at most |prompt| - 1, so the checkpoint at 30.
    c = t.best("bucket-1", "s1", seq(0, 40), 0);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->n, 30);
    // Session precedence: another session's file only when strictly longer.
    auto other = record(seq(0, 45), 100);
    other.session = "s2";
    const copy_id b = put(t, other);
    c = t.best("bucket-1", "s1", seq(0, 60), 0);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->id, b);  // 45 > 40
    EXPECT_FALSE(c->same_session);
    auto shorter = record(seq(0, 40), 100);
    shorter.session = "s3";
    put(t, shorter);
    c = t.best("bucket-1", "s1", seq(0, 42), 0);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->id, a);  // equal length: in-session wins over s3's file
}

TEST_F(DiskTier, DenseRestoresAnyPrefix) {
    disk_tier t(cfg(1 << 20, /*hybrid=*/false));
    put(t, record(seq(0, 40), 100));
    tokens p = seq(0, 25);
    p.push_back(-1);
    auto c = t.best("bucket-1", "s1", p, 0);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->n, 25);
    EXPECT_EQ(c->kind, point_kind::prefix);
}

TEST_F(DiskTier, CapacityEvictsLeastRecentlyUsedAnchorsLast) {
    const uint64_t one = copy_record_size(record(seq(0, 10), 1000));
    disk_tier t(cfg(3 * one));
    auto anchor = record(seq(0, 10), 1000);
    anchor.anchor = true;
    const copy_id f_anchor = put(t, anchor, {}, /*last_use=*/1);
    const copy_id f2 = put(t, record(seq(100, 10), 1000), {}, 2);
    const copy_id f3 = put(t, record(seq(200, 10), 1000), {}, 3);
    EXPECT_EQ(t.get_stats().bytes, 3 * one);
    // A fourth file: the oldest non-anchor goes (f2), not the older anchor.
    const copy_id f4 = put(t, record(seq(300, 10), 1000), {}, 4);
    ASSERT_NE(f4, 0u);
    auto st = t.get_stats();
    EXPECT_EQ(st.files, 3);
    EXPECT_EQ(st.evictions, 1);
    EXPECT_LE(st.bytes, 3 * one);
    EXPECT_FALSE(fs::exists(path(std::to_string(f2) + ".lcache")));
    EXPECT_TRUE(fs::exists(path(std::to_string(f_anchor) + ".lcache")));
    // Two more: f3, then f4 go; then only the anchor is left to evict (last, not exempt).
    put(t, record(seq(400, 10), 1000), {}, 5);
    put(t, record(seq(500, 10), 1000), {}, 6);
    EXPECT_FALSE(fs::exists(path(std::to_string(f3) + ".lcache")));
    EXPECT_FALSE(fs::exists(path(std::to_string(f4) + ".lcache")));
    EXPECT_TRUE(fs::exists(path(std::to_string(f_anchor) + ".lcache")));
    // A file that needs the whole cap: the two newer non-anchors go first, the anchor last.
    const copy_id big = put(t, record(seq(600, 10), 1000 + 2 * one - 50), {}, 7);
    ASSERT_NE(big, 0u);
    EXPECT_FALSE(fs::exists(path(std::to_string(f_anchor) + ".lcache")));
    st = t.get_stats();
    EXPECT_EQ(st.files, 1);
    EXPECT_EQ(st.evictions, 6);
    EXPECT_EQ(st.anchor_files, 0);
    EXPECT_EQ(st.bytes, 3 * one - 50);
    // Larger than the whole cap: not written, nothing evicted for it.
    EXPECT_EQ(put(t, record(seq(0, 10), 4 * one)), 0u);
    EXPECT_EQ(t.get_stats().files, 1);
    EXPECT_EQ(t.get_stats().write_failures, 1);
}

TEST_F(DiskTier, SupersededFilesGoOnlyAfterTheSuccessorIsWritten) {
    disk_tier t(cfg());
    const copy_id old1 = put(t, record(seq(0, 20), 100));
    const copy_id old2 = put(t, record(seq(0, 30), 100));
    const copy_id next = put(t, record(seq(0, 40), 100), {old1, old2});
    ASSERT_NE(next, 0u);
    EXPECT_FALSE(fs::exists(path(std::to_string(old1) + ".lcache")));
    EXPECT_FALSE(fs::exists(path(std::to_string(old2) + ".lcache")));
    EXPECT_TRUE(fs::exists(path(std::to_string(next) + ".lcache")));
    EXPECT_EQ(t.get_stats().superseded, 2);
    // A successor that cannot be written keeps its ancestors.
    const copy_id keep = put(t, record(seq(0, 50), 100));
    EXPECT_EQ(put(t, record(seq(0, 60), 10 << 20), {keep}), 0u);
    EXPECT_TRUE(fs::exists(path(std::to_string(keep) + ".lcache")));
}

TEST_F(DiskTier, DamagedFileIsAMissDeletedOnce) {
    disk_tier t(cfg());
    const copy_id id = put(t, record(seq(0, 40), 500));
    {
        std::fstream f(path(std::to_string(id) + ".lcache"), std::ios::binary | std::ios::in | std::ios::out);
        f.seekp(200);
        f.put('\x5a');
    }
    auto r = t.load(id).get();
    EXPECT_EQ(r.error, tier_load_error::corrupt);
    EXPECT_FALSE(r.record);
    EXPECT_FALSE(fs::exists(path(std::to_string(id) + ".lcache")));
    EXPECT_EQ(t.get_stats().damaged, 1);
    EXPECT_EQ(t.get_stats().files, 0);
    EXPECT_FALSE(t.best("bucket-1", "s1", seq(0, 60), 0));
    // Loading it again: gone, not damaged twice.
    EXPECT_EQ(t.load(id).get().error, tier_load_error::missing);
    EXPECT_EQ(t.get_stats().damaged, 1);
}

TEST_F(DiskTier, StartupCleansCrashLeftoversAndIgnoresOtherModels) {
    copy_id kept = 0, cut = 0;
    {
        disk_tier t(cfg());
        kept = put(t, record(seq(0, 40), 500));
        cut = put(t, record(seq(100, 40), 500));
    }
    {
        disk_config other = cfg();
        other.model = "model-b";
        disk_tier t(other);
        EXPECT_EQ(t.get_stats().ignored_other_model, 2);
        EXPECT_EQ(t.get_stats().files, 0);
        EXPECT_FALSE(t.best("bucket-1", "s1", seq(0, 60), 0));
        put(t, record(seq(0, 40), 500));  // model-b's own file
    }
    // Crash leftovers: a write cut short, an unindexed file, an indexed file cut short.
    std::ofstream(path("99.tmp")) << "half a file";
    std::ofstream(path("98.lcache")) << "renamed but never indexed";
    fs::resize_file(path(std::to_string(cut) + ".lcache"), 100);
    disk_tier t(cfg());
    const auto st = t.get_stats();
    EXPECT_EQ(st.files, 1);
    EXPECT_EQ(st.ignored_other_model, 1);
    EXPECT_EQ(st.removed_at_startup, 2);
    EXPECT_EQ(st.damage.at("truncated"), 1);  // indexed, so fsync'd whole: damage, not a crash
    EXPECT_EQ(st.damaged, 1);
    EXPECT_FALSE(fs::exists(path("99.tmp")));
    EXPECT_FALSE(fs::exists(path("98.lcache")));
    EXPECT_FALSE(fs::exists(path(std::to_string(cut) + ".lcache")));
    EXPECT_TRUE(fs::exists(path(std::to_string(kept) + ".lcache")));
    // Ids come from the index (one past the largest, model-b's file 3 included), never from names.
    EXPECT_EQ(put(t, record(seq(0, 50), 10)), 4u);
}

TEST_F(DiskTier, DamagedIndexIsMovedAsideAndTheTierStillWorks) {
    copy_id a = 0;
    {
        disk_tier t(cfg());
        a = put(t, record(seq(0, 40), 500));
    }
    std::ofstream(path("index.sqlite"), std::ios::binary | std::ios::trunc) << "not a database, not at all";
    fs::remove(path("index.sqlite-wal"));
    disk_tier t(cfg());
    EXPECT_TRUE(fs::exists(path("index.sqlite.damaged")));
    const auto st = t.get_stats();
    EXPECT_EQ(st.damage.at("index"), 1);
    EXPECT_EQ(st.files, 1);  // the file the damaged index listed, indexed again from its header
    EXPECT_EQ(st.reindexed, 1);
    EXPECT_EQ(st.removed_at_startup, 0);
    auto c = t.best("bucket-1", "s1", seq(0, 60), 0);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->id, a);
    EXPECT_EQ(put(t, record(seq(100, 40), 500)), a + 1);
}

TEST_F(DiskTier, OneServerPerDirectory) {
    disk_tier t(cfg());
    EXPECT_THROW(disk_tier second(cfg()), std::runtime_error);
}

TEST_F(DiskTier, ResetDeletesThisModelsFiles) {
    disk_tier t(cfg());
    put(t, record(seq(0, 40), 500));
    put(t, record(seq(50, 40), 500));
    const uint64_t bytes = t.get_stats().bytes;
    const auto [files, freed] = t.reset();
    EXPECT_EQ(files, 2);
    EXPECT_EQ(freed, bytes);
    EXPECT_EQ(t.get_stats().files, 0);
    EXPECT_EQ(t.get_stats().bytes, 0u);
}

TEST_F(DiskTier, ResetOfATenantDeletesOnlyItsFilesAlsoAfterARestart) {
    auto of = [](const std::string & tenant, tokens toks) {
        copy_record r = record(std::move(toks), 500);
        r.tenant = tenant;
        r.bucket = "bucket-" + tenant;  // the tenant is a dimension of the bucket digest
        return r;
    };
    const uint64_t alice_bytes = copy_record_size(of("alice", seq(0, 40))) + copy_record_size(of("alice", seq(50, 40)));
    {
        disk_tier t(cfg());
        put(t, of("alice", seq(0, 40)));
        put(t, of("bob", seq(0, 40)));
        put(t, of("alice", seq(50, 40)));
        put(t, of("", seq(100, 40)));
        EXPECT_EQ(t.get_stats().files, 4);
    }
    {
        // After a restart the tenant comes from the index rows.
        disk_tier t(cfg());
        EXPECT_EQ(t.get_stats().files, 4);
        const auto [files, freed] = t.reset("alice");
        EXPECT_EQ(files, 2);
        EXPECT_EQ(freed, alice_bytes);
        t.check_invariants();
        EXPECT_EQ(t.get_stats().files, 2);
        EXPECT_EQ(blob_files().size(), 2u);
        EXPECT_FALSE(t.best("bucket-alice", "s1", seq(0, 60), 0));
        // Positive: the other tenants' files are untouched and load.
        auto c = t.best("bucket-bob", "s1", seq(0, 60), 0);
        ASSERT_TRUE(c);
        EXPECT_EQ(t.load(c->id, {"bucket-bob", seq(0, c->n)}).get().error, tier_load_error::none);
        EXPECT_TRUE(t.best("bucket-", "s1", seq(100, 60), 0));
        EXPECT_EQ(t.reset("alice").first, 0);
    }
    // And after a second restart the reset holds (the rows went with the files).
    disk_tier t(cfg());
    EXPECT_EQ(t.get_stats().files, 2);
    EXPECT_EQ(t.get_stats().removed_at_startup, 0);
    EXPECT_EQ(t.reset("bob").first, 1);
}

// --- store hooks -------------------------------------------------------------------------------

TEST(StoreDisk, IdleWritesThenAbsorptionSupersedesTheFile) {
    store st(hybrid_config(), true);
    fake_disk d;
    st.attach_tier(&d, disk_tier::kind());
    const key k{"b", "s"};
    park(st, k, seq(0, 40), 3, 10.0);
    EXPECT_TRUE(st.take_idle_writes(15.0, 30).empty());  // used 5 s ago
    auto jobs = st.take_idle_writes(41.0, 30);
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_EQ(jobs[0].seq, 3);  // parked: the scheduler reads the sequence
    EXPECT_EQ(jobs[0].toks, seq(0, 40));
    EXPECT_TRUE(st.take_idle_writes(100.0, 30).empty());  // being written
    st.tier_written(jobs[0].entry_id, 11);
    EXPECT_EQ(st.entries()[0].tier_copy, 11u);
    EXPECT_TRUE(st.take_idle_writes(100.0, -1).empty());  // has its copy
    // The next turn absorbs it: the new entry supersedes file 11.
    auto p = st.plan(k, seq(0, 50), {}, 101.0);
    EXPECT_TRUE(p.absorbs);
    EXPECT_EQ(p.tier_ancestors, std::vector<copy_id>{11});
    park(st, k, seq(0, 50), 3, 101.0, p);
    auto shut = st.take_idle_writes(102.0, -1);
    ASSERT_EQ(shut.size(), 1u);
    EXPECT_EQ(shut[0].ancestors, std::vector<copy_id>{11});
    st.check_invariants();
}

TEST(StoreDisk, UnderLoadAnEntryUnwrittenTooLongIsWrittenOnePerCall) {
    store st(hybrid_config(), true);
    fake_disk d;
    st.attach_tier(&d, disk_tier::kind());
    const key k{"b", "s"};
    park(st, k, seq(0, 40), 1, 10.0);
    park(st, k, seq(1000, 40), 2, 12.0);
    EXPECT_FALSE(st.take_overdue_write(19.0, 10));  // 9 s < 10 s
    EXPECT_FALSE(st.take_overdue_write(100.0, 0));   // 0 = off
    // Both overdue: one per call, the longest unwritten first.
    auto j = st.take_overdue_write(22.5, 10);
    ASSERT_TRUE(j);
    EXPECT_EQ(j->toks, seq(0, 40));
    EXPECT_EQ(j->seq, 1);
    auto j2 = st.take_overdue_write(22.5, 10);
    ASSERT_TRUE(j2);
    EXPECT_EQ(j2->toks, seq(1000, 40));
    EXPECT_FALSE(st.take_overdue_write(22.5, 10));  // both in flight
    st.check_invariants();
}

TEST(StoreDisk, AConversationExtendedFasterThanTheBoundIsStillWritten) {
    // Each turn absorbs the last before the bound: the unwritten time carries over.
    store st(hybrid_config(), true);
    fake_disk d;
    st.attach_tier(&d, disk_tier::kind());
    const key k{"b", "s"};
    park(st, k, seq(0, 40), 1, 0.0);
    double now = 0;
    int32_t n = 40;
    for (; now < 9; now += 3) {
        EXPECT_FALSE(st.take_overdue_write(now, 10)) << "at " << now;
        auto p = st.plan(k, seq(0, n + 10), {}, now);
        ASSERT_TRUE(p.absorbs);
        EXPECT_EQ(p.unwritten_since, 0.0);
        n += 10;
        park(st, k, seq(0, n), 1, now, p);
    }
    auto j = st.take_overdue_write(10.0, 10);
    ASSERT_TRUE(j);
    EXPECT_EQ(j->toks, seq(0, n));
    // Once it has a copy, the next turn's clock starts at its own commit.
    st.tier_written(j->entry_id, 9);
    auto p = st.plan(k, seq(0, n + 10), {}, 11.0);
    ASSERT_TRUE(p.absorbs);
    EXPECT_EQ(p.unwritten_since, -1.0);
    park(st, k, seq(0, n + 10), 1, 11.0, p);
    EXPECT_FALSE(st.take_overdue_write(20.0, 10));
    EXPECT_TRUE(st.take_overdue_write(21.0, 10));
}

TEST(StoreDisk, AbsorbedWhileBeingWrittenPassesTheFileOn) {
    store st(hybrid_config(), true);
    fake_disk d;
    st.attach_tier(&d, disk_tier::kind());
    const key k{"b", "s"};
    park(st, k, seq(0, 40), 1, 1.0);
    auto jobs = st.take_idle_writes(100.0, 30);
    ASSERT_EQ(jobs.size(), 1u);
    auto p = st.plan(k, seq(0, 50), {}, 101.0);
    ASSERT_TRUE(p.absorbs);
    EXPECT_EQ(p.pending_write_of, jobs[0].entry_id);
    park(st, k, seq(0, 50), 1, 101.0, p);
    st.tier_written(jobs[0].entry_id, 21);  // the old entry's write lands after it was absorbed
    auto shut = st.take_idle_writes(102.0, -1);
    ASSERT_EQ(shut.size(), 1u);
    EXPECT_EQ(shut[0].ancestors, std::vector<copy_id>{21});
}

TEST(StoreDisk, LeavingRamSpillsToDisk) {
    config c = hybrid_config();
    c.max_entries = 1;
    store st(c, true);
    fake_disk d;
    st.attach_tier(&d, disk_tier::kind());
    const key k{"b", "s"};
    park(st, k, seq(0, 40), 1, 1.0);
    park(st, k, seq(100, 40), 2, 2.0);  // entry cap 1: the first leaves (lru)
    auto spills = st.take_spills();
    ASSERT_EQ(spills.size(), 1u);
    EXPECT_EQ(spills[0].toks, seq(0, 40));
    EXPECT_EQ(spills[0].seq, 1);  // read before take_released_seqs() frees it
    EXPECT_EQ(st.take_released_seqs(), std::vector<int32_t>{1});
    // Without a disk tier nothing is spilled.
    store plain(c, true);
    park(plain, k, seq(0, 40), 1, 1.0);
    park(plain, k, seq(100, 40), 2, 2.0);
    EXPECT_TRUE(plain.take_spills().empty());
}

/** Commits `toks` parked on a sequence, then demotes it to RAM as a whole-state blob of `bytes`. */
void park_in_ram(store & st, const key & k, tokens toks, uint64_t bytes, double now) {
    park(st, k, std::move(toks), 1, now);
    auto v = st.device_lru();
    ASSERT_TRUE(v);
    ASSERT_TRUE(st.reserve(bytes, v->id));
    st.demote(v->id, fake(bytes), bytes);
}

// Ladder jobs (docs/architecture.md "Ladder jobs"): an anchor whose job is pending stays in RAM
// though written, and the rungs the job adds to a written anchor make it written again (the old
// file superseded), so that its file holds them after a RAM release or a restart.
TEST(StoreDisk, AnAnchorWaitingForItsLadderJobStaysInRamAndIsWrittenAgainWithTheRungs) {
    config c = hybrid_config();
    c.ram_release_s = 30;
    store st(c, true);
    fake_disk d;
    st.attach_tier(&d, disk_tier::kind());
    const key k{"b", "s"};
    const tokens anchor = seq(500, 100);
    st.commit_anchor(k, anchor, fake(100), 100, 10.0);
    st.hold_for_rungs(k, anchor, true);
    auto jobs = st.take_idle_writes(41.0, 30);
    ASSERT_EQ(jobs.size(), 1u);
    st.tier_written(jobs[0].entry_id, 21);
    EXPECT_EQ(st.release_written(100.0), 0u);  // held for its ladder job
    ASSERT_TRUE(st.reserve(10));
    std::vector<checkpoint> rungs;
    rungs.push_back({60, point_kind::ladder, fake(10)});
    EXPECT_EQ(st.add_rungs(k, anchor, std::move(rungs), 10, 101.0), 1);
    st.hold_for_rungs(k, anchor, false);
    st.check_invariants();
    EXPECT_EQ(st.release_written(200.0), 0u);  // no file with the rung yet
    auto again = st.take_idle_writes(201.0, 30);
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].ancestors, std::vector<copy_id>{21});  // the file without the rung goes
    ASSERT_EQ(again[0].checkpoints.size(), 1u);
    EXPECT_EQ(again[0].checkpoints[0].n_tokens, 60);
    st.tier_written(again[0].entry_id, 22);
    EXPECT_EQ(st.release_written(300.0), 110u);  // now it gives its RAM back
    st.check_invariants();
}

// Rungs a ladder job adds while the anchor's write is in flight: that write took its job before
// them, so when it lands its file is superseded and the anchor is written again with the rungs.
TEST(StoreDisk, RungsAddedWhileTheAnchorIsBeingWrittenMakeItWrittenAgainWhenThatWriteLands) {
    config c = hybrid_config();
    c.ram_release_s = 30;
    store st(c, true);
    fake_disk d;
    st.attach_tier(&d, disk_tier::kind());
    const key k{"b", "s"};
    const tokens anchor = seq(500, 100);
    st.commit_anchor(k, anchor, fake(100), 100, 10.0);
    st.hold_for_rungs(k, anchor, true);
    auto jobs = st.take_idle_writes(41.0, 30);
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_TRUE(jobs[0].checkpoints.empty());  // written without rungs
    ASSERT_TRUE(st.reserve(10));
    std::vector<checkpoint> rungs;
    rungs.push_back({60, point_kind::ladder, fake(10)});
    EXPECT_EQ(st.add_rungs(k, anchor, std::move(rungs), 10, 42.0), 1);  // while the write is in flight
    st.hold_for_rungs(k, anchor, false);
    st.tier_written(jobs[0].entry_id, 21);
    st.check_invariants();
    ASSERT_EQ(st.entries().size(), 1u);
    EXPECT_EQ(st.entries()[0].tier_copy, 0u);  // the file lacks the rung: not its copy
    EXPECT_EQ(st.release_written(200.0), 0u);  // so it keeps its RAM
    auto again = st.take_idle_writes(201.0, 30);
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].ancestors, std::vector<copy_id>{21});  // the file without the rung goes
    ASSERT_EQ(again[0].checkpoints.size(), 1u);
    EXPECT_EQ(again[0].checkpoints[0].n_tokens, 60);
    st.tier_written(again[0].entry_id, 22);
    EXPECT_EQ(st.entries()[0].tier_copy, 22u);
    EXPECT_EQ(st.release_written(300.0), 110u);
    st.check_invariants();
}

// A ladder job starts from the latest RAM state before its first rung, often the tools anchor
// before the system anchor whose rungs it makes: that earlier anchor is held in RAM with it, as
// long as any job needs it (bench-qwen35: released to its file after 5 s, every job of the trace
// then had to start from token 0, too far to run before a request's plan).
TEST(StoreDisk, ALadderJobHoldsTheEarlierAnchorItStartsFromInRam) {
    config c = hybrid_config();
    c.ram_release_s = 30;
    store st(c, true);
    fake_disk d;
    st.attach_tier(&d, disk_tier::kind());
    const key k{"b", "s"};
    const tokens tools = seq(500, 40);
    const tokens anchor = cat(tools, seq(700, 60));
    const tokens other = cat(tools, seq(900, 60));  // another system text on the same tools
    st.commit_anchor(k, tools, fake(100), 100, 10.0);
    st.commit_anchor(k, anchor, fake(100), 100, 10.0);
    st.commit_anchor(k, other, fake(100), 100, 10.0);
    st.hold_for_rungs(k, anchor, true);
    st.hold_for_rungs(k, other, true);
    for (const auto & j : st.take_idle_writes(41.0, 30)) {
        st.tier_written(j.entry_id, 20 + j.entry_id);
    }
    EXPECT_EQ(st.release_written(100.0), 0u);  // all three held: two jobs, one start
    const auto plan = st.plan_ladder_job(k, anchor, {60, 80});
    EXPECT_EQ(plan.op, restore_op::load_ram);
    EXPECT_EQ(plan.n_restore, 40);  // from the tools anchor, not from token 0
    EXPECT_EQ(plan.captures.size(), 2u);
    st.hold_for_rungs(k, anchor, false);
    EXPECT_EQ(st.release_written(101.0), 100u);  // its job done: that anchor goes; the tools anchor
                                                 // stays for the other job
    st.hold_for_rungs(k, other, false);
    EXPECT_EQ(st.release_written(102.0), 200u);
    EXPECT_TRUE(st.entries().empty());
    st.check_invariants();
}

TEST(StoreDisk, IdleRamEntriesAndAnchorsOnDiskGiveTheirRamBackAndTheirFilesServeTheNextHit) {
    config c = hybrid_config();
    c.ram_release_s = 30;
    store st(c, true);
    fake_disk d;
    st.attach_tier(&d, disk_tier::kind());
    const key k{"b", "s"};
    const key other{"b2", "s"};
    park_in_ram(st, k, seq(0, 40), 400, 10.0);
    st.commit_anchor(other, seq(500, 20), fake(100), 100, 10.0);
    park(st, other, cat(seq(500, 20), seq(900, 20)), 2, 10.0);  // parked on the device
    EXPECT_EQ(st.release_written(100.0), 0u);  // nothing has a file yet
    auto jobs = st.take_idle_writes(41.0, 30);
    ASSERT_EQ(jobs.size(), 3u);
    EXPECT_EQ(st.release_written(100.0), 0u);  // being written
    copy_id f = 10;
    for (const auto & j : jobs) {
        st.tier_written(j.entry_id, ++f);
    }
    EXPECT_EQ(st.release_written(39.0), 0u);  // used 29 s ago
    EXPECT_EQ(st.entries().size(), 3u);
    EXPECT_EQ(st.release_written(40.0), 500u);  // 30 s: the RAM entry and the anchor go
    st.check_invariants();
    const auto left = st.entries();
    ASSERT_EQ(left.size(), 1u);
    EXPECT_EQ(left[0].where, tier::device);  // parked: not RAM
    EXPECT_EQ(st.ram_bytes(), 0u);
    const auto s = st.get_stats();
    EXPECT_EQ(s.evictions.at("released"), 2);
    EXPECT_EQ(s.evictions.count("capacity"), 0u);
    // Its file serves the next turn (the disk tier's lookup), counted as a disk hit.
    d.offer = tier_candidate{11, 40, point_kind::turn, 40, 40, false, true};
    auto p = st.plan(k, seq(0, 50), {}, 101.0);
    EXPECT_EQ(p.op, restore_op::load_tier);
    EXPECT_EQ(p.n_restore, 40);
    EXPECT_EQ(st.get_stats().hits_of_tier("disk"), 1);
    st.tier_load_failed(p);
    // Released is not lost: a miss on it (the file gone meanwhile) is not counted "evicted".
    d.offer.reset();
    auto q = st.plan(k, seq(0, 50), {}, 102.0);
    EXPECT_EQ(q.n_restore, 0);
    EXPECT_EQ(st.get_stats().misses_by_cause.count("evicted"), 0u);
}

TEST(StoreDisk, NoRamReleaseWhenOffOrWithoutADiskTier) {
    for (const bool with_disk : {false, true}) {
        config c = hybrid_config();
        c.ram_release_s = with_disk ? 0 : 30;  // off, or on without a disk tier
        store st(c, true);
        fake_disk d;
        if (with_disk) {
            st.attach_tier(&d, disk_tier::kind());
        }
        const key k{"b", "s"};
        park_in_ram(st, k, seq(0, 40), 400, 10.0);
        for (const auto & j : st.take_idle_writes(41.0, 30)) {
            st.tier_written(j.entry_id, 11);
        }
        EXPECT_EQ(st.release_written(1000.0), 0u) << with_disk;
        EXPECT_EQ(st.entries().size(), 1u) << with_disk;
    }
}

TEST(StoreDisk, DiskOnlyForSomethingLongerThanMemory) {
    store st(hybrid_config(), true);
    fake_disk d;
    st.attach_tier(&d, disk_tier::kind());
    const key k{"b", "s"};
    park(st, k, seq(0, 40), 1, 1.0);
    d.offer = tier_candidate{5, 30, point_kind::turn, 60, 55, false, true};
    auto p = st.plan(k, seq(0, 70), {}, 2.0);
    EXPECT_EQ(d.asked_longer_than, 40);  // the parked entry restores 40
    EXPECT_EQ(p.op, restore_op::take_device);
    EXPECT_EQ(p.n_restore, 40);
    // A longer file wins: load_tier, absorbing it when it reaches the file's history boundary.
    store st2(hybrid_config(), true);
    st2.attach_tier(&d, disk_tier::kind());
    d.offer = tier_candidate{5, 58, point_kind::turn, 60, 55, false, true};
    auto q = st2.plan(k, seq(0, 70), {}, 2.0);
    EXPECT_EQ(d.asked_longer_than, 3);  // min prefix 4
    EXPECT_EQ(q.op, restore_op::load_tier);
    EXPECT_EQ(q.tier_copy, 5u);
    EXPECT_EQ(q.n_restore, 58);
    EXPECT_TRUE(q.absorbs);
    EXPECT_EQ(q.tier_ancestors, std::vector<copy_id>{5});
    EXPECT_EQ(st2.get_stats().hits_of_tier("disk"), 1);
    st2.tier_load_failed(q);
    EXPECT_EQ(st2.get_stats().hits_of_tier("disk"), 0);
    EXPECT_EQ(st2.get_stats().misses, 1);
    EXPECT_EQ(st2.get_stats().rejections.at("disk_damaged"), 1);
}

}  // namespace
}  // namespace lineage::cache
