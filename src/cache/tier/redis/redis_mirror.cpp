// cache::redis_tier: the mirror of the shared index, read on the Redis thread's tick (see
// redis_tier.h, docs/architecture.md "Tier 3 (Redis) as implemented"). Each poll checks and
// repairs the counter and the index in Redis (redis_check_script), then reads the index
// entries past its cursor up to the counter, a page at a time, and their metas, each bounded
// before it is read; a bad member, meta or counter is counted and skipped or repaired, never a
// reason to stop reading the ones after it.
#include "cache/tier/redis/redis_reply.h"
#include "cache/tier/redis/redis_tier.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>

namespace lineage::cache {

using namespace redis_reply;

void redis_tier::index_read() {
    util::lock_guard lk(mu_);
    if (ready_.state != tier_readiness::ready) {
        spdlog::info("tier 3: the index in Redis read, {} entries of this model mirrored: ready", remote_.size());
        ready_ = {};
    }
}

void redis_tier::count_repairs(int64_t n, int64_t fixed, int64_t removed) {
    if (fixed == 0 && removed == 0) {
        return;
    }
    util::lock_guard lk(mu_);
    if ((fixed & 1) != 0) {
        stats_.damaged++;
        stats_.damage["counter"]++;
        spdlog::warn("tier 3: the sequence counter {} was not a number in [0, 2^53] (or not a string): set to {}, "
                     "past every sequence in the index",
                     keys_.seq(), n);
    }
    if ((fixed & 2) != 0) {
        stats_.damaged++;
        stats_.damage["wrong_type"]++;
        spdlog::warn("tier 3: the index {} was not a sorted set: deleted", keys_.index());
    }
    if ((fixed & 4) != 0) {
        stats_.damaged++;
        stats_.damage["counter"]++;
        spdlog::warn("tier 3: the sequence counter {} reached 2^53: the index starts over", keys_.seq());
    }
    if (removed > 0) {
        stats_.damaged += removed;
        stats_.damage["index"] += removed;
        spdlog::warn("tier 3: {} members of the index {} scored above the sequence counter (e.g. +inf): removed",
                     removed, keys_.index());
    }
}

bool redis_tier::tick_now() {
    const std::optional<int64_t> seq = read_counter();
    if (!seq) {
        return false;
    }
    if (*seq < last_seq_) {
        // FLUSHALL, a Redis restart without persistence, a repaired counter: what the mirror
        // lists may be gone.
        util::lock_guard lk(mu_);
        spdlog::info("tier 3: the index in Redis restarted (sequence {} < {}): mirror of {} entries cleared", *seq,
                     last_seq_, remote_.size());
        stats_.index_resets++;
        mirror_.clear();
        remote_.clear();
        by_key_.clear();
        order_.clear();
        mirror_tokens_ = 0;
        last_seq_ = 0;
        cursor_ = 0;
    }
    if (*seq == last_seq_ && cursor_ >= static_cast<double>(*seq)) {
        index_read();
        return false;
    }
    // The index entries past the cursor, up to the counter, a page at a time, then their metas.
    std::vector<std::pair<std::string, int64_t>> fresh;
    double last_score = cursor_;
    size_t n_read = 0;
    if (!read_index_page(*seq, fresh, last_score, n_read) || !read_metas(fresh)) {
        return false;  // the same page again at the next tick
    }
    if (n_read == index_page) {
        cursor_ = last_score;
        return true;  // more to read
    }
    cursor_ = static_cast<double>(*seq);
    last_seq_ = *seq;
    index_read();
    return false;
}

std::optional<int64_t> redis_tier::read_counter() {
    // Checked and repaired with the index (redis_poll_script): every member is then scored at
    // most the counter, so that reading up to it never stops on a bad one.
    reply_set rs;
    if (!pipeline({{"EVAL", redis_poll_script, "2", keys_.seq(), keys_.index(), std::to_string(redis_max_sequence)}},
                  rs)) {
        return std::nullopt;
    }
    auto checked = check_result_of(rs.r[0].get());
    std::string why = is_error(rs.r[0].get()) ? std::string(rs.r[0]->str, rs.r[0]->len) : "an unexpected reply";
    if (!checked && why.starts_with("OOM")) {
        // Redis full under maxmemory-policy noeviction refuses a script that may write: the
        // counter read as it is, without the repair (a bad one waits for memory).
        if (!pipeline({{"GET", keys_.seq()}}, rs)) {
            return std::nullopt;
        }
        const auto text = string_of(rs.r[0].get());
        if (!text) {
            checked = check_result{};
        } else if (auto n = parse_redis_sequence(*text); n && text->find_first_not_of("0123456789") == std::string::npos) {
            checked = check_result{*n, 0, 0};
        } else {
            why += "; the counter is not a sequence";
        }
    }
    if (!checked) {
        util::lock_guard lk(mu_);
        stats_.errors++;
        tier_state st{tier_readiness::unavailable, "the index in Redis could not be read (" + why + ")"};
        if (ready_.state != st.state || ready_.detail != st.detail) {  // once, not every poll
            spdlog::warn("tier 3: the index could not be read ({}); serving without the entries of other replicas", why);
        }
        ready_ = std::move(st);
        return std::nullopt;
    }
    count_repairs(checked->n, checked->fixed, checked->removed);
    return checked->n;
}

bool redis_tier::read_index_page(int64_t seq, std::vector<std::pair<std::string, int64_t>> & fresh,
                                 double & last_score, size_t & n_read) {
    reply_set rs;
    if (!pipeline({{"ZRANGEBYSCORE", keys_.index(), fmt::format("({:.17g}", cursor_), std::to_string(seq), "WITHSCORES",
                    "LIMIT", "0", std::to_string(index_page)}},
                  rs) ||
        !all_ok(rs)) {
        return false;
    }
    const redisReply * arr = rs.r[0].get();
    int64_t bad = 0;
    for (size_t i = 0; arr->type == REDIS_REPLY_ARRAY && i + 1 < arr->elements; i += 2, ++n_read) {
        const auto ek = string_of(arr->element[i]);
        const auto score = string_of(arr->element[i + 1]);
        if (score) {
            last_score = std::max(last_score, std::strtod(score->c_str(), nullptr));
        }
        const auto n = score ? parse_redis_sequence(*score) : std::nullopt;
        if (!ek || !n || !valid_redis_entry_key(*ek)) {
            bad++;  // a member no writer makes: skipped, the cursor moves past it
            if (bad == 1) {
                spdlog::warn("tier 3: index member '{}' (score {}) is not an entry key scored by a sequence: skipped",
                             ek ? ek->substr(0, 64) : "?", score.value_or("?"));
            }
            continue;
        }
        fresh.emplace_back(*ek, *n);
    }
    if (bad > 0) {
        util::lock_guard lk(mu_);
        stats_.damaged += bad;
        stats_.damage["index"] += bad;
    }
    return true;
}

bool redis_tier::read_metas(const std::vector<std::pair<std::string, int64_t>> & fresh) {
    // Each sized first (STRLEN), read in batches of at most max_batch_bytes, none past
    // redis_max_meta_bytes.
    reply_set rs;
    std::vector<std::vector<std::string>> lens;
    for (const auto & [ek, n] : fresh) {
        lens.push_back({"STRLEN", keys_.meta(ek)});
    }
    if (!fresh.empty() && !pipeline(lens, rs)) {
        return false;
    }
    std::vector<std::pair<size_t, uint64_t>> wanted;  // (index in fresh, bytes)
    for (size_t i = 0; i < fresh.size(); ++i) {
        const redisReply * r = rs.r[i].get();
        if (is_wrong_type(r)) {
            count_damage("wrong_type");
            spdlog::warn("tier 3: index entry {} is a key of another type: skipped", keys_.meta(fresh[i].first));
        } else if (r->type != REDIS_REPLY_INTEGER) {
            util::lock_guard lk(mu_);  // another error reply: counted; the entry is skipped
            stats_.errors++;
        } else if (r->integer <= 0) {
            // evicted since (or never written): nothing to mirror
        } else if (static_cast<uint64_t>(r->integer) > redis_max_meta_bytes) {
            count_damage("too_large");
            spdlog::warn("tier 3: index entry {} of {} bytes is past {} bytes: skipped", keys_.meta(fresh[i].first),
                         r->integer, redis_max_meta_bytes);
        } else {
            wanted.emplace_back(i, static_cast<uint64_t>(r->integer));
        }
    }
    for (size_t at = 0; at < wanted.size();) {
        std::vector<std::vector<std::string>> gets;
        uint64_t batch = 0;
        size_t end = at;
        while (end < wanted.size() && (end == at || batch + wanted[end].second <= max_batch_bytes)) {
            batch += wanted[end].second;
            // Never more than STRLEN said (a meta rewritten meanwhile reads cut: damage).
            gets.push_back({"GETRANGE", keys_.meta(fresh[wanted[end].first].first), "0",
                            std::to_string(wanted[end].second - 1)});
            ++end;
        }
        if (!pipeline(gets, rs)) {
            return false;
        }
        for (size_t k = 0; k < gets.size(); ++k) {
            const auto & [ek, n] = fresh[wanted[at + k].first];
            const redisReply * r = rs.r[k].get();
            if (is_wrong_type(r)) {
                count_damage("wrong_type");
                continue;
            }
            const auto bytes = string_of(r);
            if (!bytes || bytes->empty()) {
                continue;  // evicted since
            }
            mirror_meta(ek, n, *bytes);
        }
        at = end;
    }
    return true;
}

void redis_tier::mirror_meta(const std::string & ek, int64_t seq, const std::string & bytes) {
    redis_meta m;
    const tier_load_result r = decode_redis_meta(bytes, cfg_.model, m);
    if (r.error == tier_load_error::other_model) {
        return;  // another model's replicas share the namespace: not ours
    }
    if (r.error != tier_load_error::none) {
        count_damage(r.error);
        spdlog::warn("tier 3: index entry {} ignored ({}: {})", ek, to_string(r.error), r.detail);
        return;
    }
    util::lock_guard lk(mu_);
    if (auto old = by_key_.find(ek); old != by_key_.end()) {
        unmirror(old->second);
    }
    const copy_id id = next_id_++;
    const auto n_tokens = static_cast<uint64_t>(m.rec.toks.size());
    tier_catalog::file f;
    f.id = id;
    f.bucket = m.rec.bucket;
    f.session = m.rec.session;
    f.toks = std::move(m.rec.toks);
    f.checkpoints = std::move(m.rec.checkpoints);
    f.history = m.rec.history;
    f.anchor = m.rec.anchor;
    f.tenant = m.rec.tenant;
    f.bytes = m.payload_bytes;
    f.last_use = static_cast<double>(seq);
    mirror_.add(std::move(f));
    remote_[id] = {ek, m.payload_bytes, m.n_chunks, n_tokens};
    by_key_[ek] = id;
    order_.push_back(id);
    mirror_tokens_ += n_tokens;
    // The oldest first, past either bound (index entries of other replicas are not this one's
    // to grow its memory without end).
    while (static_cast<int64_t>(order_.size()) > redis_max_index || mirror_tokens_ > redis_max_mirror_tokens) {
        unmirror(order_.front());
    }
}

}  // namespace lineage::cache
