// server::lora_registry: the LoRA adapters the server loaded (--lora, --lora-scaled), their
// global scales (GET/POST /lora-adapters) and the digest of each file's content, from which a
// request's lora_id is computed (the cache key's lora dimension, docs/prompt-cache.md "LoRA
// adapters"): two requests share cached states only when the same adapter contents are
// applied with the same scales. POST /lora-adapters re-reads every adapter file and reloads
// the ones whose content changed, so their new lora_id never meets the old file's states.
// Thread safety: every member may be called from any HTTP thread (internally locked; apply()
// calls are serialised). Ownership: value semantics; the reload callback is borrowed per call.
#pragma once

#include "cache/rule/digest.h"
#include "server/http/errors.h"
#include "util/status.h"
#include "util/thread_annotations.h"

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace lineage::server {

/** One adapter file and its scale at startup (--lora: 1.0; --lora-scaled FILE:SCALE). */
struct lora_spec {
    std::string path;
    float scale = 1.0f;
};

/** One {id, scale} of a request's `lora` or of a POST /lora-adapters body. */
struct lora_scale {
    int64_t id = -1;
    float scale = 0.0f;
};

/** An adapter as GET /lora-adapters lists it. */
struct lora_entry {
    int64_t id = 0;
    std::string path;
    float scale = 0.0f;
    std::string digest;  ///< digest of the file's content, hex (the --prompt-cache-hash algorithm)
};

/** What a request runs with: the scales of every adapter (id order; empty when all are 0),
 *  the lora_id of the cache key ("" = no adapter) and the adapter generation it was keyed in. */
struct lora_selection {
    std::vector<float> scales;
    std::string lora_id;
    uint64_t epoch = 0;
};

/** lora_id: "" when every scale is 0 (the base model's value), else the digest ("lineage:lora:v1"
 *  then, for each adapter with a non-zero scale in id order, its content digest and the
 *  scale's IEEE-754 bits) as hex. REQUIRES: digests.size() == scales.size(). */
std::string lora_id_of(const std::vector<std::string> & digests, const std::vector<float> & scales,
                       cache::hash_algo algo);

/** The value of --lora (`with_scale` false: "FILE[,FILE...]", scale 1) or of --lora-scaled
 *  (`with_scale` true: "FILE:SCALE[,FILE:SCALE...]" as llama-server, or "FILE,SCALE" as
 *  `--lora-scaled FILE SCALE` arrives joined) appended to `out`. Returns ok or what was wrong. */
util::status parse_lora_specs(const std::string & value, bool with_scale, std::vector<lora_spec> & out);

/** Digest of a file's bytes (raw, `algo`); nullopt when it cannot be read. */
std::optional<std::string> file_digest(const std::string & path, cache::hash_algo algo);

/** A `lora` array ([{"id": N, "scale": S}, ...]) read from JSON; throws fields::bad_field naming
 *  `param` ("lora[1].scale") when it is not an array of such objects (id an integer >= 0,
 *  scale a finite number; scale defaults to 0 as in llama-server). */
std::vector<lora_scale> parse_lora_list(const json & v, const std::string & param);

class lora_registry {
public:
    /** Digests each file. Throws std::runtime_error naming a file that cannot be read. */
    lora_registry(std::vector<lora_spec> specs, cache::hash_algo algo);

    size_t size() const { return n_; }
    std::vector<lora_entry> list() const;

    /** The selection of a request: the global scales when `requested` is empty, else the
     *  requested ones with every adapter it does not name at 0 (llama-server's rule). A 400
     *  naming `param` for an id that is not loaded. */
    std::optional<api_error> select(const std::vector<lora_scale> & requested, lora_selection & out,
                                    const std::string & param = "lora") const;

    /** Reloads adapter `id` in the engine under generation `epoch`; ok or why it failed. */
    using reload_fn = std::function<util::status(size_t id, uint64_t epoch)>;

    /** POST /lora-adapters: sets the global scales (adapters not named go to 0), then re-reads
     *  every adapter file and reloads through `reload` each one whose content changed;
     *  `reloaded` gets their ids. Errors: 400 for an unknown id (nothing changes), 500 when a
     *  file cannot be read or the engine refuses its new content (that adapter keeps its old
     *  content and digest). */
    std::optional<api_error> apply(const std::vector<lora_scale> & scales, const reload_fn & reload,
                                   std::vector<int64_t> & reloaded);

private:
    std::optional<api_error> check_ids(const std::vector<lora_scale> & s, const std::string & param) const;

    const cache::hash_algo algo_;
    const size_t n_;
    std::mutex apply_mu_;  // one apply() at a time (a reload waits for the engine to idle)
    mutable util::mutex mu_;
    std::vector<lora_entry> entries_ GUARDED_BY(mu_);
    std::vector<std::string> raw_digests_ GUARDED_BY(mu_);
    uint64_t epoch_ GUARDED_BY(mu_) = 0;       ///< the generation new requests are keyed in
    uint64_t next_epoch_ GUARDED_BY(mu_) = 1;  ///< never reused, also after a failed reload
};

}  // namespace lineage::server
