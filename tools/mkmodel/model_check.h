// model_check: loads a GGUF (normally one lineage-mkmodel just wrote) and verifies the
// properties the prompt cache relies on: it loads with its tokenizer and chat template, a cold
// prefill runs (timed), greedy decoding does not stop at once, and for hybrid models a
// recurrent-only (PARTIAL_ONLY) checkpoint restored after decoding further, followed by
// seq_rm of the tail, reproduces the logits of a cold run bit for bit (docs/prompt-cache.md
// "What a hit guarantees").
// Thread safety: run_check owns its model and context; call from one thread at a time.
// Ownership: nothing outlives the call.
#pragma once

#include <string>

namespace lineage::mkmodel {

struct check_options {
    std::string path;      // GGUF to load
    int n_tokens  = 1000;  // prompt tokens to prefill; checkpoints at n/2, a split at 3n/4
    int n_threads = 2;     // decode threads
    int n_batch   = 512;   // tokens per llama_decode call (and ubatch)
    int n_restore = 3;     // how many times the checkpoint is restored and replayed
};

// Runs the checks and prints one "check: ..." line per result to stdout (sizes in bytes,
// times in seconds). Returns true when every check passed; false on a load or decode failure,
// non-finite logits, a restore that fails, or logits that differ from the cold run.
// REQUIRES: llama_backend_init() was called; opts.n_tokens >= 16.
bool run_check(const check_options & opts);

}  // namespace lineage::mkmodel
