// Unit tests of the client cache breakpoints (Anthropic cache_control) in cache::store, with
// fake states: a hybrid prompt captures a turn checkpoint at each breakpoint (minus the anchor
// slack), so that a new session sharing the conversation up to the mark restores there.
#include "cache/store/store.h"

#include "fake_states.h"

#include <gtest/gtest.h>

namespace lineage::cache {
namespace {

using fakes::cat;
using fakes::fake;
using fakes::seq;

config test_config() {
    config c = fakes::small_config();
    c.guard_min_suffix = 1000;  // no guard checkpoints: the captures below are the breakpoints' and turns'
    return c;
}

/** `h` with the client's cache breakpoints `bps` (prompt_hints::breakpoint_tokens). */
plan_hints marked(plan_hints h, std::vector<int32_t> bps) {
    h.breakpoint_tokens = std::move(bps);
    return h;
}

// Plans `prompt`, captures fake checkpoints at the plan's capture points, commits; returns the plan.
restore_plan run(store & st, const key & k, const tokens & prompt, const plan_hints & h, const std::vector<int32_t> & bps,
                 int32_t seq_id, double now) {
    restore_plan p = st.plan(k, prompt, marked(h, bps), now);
    st.check_invariants();
    commit_input in;
    in.k = k;
    in.toks = prompt;
    in.seq = seq_id;
    in.device_bytes = 1000;
    in.hints.history_tokens = h.history_tokens;
    for (const auto & c : p.captures) {
        EXPECT_TRUE(st.reserve(100));
        in.reserved_bytes += 100;
        in.captured.push_back({c.n_tokens, c.kind, fake(100)});
    }
    if (st.hybrid()) {
        EXPECT_TRUE(st.reserve(100));
        in.reserved_bytes += 100;
        in.final_recurrent = fake(100);
    }
    if (p.absorbs) {
        in.absorbed = p;
    }
    st.commit(std::move(in), now);
    st.check_invariants();
    return p;
}

// A first user message [0, 300) marked with cache_control, then a session's own turns.
tokens conversation(int32_t session) {
    return cat(seq(0, 300), seq(10000 * (session + 1), 100));
}

TEST(StoreBreakpoints, HybridCapturesAtTheBreakpointAndANewSessionRestoresThere) {
    store st(test_config(), /*hybrid=*/true);
    plan_hints h;
    h.history_tokens = 394;
    const restore_plan p1 = run(st, key{"b", "s1"}, conversation(0), h, {300}, 0, 1.0);
    EXPECT_EQ(p1.n_restore, 0);
    std::vector<std::pair<int32_t, point_kind>> got;
    for (const auto & c : p1.captures) {
        got.emplace_back(c.n_tokens, c.kind);
    }
    const std::vector<std::pair<int32_t, point_kind>> want = {{298, point_kind::turn}, {394, point_kind::turn}};
    EXPECT_EQ(got, want) << "a checkpoint at the breakpoint minus the 2-token slack, and the history boundary";

    const restore_plan p2 = st.plan(key{"b", "s2"}, conversation(1), marked(h, {300}), 2.0);
    EXPECT_EQ(p2.n_restore, 298);
    EXPECT_EQ(p2.kind, point_kind::turn);
}

TEST(StoreBreakpoints, WithoutTheBreakpointTheNewSessionMisses) {
    // The control: the same traffic without the mark leaves no restore point inside [0, 300).
    store st(test_config(), /*hybrid=*/true);
    plan_hints h;
    h.history_tokens = 394;
    run(st, key{"b", "s1"}, conversation(0), h, {}, 0, 1.0);
    const restore_plan p2 = st.plan(key{"b", "s2"}, conversation(1), h, 2.0);
    EXPECT_EQ(p2.n_restore, 0);
}

TEST(StoreBreakpoints, BreakpointsOutsideThePrefillAreNotCaptured) {
    // At or before the restore point, or at/after the prompt's end: nothing to capture.
    store st(test_config(), /*hybrid=*/true);
    plan_hints h;
    const restore_plan p = st.plan(key{"b", "s"}, conversation(0), marked(h, {1, 400, 900}), 1.0);
    std::vector<int32_t> got;
    for (const auto & c : p.captures) {
        got.push_back(c.n_tokens);
    }
    EXPECT_EQ(got, std::vector<int32_t>{398}) << "only 400 - 2 lies inside (0, 400)";
}

TEST(StoreBreakpoints, DenseNeedsNoCaptureButRestoresThePrefix) {
    store st(test_config(), /*hybrid=*/false);
    plan_hints h;
    const restore_plan p1 = run(st, key{"b", "s1"}, conversation(0), h, {300}, 0, 1.0);
    EXPECT_TRUE(p1.captures.empty());
    const restore_plan p2 = st.plan(key{"b", "s2"}, conversation(1), marked(h, {300}), 2.0);
    EXPECT_EQ(p2.n_restore, 300);
}

}  // namespace
}  // namespace lineage::cache
