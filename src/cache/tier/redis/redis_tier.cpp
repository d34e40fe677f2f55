// cache::redis_tier: tier 3 in Redis; see redis_tier.h.
#include "cache/tier/redis/redis_tier.h"

#include "cache/tier/redis/redis_reply.h"

#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <stdexcept>

namespace lineage::cache {

using namespace redis_reply;

namespace {

double mono_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace


util::expected<redis_url> parse_redis_url(const std::string & url) {
    const std::string scheme = "redis://";
    if (url.rfind(scheme, 0) != 0) {
        return util::status::error("'" + url + "' is not a redis:// URL (expected redis://host[:port][/db])");
    }
    std::string rest = url.substr(scheme.size());
    redis_url u;
    if (auto slash = rest.find('/'); slash != std::string::npos) {
        const std::string db = rest.substr(slash + 1);
        rest.resize(slash);
        if (!db.empty()) {
            if (db.find_first_not_of("0123456789") != std::string::npos || db.size() > 4) {
                return util::status::error("database '" + db + "' in '" + url + "' is not a number");
            }
            u.db = std::stoi(db);
        }
    }
    if (rest.find('@') != std::string::npos) {
        return util::status::error("'" + url + "': credentials in the URL are not supported");
    }
    if (auto colon = rest.rfind(':'); colon != std::string::npos) {
        const std::string port = rest.substr(colon + 1);
        if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 ||
            std::stoi(port) < 1 || std::stoi(port) > 65535) {
            return util::status::error("port '" + port + "' in '" + url + "' is not in 1-65535");
        }
        u.port = std::stoi(port);
        rest.resize(colon);
    }
    if (rest.empty()) {
        return util::status::error("'" + url + "' names no host");
    }
    u.host = rest;
    return u;
}

tier_traits redis_tier::kind() {
    return tier_traits{
        .name = "redis", .shared = true, .load_failed = "redis_failed", .copy_noun = "tier-3 (Redis) entry"};
}

redis_tier::redis_tier(redis_config cfg)
    // Redis slower than the write-behind: drop writes past 64 queued rather than hold states.
    : lower_tier(worker_config{.name = "tier 3", .max_queued_writes = 64, .tick_s = cfg.poll_s}, kind()),
      cfg_(std::move(cfg)),
      keys_{cfg_.ns},
      mirror_(cfg_.rule) {
    auto u = parse_redis_url(cfg_.url);
    if (!u) {
        throw std::invalid_argument(u.error().message());
    }
    url_ = *u;
    {
        util::lock_guard lk(mu_);
        stats_.enabled = true;
        stats_.url = cfg_.url;
        stats_.ns = cfg_.ns;
        ready_ = {tier_readiness::warming, "connecting to Redis at " + cfg_.url + " to read its index"};
    }
    start();
    request_tick();  // the first read of the index now, not after poll_s: the replica is not ready before it
}

redis_tier::~redis_tier() {
    stop();  // the queued jobs first (writes included, each bounded by the timeout)
    if (ctx_ != nullptr) {
        redisFree(ctx_);
    }
}

std::optional<tier_candidate> redis_tier::best(const std::string & bucket, const std::string & session,
                                               const tokens & prompt, int32_t longer_than) const {
    util::lock_guard lk(mu_);
    return mirror_.best(bucket, session, prompt, longer_than);
}

tier_state redis_tier::readiness() const {
    util::lock_guard lk(mu_);
    return ready_;
}

void redis_tier::write_dropped() {
    util::lock_guard lk(mu_);
    stats_.write_failures++;
}

std::unique_ptr<lower_tier> open_redis_tier(const config & cfg, const std::string & model, bool hybrid) {
    if (!cfg.enabled || cfg.redis_url.empty()) {
        return nullptr;
    }
    redis_config rc;
    rc.url = cfg.redis_url;
    rc.ns = cfg.redis_namespace;
    rc.timeout_ms = cfg.redis_timeout_ms;
    rc.chunk_bytes = cfg.redis_chunk_bytes;
    rc.model = model;
    rc.rule = restore_settings::from(cfg, hybrid);
    auto t = std::make_unique<redis_tier>(rc);
    spdlog::info("tier 3: Redis at {}, namespace {}, timeout {} ms, chunks of {} bytes", rc.url, rc.ns, rc.timeout_ms,
                 rc.chunk_bytes);
    return t;
}

tier_report describe(const redis_stats & r) {
    // Figures in JSON order; a metric's family comes where its first figure does (cache/figure.h stat_figure).
    return tier_report{
        .name = "redis",
        .enabled = r.enabled,
        .hits_help = "Restores served from tier 3 (Redis).",
        .figures = {
            figure("url", r.url),
            figure("namespace", r.ns),
            figure("connected", r.connected, "connected", "1 when the last call reached Redis (--cache-redis)."),
            figure("entries", r.entries, "entries", "Tier-3 index entries of this model mirrored by this replica."),
            figure("writes", r.writes, "writes_total", "Entries written to Redis."),
            figure("bytes_written", r.bytes_written, "written_bytes_total", "Chunk bytes written to Redis."),
            figure("chunks_written", r.chunks_written),
            figure("write_failures", r.write_failures, "write_failures_total",
                   "Writes to Redis not done (Redis down or slow, or the queue full)."),
            figure("loads", r.loads, "loads_total", "Entries read from Redis for a restore."),
            figure("bytes_read", r.bytes_read),
            figure("errors", r.errors, "errors_total",
                   "Redis calls that failed (timeouts included); the request went on without tier 3."),
            figure("timeouts", r.timeouts),
            figure("connects", r.connects),
            figure("vanished", r.vanished, "vanished_total",
                   "Tier-3 hits whose chunks were gone (Redis eviction, FLUSHALL): misses."),
            figure("damaged", r.damaged),
            figure_map("damage", r.damage, "damaged_total",
                       "Damaged or foreign tier-3 chunks and index entries, and bad values in the index (never served; deleted, skipped or repaired), by kind.", "kind",
                       {"corrupt", "truncated", "bad_magic", "identity", "other_format", "index", "counter",
                        "wrong_type", "too_large"}),
            figure("index_resets", r.index_resets),
            figure("queued", r.queued),
        }};
}

void redis_tier::report(stats & s) const {
    s.tiers.push_back(describe(get_stats()));
}

std::string redis_tier::exit_summary() const {
    const redis_stats rs = get_stats();
    return fmt::format("tier 3: {} entries written to Redis this run ({:.1f} MiB), {} failed", rs.writes,
                       static_cast<double>(rs.bytes_written) / (1 << 20), rs.write_failures);
}

redis_stats redis_tier::get_stats() const {
    redis_stats s;
    {
        util::lock_guard lk(mu_);
        s = stats_;
        s.entries = static_cast<int64_t>(remote_.size());
    }
    s.queued = queued();
    return s;
}

void redis_tier::count_damage(tier_load_error e) {
    count_damage(std::string(to_string(e)));
}

void redis_tier::count_damage(const std::string & kind) {
    util::lock_guard lk(mu_);
    stats_.damaged++;
    stats_.damage[kind]++;
}

void redis_tier::drop_connection(const std::string & why) {
    // hiredis reports a timeout as an I/O error with EAGAIN ("Resource temporarily unavailable").
    const bool timeout = ctx_ != nullptr && ctx_->err == REDIS_ERR_IO &&
                         (errno == EAGAIN || errno == EWOULDBLOCK || why.find("temporarily") != std::string::npos ||
                          why.find("timed out") != std::string::npos);
    {
        util::lock_guard lk(mu_);
        if (ready_.state == tier_readiness::warming) {
            spdlog::warn("tier 3: Redis at {} unavailable at startup ({}); ready without it, retrying every {:.0f} s",
                         cfg_.url, why, cfg_.retry_s);
        } else if (stats_.connected) {
            spdlog::warn("tier 3: Redis at {} failed ({}); requests go on without it, retrying in {:.0f} s", cfg_.url,
                         why, cfg_.retry_s);
        }
        stats_.errors++;
        stats_.timeouts += timeout ? 1 : 0;
        stats_.connected = false;
        ready_ = {tier_readiness::unavailable, "Redis at " + cfg_.url + " failed (" + why + "); retrying"};
    }
    if (ctx_ != nullptr) {
        redisFree(ctx_);
        ctx_ = nullptr;
    }
    next_connect_ = mono_s() + cfg_.retry_s;
}

bool redis_tier::connected() {
    if (ctx_ != nullptr) {
        return true;
    }
    if (mono_s() < next_connect_) {
        return false;
    }
    const timeval tv{cfg_.timeout_ms / 1000, (cfg_.timeout_ms % 1000) * 1000};
    ctx_ = redisConnectWithTimeout(url_.host.c_str(), url_.port, tv);
    if (ctx_ == nullptr || ctx_->err != 0) {
        drop_connection(ctx_ != nullptr ? ctx_->errstr : "cannot allocate a context");
        return false;
    }
    redisSetTimeout(ctx_, tv);
    {
        util::lock_guard lk(mu_);
        stats_.connects++;
        stats_.connected = true;
    }
    if (url_.db != 0) {
        reply_set rs;
        if (!pipeline({{"SELECT", std::to_string(url_.db)}}, rs)) {
            return false;
        }
        if (is_error(rs.r[0].get())) {
            drop_connection("SELECT " + std::to_string(url_.db) + ": " + std::string(rs.r[0]->str, rs.r[0]->len));
            return false;
        }
    }
    spdlog::info("tier 3: connected to Redis at {} (namespace {})", cfg_.url, cfg_.ns);
    return true;
}

bool redis_tier::pipeline(const std::vector<std::vector<std::string>> & cmds, reply_set & out) {
    out.r.clear();
    if (!connected()) {
        return false;
    }
    for (const auto & c : cmds) {
        std::vector<const char *> argv;
        std::vector<size_t> lens;
        for (const auto & a : c) {
            argv.push_back(a.data());
            lens.push_back(a.size());
        }
        if (redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
            drop_connection(ctx_->errstr);
            return false;
        }
    }
    for (size_t i = 0; i < cmds.size(); ++i) {
        void * r = nullptr;
        if (redisGetReply(ctx_, &r) != REDIS_OK || r == nullptr) {
            drop_connection(ctx_->errstr[0] != '\0' ? ctx_->errstr : "no reply");
            out.r.clear();
            return false;
        }
        out.r.emplace_back(static_cast<redisReply *>(r));
    }
    return true;
}

bool redis_tier::all_ok(const reply_set & rs) {
    for (const auto & r : rs.r) {
        if (is_error(r.get())) {
            // An error reply (e.g. OOM under maxmemory noeviction): the connection is fine.
            const std::string msg(r->str, r->len);
            util::lock_guard lk(mu_);
            stats_.errors++;
            spdlog::debug("tier 3: Redis replied {}", msg);
            return false;
        }
    }
    return true;
}

void redis_tier::forget(copy_id id) {
    util::lock_guard lk(mu_);
    unmirror(id);
}

void redis_tier::unmirror(copy_id id) {
    auto it = remote_.find(id);
    if (it == remote_.end()) {
        return;
    }
    mirror_tokens_ -= it->second.n_tokens;
    by_key_.erase(it->second.ek);
    remote_.erase(it);
    mirror_.remove(id);
    std::erase(order_, id);
}

tier_completion redis_tier::write_now(tier_write & w) {
    copy_record & rec = w.rec;
    rec.model = cfg_.model;
    rec.id = 1;  // the disk format wants an id; tier 3's identity is the entry key
    const std::string ek = redis_entry_key(rec.model, rec.bucket, rec.toks);
    const std::string payload = encode_copy_record(rec);
    const auto chunks = split_chunks(ek, payload, cfg_.chunk_bytes);
    std::string meta = encode_redis_meta(payload.size(), static_cast<uint32_t>(chunks.size()), rec);
    if (chunks.size() > redis_max_chunks || meta.size() > redis_max_meta_bytes || payload.size() > redis_max_payload_bytes) {
        // What every reader would reject (redis_format.h bounds): not written.
        util::lock_guard lk(mu_);
        stats_.write_failures++;
        spdlog::warn("tier 3: an entry of {} bytes in {} chunks (index entry {} bytes) is past what a reader accepts; "
                     "not written (raise --cache-redis-chunk-bytes)",
                     payload.size(), chunks.size(), meta.size());
        return {w.entry_id, 0, util::status::error("tier 3: entry too large for Redis")};
    }
    std::vector<std::vector<std::string>> cmds;
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < chunks.size(); ++i) {
        cmds.push_back({"SET", keys_.chunk(ek, i), chunks[i]});
        bytes += chunks[i].size();
    }
    cmds.push_back({"SET", keys_.meta(ek), std::move(meta)});
    // The index entry last: a reader that sees it finds the chunks (unless evicted since). The
    // sequence number and the index entry in one script (Redis runs a script atomically): with
    // INCR and ZADD apart, a reader that polled between them read the new sequence, found no
    // index entry above its last, moved past it and never mirrored the entry (an e2e run saw a
    // replica stuck one entry short); so did one whose ZADD of sequence n landed after another
    // writer's n + 1 had been read.
    // The script checks and repairs the counter and the index first (redis_check_script): a
    // counter set to garbage or a key of another type must not stop every later write.
    cmds.push_back({"EVAL", redis_index_script, "2", keys_.seq(), keys_.index(), std::to_string(redis_max_sequence),
                    ek, std::to_string(redis_max_index)});
    reply_set rs;
    bool ok = pipeline(cmds, rs);
    if (ok) {
        if (auto c = check_result_of(rs.r.back().get())) {
            count_repairs(c->n, c->fixed, c->removed);
        }
        ok = all_ok(rs);
    }
    util::lock_guard lk(mu_);
    if (!ok) {
        stats_.write_failures++;
        return {w.entry_id, 0, util::status::error("tier 3: Redis unreachable")};
    }
    stats_.writes++;
    stats_.chunks_written += static_cast<int64_t>(chunks.size());
    stats_.bytes_written += bytes;
    return {w.entry_id, 1, util::status::ok(), bytes};
}

tier_load_result redis_tier::read_chunks(const remote_entry & e, std::string & payload, uint64_t & bytes,
                                         uint32_t & n_owned) {
    // Chunk 0 alone first: its checksummed header must agree with the index entry's count and
    // size, and its data length gives the chunk size, before any other chunk is asked for; then
    // batches of at most max_batch_bytes, each chunk read no longer than a sound one is (plus
    // one byte, to see a longer one). So what a load holds follows the bytes Redis really has
    // for a sound entry, whatever an index entry declares.
    tier_load_result r;
    n_owned = 1;
    const uint64_t overhead = redis_chunk_overhead(e.ek);
    uint64_t chunk_size = 0;
    for (uint32_t i = 0; i < e.n_chunks;) {
        std::vector<std::vector<std::string>> gets;
        std::vector<uint64_t> sizes;
        uint64_t batch = 0;
        for (uint32_t k = i; k < e.n_chunks && (k == i || (i > 0 && batch + overhead + chunk_size <= max_batch_bytes));
             ++k) {
            const uint64_t data = k == 0 ? std::min(e.payload_bytes, redis_max_chunk_bytes)
                                  : k + 1 < e.n_chunks ? chunk_size
                                                       : e.payload_bytes - (e.n_chunks - 1) * chunk_size;
            sizes.push_back(overhead + data);
            batch += overhead + data;
            gets.push_back({"GETRANGE", keys_.chunk(e.ek, k), "0", std::to_string(overhead + data)});
            if (k == 0) {
                break;
            }
        }
        reply_set rs;
        if (!pipeline(gets, rs)) {
            r.error = tier_load_error::io;
            r.detail = "Redis unreachable or slow";
            return r;
        }
        for (size_t k = 0; k < gets.size(); ++k, ++i) {
            const std::string where = "chunk " + std::to_string(i) + " of " + std::to_string(e.n_chunks);
            const redisReply * x = rs.r[k].get();
            if (is_wrong_type(x)) {
                r.error = tier_load_error::bad_magic;
                r.detail = where + " is a key of another Redis type";
                return r;
            }
            if (is_error(x)) {
                all_ok(rs);
                r.error = tier_load_error::io;
                r.detail = where + ": " + std::string(x->str, x->len);
                return r;
            }
            const auto raw = string_of(x);
            if (!raw || raw->empty()) {  // GETRANGE answers "" for a missing key
                r.error = tier_load_error::missing;
                r.detail = where + " is not in Redis (evicted or flushed)";
                return r;
            }
            if (raw->size() > sizes[k]) {
                r.error = tier_load_error::corrupt;
                r.detail = where + " is longer than its index entry allows";
                return r;
            }
            bytes += raw->size();
            std::string_view data;
            r = check_chunk(e.ek, e.payload_bytes, e.n_chunks, i, *raw, chunk_size, data);
            if (r.error != tier_load_error::none) {
                return r;
            }
            n_owned = e.n_chunks;  // chunk 0 agrees with the index entry: its keys are the entry's
            payload.append(data);
        }
    }
    return r;
}

tier_load_result redis_tier::load_now(copy_id id, const tier_expect & want) {
    remote_entry e;
    tier_catalog::file row;
    {
        util::lock_guard lk(mu_);
        auto it = remote_.find(id);
        if (it != remote_.end()) {
            e = it->second;
            row = *mirror_.find(id);
        }
    }
    tier_load_result r;
    if (e.ek.empty()) {
        r.error = tier_load_error::missing;
        r.detail = "no longer in the mirror";
        return r;
    }
    std::string payload;
    uint64_t bytes = 0;
    uint32_t n_owned = 1;
    r = read_chunks(e, payload, bytes, n_owned);
    if (r.error == tier_load_error::none) {
        r = decode_copy_record(payload, cfg_.model);
    }
    if (r.error == tier_load_error::none) {
        // Its identity: the entry the index names, and the prefix the request restores.
        const copy_record & rec = *r.record;
        const bool same = rec.bucket == row.bucket && rec.session == row.session && rec.toks == row.toks &&
                          (want.bucket.empty() || rec.bucket == want.bucket) && want.prefix.size() <= rec.toks.size() &&
                          std::equal(want.prefix.begin(), want.prefix.end(), rec.toks.begin());
        if (!same) {
            r = {};
            r.error = tier_load_error::identity;
            r.detail = "the chunks hold another entry than the index names";
        }
    }
    if (r.error == tier_load_error::none) {
        util::lock_guard lk(mu_);
        stats_.loads++;
        stats_.bytes_read += bytes;
    } else if (r.error == tier_load_error::missing) {
        {
            util::lock_guard lk(mu_);
            stats_.vanished++;
        }
        spdlog::info("tier 3: entry {} vanished from Redis ({}): not restored", e.ek, r.detail);
        forget(id);
    } else {
        count_damage(r.error);
        spdlog::warn("tier 3: entry {} rejected ({}: {}); deleted from Redis", e.ek, to_string(r.error), r.detail);
        forget(id);
        // The chunk keys known to be the entry's, in UNLINKs of 1,024 keys (an index entry's
        // count alone, unchecked, never sizes a pipeline).
        std::vector<std::vector<std::string>> dels{{"ZREM", keys_.index(), e.ek}, {"UNLINK", keys_.meta(e.ek)}};
        for (uint32_t i = 0; i < n_owned; ++i) {
            if (i % 1024 == 0) {
                dels.push_back({"UNLINK"});
            }
            dels.back().push_back(keys_.chunk(e.ek, i));
        }
        reply_set ignored;
        pipeline(dels, ignored);
    }
    return r;
}

std::pair<int64_t, uint64_t> redis_tier::reset_now(const std::optional<std::string> & tenant) {
    // The whole index first (what other replicas wrote since the last poll, and this replica's
    // writes queued before the reset): tick_now() reads 512 index entries a call.
    for (int i = 0; i < 256 && tick_now(); ++i) {
    }
    std::vector<std::pair<copy_id, remote_entry>> victims;
    {
        util::lock_guard lk(mu_);
        for (const auto & [id, e] : remote_) {
            const tier_catalog::file * f = mirror_.find(id);
            if (!tenant || (f != nullptr && f->tenant == *tenant)) {
                victims.emplace_back(id, e);
            }
        }
    }
    int64_t entries = 0;
    uint64_t bytes = 0;
    constexpr size_t batch = 256;
    for (size_t at = 0; at < victims.size(); at += batch) {
        const size_t end = std::min(victims.size(), at + batch);
        std::vector<std::string> zrem{"ZREM", keys_.index()};
        std::vector<std::string> unlink{"UNLINK"};
        for (size_t i = at; i < end; ++i) {
            const remote_entry & e = victims[i].second;
            zrem.push_back(e.ek);
            unlink.push_back(keys_.meta(e.ek));
            for (uint32_t c = 0; c < e.n_chunks; ++c) {
                unlink.push_back(keys_.chunk(e.ek, c));
            }
        }
        reply_set rs;
        if (pipeline({zrem, unlink}, rs)) {
            for (size_t i = at; i < end; ++i) {
                entries++;
                bytes += victims[i].second.payload_bytes;
            }
        }
    }
    for (const auto & v : victims) {
        forget(v.first);  // never restored here again, deleted from Redis or not
    }
    spdlog::info("tier 3: reset{} deleted {} of {} entries ({} bytes) from Redis namespace {}",
                 tenant ? " of tenant " + *tenant : std::string(), entries, victims.size(), bytes, cfg_.ns);
    return {entries, bytes};
}

}  // namespace lineage::cache
