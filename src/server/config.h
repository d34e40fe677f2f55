// server::config: every server setting, from command-line flags (CLI11) or environment variables; a
// flag on the command line wins over its variable (docs/prompt-cache.md "Configuration"). Why one
// place: --help, the docs and the parser cannot drift apart when each setting is declared once with
// its flag, variable, default and meaning.
// Thread safety: parse_config is reentrant (it reads the environment through `env`).
#pragma once

#include "cache/tier_table.h"
#include "scheduler/scheduler.h"
#include "server/http/tenants.h"
#include "server/prepare/lora_registry.h"
#include "server/http/request_limits.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace lineage::server {

struct server_config {
    scheduler::params sched;              ///< engine, batching and cache settings
    std::string model_path;               ///< -m/--model (required)
    int32_t n_gpu_layers = -1;            ///< --n-gpu-layers (-ngl); -1: as many as fit
    bool use_mmap = true;                 ///< --mmap / --no-mmap: memory-map the weights
    bool use_repack = true;               ///< --repack / --no-repack: llama.cpp's extra CPU buffer types
    bool use_mlock = false;               ///< --mlock: keep the weights in RAM (never swapped)
    bool jinja = true;                    ///< --jinja: accepted (llama-server); false is refused
    /** --cache-ram (-cram), llama-server's RAM cache size in MiB: N > 0 sets both RAM-tier
     *  budgets (sched.cache.kv_capacity_bytes and snapshot_capacity_bytes) to N MiB; -1 = unset
     *  (the budget flags or the model-aware default). 0 is refused. */
    int64_t cache_ram_mib = -1;
    std::string host = "127.0.0.1";       ///< --host
    int32_t port = 8080;                  ///< --port
    int32_t n_predict = -1;               ///< --n-predict: max tokens of a request that sets none; -1 = no cap
    std::string api_key;                  ///< --api-key; "" = none (tenant "default", tenants.h)
    std::string api_key_file;             ///< --api-key-file: "KEY TENANT" lines; "" = none
    std::vector<tenant_key> tenant_keys;  ///< the keys of --api-key-file, parsed by parse_config
    std::string admin_api_key;            ///< --admin-api-key: global stats, reset and /metrics
    std::vector<std::string> allowed_hosts;  ///< --allowed-hosts; empty = the default (routes.h)
    std::string chat_template_file;       ///< --chat-template-file; "" = the model's template
    std::string alias;                    ///< --alias: model id in /v1/models; "" = file name
    std::vector<std::string> model_aliases;  ///< --model-alias (repeatable): more ids in /v1/models
    uint64_t max_body_bytes = 64ull << 20;  ///< --max-body-bytes: larger requests get 413
    int32_t max_json_depth = 128;         ///< --max-json-depth: deeper bodies get 400 (json_body.h)
    /** --max-tools, --max-tools-bytes, --max-messages, --max-content-parts, --max-prompt-bytes:
     *  the work one request may ask before the engine (request_limits.h). */
    request_limits limits;
    /** --memory-trim-interval: seconds between checks that give freed heap memory back to the
     *  system after requests (memory_trim.h); 0 = never. */
    double memory_trim_interval_s = 5;
    // Connections (cpp-httplib; docs/prompt-cache.md "Security and failure model")
    int32_t http_threads = 128;           ///< --http-threads: worker threads (one per open connection); > --parallel
    int32_t http_nice = 10;               ///< --http-nice: nice value a large or constrained body is prepared at (0: off)
    int32_t http_queue = 256;             ///< --http-queue: connections waiting for a worker; more are closed
    double http_read_timeout_s = 5;       ///< --http-read-timeout: longest wait for the next bytes of a request
    double http_write_timeout_s = 5;      ///< --http-write-timeout: longest wait for a client to take bytes
    int32_t http_keep_alive_max = 100;    ///< --http-keep-alive-max: requests per connection
    /** --stream-keepalive: a streamed request whose first event has not come within this many
     *  seconds (queued, or a long prefill) gets its response headers then, and an SSE comment
     *  line every this many seconds until its output starts; 0 = headers with the first event. */
    double stream_keepalive_s = 10;
    int32_t http_keep_alive_timeout_s = 5;  ///< --http-keep-alive-timeout: idle seconds before a kept-alive connection closes
    uint64_t max_uri_bytes = 8192;        ///< --max-uri-bytes: longer request targets get 414
    uint64_t max_header_bytes = 32768;    ///< --max-header-bytes: more header bytes get 431
    std::string log_level = "info";       ///< --log-level: trace|debug|info|warn|error
    bool metrics = false;                 ///< --metrics: serve GET /metrics (Prometheus text format)
    bool cache_page = true;               ///< --cache-page: serve the cache page GET /cache (cache_view.h)
    /** LoRA adapters, id = index: the --lora files (scale 1) then the --lora-scaled ones;
     *  parse_config also puts their paths in sched.lora_paths. */
    std::vector<lora_spec> loras;
    std::vector<lora_spec> loras_scaled;  ///< --lora-scaled, before parse_config appends them to `loras`
    /** --mmproj: the multimodal projector GGUF for the model ("" = none: images refused). */
    std::string mmproj;
    /** --image-max-pixels: the largest image (width x height) a request may send. */
    int64_t image_max_pixels = 32ll << 20;
    /** --responses-store: SQLite file of the stored Responses API responses; resolved by
     *  parse_config to <disk_dir>/responses.sqlite when unset and the disk tier is on, else
     *  ":memory:" (also for the value "memory"). */
    std::string responses_store;
    double responses_ttl_s = 30 * 24 * 3600.0;      ///< --responses-ttl-s
    uint64_t responses_capacity_bytes = 1ull << 30;  ///< --responses-capacity-bytes
    /** --test-reply-script: a test instrument; every reply is forced from this script
     *  (server/prepare/reply_script.h); "" = off. */
    std::string test_reply_script;

    /** True when any API key is configured (--api-key, --api-key-file or --admin-api-key). */
    bool has_keys() const { return !api_key.empty() || !tenant_keys.empty() || !admin_api_key.empty(); }
};

/** Reads an environment variable; nullptr when unset. */
using env_lookup = std::function<const char *(const char *)>;

struct config_result {
    std::optional<server_config> config;  ///< set when the server should start
    int exit_code = 0;                    ///< when config is unset: 0 after --help, 1 on error
    std::string output;                   ///< the help text, or the error message(s)
};

/** Parses `argv` and the environment. Never throws and never exits: the caller prints
 *  `output` (stdout for help, stderr for errors) and exits with `exit_code`. An error message
 *  names the flag or variable, the bad value and what is accepted. `tiers`: the tiers below RAM
 *  whose flags are read (each row's flags function; unit tests add one). */
config_result parse_config(int argc, const char * const * argv, const env_lookup & env = std::getenv,
                           const std::vector<cache::tier_row> & tiers = cache::tier_table());

/** Byte count with an optional suffix B, K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB (all powers of
 *  1024, case-insensitive), e.g. "16GiB"; nullopt when malformed or out of range. */
std::optional<uint64_t> parse_bytes(const std::string & s);

/** The --help text (`tiers`: as parse_config). */
std::string config_help(const char * program = "lineage-server",
                        const std::vector<cache::tier_row> & tiers = cache::tier_table());

}  // namespace lineage::server
