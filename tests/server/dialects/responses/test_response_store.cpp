// Tests of server::response_store (TTL, byte-cap eviction order, persistence across a reopen,
// a damaged file moved aside) and server::reasoning_seal (round trip, another key, tampering).
#include "server/dialects/responses/reasoning_seal.h"
#include "server/dialects/responses/response_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace lineage::server;
namespace fs = std::filesystem;

namespace {

// created 0: the store's clock at put().
stored_response resp(const std::string & id, size_t body_bytes, double created = 0) {
    stored_response r;
    r.id = id;
    r.body = std::string(body_bytes, 'b');
    r.conversation = "[]";
    r.created_s = created;
    return r;
}

// A fresh directory per test, removed afterwards.
class ResponseStoreFile : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("lineage-rstore-" + std::to_string(::getpid()) + "-" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string path() const { return (dir_ / "responses.sqlite").string(); }
    fs::path dir_;
};

}  // namespace

TEST(ResponseStore, PutGetRemove) {
    double now = 1000.0;
    response_store s({":memory:", 100.0, 1 << 20}, [&] { return now; });
    EXPECT_FALSE(s.persistent());
    ASSERT_TRUE(s.put(resp("resp_a", 10, 1000.0)));
    auto got = s.get("resp_a", "");
    ASSERT_TRUE(got);
    EXPECT_EQ(got->body, std::string(10, 'b'));
    EXPECT_EQ(got->conversation, "[]");
    EXPECT_DOUBLE_EQ(got->created_s, 1000.0);
    EXPECT_EQ(s.bytes(), 6u + 10u + 2u);
    EXPECT_TRUE(s.remove("resp_a", ""));
    EXPECT_FALSE(s.remove("resp_a", ""));
    EXPECT_FALSE(s.get("resp_a", ""));
    EXPECT_EQ(s.count(), 0u);
}

TEST(ResponseStore, ExpiresAfterTtl) {
    double now = 1000.0;
    response_store s({":memory:", 100.0, 1 << 20}, [&] { return now; });
    ASSERT_TRUE(s.put(resp("resp_a", 10, 1000.0)));
    ASSERT_TRUE(s.put(resp("resp_b", 10, 1050.0)));
    now = 1099.0;
    EXPECT_TRUE(s.get("resp_a", ""));
    now = 1100.0;  // resp_a is 100 s old: expired; resp_b is 50 s old
    EXPECT_FALSE(s.get("resp_a", ""));
    EXPECT_TRUE(s.get("resp_b", ""));
    EXPECT_EQ(s.count(), 1u);
    now = 1150.0;
    EXPECT_FALSE(s.remove("resp_b", ""));
    EXPECT_EQ(s.count(), 0u);
}

TEST(ResponseStore, ByteCapEvictsLeastRecentlyUsedFirst) {
    // Each response costs 6 (id) + 20 (body) + 2 (conversation) = 28 bytes; the cap holds 3.
    response_store s({":memory:", 1e9, 90}, [] { return 1000.0; });
    ASSERT_TRUE(s.put(resp("resp_a", 20)));
    ASSERT_TRUE(s.put(resp("resp_b", 20)));
    ASSERT_TRUE(s.put(resp("resp_c", 20)));
    EXPECT_EQ(s.bytes(), 84u);
    ASSERT_TRUE(s.get("resp_a", ""));  // a is now the most recently used: b goes first, then c
    ASSERT_TRUE(s.put(resp("resp_d", 20)));
    EXPECT_FALSE(s.get("resp_b", ""));
    EXPECT_TRUE(s.get("resp_c", ""));  // order now: a, d, c (c just used)
    ASSERT_TRUE(s.put(resp("resp_e", 48)));  // 56 bytes: evicts a (28) then d (28)
    EXPECT_FALSE(s.get("resp_a", ""));
    EXPECT_FALSE(s.get("resp_d", ""));
    EXPECT_TRUE(s.get("resp_c", ""));
    EXPECT_TRUE(s.get("resp_e", ""));
    EXPECT_EQ(s.bytes(), 28u + 56u);
    // Larger than the cap alone: refused, nothing evicted.
    EXPECT_FALSE(s.put(resp("resp_f", 200)));
    EXPECT_EQ(s.count(), 2u);
}

TEST_F(ResponseStoreFile, SurvivesReopenWithItsKey) {
    std::string key;
    {
        response_store s({path(), 1e9, 1 << 20});
        EXPECT_TRUE(s.persistent());
        ASSERT_TRUE(s.put(resp("resp_a", 10, 0)));
        ASSERT_TRUE(s.put(resp("resp_b", 10, 0)));
        ASSERT_TRUE(s.get("resp_a", ""));  // LRU order across the restart: b, then a
        key = s.reasoning_key();
        EXPECT_EQ(key.size(), 32u);
    }
    response_store s({path(), 1e9, 60});
    EXPECT_EQ(s.reasoning_key(), key);
    EXPECT_EQ(s.count(), 2u);
    ASSERT_TRUE(s.get("resp_a", ""));
    ASSERT_TRUE(s.put(resp("resp_c", 10)));  // 18 + 18 + 18 = 54 <= 60: all fit
    ASSERT_TRUE(s.put(resp("resp_d", 10)));  // evicts b, the least recently used before the restart
    EXPECT_FALSE(s.get("resp_b", ""));
    EXPECT_TRUE(s.get("resp_a", ""));
}

TEST(ResponseStore, AResponseBelongsToTheTenantThatStoredIt) {
    response_store s({":memory:", 1e9, 1 << 20});
    stored_response a = resp("resp_a", 10);
    a.tenant = "alice";
    ASSERT_TRUE(s.put(a));
    EXPECT_FALSE(s.get("resp_a", "bob"));
    EXPECT_FALSE(s.get("resp_a", ""));  // nor the tenant of a server without keys
    EXPECT_FALSE(s.remove("resp_a", "bob"));
    EXPECT_EQ(s.count(), 1u);  // another tenant's delete left it alone
    auto got = s.get("resp_a", "alice");
    ASSERT_TRUE(got);
    EXPECT_EQ(got->tenant, "alice");
    EXPECT_EQ(got->body, std::string(10, 'b'));
    EXPECT_TRUE(s.remove("resp_a", "alice"));
    EXPECT_EQ(s.count(), 0u);
}

TEST_F(ResponseStoreFile, AStoreWithoutTheTenantColumnGainsIt) {
    {
        // The table as stores wrote it before tenants scoped responses.
        sqlite3 * db = nullptr;
        ASSERT_EQ(sqlite3_open(path().c_str(), &db), SQLITE_OK);
        ASSERT_EQ(sqlite3_exec(db,
                               "CREATE TABLE responses (id TEXT PRIMARY KEY, created REAL NOT NULL, use INTEGER NOT "
                               "NULL, bytes INTEGER NOT NULL, body BLOB NOT NULL, conversation BLOB NOT NULL);"
                               "INSERT INTO responses VALUES ('resp_old', 1e12, 1, 20, 'body', '[]');",
                               nullptr, nullptr, nullptr),
                  SQLITE_OK);
        sqlite3_close(db);
    }
    response_store s({path(), 1e13, 1 << 20});
    EXPECT_FALSE(fs::exists(path() + ".damaged"));
    EXPECT_EQ(s.count(), 1u);
    EXPECT_FALSE(s.get("resp_old", "alice"));
    auto old = s.get("resp_old", "");
    ASSERT_TRUE(old);
    EXPECT_EQ(old->body, "body");
    stored_response b = resp("resp_b", 10);
    b.tenant = "bob";
    ASSERT_TRUE(s.put(b));
    EXPECT_TRUE(s.get("resp_b", "bob"));
}

TEST_F(ResponseStoreFile, DamagedFileIsMovedAside) {
    {
        std::ofstream f(path(), std::ios::binary);
        f << std::string(8192, 'x');
    }
    response_store s({path(), 1e9, 1 << 20});
    EXPECT_TRUE(s.persistent());
    EXPECT_TRUE(fs::exists(path() + ".damaged"));
    EXPECT_EQ(s.count(), 0u);
    ASSERT_TRUE(s.put(resp("resp_a", 10)));
    EXPECT_TRUE(s.get("resp_a", ""));
}

TEST_F(ResponseStoreFile, UnusableDirectoryFallsBackToMemory) {
    const std::string blocker = (dir_ / "file").string();
    { std::ofstream f(blocker); f << "x"; }
    response_store s({blocker + "/sub/responses.sqlite", 1e9, 1 << 20});
    EXPECT_FALSE(s.persistent());
    ASSERT_TRUE(s.put(resp("resp_a", 10)));
    EXPECT_TRUE(s.get("resp_a", ""));
}

TEST(ReasoningSeal, RoundTripAndRefusals) {
    const reasoning_seal a(reasoning_seal::random_key());
    const reasoning_seal b(reasoning_seal::random_key());
    for (const std::string & text : {std::string(), std::string("x"), std::string("Let me think.\n\u00e9\u4e2d"),
                                   std::string(1000, 'r')}) {
        const std::string sealed = a.seal(text);
        EXPECT_EQ(sealed.rfind("lnr1:", 0), 0u);
        EXPECT_EQ(a.open(sealed), text);
        EXPECT_FALSE(b.open(sealed));  // another server's key
        EXPECT_NE(a.seal(text), sealed);  // a fresh nonce each time
        std::string tampered = sealed;
        // A character inside the nonce+ciphertext (all of its 6 bits are data; the last group's
        // spare bits are not authenticated bytes).
        char & c = tampered[5 + 8];
        c = c == 'A' ? 'B' : 'A';
        EXPECT_FALSE(a.open(tampered));
    }
    EXPECT_FALSE(a.open("not sealed"));
    EXPECT_FALSE(a.open("lnr1:%%%%"));
    EXPECT_THROW(reasoning_seal("short"), std::invalid_argument);
}
