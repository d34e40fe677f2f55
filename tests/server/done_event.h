// The final event of a generation, as the scheduler sends it, for the response-writer tests
// (chat, Messages, Responses): a finish reason and the token counts of its stats. Header-only.
#pragma once

#include "scheduler/request.h"

#include <cstdint>

namespace lineage::server::test_events {

/** A done event finishing with `f` after `prompt` prompt tokens (`cached` of them restored)
 *  and `completion` generated ones; the other stats at their defaults. */
inline scheduler::generation_event done_event(scheduler::finish_reason f, int32_t prompt, int32_t cached,
                                              int32_t completion) {
    scheduler::generation_event e;
    e.type = scheduler::generation_event::kind::done;
    e.finish = f;
    e.stats.prompt_tokens = prompt;
    e.stats.cached_tokens = cached;
    e.stats.completion_tokens = completion;
    return e;
}

}  // namespace lineage::server::test_events
