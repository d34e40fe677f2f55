// bench_cache: the cache core's own cost per request (cache::store plan() and commit()),
// against the number of entries in the bucket and the prompt length, with fake states (no
// model): what the engine thread spends deciding, before and after any prefill.
//
// The store is filled like an agent workload: N conversation entries that share a system
// prompt of L/2 tokens and differ after it (lengths L .. L+6), parked on device sequences, each
// with a turn and a guard checkpoint (hybrid), plus the pinned anchor at the end of the system
// prompt. Benchmarks, each for hybrid (checkpoints) and dense families:
//   BM_PlanNewSession/N/L   plan() of a new session on the known system prompt (restores the
//                           anchor; nothing is taken, so the store is unchanged between runs);
//   BM_NextTurn/N/L         plan() + commit() of a conversation's next turn (32 new tokens:
//                           absorbs its entry, stores the longer one), round robin over entries;
//   BM_Resend/N/L           plan() + commit() of a verbatim resend (regenerate) of an entry;
//   BM_DiskLookup/F         the disk catalog's lookup (tier_catalog::best, what disk_tier::best
//                           runs under its mutex) of a next turn in a bucket of 16 files of 1024
//                           tokens, with F files of other buckets beside them: the cost must not
//                           grow with F (the catalog is indexed by bucket, like the store).
//   BM_FreshBuffer/how/MiB  a state buffer of MiB that no idle buffer can serve, filled once (what
//                           a capture or a disk load does with it), freed: `vector` is a plain
//                           std::vector<uint8_t>, `take_blob` the blob pool's fresh allocation
//                           (transparent huge pages asked for before the first touch). Runs with
//                           the server's mmap threshold (main.cpp), so each buffer is mmap'd fresh.
//
//   build/bin/bench_cache [--benchmark_filter=NextTurn] [--benchmark_format=json]
#include "cache/blob_pool.h"
#include "cache/tier/tier_catalog.h"
#include "cache/store/store.h"

#include <benchmark/benchmark.h>
#include <malloc.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace lineage::cache;

constexpr int32_t new_tokens = 32;        // tokens a next turn adds
constexpr size_t checkpoint_bytes = 4096;  // fake recurrent state (shared, never copied)

tokens iota_tokens(int32_t from, int32_t n) {
    tokens t(static_cast<size_t>(n));
    std::iota(t.begin(), t.end(), from);
    return t;
}

// A store filled as the header describes, and the tokens of each entry.
struct fixture {
    fixture(bool hybrid, int32_t n_entries, int32_t len) : hybrid_(hybrid), n_(n_entries), len_(len) { rebuild(); }

    void rebuild() {
        config c;
        c.ram_bytes = uint64_t{1} << 40;
        c.max_entries = 1 << 20;
        c.ttl_s = 1e9;
        st = std::make_unique<store>(c, hybrid_);
        system = iota_tokens(1, len_ / 2);
        conv.assign(static_cast<size_t>(n_), {});
        if (!st->reserve(checkpoint_bytes)) {
            throw std::runtime_error("reserve failed");
        }
        const int32_t anchor = static_cast<int32_t>(system.size()) - c.anchor_slack;
        st->commit_anchor(key{"b", "s0"}, tokens(system.begin(), system.begin() + anchor), blob, checkpoint_bytes, 0);
        for (int32_t i = 0; i < n_; ++i) {
            tokens t = system;
            const tokens tail = iota_tokens(1'000'000 * (i + 1), len_ - static_cast<int32_t>(system.size()) + i % 7);
            t.insert(t.end(), tail.begin(), tail.end());
            conv[static_cast<size_t>(i)] = t;
            commit(key{"b", "s" + std::to_string(i)}, t, i, std::nullopt);
        }
        next_seq = n_;
    }

    // Stores `t` as an entry on sequence `seq`, with a turn and a guard checkpoint (hybrid).
    void commit(const key & k, const tokens & t, int32_t seq, std::optional<restore_plan> absorbed) {
        commit_input in;
        in.k = k;
        in.toks = t;
        in.seq = seq;
        in.device_bytes = 1 << 20;
        const int32_t n = static_cast<int32_t>(t.size());
        in.hints.history_tokens = n - 5;
        if (hybrid_) {
            for (const int32_t at : {n - 5, n - 1}) {
                if (!st->reserve(checkpoint_bytes)) {
                    throw std::runtime_error("reserve failed");
                }
                in.reserved_bytes += checkpoint_bytes;
                in.captured.push_back({at, at == n - 1 ? point_kind::guard : point_kind::turn, blob});
            }
            if (!st->reserve(checkpoint_bytes)) {
                throw std::runtime_error("reserve failed");
            }
            in.reserved_bytes += checkpoint_bytes;
            in.final_recurrent = blob;
        }
        in.absorbed = std::move(absorbed);
        st->commit(std::move(in), 1.0);
        st->take_released_seqs();
    }

    bool hybrid_;
    int32_t n_;
    int32_t len_;
    std::unique_ptr<store> st;
    tokens system;
    std::vector<tokens> conv;
    int32_t next_seq = 0;
    blob_ptr blob = make_blob(lineage::cache::blob(checkpoint_bytes, 0xab));
};

void BM_PlanNewSession(benchmark::State & state, bool hybrid) {
    fixture f(hybrid, static_cast<int32_t>(state.range(0)), static_cast<int32_t>(state.range(1)));
    tokens prompt = f.system;
    const tokens user = iota_tokens(900'000'000, 200);
    prompt.insert(prompt.end(), user.begin(), user.end());
    const plan_hints h{static_cast<int32_t>(f.system.size()), static_cast<int32_t>(prompt.size()) - 3};
    const key k{"b", "new-session"};
    for (auto _ : state) {
        restore_plan p = f.st->plan(k, prompt, h, 1.0);
        benchmark::DoNotOptimize(p.n_restore);
    }
    state.counters["entries"] = static_cast<double>(f.st->entries().size());
}

void BM_NextTurn(benchmark::State & state, bool hybrid) {
    const auto n = static_cast<int32_t>(state.range(0));
    fixture f(hybrid, n, static_cast<int32_t>(state.range(1)));
    const tokens turn = iota_tokens(800'000'000, new_tokens);
    int64_t i = 0;
    for (auto _ : state) {
        const auto j = static_cast<size_t>(i % n);
        if (i > 0 && j == 0) {
            state.PauseTiming();  // every entry has grown by one turn: start again
            f.rebuild();
            state.ResumeTiming();
        }
        ++i;
        tokens & t = f.conv[j];
        t.insert(t.end(), turn.begin(), turn.end());
        const key k{"b", "s" + std::to_string(j)};
        const plan_hints h{static_cast<int32_t>(f.system.size()), static_cast<int32_t>(t.size()) - 5};
        restore_plan p = f.st->plan(k, t, h, 1.0);
        if (!p.absorbs) {
            state.SkipWithError("the next turn did not absorb its entry");
            break;
        }
        const int32_t seq = p.device_seq;
        f.commit(k, t, seq, std::move(p));
    }
}

void BM_Resend(benchmark::State & state, bool hybrid) {
    const auto n = static_cast<int32_t>(state.range(0));
    fixture f(hybrid, n, static_cast<int32_t>(state.range(1)));
    int64_t i = 0;
    for (auto _ : state) {
        const auto j = static_cast<size_t>(i++ % n);
        const tokens & t = f.conv[j];
        const key k{"b", "s" + std::to_string(j)};
        const plan_hints h{static_cast<int32_t>(f.system.size()), static_cast<int32_t>(t.size()) - 5};
        restore_plan p = f.st->plan(k, t, h, 1.0);
        const int32_t seq = p.op == restore_op::take_device ? p.device_seq : f.next_seq++;
        std::optional<restore_plan> absorbed;
        if (p.absorbs) {
            absorbed = std::move(p);
        }
        f.commit(k, t, seq, std::move(absorbed));
    }
}

void BM_DiskLookup(benchmark::State & state) {
    const auto others = static_cast<int32_t>(state.range(0));
    constexpr int32_t len = 1024;
    constexpr int32_t own = 16;
    tier_catalog cat(restore_settings::from(config{}, true));
    const tokens system = iota_tokens(1, len / 2);
    copy_id id = 1;
    auto add = [&](const std::string & bucket, int32_t i) {
        tier_catalog::file f;
        f.id = id++;
        f.bucket = bucket;
        f.session = "s" + std::to_string(i);
        f.toks = system;
        const tokens tail = iota_tokens(1'000'000 * (i + 1), len / 2);
        f.toks.insert(f.toks.end(), tail.begin(), tail.end());
        f.history = len - 5;
        f.checkpoints = {{len - 5, point_kind::turn, nullptr}, {len - 1, point_kind::guard, nullptr}};
        f.last_use = static_cast<double>(i);
        cat.add(std::move(f));
    };
    for (int32_t i = 0; i < own; ++i) {
        add("b", i);
    }
    for (int32_t i = 0; i < others; ++i) {
        add("other-" + std::to_string(i % 64), own + i);  // the same tokens, other buckets
    }
    tokens prompt = system;
    const tokens tail = iota_tokens(1'000'000 * 4, len / 2);
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    const tokens turn = iota_tokens(800'000'000, new_tokens);
    prompt.insert(prompt.end(), turn.begin(), turn.end());
    for (auto _ : state) {
        auto c = cat.best("b", "s3", prompt, 0);
        if (!c || c->n != len) {
            state.SkipWithError("the next turn did not find its file");
            break;
        }
        benchmark::DoNotOptimize(c->n);
    }
    state.counters["files"] = static_cast<double>(cat.files().size());
}

void BM_FreshBuffer(benchmark::State & state, bool pooled) {
    mallopt(M_MMAP_THRESHOLD, 4 << 20);       // as lineage-server's main() does
    blob_pool::instance().configure(0, 0, 0);  // no idle buffer: every take allocates
    const auto n = static_cast<size_t>(state.range(0)) << 20;
    for (auto _ : state) {
        blob b = pooled ? take_blob(n) : blob(n);
        std::memset(b.data(), 0x5a, n);  // the capture's or the read's copy into it
        benchmark::DoNotOptimize(b.data());
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n));
}

void args(benchmark::internal::Benchmark * b) {
    for (const int64_t len : {1024, 8192, 32768}) {
        for (const int64_t n : {1, 16, 128, 1024}) {
            b->Args({n, len});
        }
    }
    b->ArgNames({"entries", "tokens"})->Unit(benchmark::kMicrosecond);
}

BENCHMARK_CAPTURE(BM_PlanNewSession, hybrid, true)->Apply(args);
BENCHMARK_CAPTURE(BM_PlanNewSession, dense, false)->Apply(args);
BENCHMARK_CAPTURE(BM_NextTurn, hybrid, true)->Apply(args);
BENCHMARK_CAPTURE(BM_NextTurn, dense, false)->Apply(args);
BENCHMARK_CAPTURE(BM_Resend, hybrid, true)->Apply(args);

}  // namespace

BENCHMARK(BM_DiskLookup)->Arg(0)->Arg(1000)->Arg(10000)->ArgNames({"other_files"})->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_FreshBuffer, vector, false)->Arg(5)->Arg(20)->Arg(40)->ArgNames({"MiB"})->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_FreshBuffer, take_blob, true)->Arg(5)->Arg(20)->Arg(40)->ArgNames({"MiB"})->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
