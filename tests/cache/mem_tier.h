// cache::fakes::mem_tier: a tier below RAM held in memory, in the manner of LevelDB's memenv.
// It is the fake tier of the store's and the scheduler's unit tests
// (tests/cache/store/test_store_tiers.cpp, tests/scheduler/test_tier_link.cpp). It also shows
// what a new tier has to supply: a class derived from lower_tier with its I/O (tier_io) and its
// stats. Everything else (the worker thread, the queue, loads that jump it, the write bound,
// completions, the restore rule over its catalog) comes from lower_tier.
// Threads: the tier_io methods run on the tier's worker thread; the test hooks and best() take
// the same mutex.
#pragma once

#include "cache/tier/tier_catalog.h"
#include "cache/tier/lower_tier.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace lineage::cache::fakes {

class mem_tier final : public lower_tier {
public:
    /** A tier named `name` (its traits: load_failed "<name>_failed", copy_noun "<name> copy");
     *  `max_queued_writes` bounds its queue (0: none). */
    explicit mem_tier(const std::string & name, bool shared = false, size_t max_queued_writes = 0)
        : lower_tier(worker_config{.name = name + " tier", .max_queued_writes = max_queued_writes},
                     tier_traits{.name = name, .shared = shared, .load_failed = name + "_failed",
                                 .copy_noun = name + " copy"}) {
        start();
    }
    ~mem_tier() override { stop(); }

    std::optional<tier_candidate> best(const std::string & bucket, const std::string & session,
                                       const tokens & prompt, int32_t longer_than) const override {
        std::lock_guard lk(mu_);
        return catalog_.best(bucket, session, prompt, longer_than);
    }
    void report(stats & s) const override {
        std::lock_guard lk(mu_);
        s.bytes[traits().name] = bytes_;
        s.tiers.push_back(tier_report{.name = traits().name,
                                      .enabled = true,
                                      .hits_help = "Restores served from the in-memory tier.",
                                      .figures = {figure("copies", static_cast<int64_t>(records_.size()), "copies",
                                                         "Copies held."),
                                                  figure("bytes", bytes_)}});
    }
    std::string location() const override { return "memory"; }

    // --- test hooks ---
    /** Loads answer "missing" (a copy evicted behind the store's back). */
    std::atomic<bool> fail_loads{false};
    /** Loads find the copy deleted and answer "missing"; it is gone from the catalog too, as a
     *  disk file superseded or evicted between the plan and the read (disk_tier::load_now). */
    std::atomic<bool> vanish_on_load{false};
    /** Copies held now, by id. */
    std::map<copy_id, copy_record> held() const {
        std::lock_guard lk(mu_);
        return records_;
    }
    /** Copies removed as superseded (remove()), in order. */
    std::vector<copy_id> removed() const {
        std::lock_guard lk(mu_);
        return removed_;
    }
    int64_t loads() const {
        std::lock_guard lk(mu_);
        return loads_;
    }

protected:
    tier_completion write_now(tier_write & w) override {
        std::lock_guard lk(mu_);
        const copy_id id = ++next_id_;
        uint64_t size = w.rec.full ? w.rec.full->size() : 0;
        tier_catalog::file f;
        f.id = id;
        f.bucket = w.rec.bucket;
        f.session = w.rec.session;
        f.tenant = w.rec.tenant;
        f.toks = w.rec.toks;
        for (const auto & c : w.rec.checkpoints) {
            f.checkpoints.push_back({c.n_tokens, c.kind, nullptr});
            size += c.recurrent ? c.recurrent->size() : 0;
        }
        f.history = w.rec.history;
        f.anchor = w.rec.anchor;
        f.bytes = size;
        f.last_use = w.last_use;
        catalog_.add(std::move(f));
        records_[id] = w.rec;
        records_[id].id = id;
        bytes_ += size;
        for (const copy_id old : w.ancestors) {
            drop(old);
        }
        return tier_completion{.entry_id = w.entry_id, .file = id, .result = {}};
    }
    tier_load_result load_now(copy_id id, const tier_expect & want) override {
        std::lock_guard lk(mu_);
        loads_++;
        tier_load_result r;
        if (vanish_on_load) {
            erase(id);
        }
        auto it = records_.find(id);
        if (fail_loads || it == records_.end()) {
            r.error = tier_load_error::missing;
            r.detail = "no copy " + std::to_string(id);
            return r;
        }
        const copy_record & rec = it->second;
        if ((!want.bucket.empty() && want.bucket != rec.bucket) || want.prefix.size() > rec.toks.size() ||
            !std::equal(want.prefix.begin(), want.prefix.end(), rec.toks.begin())) {
            r.error = tier_load_error::identity;
            r.detail = "copy " + std::to_string(id) + " is not the request's prefix";
            return r;
        }
        r.record = rec;
        r.n_tokens = static_cast<int32_t>(rec.toks.size());
        return r;
    }
    void remove_now(const std::vector<copy_id> & ids) override {
        std::lock_guard lk(mu_);
        for (const copy_id id : ids) {
            drop(id);
        }
    }
    std::pair<int64_t, uint64_t> reset_now(const std::optional<std::string> & tenant) override {
        std::lock_guard lk(mu_);
        std::vector<copy_id> ids;
        for (const auto & [id, rec] : records_) {
            if (!tenant || rec.tenant == *tenant) {
                ids.push_back(id);
            }
        }
        const uint64_t before = bytes_;
        for (const copy_id id : ids) {
            erase(id);
        }
        return {static_cast<int64_t>(ids.size()), before - bytes_};
    }

private:
    void drop(copy_id id) {
        if (records_.count(id) > 0) {
            removed_.push_back(id);
            erase(id);
        }
    }
    void erase(copy_id id) {
        if (auto f = catalog_.remove(id)) {
            bytes_ -= f->bytes;
        }
        records_.erase(id);
    }

    mutable std::mutex mu_;
    tier_catalog catalog_;
    std::map<copy_id, copy_record> records_;
    std::vector<copy_id> removed_;
    copy_id next_id_ = 0;
    uint64_t bytes_ = 0;
    int64_t loads_ = 0;
};

}  // namespace lineage::cache::fakes
