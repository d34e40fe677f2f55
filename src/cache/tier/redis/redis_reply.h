// cache::redis_tier's replies (internal to src/cache/tier/redis): hiredis replies owned, read and
// classified, shared by redis_tier.cpp (connection, writes, loads, reset) and redis_mirror.cpp
// (the poll of the shared index). Thread safety: the Redis thread only.
#pragma once

#include "cache/tier/redis/redis_tier.h"

#include <hiredis/hiredis.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lineage::cache {

namespace redis_reply {

struct reply_free {
    void operator()(redisReply * r) const { freeReplyObject(r); }
};
using reply_ptr = std::unique_ptr<redisReply, reply_free>;

inline std::optional<std::string> string_of(const redisReply * r) {
    if (r != nullptr && r->type == REDIS_REPLY_STRING) {
        return std::string(r->str, r->len);
    }
    return std::nullopt;
}

inline bool is_error(const redisReply * r) {
    return r != nullptr && r->type == REDIS_REPLY_ERROR;
}

/** An error reply about a key of another type (a list where a string belongs, ...). */
inline bool is_wrong_type(const redisReply * r) {
    return is_error(r) && std::string_view(r->str, r->len).starts_with("WRONGTYPE");
}

/** What redis_index_script and redis_poll_script return: {n, fixed, removed}. */
struct check_result {
    int64_t n = 0;
    int64_t fixed = 0;
    int64_t removed = 0;
};
inline std::optional<check_result> check_result_of(const redisReply * r) {
    if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != 3) {
        return std::nullopt;
    }
    for (size_t i = 0; i < 3; ++i) {
        if (r->element[i]->type != REDIS_REPLY_INTEGER) {
            return std::nullopt;
        }
    }
    return check_result{r->element[0]->integer, r->element[1]->integer, r->element[2]->integer};
}

/** Bytes a pipeline of reads may bring back at once (chunks of a load, metas of a poll). */
inline constexpr uint64_t max_batch_bytes = uint64_t{64} << 20;

}  // namespace redis_reply

/** One reply per command of a pipeline (redis_tier::pipeline). */
struct redis_tier::reply_set {
    std::vector<redis_reply::reply_ptr> r;
};

}  // namespace lineage::cache
