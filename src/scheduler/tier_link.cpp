// scheduler::tier_link: the scheduler's side of the tiers below RAM; see tier_link.h.
#include "scheduler/tier_link.h"

#include "cache/tier/copy_record.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

namespace lineage::scheduler {

tier_link::tier_link(cache::store & store, sequence_states & st, const cache::config & cfg,
                     const std::string & model_path, bool hybrid, const std::vector<cache::tier_row> & table)
    : store_(store), st_(st), idle_s_(cfg.disk_idle_s), max_unwritten_s_(cfg.disk_max_unwritten_s), table_(table) {
    const auto named = [&](const cache::tier_row & row) { return row.named(cfg); };
    if (!cfg.enabled || std::none_of(table.begin(), table.end(), named)) {
        return;  // no tier named: the fingerprint (a read of the model file's header) is not needed
    }
    const std::string model = cache::model_fingerprint(model_path);
    for (const cache::tier_row & row : table) {
        if (!row.named(cfg)) {
            continue;
        }
        if (auto t = row.open(cfg, model, hybrid)) {
            tiers_.push_back(std::move(t));
        }
    }
    attach();
}

tier_link::tier_link(cache::store & store, sequence_states & st, const cache::config & cfg,
                     std::vector<std::unique_ptr<cache::lower_tier>> tiers)
    : store_(store), st_(st), idle_s_(cfg.disk_idle_s), max_unwritten_s_(cfg.disk_max_unwritten_s),
      table_(cache::tier_table()), tiers_(std::move(tiers)) {
    attach();
}

void tier_link::attach() {
    for (const auto & t : tiers_) {
        store_.attach_tier(t.get(), t->traits());
    }
}

tier_link::~tier_link() {
    close();
}

std::vector<std::pair<std::string, cache::tier_state>> tier_link::readiness() const {
    std::vector<std::pair<std::string, cache::tier_state>> out;
    for (const auto & t : tiers_) {
        out.emplace_back(t->traits().name, t->readiness());
    }
    return out;
}

void tier_link::close() {
    store_.detach_tiers();
    tiers_.clear();
}

void tier_link::write(cache::tier_job j) {
    if (!on()) {
        return;
    }
    cache::tier_write w;
    w.entry_id = j.entry_id;
    w.rec.bucket = j.k.bucket;
    w.rec.session = j.k.session;
    w.rec.tenant = j.k.tenant;
    w.rec.toks = std::move(j.toks);
    w.rec.history = j.history;
    w.rec.anchor = j.anchor;
    // A parked sequence's state is read here, on the engine thread, before it is released.
    w.rec.full = j.seq >= 0 ? cache::make_blob(st_.get_state(j.seq, false)) : std::move(j.full);
    w.rec.base = j.seq >= 0 ? nullptr : std::move(j.base);
    w.rec.checkpoints = std::move(j.checkpoints);
    w.ancestors = std::move(j.ancestors);
    w.last_use = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    // The ancestors are the first tier's copies (the ones the store tracks), and a shared tier's
    // copies are not one replica's to supersede.
    if (tiers_.front()->traits().shared) {
        w.ancestors.clear();
    }
    for (size_t i = tiers_.size(); i-- > 1;) {
        cache::tier_write copy = w;  // the states are shared, not copied
        copy.ancestors.clear();
        tiers_[i]->write(std::move(copy));
    }
    tiers_.front()->write(std::move(w));
}

void tier_link::housekeeping(bool idle, double now_s) {
    if (!on()) {
        return;
    }
    // The store tracks one copy per entry: the first tier's. The others' completions are counted
    // by their tiers only.
    for (size_t i = 1; i < tiers_.size(); ++i) {
        tiers_[i]->take_completions();
    }
    for (const auto & c : tiers_.front()->take_completions()) {
        store_.tier_written(c.entry_id, c.file);
        if (c.file != 0) {
            store_.cost().observe_write(c.bytes, c.seconds);
        }
    }
    // RAM release: idle entries whose copy has landed give their RAM back (cache::config
    // ram_release_s; the store does it only on a tier of this replica's own); one pass a second
    // is enough for a threshold in seconds.
    if (now_s - last_release_s_ >= 1.0) {
        last_release_s_ = now_s;
        if (const uint64_t freed = store_.release_written(now_s); freed > 0) {
            spdlog::debug("cache: released {:.1f} MiB of RAM held by idle entries already on disk",
                          static_cast<double>(freed) / (1 << 20));
        }
    }
    if (idle) {
        for (auto & j : store_.take_idle_writes(now_s, idle_s_)) {
            write(std::move(j));
        }
    }
    if (auto j = store_.take_overdue_write(now_s, max_unwritten_s_)) {
        // Busy or not: when busy this costs the step one state read (device entries) and a copy.
        const auto t0 = std::chrono::steady_clock::now();
        write(std::move(*j));
        const double read_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        tiers_.front()->count_overdue_write(read_s);
        spdlog::debug("{}: writing an entry unwritten for --cache-disk-max-unwritten-s ({}; state read {:.2f} ms)",
                      tiers_.front()->name(), idle ? "idle" : "engine busy", read_s * 1e3);
    }
}

void tier_link::flush(double now_s, const std::function<void()> & drain) {
    if (!on()) {
        return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    drain();
    auto jobs = store_.take_idle_writes(now_s, -1);
    const size_t n_jobs = jobs.size();
    for (auto & j : jobs) {
        write(std::move(j));
    }
    for (size_t i = tiers_.size(); i-- > 0;) {  // the first tier last, as its summary ends the log
        cache::lower_tier & t = *tiers_[i];
        if (const int64_t queued = t.queued(); queued > 0) {
            spdlog::info("{}: writing {} cache entries to {} before exit ({} jobs queued)...", t.name(), n_jobs,
                         t.location(), queued);
        }
        t.drain();
        if (const std::string summary = t.exit_summary(); !summary.empty()) {
            spdlog::info("{} ({:.2f} s since shutdown began)", summary,
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
    }
}

std::future<cache::tier_load_result> tier_link::load(int32_t tier, cache::copy_id f, const std::string & bucket,
                                                     const cache::tokens & prompt, int32_t n_restore,
                                                     cache::checkpoint_filter keep, std::function<void()> on_done) {
    cache::tier_expect want;
    want.bucket = bucket;
    want.prefix.assign(prompt.begin(), prompt.begin() + std::clamp<int32_t>(n_restore, 0, static_cast<int32_t>(prompt.size())));
    want.keep = keep;
    return tiers_.at(static_cast<size_t>(tier))->load(f, std::move(want), std::move(on_done));
}

void tier_link::report(cache::stats & s) const {
    const auto open = [this](const std::string & name) -> const cache::lower_tier * {
        for (const auto & t : tiers_) {
            if (t->traits().name == name) {
                return t.get();
            }
        }
        return nullptr;
    };
    for (const cache::tier_row & row : table_) {
        if (const cache::lower_tier * t = open(row.name)) {
            t->report(s);
        } else {
            s.tiers.push_back(row.off());
        }
    }
    for (const auto & t : tiers_) {  // a tier outside the table (unit tests' in-memory tier)
        const bool listed = std::any_of(table_.begin(), table_.end(),
                                        [&](const cache::tier_row & row) { return t->traits().name == row.name; });
        if (!listed) {
            t->report(s);
        }
    }
}

void tier_link::reset(cache::reset_result & r, const std::optional<std::string> & tenant) {
    for (const auto & t : tiers_) {
        // A tenant's reset runs after the writes queued before it and deletes those too; the
        // completions of other tenants' writes stay for the housekeeping to hand to the store.
        const auto freed = t->reset(tenant);
        auto & f = r.tiers[t->traits().name];
        f.copies += freed.first;
        f.bytes += freed.second;
        if (!tenant) {
            t->take_completions();  // writes finished before the reset: their copies are gone
        }
    }
}

}  // namespace lineage::scheduler
