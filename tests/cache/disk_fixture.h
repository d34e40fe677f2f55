// Test fixture of the tier-2 tests (test_disk*.cpp): a temporary directory per test, a record
// maker and a synchronous write through the tier. Header-only; no model.
#pragma once

#include "cache/tier/disk/disk_format.h"
#include "cache/tier/disk/disk_tier.h"
#include "cache/store/store.h"

#include "fake_states.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

namespace lineage::cache {

using fakes::fake;
namespace fs = std::filesystem;

inline copy_record record(tokens toks, size_t full_bytes = 1000, std::vector<checkpoint> cps = {}) {
    copy_record r;
    r.id = 1;  // the tier sets its own when it writes
    r.model = "model-a";
    r.bucket = "bucket-1";
    r.session = "s1";
    r.toks = std::move(toks);
    r.history = static_cast<int32_t>(r.toks.size()) - 2;
    r.full = fake(full_bytes);
    r.checkpoints = std::move(cps);
    return r;
}

class TempDir : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("lineage-disk-test-" + std::to_string(::getpid()) + "-" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string path(const std::string & name) const { return (dir_ / name).string(); }
    std::vector<std::string> blob_files() const {
        std::vector<std::string> out;
        for (const auto & e : fs::directory_iterator(dir_)) {
            if (e.path().extension() == ".lcache") {
                out.push_back(e.path().filename().string());
            }
        }
        return out;
    }

    disk_config cfg(uint64_t cap = 1 << 20, bool hybrid = true) const {
        disk_config c;
        c.dir = dir_.string();
        c.capacity_bytes = cap;
        c.model = "model-a";
        c.rule.hybrid = hybrid;
        return c;
    }

    /** Writes `r` through the tier and waits; returns its file id (0 when not written). */
    static copy_id put(disk_tier & t, copy_record r, std::vector<copy_id> ancestors = {}, double last_use = 1) {
        tier_write w;
        w.entry_id = 7;
        w.rec = std::move(r);
        w.ancestors = std::move(ancestors);
        w.last_use = last_use;
        t.write(std::move(w));
        t.drain();
        auto done = t.take_completions();
        EXPECT_EQ(done.size(), 1u);
        t.check_invariants();
        return done.empty() ? 0 : done[0].file;
    }

    fs::path dir_;
};

// --- the store's tier hooks (test_disk.cpp, test_redis_format.cpp) ---------------------------

/** A tier_lookup that offers one fixed candidate for prompts it covers. */
class fake_disk : public tier_lookup {
public:
    std::optional<tier_candidate> offer;
    mutable int32_t asked_longer_than = -1;
    std::optional<tier_candidate> best(const std::string &, const std::string &, const tokens &,
                                       int32_t longer_than) const override {
        asked_longer_than = longer_than;
        if (offer && offer->n > longer_than) {
            return offer;
        }
        return std::nullopt;
    }
};

/** Commits `toks` as an entry parked on sequence `seq_id` (absorbing `absorbed` when given). */
inline void park(store & st, const key & k, tokens toks, int32_t seq_id, double now,
          std::optional<restore_plan> absorbed = std::nullopt) {
    commit_input in;
    in.k = k;
    in.toks = std::move(toks);
    in.seq = seq_id;
    in.device_bytes = 1000;
    in.absorbed = std::move(absorbed);
    ASSERT_TRUE(st.commit(std::move(in), now));
}

inline config hybrid_config() {
    config c;
    c.ram_bytes = 1 << 20;
    c.min_prefix = 4;
    c.resend_checkpoint = false;
    c.guard_min_suffix = 1 << 20;
    c.divergence_min_gain = 1 << 20;
    return c;
}

}  // namespace lineage::cache
