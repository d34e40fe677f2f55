// Unit tests of tier-2 damage (docs/prompt-cache.md "Disk tier"), no model: swapped files and
// swapped index rows, a load checked against the request's prompt, index rows with NULL,
// wrongly typed or out-of-range columns, rows of an older format, stray files with huge
// numeric names, FIFOs and symlinks in place of files, headers declaring sizes larger than the
// file, a corrupt index. Each case: never served, counted by kind, the file deleted, the tier
// keeps working (a positive case after each).
#include "cache/tier/disk/disk_format.h"
#include "cache/tier/disk/disk_index.h"
#include "cache/tier/disk/disk_tier.h"

#include "disk_fixture.h"
#include "fake_states.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <chrono>
#include <cstring>
#include <fstream>

#include <sys/stat.h>

namespace lineage::cache {
namespace {

using fakes::seq;

using DiskDamage = TempDir;

/** Runs `sql` on the index at `path` (the server is down). */
void sql(const std::string & path, const std::string & q) {
    sqlite3 * db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    char * err = nullptr;
    const int rc = sqlite3_exec(db, q.c_str(), nullptr, nullptr, &err);
    const std::string msg = err ? err : "";
    sqlite3_free(err);
    sqlite3_close(db);
    ASSERT_EQ(rc, SQLITE_OK) << msg << " in " << q;
}

std::string read_all(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

void write_all(const std::string & path, const std::string & bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string name(copy_id id) {
    return std::to_string(id) + ".lcache";
}

/** Offset of full_bytes in the header of a record_of-made file (model "model-a", bucket
 *  "bucket-1", session "s1", tenant ""). */
constexpr size_t full_bytes_offset = 8 + 4 + 4 + 8 + (4 + 7) + (4 + 8) + (4 + 2) + (4 + 0) + 4 + 8 + 4 + 1 + 4;

TEST_F(DiskDamage, HeaderCarriesTheFilesIdentity) {
    auto r = record(seq(10, 30), 100);
    r.id = 42;
    ASSERT_TRUE(write_disk_file(path("a"), r).is_ok());
    auto h = read_disk_header(path("a"), /*with_tokens=*/true);
    ASSERT_EQ(h.error, tier_load_error::none) << h.detail;
    EXPECT_EQ(h.record->id, 42u);
    EXPECT_EQ(h.record->bucket, "bucket-1");
    EXPECT_EQ(h.record->session, "s1");
    EXPECT_EQ(h.n_tokens, 30);
    EXPECT_EQ(h.digest, tokens_digest(seq(10, 30)));
    EXPECT_EQ(h.record->toks, seq(10, 30));
    EXPECT_EQ(h.version, copy_format_version);
    EXPECT_EQ(copy_format_version, 3u);
    EXPECT_EQ(read_disk_file(path("a"), "model-a").record->id, 42u);
}

TEST_F(DiskDamage, DeclaredSizesAreCheckedBeforeAllocating) {
    auto r = record(seq(0, 10), 64, {{5, point_kind::turn, fake(16)}});
    r.id = 1;
    ASSERT_TRUE(write_disk_file(path("a"), r).is_ok());
    const std::string orig = read_all(path("a"));
    // 1 GiB, 2^62, and a pair of sections whose sum wraps to the real size.
    const uint64_t cp_bytes_offset = full_bytes_offset + 8 + 4 + 1;
    struct craft { uint64_t full, cp; };
    for (craft c : {craft{1ull << 30, 16}, craft{1ull << 62, 16}, craft{~0ull - 100, 64 + 16 + 101}}) {
        std::string bad = orig;
        std::memcpy(bad.data() + full_bytes_offset, &c.full, 8);
        std::memcpy(bad.data() + cp_bytes_offset, &c.cp, 8);
        write_all(path("b"), bad);
        const auto t0 = std::chrono::steady_clock::now();
        tier_load_result got;
        ASSERT_NO_THROW(got = read_disk_file(path("b"), "model-a"));
        EXPECT_EQ(got.error, tier_load_error::truncated) << c.full << ": " << got.detail;
        EXPECT_FALSE(got.record);
        EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500)) << "allocated first?";
        EXPECT_EQ(read_disk_header(path("b")).error, tier_load_error::truncated);
    }
}

TEST_F(DiskDamage, OnlyRegularFilesAreOpened) {
    ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(read_disk_file(path("fifo"), "model-a").error, tier_load_error::not_regular);  // no writer: would block
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
    auto r = record(seq(0, 10), 64);
    r.id = 1;
    ASSERT_TRUE(write_disk_file(path("real"), r).is_ok());
    fs::create_symlink(path("real"), path("link"));
    EXPECT_EQ(read_disk_file(path("link"), "model-a").error, tier_load_error::not_regular);
    EXPECT_EQ(read_disk_file(path("real"), "model-a").error, tier_load_error::none);
    fs::create_directory(path("dir"));
    EXPECT_EQ(read_disk_file(path("dir"), "model-a").error, tier_load_error::not_regular);
    // Writes refuse a symlink planted at their temporary name.
    fs::create_symlink(path("victim"), path("planted.tmp"));
    EXPECT_FALSE(write_disk_file(path("planted.tmp"), r).is_ok());
    EXPECT_FALSE(fs::exists(path("victim")));
}

TEST_F(DiskDamage, SwappedFilesAreNeverServed) {
    copy_id a = 0, b = 0;
    {
        disk_tier t(cfg());
        a = put(t, record(seq(0, 40), 500));
        b = put(t, record(seq(1000, 40), 500));
    }
    ASSERT_EQ(fs::file_size(path(name(a))), fs::file_size(path(name(b))));
    fs::rename(path(name(a)), path("swap"));
    fs::rename(path(name(b)), path(name(a)));
    fs::rename(path("swap"), path(name(b)));
    disk_tier t(cfg());
    t.check_invariants();
    auto st = t.get_stats();
    EXPECT_EQ(st.files, 0);
    EXPECT_EQ(st.damaged, 2);
    EXPECT_EQ(st.damage.at("identity"), 2);
    EXPECT_TRUE(blob_files().empty());
    EXPECT_FALSE(t.best("bucket-1", "s1", seq(0, 60), 0));
    EXPECT_FALSE(t.best("bucket-1", "s1", seq(1000, 60), 0));
    // The tier keeps working.
    const copy_id c = put(t, record(seq(0, 40), 500));
    ASSERT_NE(c, 0u);
    auto r = t.load(c, {"bucket-1", seq(0, 39)}).get();
    ASSERT_EQ(r.error, tier_load_error::none) << r.detail;
    EXPECT_EQ(r.record->toks, seq(0, 40));
}

TEST_F(DiskDamage, FilesSwappedWhileRunningAreCaughtOnLoad) {
    disk_tier t(cfg());
    t.check_invariants();
    const copy_id a = put(t, record(seq(0, 40), 500));
    const copy_id b = put(t, record(seq(1000, 40), 500));
    fs::rename(path(name(a)), path("swap"));
    fs::rename(path(name(b)), path(name(a)));
    fs::rename(path("swap"), path(name(b)));
    auto c = t.best("bucket-1", "s1", seq(0, 60), 0);
    ASSERT_TRUE(c);
    ASSERT_EQ(c->id, a);
    auto r = t.load(a, {"bucket-1", seq(0, c->n)}).get();
    EXPECT_EQ(r.error, tier_load_error::identity) << r.detail;
    EXPECT_FALSE(r.record);
    EXPECT_EQ(t.get_stats().damage.at("identity"), 1);
    EXPECT_FALSE(fs::exists(path(name(a))));
    EXPECT_FALSE(t.best("bucket-1", "s1", seq(0, 60), 0));
}

TEST_F(DiskDamage, SwappedIndexRowsAreCaughtAtStartup) {
    copy_id a = 0, b = 0;
    {
        disk_tier t(cfg());
        a = put(t, record(seq(0, 40), 500));
        b = put(t, record(seq(1000, 40), 500));
    }
    // Swap the rows' keys and tokens (ids stay): each row now describes the other's file.
    const std::string A = std::to_string(a), B = std::to_string(b);
    sql(path("index.sqlite"), "UPDATE files SET id = -1 WHERE id = " + A + "; UPDATE files SET id = " + A +
                                  " WHERE id = " + B + "; UPDATE files SET id = " + B + " WHERE id = -1;");
    disk_tier t(cfg());
    t.check_invariants();
    EXPECT_EQ(t.get_stats().files, 0);
    EXPECT_EQ(t.get_stats().damage.at("identity"), 2);
    EXPECT_FALSE(t.best("bucket-1", "s1", seq(0, 60), 0));
}

TEST_F(DiskDamage, ALoadMustHoldTheRequestsPrefix) {
    disk_tier t(cfg());
    t.check_invariants();
    const copy_id a = put(t, record(seq(0, 40), 500));
    // The right file for another prompt (e.g. a catalog gone wrong): refused, counted, deleted.
    tokens other = seq(0, 30);
    other[29] = -7;
    auto r = t.load(a, {"bucket-1", other}).get();
    EXPECT_EQ(r.error, tier_load_error::identity);
    EXPECT_EQ(t.get_stats().damage.at("identity"), 1);
    EXPECT_EQ(t.get_stats().files, 0);
    const copy_id b = put(t, record(seq(0, 40), 500));
    EXPECT_EQ(t.load(b, {"bucket-2", seq(0, 30)}).get().error, tier_load_error::identity);
    // Positive: the right prefix and bucket load.
    const copy_id c = put(t, record(seq(0, 40), 500));
    EXPECT_EQ(t.load(c, {"bucket-1", seq(0, 30)}).get().error, tier_load_error::none);
    EXPECT_EQ(t.get_stats().loads, 1);
}

TEST_F(DiskDamage, DamagedIndexRowsAreSkippedCountedAndTheirFilesRemoved) {
    std::vector<copy_id> ids;
    {
        disk_tier t(cfg());
        for (int i = 0; i < 9; ++i) {
            ids.push_back(put(t, record(seq(100 * i, 40), 200)));
        }
    }
    // The schema says NOT NULL; an index edited by hand (or by a bug) need not: rebuild the
    // table without constraints, then damage one column per row.
    sql(path("index.sqlite"),
        "CREATE TABLE f2 AS SELECT * FROM files; DROP TABLE files; "
        "CREATE TABLE files (id INTEGER PRIMARY KEY, model, format, bucket, session, n_tokens, history, anchor, "
        "checkpoints, bytes, last_use, created, tokens, tenant); INSERT INTO files SELECT * FROM f2; DROP TABLE f2;");
    const char * damage[] = {"bucket = NULL",   "session = NULL",   "model = NULL",
                             "checkpoints = NULL", "tokens = x'0102'", "history = 99999",
                             "checkpoints = '5:1,3:1'", "tenant = NULL"};
    for (size_t i = 0; i < std::size(damage); ++i) {
        sql(path("index.sqlite"), std::string("UPDATE files SET ") + damage[i] + " WHERE id = " + std::to_string(ids[i]));
    }
    disk_tier t(cfg());
    t.check_invariants();
    const auto st = t.get_stats();
    EXPECT_EQ(st.damage.at("index_row"), 8);
    EXPECT_EQ(st.damaged, 8);
    EXPECT_EQ(st.files, 1);
    EXPECT_EQ(blob_files(), std::vector<std::string>{name(ids[8])});
    auto c = t.best("bucket-1", "s1", seq(800, 50), 0);
    ASSERT_TRUE(c);
    EXPECT_EQ(t.load(c->id, {"bucket-1", seq(800, c->n)}).get().error, tier_load_error::none);
    EXPECT_NE(put(t, record(seq(0, 40), 200)), 0u);
}

TEST_F(DiskDamage, OlderFormatRowsAreDiscarded) {
    copy_id a = 0;
    {
        disk_tier t(cfg());
        a = put(t, record(seq(0, 40), 200));
        put(t, record(seq(100, 40), 200));
    }
    sql(path("index.sqlite"), "UPDATE files SET format = 1 WHERE id = " + std::to_string(a));
    disk_tier t(cfg());
    t.check_invariants();
    EXPECT_EQ(t.get_stats().discarded_old_format, 1);
    EXPECT_EQ(t.get_stats().files, 1);
    EXPECT_FALSE(fs::exists(path(name(a))));
}

TEST_F(DiskDamage, AFormat2IndexGainsTheTenantColumnAndItsRowsAreDiscarded) {
    // An index as format 2 wrote it: no tenant column, rows of format 2 (the files are those of
    // this build, so the row is the only thing that is old).
    copy_id a = 0;
    {
        disk_tier t(cfg());
        a = put(t, record(seq(0, 40), 200));
    }
    sql(path("index.sqlite"),
        "CREATE TABLE f2 AS SELECT id, model, format, bucket, session, n_tokens, history, anchor, checkpoints, bytes, "
        "last_use, created, tokens FROM files; DROP TABLE files; "
        "CREATE TABLE files (id INTEGER PRIMARY KEY, model TEXT NOT NULL, format INTEGER NOT NULL, bucket TEXT NOT NULL,"
        " session TEXT NOT NULL, n_tokens INTEGER NOT NULL, history INTEGER NOT NULL, anchor INTEGER NOT NULL,"
        " checkpoints TEXT NOT NULL, bytes INTEGER NOT NULL, last_use REAL NOT NULL, created REAL NOT NULL,"
        " tokens BLOB NOT NULL); INSERT INTO files SELECT * FROM f2; DROP TABLE f2; UPDATE files SET format = 2;");
    disk_tier t(cfg());
    t.check_invariants();
    const auto st = t.get_stats();
    EXPECT_EQ(st.discarded_old_format, 1);
    EXPECT_EQ(st.damaged, 0);  // not index damage: the column is added
    EXPECT_EQ(st.files, 0);
    EXPECT_FALSE(fs::exists(path(name(a))));
    EXPECT_FALSE(fs::exists(path("index.sqlite.damaged")));
    // Positive: the migrated index takes new rows with their tenant, and they survive a restart.
    copy_record r = record(seq(100, 40), 200);
    r.tenant = "alice";
    ASSERT_NE(put(t, r), 0u);
    EXPECT_EQ(t.reset("bob").first, 0);
    EXPECT_EQ(t.reset("alice").first, 1);
}

TEST_F(DiskDamage, ATenantsRowAndHeaderMustAgree) {
    copy_id a = 0;
    {
        disk_tier t(cfg());
        copy_record r = record(seq(0, 40), 500);
        r.tenant = "alice";
        a = put(t, r);
        put(t, record(seq(100, 40), 500));
    }
    // The row names another tenant than the file's header: identity damage at startup.
    sql(path("index.sqlite"), "UPDATE files SET tenant = 'bob' WHERE id = " + std::to_string(a));
    disk_tier t(cfg());
    t.check_invariants();
    EXPECT_EQ(t.get_stats().damage.at("identity"), 1);
    EXPECT_FALSE(fs::exists(path(name(a))));
    EXPECT_EQ(t.get_stats().files, 1);  // positive: the sound file stays
}

TEST_F(DiskDamage, StrayHugeNamesNeitherSetIdsNorOverwriteFiles) {
    copy_id a = 0;
    {
        disk_tier t(cfg());
        a = put(t, record(seq(0, 40), 200));
    }
    // A copy of a sound file, and junk, under names near 2^64.
    fs::copy_file(path(name(a)), path("18446744073709551615.lcache"));
    write_all(path("18446744073709551614.lcache"), "junk");
    disk_tier t(cfg());
    t.check_invariants();
    EXPECT_EQ(t.get_stats().files, 1);
    EXPECT_EQ(t.get_stats().removed_at_startup, 2);
    const copy_id b = put(t, record(seq(100, 40), 200));
    EXPECT_EQ(b, a + 1);  // from the index, not from the names
    EXPECT_EQ(t.load(a, {"bucket-1", seq(0, 39)}).get().error, tier_load_error::none);
    EXPECT_EQ(blob_files().size(), 2u);
}

TEST_F(DiskDamage, AFifoInPlaceOfAFileNeverBlocksTheDiskThread) {
    disk_tier t(cfg());
    t.check_invariants();
    const copy_id a = put(t, record(seq(0, 40), 200));
    fs::remove(path(name(a)));
    ASSERT_EQ(::mkfifo(path(name(a)).c_str(), 0600), 0);
    auto fut = t.load(a, {"bucket-1", seq(0, 39)});
    ASSERT_EQ(fut.wait_for(std::chrono::seconds(5)), std::future_status::ready);
    EXPECT_EQ(fut.get().error, tier_load_error::not_regular);
    EXPECT_EQ(t.get_stats().damage.at("not_regular"), 1);
    EXPECT_FALSE(fs::exists(path(name(a))));
    EXPECT_NE(put(t, record(seq(0, 40), 200)), 0u);
}

TEST_F(DiskDamage, AFifoFoundAtStartupIsDamage) {
    copy_id a = 0, b = 0;
    {
        disk_tier t(cfg());
        a = put(t, record(seq(0, 40), 200));
        b = put(t, record(seq(100, 40), 200));
    }
    fs::remove(path(name(a)));
    ASSERT_EQ(::mkfifo(path(name(a)).c_str(), 0600), 0);
    disk_tier t(cfg());
    t.check_invariants();
    EXPECT_EQ(t.get_stats().damage.at("not_regular"), 1);
    EXPECT_EQ(t.get_stats().files, 1);
    EXPECT_TRUE(t.best("bucket-1", "s1", seq(100, 50), 0));
    EXPECT_EQ(b, a + 1);
}

TEST_F(DiskDamage, CraftedSizesOnLoadAreDamageNotBadAlloc) {
    disk_tier t(cfg());
    t.check_invariants();
    const copy_id a = put(t, record(seq(0, 40), 200));
    std::string bytes = read_all(path(name(a)));
    const uint64_t huge = 1ull << 62;
    // model "model-a", bucket "bucket-1", session "s1": the same offsets as record_of's.
    std::memcpy(bytes.data() + full_bytes_offset, &huge, 8);
    write_all(path(name(a)), bytes);
    auto r = t.load(a, {"bucket-1", seq(0, 39)}).get();
    EXPECT_EQ(r.error, tier_load_error::truncated) << r.detail;
    EXPECT_EQ(t.get_stats().damage.at("truncated"), 1);
    EXPECT_FALSE(fs::exists(path(name(a))));
    // Not retried: the row is gone.
    EXPECT_EQ(t.load(a, {}).get().error, tier_load_error::missing);
    EXPECT_EQ(t.get_stats().damaged, 1);
}

TEST_F(DiskDamage, ACorruptIndexIsMovedAsideAndRebuiltFromTheFiles) {
    std::vector<copy_id> ids;
    {
        disk_tier t(cfg());
        for (int i = 0; i < 40; ++i) {
            ids.push_back(put(t, record(seq(100 * i, 40), 200)));
        }
    }
    sql(path("index.sqlite"), "PRAGMA wal_checkpoint(TRUNCATE)");
    // Flip bytes in every page but the first (the header), each page's b-tree page type among
    // them: the table's b-tree is damaged (flips that only land in a row's content pass
    // quick_check and are caught row by row: DamagedIndexRowsAreSkippedCountedAndTheirFilesRemoved).
    std::string db = read_all(path("index.sqlite"));
    ASSERT_GT(db.size(), 8192u);
    for (size_t i = 4096 + 100; i < db.size(); i += 512) {
        db[i] = static_cast<char>(db[i] ^ 0x5a);
    }
    for (size_t page = 4096; page < db.size(); page += 4096) {
        db[page] = static_cast<char>(db[page] ^ 0x5a);
    }
    write_all(path("index.sqlite"), db);
    disk_tier t(cfg());
    t.check_invariants();
    EXPECT_TRUE(fs::exists(path("index.sqlite.damaged")));
    const auto st = t.get_stats();
    EXPECT_EQ(st.damage.at("index"), 1);
    EXPECT_EQ(st.reindexed, 40);
    EXPECT_EQ(st.files, 40);
    EXPECT_EQ(blob_files().size(), 40u);
    // Every file still restores, and new ids do not collide.
    auto c = t.best("bucket-1", "s1", seq(3900, 50), 0);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->id, ids[39]);
    EXPECT_EQ(t.load(c->id, {"bucket-1", seq(3900, c->n)}).get().error, tier_load_error::none);
    EXPECT_EQ(put(t, record(seq(0, 50), 200)), ids[39] + 1);
    // And the rebuilt index holds across a restart.
    t.drain();
}

TEST_F(DiskDamage, IndexScanValidatesWithoutTheTier) {
    {
        disk_tier t(cfg());
        put(t, record(seq(0, 40), 200, {{10, point_kind::turn, fake(8)}}));
    }
    disk_index idx(path("index.sqlite"));
    auto sc = idx.scan("model-a");
    ASSERT_EQ(sc.files.size(), 1u);
    EXPECT_EQ(sc.files[0].toks, seq(0, 40));
    ASSERT_EQ(sc.files[0].checkpoints.size(), 1u);
    EXPECT_EQ(sc.files[0].checkpoints[0].n_tokens, 10);
    EXPECT_TRUE(sc.damaged.empty());
    EXPECT_EQ(idx.scan("model-b").other_model, 1);
}

}  // namespace
}  // namespace lineage::cache
