// cache::reasons: names of the eviction and rejection reasons; see reasons.h.
#include "cache/store/reasons.h"

namespace lineage::cache {

std::string_view to_string(eviction_reason r) {
    switch (r) {
        case eviction_reason::lru: return "lru";
        case eviction_reason::ttl: return "ttl";
        case eviction_reason::capacity: return "capacity";
        case eviction_reason::superseded: return "superseded";
        case eviction_reason::anchor_cap: return "anchor_cap";
        case eviction_reason::released: return "released";
    }
    return "?";
}

std::string_view to_string(rejection_reason r) {
    switch (r) {
        case rejection_reason::too_large: return "too_large";
        case rejection_reason::budget: return "budget";
        case rejection_reason::min_prefix: return "min_prefix";
        case rejection_reason::disabled: return "disabled";
        case rejection_reason::anchor_too_large: return "anchor_too_large";
        case rejection_reason::abandoned: return "abandoned";
        case rejection_reason::not_admitted: return "not_admitted";
    }
    return "?";
}

std::string_view to_string(miss_cause c) {
    switch (c) {
        case miss_cause::no_shared_prefix: return "no_shared_prefix";
        case miss_cause::below_min_prefix: return "below_min_prefix";
        case miss_cause::key_differs: return "key_differs";
        case miss_cause::before_first_restore_point: return "before_first_restore_point";
        case miss_cause::evicted: return "evicted";
        case miss_cause::bypassed: return "bypassed";
    }
    return "?";
}

}  // namespace lineage::cache
