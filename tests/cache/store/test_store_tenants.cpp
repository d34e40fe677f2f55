// Unit tests of cache::store's tenant support (docs/prompt-cache.md "Tenants and access"): reset_if
// drops exactly the entries whose key matches (device and RAM, anchors included), frees their
// sequences, counts no eviction, keeps the invariants; get_stats reports each tenant's entries and
// bytes.
#include "cache/store/store.h"

#include "fake_states.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace lineage::cache {
namespace {

using fakes::fake;
using fakes::seq;

config small_config() {
    config c;
    c.ram_bytes = 1 << 20;
    c.min_prefix = 4;
    c.resend_checkpoint = false;
    return c;
}

key tenant_key(const std::string & bucket, const std::string & tenant) {
    key k{bucket, "s"};
    k.tenant = tenant;
    return k;
}

// One dense request: plan, an anchor at `anchor` tokens when > 0, commit on sequence `seq_id`.
restore_plan run(store & st, const key & k, const tokens & prompt, int32_t seq_id, int32_t anchor = -1) {
    plan_hints h;
    h.anchor_tokens = anchor;
    restore_plan p = st.plan(k, prompt, h, 1.0);
    commit_input in;
    in.k = k;
    in.toks = prompt;
    in.seq = p.op == restore_op::take_device ? p.device_seq : seq_id;
    in.device_bytes = 1000;
    for (const auto & c : p.captures) {
        if (c.kind == point_kind::anchor) {
            EXPECT_TRUE(st.reserve(500));
            st.commit_anchor(k, tokens(prompt.begin(), prompt.begin() + c.n_tokens), fake(500), 500, 1.0);
        }
    }
    if (p.absorbs) {
        in.absorbed = p;
    }
    st.commit(std::move(in), 1.0);
    st.check_invariants();
    return p;
}

TEST(StoreTenants, ResetIfDropsOnlyTheMatchingTenant) {
    store st(small_config(), /*hybrid=*/false);
    run(st, tenant_key("bucket-a", "alice"), seq(0, 100), 0, /*anchor=*/60);
    run(st, tenant_key("bucket-a2", "alice"), seq(500, 50), 1);
    run(st, tenant_key("bucket-b", "bob"), seq(0, 100), 2, /*anchor=*/60);
    st.take_released_seqs();

    const stats before = st.get_stats();
    ASSERT_EQ(before.tenants.size(), 2u);
    EXPECT_EQ(before.tenants.at("alice").entries, 2);
    EXPECT_EQ(before.tenants.at("alice").anchors, 1);
    EXPECT_EQ(before.tenants.at("alice").bytes, 2000u + 500u);  // two device entries + the anchor blob
    EXPECT_EQ(before.tenants.at("bob").entries, 1);
    EXPECT_EQ(before.tenants.at("bob").anchors, 1);
    EXPECT_EQ(before.tenants.at("bob").bytes, 1000u + 500u);

    const reset_result r = st.reset_if([](const key & k) { return k.tenant == "alice"; });
    st.check_invariants();
    EXPECT_EQ(r.entries_freed, 3);  // two conversations and the anchor
    EXPECT_EQ(r.bytes_freed, 2500u);
    EXPECT_TRUE(r.tiers.empty());  // no tier below RAM: the store alone frees nothing there
    std::vector<int32_t> released = st.take_released_seqs();
    std::sort(released.begin(), released.end());
    EXPECT_EQ(released, (std::vector<int32_t>{0, 1}));

    const stats after = st.get_stats();
    EXPECT_EQ(after.tenants.count("alice"), 0u);
    EXPECT_EQ(after.tenants.at("bob").entries, 1);
    EXPECT_EQ(after.entries, 1);
    EXPECT_EQ(after.anchors, 1);
    EXPECT_TRUE(after.evictions.empty()) << "a reset is not an eviction";
    for (const auto & e : st.entries()) {
        EXPECT_EQ(e.k.tenant, "bob");
    }
    // Bob still hits his entry; a request of Alice's in the same bucket name finds nothing.
    EXPECT_EQ(st.plan(tenant_key("bucket-b", "bob"), seq(0, 120), {}, 2.0).n_restore, 100);
    st.check_invariants();
}

TEST(StoreTenants, ResetIfWithNoMatchKeepsEverything) {
    store st(small_config(), /*hybrid=*/false);
    run(st, tenant_key("b", "bob"), seq(0, 100), 0);
    const reset_result r = st.reset_if([](const key & k) { return k.tenant == "nobody"; });
    EXPECT_EQ(r.entries_freed, 0);
    EXPECT_EQ(r.bytes_freed, 0u);
    EXPECT_EQ(st.entries().size(), 1u);
    EXPECT_TRUE(st.take_released_seqs().empty());
    st.check_invariants();
}

TEST(StoreTenants, EntriesWithoutTenantAreNotListed) {
    store st(small_config(), /*hybrid=*/false);
    run(st, key{"b", "s"}, seq(0, 100), 0);
    EXPECT_TRUE(st.get_stats().tenants.empty());
    EXPECT_EQ(st.get_stats().entries, 1);
}

}  // namespace
}  // namespace lineage::cache
