// Tests of server::tenants (key file, constant-time lookup, admin rules), of the tenant as a
// cache-key dimension (cache_key.h, cache::key_difference) and of the tenant and connection
// flags (config.h): docs/prompt-cache.md "Tenants and access" and "Connections".
#include "cache/rule/digest.h"
#include "server/prepare/cache_key.h"
#include "server/config.h"
#include "server/http/tenants.h"

#include "config_args.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace lineage::server;
using lineage::server::config_test::parse;

namespace {

caller who(const access_table & t, const std::string & key) {
    const std::string_view v(key);
    return t.identify(&v);
}

// A temporary file holding `text`; removed at destruction.
struct temp_file {
    std::string path;
    explicit temp_file(const std::string & text) {
        char tmpl[] = "/tmp/lineage-keys-XXXXXX";
        const int fd = mkstemp(tmpl);
        EXPECT_GE(fd, 0);
        close(fd);
        path = tmpl;
        std::ofstream(path) << text;
    }
    ~temp_file() { std::remove(path.c_str()); }
};

}  // namespace

TEST(KeyFile, ParsesKeysCommentsAndBlankLines) {
    std::vector<tenant_key> keys;
    const std::string text =
        "# tenants of the staging server\n"
        "\n"
        "sk-alice-0123456789 alice\n"
        "   \t\n"
        "  # an indented comment\n"
        "sk-bob-0123456789\tbob.team_2-x\r\n"
        "sk-alice-second alice\n";
    EXPECT_TRUE(parse_key_file(text, keys).is_ok());
    ASSERT_EQ(keys.size(), 3u);
    EXPECT_EQ(keys[0].key, "sk-alice-0123456789");
    EXPECT_EQ(keys[0].tenant, "alice");
    EXPECT_EQ(keys[1].key, "sk-bob-0123456789");
    EXPECT_EQ(keys[1].tenant, "bob.team_2-x");
    EXPECT_EQ(keys[2].tenant, "alice");
}

TEST(KeyFile, BadLinesNameTheLineAndNeverTheKey) {
    std::vector<tenant_key> keys = {{"kept", "t"}};
    EXPECT_EQ(parse_key_file("sk-1 a\nsk-secret-2\n", keys).message(),
              "line 2: expected 'KEY TENANT' (two fields separated by spaces), got 1 field");
    EXPECT_EQ(parse_key_file("sk-1 a b\n", keys).message(),
              "line 1: expected 'KEY TENANT' (two fields separated by spaces), got 3 fields");
    EXPECT_EQ(parse_key_file("# c\nsk-1 (admin)\n", keys).message(),
              "line 2: tenant name '(admin)' is not 1-64 characters of A-Z a-z 0-9 . _ -");
    EXPECT_EQ(parse_key_file("sk-1 " + std::string(65, 'a') + "\n", keys).message(),
              "line 1: tenant name '" + std::string(65, 'a') + "' is not 1-64 characters of A-Z a-z 0-9 . _ -");
    EXPECT_EQ(parse_key_file("sk-dup a\nsk-dup b\n", keys).message(),
              "line 2: this key is already given on an earlier line (each key names one tenant)");
    EXPECT_EQ(parse_key_file("sk-\x01 a\n", keys).message(),
              "line 1: the key has a non-printable or non-ASCII character");
    EXPECT_EQ(parse_key_file("# only comments\n\n", keys).message(), "no key in the file: add lines 'KEY TENANT'");
    ASSERT_EQ(keys.size(), 1u) << "a file with an error adds nothing";
    EXPECT_EQ(keys[0].key, "kept");
}

TEST(AccessTable, NoKeysIsOpen) {
    const access_table t("", {}, "");
    EXPECT_TRUE(t.open());
    const caller c = t.identify(nullptr);
    EXPECT_TRUE(c.known);
    EXPECT_TRUE(c.admin);
    EXPECT_EQ(c.tenant, "");
}

TEST(AccessTable, KeysNameTheirTenantsAndTheAdmin) {
    const access_table t("sk-default", {{"sk-a", "alice"}, {"sk-a2", "alice"}, {"sk-b", "bob"}}, "sk-admin");
    EXPECT_FALSE(t.open());
    EXPECT_EQ(t.tenants(), (std::vector<std::string>{"alice", "bob", "default"}));
    EXPECT_EQ(who(t, "sk-a").tenant, "alice");
    EXPECT_EQ(who(t, "sk-a2").tenant, "alice");
    EXPECT_FALSE(who(t, "sk-a").admin);
    EXPECT_EQ(who(t, "sk-b").tenant, "bob");
    EXPECT_EQ(who(t, "sk-default").tenant, "default");
    EXPECT_FALSE(who(t, "sk-default").admin) << "with other keys, --api-key is one tenant among others";
    const caller admin = who(t, "sk-admin");
    EXPECT_TRUE(admin.known);
    EXPECT_TRUE(admin.admin);
    EXPECT_EQ(admin.tenant, admin_tenant);
    for (const std::string bad : {"", "sk-", "sk-a ", "SK-A", "sk-admin2", "sk-b\n"}) {
        EXPECT_FALSE(who(t, bad).known) << "'" << bad << "'";
    }
    EXPECT_FALSE(t.identify(nullptr).known);
}

TEST(AccessTable, ALoneApiKeyIsAlsoTheAdmin) {
    const access_table t("sk-only", {}, "");
    EXPECT_TRUE(who(t, "sk-only").admin);
    EXPECT_EQ(who(t, "sk-only").tenant, "default");
    EXPECT_FALSE(who(t, "sk-other").known);
    const access_table with_admin("sk-only", {}, "sk-admin");
    EXPECT_FALSE(who(with_admin, "sk-only").admin);
    const access_table admin_only("", {}, "sk-admin");
    EXPECT_FALSE(admin_only.open());
    EXPECT_TRUE(who(admin_only, "sk-admin").admin);
    EXPECT_FALSE(admin_only.identify(nullptr).known);
}

TEST(TenantKey, AnEmptyTenantAddsNoFieldToTheBucketDigest) {
    bucket_inputs b;
    b.model_id = "m";
    b.template_sig = "t";  // not a bucket dimension (v2)
    // The v2 layout, computed by hand: no tenant field, no template_sig.
    lineage::cache::hasher h;
    h.raw("lineage:prompt-cache:v2");
    h.field("m");
    h.field("");
    h.raw(std::string_view("\0\0", 2));
    h.field(text_only_mm_digest());
    EXPECT_EQ(bucket_digest(b), h.hex());
}

TEST(TenantKey, TenantsGetDifferentBuckets) {
    bucket_inputs a;
    a.model_id = "m";
    a.template_sig = "t";
    bucket_inputs b = a;
    a.tenant = "alice";
    b.tenant = "bob";
    bucket_inputs none = a;
    none.tenant = "";
    EXPECT_NE(bucket_digest(a), bucket_digest(b));
    EXPECT_NE(bucket_digest(a), bucket_digest(none));
    EXPECT_EQ(bucket_digest(a), bucket_digest(bucket_inputs(a)));
    EXPECT_NE(bucket_digest(a, lineage::cache::hash_algo::xxh3), bucket_digest(b, lineage::cache::hash_algo::xxh3));
    // The decision trace names the dimension.
    const auto da = key_dims_of(a, "tmpl", {}, "auto", {});
    const auto db = key_dims_of(b, "tmpl", {}, "auto", {});
    EXPECT_EQ(da.tenant, "alice");
    EXPECT_EQ(lineage::cache::key_difference(da, db), "tenant differs");
    bucket_inputs c = b;
    c.model_id = "m2";
    EXPECT_EQ(lineage::cache::key_difference(da, key_dims_of(c, "tmpl", {}, "auto", {})),
              "tenant differs, model_id differs");
}

TEST(TenantConfig, KeyFileAndAdminKeyFromFlagsAndEnvironment) {
    temp_file f("# keys\nsk-a alice\nsk-b bob\n");
    auto r = parse({"-m", "x.gguf", "--api-key-file", f.path, "--admin-api-key", "sk-admin"});
    ASSERT_TRUE(r.config) << r.output;
    ASSERT_EQ(r.config->tenant_keys.size(), 2u);
    EXPECT_EQ(r.config->tenant_keys[1].tenant, "bob");
    EXPECT_EQ(r.config->admin_api_key, "sk-admin");
    EXPECT_TRUE(r.config->has_keys());

    auto e = parse({"-m", "x.gguf"}, {{"LINEAGE_API_KEY_FILE", f.path}, {"LINEAGE_ADMIN_API_KEY", "sk-adm"}});
    ASSERT_TRUE(e.config) << e.output;
    EXPECT_EQ(e.config->tenant_keys.size(), 2u);
    EXPECT_EQ(e.config->admin_api_key, "sk-adm");
    EXPECT_FALSE(parse({"-m", "x.gguf"}).config->has_keys());
}

TEST(TenantConfig, BadKeyFilesStopTheStart) {
    temp_file bad("sk-a alice\nsk-b\n");
    auto r = parse({"-m", "x.gguf", "--api-key-file", bad.path});
    EXPECT_FALSE(r.config);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("error: --api-key-file '" + bad.path +
                            "': line 2: expected 'KEY TENANT' (two fields separated by spaces), got 1 field"),
              std::string::npos)
        << r.output;
    auto missing = parse({"-m", "x.gguf", "--api-key-file", "/nonexistent/keys"});
    EXPECT_FALSE(missing.config);
    EXPECT_NE(missing.output.find("--api-key-file '/nonexistent/keys': cannot read the file"), std::string::npos)
        << missing.output;
    temp_file good("sk-a alice\n");
    auto reused = parse({"-m", "x.gguf", "--api-key-file", good.path, "--admin-api-key", "sk-a"});
    EXPECT_FALSE(reused.config);
    EXPECT_NE(reused.output.find("--admin-api-key is also a tenant's key"), std::string::npos) << reused.output;
    auto twice = parse({"-m", "x.gguf", "--api-key-file", good.path, "--api-key", "sk-a"});
    EXPECT_FALSE(twice.config);
    EXPECT_NE(twice.output.find("--api-key is also in --api-key-file"), std::string::npos) << twice.output;
}

TEST(ConnectionConfig, DefaultsFlagsAndEnvironment) {
    auto d = parse({"-m", "x.gguf"});
    ASSERT_TRUE(d.config) << d.output;
    EXPECT_EQ(d.config->http_threads, 128);
    EXPECT_EQ(d.config->http_queue, 256);
    EXPECT_EQ(d.config->http_read_timeout_s, 5.0);
    EXPECT_EQ(d.config->http_write_timeout_s, 5.0);
    EXPECT_EQ(d.config->http_keep_alive_max, 100);
    EXPECT_EQ(d.config->http_keep_alive_timeout_s, 5);
    EXPECT_EQ(d.config->max_uri_bytes, 8192u);
    EXPECT_EQ(d.config->max_header_bytes, 32768u);

    auto r = parse({"-m", "x.gguf", "--http-threads", "8", "--http-queue", "0",
                    "--http-read-timeout", "2.5", "--http-write-timeout", "30", "--http-keep-alive-max", "7",
                    "--http-keep-alive-timeout", "9", "--max-uri-bytes", "4KiB", "--max-header-bytes", "64KiB"});
    ASSERT_TRUE(r.config) << r.output;
    EXPECT_EQ(r.config->http_threads, 8);
    EXPECT_EQ(r.config->http_queue, 0);
    EXPECT_EQ(r.config->http_read_timeout_s, 2.5);
    EXPECT_EQ(r.config->http_write_timeout_s, 30.0);
    EXPECT_EQ(r.config->http_keep_alive_max, 7);
    EXPECT_EQ(r.config->http_keep_alive_timeout_s, 9);
    EXPECT_EQ(r.config->max_uri_bytes, 4096u);
    EXPECT_EQ(r.config->max_header_bytes, 65536u);

    auto e = parse({"-m", "x.gguf"}, {{"LINEAGE_HTTP_THREADS", "40"}, {"LINEAGE_HTTP_READ_TIMEOUT", "1"}});
    ASSERT_TRUE(e.config) << e.output;
    EXPECT_EQ(e.config->http_threads, 40);
    EXPECT_EQ(e.config->http_read_timeout_s, 1.0);

    auto bad = parse({"-m", "x.gguf", "--http-read-timeout", "0", "--http-threads", "1", "--max-uri-bytes", "10"});
    EXPECT_FALSE(bad.config);
    EXPECT_NE(bad.output.find("--http-read-timeout '0': expected a number of seconds > 0"), std::string::npos)
        << bad.output;
    EXPECT_NE(bad.output.find("--http-threads '1': expected an integer in [2, 65536]"), std::string::npos)
        << bad.output;
    EXPECT_NE(bad.output.find("--max-uri-bytes '10': expected a byte count >= 256"), std::string::npos)
        << bad.output;
    auto few = parse({"-m", "x.gguf", "--parallel", "4", "--http-threads", "4"});
    EXPECT_FALSE(few.config);
    EXPECT_NE(few.output.find("error: --http-threads 4 is not more than --parallel 4"), std::string::npos) << few.output;
    EXPECT_TRUE(parse({"-m", "x.gguf", "--parallel", "4", "--http-threads", "5"}).config);
}
