// cache::redis_tier: tier 3 in Redis; see redis_tier.h.
#include "cache/redis_tier.h"

#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <stdexcept>

namespace lineage::cache {

namespace {

double mono_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct reply_free {
    void operator()(redisReply * r) const { freeReplyObject(r); }
};
using reply_ptr = std::unique_ptr<redisReply, reply_free>;

std::optional<std::string> string_of(const redisReply * r) {
    if (r != nullptr && r->type == REDIS_REPLY_STRING) {
        return std::string(r->str, r->len);
    }
    return std::nullopt;
}

}  // namespace

struct redis_tier::reply_set {
    std::vector<reply_ptr> r;
};

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

redis_tier::redis_tier(redis_config cfg) : cfg_(std::move(cfg)), keys_{cfg_.ns}, mirror_(cfg_.rule) {
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
    }
    thread_ = std::thread([this] { run(); });
}

redis_tier::~redis_tier() {
    {
        util::lock_guard lk(qmu_);
        stopping_ = true;
    }
    qcv_.notify_all();
    if (thread_.joinable()) {
        thread_.join();
    }
    if (ctx_ != nullptr) {
        redisFree(ctx_);
    }
}

std::optional<disk_candidate> redis_tier::best(const std::string & bucket, const std::string & session,
                                               const tokens & prompt, int32_t longer_than) const {
    util::lock_guard lk(mu_);
    auto c = mirror_.best(bucket, session, prompt, longer_than);
    if (c) {
        c->remote = true;
    }
    return c;
}

void redis_tier::push(job j, bool front) {
    {
        util::lock_guard lk(qmu_);
        if (front) {
            queue_.push_front(std::move(j));
        } else {
            queue_.push_back(std::move(j));
        }
    }
    qcv_.notify_one();
}

void redis_tier::write(disk_write w) {
    {
        util::lock_guard lk(qmu_);
        size_t writes = 0;
        for (const auto & q : queue_) {
            writes += q.k == job::kind::write ? 1 : 0;
        }
        if (writes >= 64) {  // Redis slower than the write-behind: drop rather than hold states
            util::lock_guard lk2(mu_);
            stats_.write_failures++;
            completions_.push_back({w.entry_id, 0, util::status::error("tier-3 queue full")});
            return;
        }
    }
    job j;
    j.k = job::kind::write;
    j.w = std::move(w);
    push(std::move(j), false);
}

std::future<disk_load_result> redis_tier::load(file_id id, disk_expect want, std::function<void()> on_done) {
    job j;
    j.k = job::kind::load;
    j.id = id;
    j.want = std::move(want);
    j.load_done = std::make_shared<std::promise<disk_load_result>>();
    j.on_done = std::move(on_done);
    auto f = j.load_done->get_future();
    push(std::move(j), true);
    return f;
}

std::vector<disk_completion> redis_tier::take_completions() {
    util::lock_guard lk(mu_);
    std::vector<disk_completion> out;
    out.swap(completions_);
    return out;
}

void redis_tier::drain() {
    {
        util::lock_guard lk(qmu_);
        poll_now_ = true;
    }
    job j;
    j.barrier = std::make_shared<std::promise<void>>();
    auto f = j.barrier->get_future();
    push(std::move(j), false);
    f.wait();
}

std::pair<int64_t, uint64_t> redis_tier::reset(const std::optional<std::string> & tenant) {
    job j;
    j.k = job::kind::reset;
    j.tenant = tenant;
    j.reset_done = std::make_shared<std::promise<std::pair<int64_t, uint64_t>>>();
    auto f = j.reset_done->get_future();
    push(std::move(j), false);
    return f.get();
}

redis_stats redis_tier::get_stats() const {
    redis_stats s;
    {
        util::lock_guard lk(mu_);
        s = stats_;
        s.entries = static_cast<int64_t>(remote_.size());
    }
    util::lock_guard lk(qmu_);
    s.queued = static_cast<int64_t>(queue_.size());
    return s;
}

void redis_tier::count_damage(disk_load_error e) {
    util::lock_guard lk(mu_);
    stats_.damaged++;
    stats_.damage[to_string(e)]++;
}

void redis_tier::drop_connection(const std::string & why) {
    // hiredis reports a timeout as an I/O error with EAGAIN ("Resource temporarily unavailable").
    const bool timeout = ctx_ != nullptr && ctx_->err == REDIS_ERR_IO &&
                         (errno == EAGAIN || errno == EWOULDBLOCK || why.find("temporarily") != std::string::npos ||
                          why.find("timed out") != std::string::npos);
    {
        util::lock_guard lk(mu_);
        if (stats_.connected) {
            spdlog::warn("tier 3: Redis at {} failed ({}); requests go on without it, retrying in {:.0f} s",
                         cfg_.url, why, cfg_.retry_s);
        }
        stats_.errors++;
        stats_.timeouts += timeout ? 1 : 0;
        stats_.connected = false;
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
    for (const auto & r : out.r) {
        if (r->type == REDIS_REPLY_ERROR) {
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

void redis_tier::forget(file_id id) {
    util::lock_guard lk(mu_);
    auto it = remote_.find(id);
    if (it == remote_.end()) {
        return;
    }
    by_key_.erase(it->second.ek);
    remote_.erase(it);
    mirror_.remove(id);
    std::erase(order_, id);
}

void redis_tier::run() {
    double last_poll = 0;
    for (;;) {
        std::optional<job> j;
        bool poll_due = false;
        {
            util::unique_lock lk(qmu_);
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(cfg_.poll_s);
            while (!stopping_ && queue_.empty() && !poll_now_ &&
                   lk.wait_until(qcv_, deadline) != std::cv_status::timeout) {
            }
            if (stopping_ && queue_.empty()) {
                break;
            }
            poll_due = poll_now_ || mono_s() - last_poll >= cfg_.poll_s;
            poll_now_ = false;
            if (!queue_.empty()) {
                j = std::move(queue_.front());
                queue_.pop_front();
            }
        }
        try {
            if (poll_due && (!j || j->k != job::kind::load)) {
                last_poll = mono_s();
                poll();
            }
            if (j) {
                switch (j->k) {
                    case job::kind::write: do_write(*j); break;
                    case job::kind::load: do_load(*j); break;
                    case job::kind::reset: j->reset_done->set_value(do_reset(j->tenant)); break;
                    case job::kind::barrier: j->barrier->set_value(); break;
                }
            }
        } catch (const std::exception & e) {
            spdlog::error("tier 3: {}", e.what());
            if (j && j->reset_done) {
                j->reset_done->set_value({0, 0});
            }
            if (j && j->load_done) {
                disk_load_result r;
                r.error = disk_load_error::io;
                r.detail = e.what();
                j->load_done->set_value(std::move(r));
                if (j->on_done) {
                    j->on_done();
                }
            }
        }
    }
}

void redis_tier::do_write(job & j) {
    disk_record & rec = j.w.rec;
    rec.model = cfg_.model;
    rec.id = 1;  // the disk format wants an id; tier 3's identity is the entry key
    const std::string ek = redis_entry_key(rec.model, rec.bucket, rec.toks);
    const std::string payload = encode_disk_record(rec);
    const auto chunks = split_chunks(ek, payload, cfg_.chunk_bytes);
    std::vector<std::vector<std::string>> cmds;
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < chunks.size(); ++i) {
        cmds.push_back({"SET", keys_.chunk(ek, i), chunks[i]});
        bytes += chunks[i].size();
    }
    cmds.push_back({"SET", keys_.meta(ek), encode_redis_meta(payload.size(), static_cast<uint32_t>(chunks.size()), rec)});
    cmds.push_back({"INCR", keys_.seq()});
    reply_set rs;
    bool ok = pipeline(cmds, rs);
    if (ok) {
        const long long seq = rs.r.back()->integer;
        // The index entry last: a reader that sees it finds the chunks (unless evicted since).
        ok = pipeline({{"ZADD", keys_.index(), std::to_string(seq), ek},
                       {"ZREMRANGEBYRANK", keys_.index(), "0", std::to_string(-(redis_max_index + 1))}},
                      rs);
    }
    util::lock_guard lk(mu_);
    if (!ok) {
        stats_.write_failures++;
        completions_.push_back({j.w.entry_id, 0, util::status::error("tier 3: Redis unreachable")});
        return;
    }
    stats_.writes++;
    stats_.chunks_written += static_cast<int64_t>(chunks.size());
    stats_.bytes_written += bytes;
    completions_.push_back({j.w.entry_id, 1, util::status::ok()});
}

void redis_tier::poll() {
    reply_set rs;
    if (!pipeline({{"GET", keys_.seq()}}, rs)) {
        return;
    }
    const auto seq_text = string_of(rs.r[0].get());
    const int64_t seq = seq_text ? std::stoll(*seq_text) : 0;
    if (seq < last_seq_) {
        // FLUSHALL, a Redis restart without persistence, or eviction of the counter: what the
        // mirror lists is gone.
        util::lock_guard lk(mu_);
        spdlog::info("tier 3: the index in Redis restarted (sequence {} < {}): mirror of {} entries cleared", seq,
                     last_seq_, remote_.size());
        stats_.index_resets++;
        mirror_.clear();
        remote_.clear();
        by_key_.clear();
        order_.clear();
        last_seq_ = 0;
    }
    if (seq == last_seq_) {
        return;
    }
    if (!pipeline({{"ZRANGEBYSCORE", keys_.index(), "(" + std::to_string(last_seq_), "+inf", "WITHSCORES", "LIMIT",
                    "0", "512"}},
                  rs)) {
        return;
    }
    const redisReply * arr = rs.r[0].get();
    std::vector<std::pair<std::string, int64_t>> fresh;
    for (size_t i = 0; arr->type == REDIS_REPLY_ARRAY && i + 1 < arr->elements; i += 2) {
        auto ek = string_of(arr->element[i]);
        auto score = string_of(arr->element[i + 1]);
        if (ek && score) {
            fresh.emplace_back(*ek, std::stoll(*score));
        }
    }
    if (fresh.empty()) {
        last_seq_ = seq;
        return;
    }
    std::vector<std::vector<std::string>> gets;
    for (const auto & [ek, s] : fresh) {
        gets.push_back({"GET", keys_.meta(ek)});
    }
    if (!pipeline(gets, rs)) {
        return;
    }
    for (size_t i = 0; i < fresh.size(); ++i) {
        last_seq_ = std::max(last_seq_, fresh[i].second);
        const auto bytes = string_of(rs.r[i].get());
        if (!bytes) {
            continue;  // evicted since
        }
        redis_meta m;
        const disk_load_result r = decode_redis_meta(*bytes, cfg_.model, m);
        if (r.error == disk_load_error::other_model) {
            continue;  // another model's replicas share the namespace: not ours
        }
        if (r.error != disk_load_error::none) {
            count_damage(r.error);
            spdlog::warn("tier 3: index entry {} ignored ({}: {})", fresh[i].first, to_string(r.error), r.detail);
            continue;
        }
        util::lock_guard lk(mu_);
        if (auto old = by_key_.find(fresh[i].first); old != by_key_.end()) {
            const file_id id = old->second;
            mirror_.remove(id);
            by_key_.erase(old);
            remote_.erase(id);
            std::erase(order_, id);
        }
        const file_id id = next_id_++;
        disk_catalog::file f;
        f.id = id;
        f.bucket = m.rec.bucket;
        f.session = m.rec.session;
        f.toks = std::move(m.rec.toks);
        f.checkpoints = std::move(m.rec.checkpoints);
        f.history = m.rec.history;
        f.anchor = m.rec.anchor;
        f.tenant = m.rec.tenant;
        f.bytes = m.payload_bytes;
        f.last_use = static_cast<double>(fresh[i].second);
        mirror_.add(std::move(f));
        remote_[id] = {fresh[i].first, m.payload_bytes, m.n_chunks};
        by_key_[fresh[i].first] = id;
        order_.push_back(id);
        while (static_cast<int64_t>(order_.size()) > redis_max_index) {
            const file_id victim = order_.front();
            order_.pop_front();
            by_key_.erase(remote_[victim].ek);
            remote_.erase(victim);
            mirror_.remove(victim);
        }
    }
    if (fresh.size() == 512) {
        util::lock_guard lk(qmu_);
        poll_now_ = true;  // more to read
    }
}

void redis_tier::do_load(job & j) {
    remote_entry e;
    disk_catalog::file row;
    {
        util::lock_guard lk(mu_);
        auto it = remote_.find(j.id);
        if (it != remote_.end()) {
            e = it->second;
            row = *mirror_.find(j.id);
        }
    }
    disk_load_result r;
    auto finish = [&] {
        j.load_done->set_value(std::move(r));
        if (j.on_done) {
            j.on_done();
        }
    };
    if (e.ek.empty()) {
        r.error = disk_load_error::missing;
        r.detail = "no longer in the mirror";
        finish();
        return;
    }
    std::vector<std::vector<std::string>> gets;
    for (uint32_t i = 0; i < e.n_chunks; ++i) {
        gets.push_back({"GET", keys_.chunk(e.ek, i)});
    }
    reply_set rs;
    if (!pipeline(gets, rs)) {
        r.error = disk_load_error::io;
        r.detail = "Redis unreachable or slow";
        finish();
        return;
    }
    std::vector<std::optional<std::string>> chunks;
    uint64_t bytes = 0;
    for (const auto & x : rs.r) {
        chunks.push_back(string_of(x.get()));
        bytes += chunks.back() ? chunks.back()->size() : 0;
    }
    std::string payload;
    r = join_chunks(e.ek, e.payload_bytes, e.n_chunks, chunks, payload);
    if (r.error == disk_load_error::none) {
        r = decode_disk_record(payload, cfg_.model);
    }
    if (r.error == disk_load_error::none) {
        // Its identity: the entry the index names, and the prefix the request restores.
        const disk_record & rec = *r.record;
        const bool same = rec.bucket == row.bucket && rec.session == row.session && rec.toks == row.toks &&
                          (j.want.bucket.empty() || rec.bucket == j.want.bucket) &&
                          j.want.prefix.size() <= rec.toks.size() &&
                          std::equal(j.want.prefix.begin(), j.want.prefix.end(), rec.toks.begin());
        if (!same) {
            r = {};
            r.error = disk_load_error::identity;
            r.detail = "the chunks hold another entry than the index names";
        }
    }
    if (r.error == disk_load_error::none) {
        util::lock_guard lk(mu_);
        stats_.loads++;
        stats_.bytes_read += bytes;
    } else if (r.error == disk_load_error::missing) {
        {
            util::lock_guard lk(mu_);
            stats_.vanished++;
        }
        spdlog::info("tier 3: entry {} vanished from Redis ({}): a miss", e.ek, r.detail);
        forget(j.id);
    } else {
        count_damage(r.error);
        spdlog::warn("tier 3: entry {} rejected ({}: {}); deleted from Redis", e.ek, to_string(r.error), r.detail);
        forget(j.id);
        std::vector<std::vector<std::string>> dels{{"ZREM", keys_.index(), e.ek}, {"DEL", keys_.meta(e.ek)}};
        for (uint32_t i = 0; i < e.n_chunks; ++i) {
            dels.push_back({"DEL", keys_.chunk(e.ek, i)});
        }
        reply_set ignored;
        pipeline(dels, ignored);
    }
    finish();
}

std::pair<int64_t, uint64_t> redis_tier::do_reset(const std::optional<std::string> & tenant) {
    // The whole index first (what other replicas wrote since the last poll, and this replica's
    // writes queued before the reset): poll() reads 512 index entries a call.
    for (int i = 0; i < 256; ++i) {
        poll();
        util::lock_guard lk(qmu_);
        if (!poll_now_) {
            break;
        }
        poll_now_ = false;
    }
    std::vector<std::pair<file_id, remote_entry>> victims;
    {
        util::lock_guard lk(mu_);
        for (const auto & [id, e] : remote_) {
            const disk_catalog::file * f = mirror_.find(id);
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
