// server::config: the settings table (flag, variable, default, meaning, parser) and the parse.
// CLI11 reads the command line into strings; each value, whether from a flag or from its
// variable, then goes through the same typed parser, so both get the same checks and messages.
// Longer than ~600 lines on purpose: the table of every flag (about a hundred, each with its
// help text, variable and default) is one list in one place, which --help, the docs test and
// the parser all read; split by flag group it would be harder to keep complete.
#include "server/config.h"

#include "cache/tier_table.h"
#include "engine/context.h"
#include "server/http/endpoints.h"
#include "util/status.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <memory>
#include <sstream>
#include <vector>

namespace lineage::server {

namespace {

// llama.cpp limits (src/llama-cparams.h LLAMA_MAX_SEQ, ggml.h GGML_MAX_N_THREADS).
constexpr int64_t max_sequences = cache::config::max_sequences;
constexpr int64_t max_threads = 512;

// A parser stores a value, or returns what was wrong with it.
using value_parser = std::function<util::status(const std::string &)>;

struct setting {
    std::string names;       ///< CLI11 names, e.g. "-m,--model"
    std::string env;         ///< environment variable
    std::vector<std::string> env_aliases;  ///< older variables, read in order when the flag and `env` are unset
    std::string value_name;  ///< shown in --help, e.g. "PATH"
    std::string default_text;
    std::string help;
    value_parser parse;
    bool is_flag = false;    ///< --name or --name=BOOL (no separate value)
    bool repeatable = false; ///< may be given several times; the values reach `parse` joined by ','
    int max_values = 1;      ///< values one occurrence may take (--lora-scaled FILE SCALE: 2)
    /** llama-server's single-dash names of this flag ("-np"): CLI11 takes one-letter short
     *  names only, so parse_config rewrites these to the first long name before parsing. */
    std::vector<std::string> llama_short;
    std::string raw;         ///< filled by CLI11
    CLI::Option * opt = nullptr;
};

std::string trim(const std::string & s) {
    const auto b = s.find_first_not_of(" \t");
    if (b == std::string::npos) {
        return "";
    }
    const auto e = s.find_last_not_of(" \t");
    return s.substr(b, e - b + 1);
}

std::optional<int64_t> to_int(const std::string & s) {
    const std::string t = trim(s);
    int64_t v = 0;
    const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc() || p != t.data() + t.size()) {
        return std::nullopt;
    }
    return v;
}

std::optional<bool> to_bool(const std::string & s) {
    std::string t = trim(s);
    for (auto & c : t) {
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    if (t == "1" || t == "true" || t == "yes" || t == "on") {
        return true;
    }
    if (t == "0" || t == "false" || t == "no" || t == "off") {
        return false;
    }
    return std::nullopt;
}

value_parser int_in(int32_t & out, int64_t lo, int64_t hi) {
    return [&out, lo, hi](const std::string & s) -> util::status {
        const auto v = to_int(s);
        if (!v || *v < lo || *v > hi) {
            if (hi == std::numeric_limits<int32_t>::max()) {
                return util::status::error("expected an integer >= " + std::to_string(lo));
            }
            return util::status::error("expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                       "]");
        }
        out = static_cast<int32_t>(*v);
        return util::status::ok();
    };
}

value_parser int_min(int32_t & out, int64_t lo) {
    return int_in(out, lo, std::numeric_limits<int32_t>::max());
}

/** Seconds > 0, or >= 0 when `allow_zero`. */
value_parser seconds(double & out, bool allow_zero = false) {
    return [&out, allow_zero](const std::string & s) -> util::status {
        const std::string t = trim(s);
        double v = 0;
        const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (t.empty() || ec != std::errc() || p != t.data() + t.size() || !std::isfinite(v) || v < 0 ||
            (v == 0 && !allow_zero)) {
            return util::status::error(allow_zero ? "expected a number of seconds >= 0"
                                                  : "expected a number of seconds > 0");
        }
        out = v;
        return util::status::ok();
    };
}

/** Milliseconds > 0. */
value_parser milliseconds(double & out) {
    return [&out](const std::string & s) -> util::status {
        const std::string t = trim(s);
        double v = 0;
        const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (t.empty() || ec != std::errc() || p != t.data() + t.size() || !std::isfinite(v) || v <= 0) {
            return util::status::error("expected a number of milliseconds > 0");
        }
        out = v;
        return util::status::ok();
    };
}

/** Seconds >= 0, or "auto" (also -1): -1, resolved where the value depends on the device. */
value_parser seconds_or_auto(double & out) {
    return [&out](const std::string & s) -> util::status {
        if (const std::string t = trim(s); t == "auto" || t == "-1") {
            out = -1;
            return util::status::ok();
        }
        if (seconds(out, true)(s).is_ok()) {
            return util::status::ok();
        }
        return util::status::error("expected a number of seconds >= 0, or auto");
    };
}

value_parser boolean(bool & out) {
    return [&out](const std::string & s) -> util::status {
        const auto v = to_bool(s);
        if (!v) {
            return util::status::error("expected a boolean (true/false, 1/0, yes/no, on/off)");
        }
        out = *v;
        return util::status::ok();
    };
}

value_parser text(std::string & out, bool allow_empty = true) {
    return [&out, allow_empty](const std::string & s) -> util::status {
        if (!allow_empty && s.empty()) {
            return util::status::error("expected a non-empty value");
        }
        out = s;
        return util::status::ok();
    };
}

value_parser hash_name(cache::hash_algo & out) {
    return [&out](const std::string & s) -> util::status {
        const auto a = cache::parse_hash_algo(trim(s));
        if (!a) {
            return util::status::error("expected one of sha256|xxh3");
        }
        out = *a;
        return util::status::ok();
    };
}

value_parser int64_min(int64_t & out, int64_t lo) {
    return [&out, lo](const std::string & s) -> util::status {
        const auto v = to_int(s);
        if (!v || *v < lo) {
            return util::status::error("expected an integer >= " + std::to_string(lo));
        }
        out = *v;
        return util::status::ok();
    };
}

/** A list of names separated by ',' (a repeated flag's values are joined with ','); empty
 *  items are skipped. */
value_parser name_list(std::vector<std::string> & out) {
    return [&out](const std::string & s) -> util::status {
        out.clear();
        std::stringstream ss(s);
        std::string item;
        while (std::getline(ss, item, ',')) {
            item = trim(item);
            if (!item.empty() && std::find(out.begin(), out.end(), item) == out.end()) {
                out.push_back(item);
            }
        }
        return util::status::ok();
    };
}

value_parser one_of(std::string & out, std::vector<std::string> allowed) {
    return [&out, allowed](const std::string & s) -> util::status {
        for (const auto & a : allowed) {
            if (s == a) {
                out = s;
                return util::status::ok();
            }
        }
        std::string list;
        for (const auto & a : allowed) {
            list += (list.empty() ? "" : "|") + a;
        }
        return util::status::error("expected one of " + list);
    };
}

/** --flash-attn: on|off|auto (llama-server's values; also true/false, 1/0, yes/no, enabled/
 *  disabled) -> 1, 0, -1. */
value_parser flash_attn(int32_t & out) {
    return [&out](const std::string & s) -> util::status {
        std::string t = trim(s);
        for (auto & ch : t) {
            ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        }
        if (t == "auto" || t == "-1") {
            out = -1;
        } else if (t == "enabled") {
            out = 1;
        } else if (t == "disabled") {
            out = 0;
        } else if (const auto b = to_bool(t)) {
            out = *b ? 1 : 0;
        } else {
            return util::status::error("expected on, off or auto");
        }
        return util::status::ok();
    };
}

/** --n-gpu-layers: an integer >= -1, or llama-server's "auto" / "all" (both -1 here: llama.cpp
 *  then offloads every layer it can). */
value_parser gpu_layers(int32_t & out) {
    return [&out](const std::string & s) -> util::status {
        const std::string t = trim(s);
        if (t == "auto" || t == "all") {
            out = -1;
            return util::status::ok();
        }
        const auto v = to_int(t);
        if (!v || *v < -1 || *v > std::numeric_limits<int32_t>::max()) {
            return util::status::error("expected an integer >= -1, auto or all");
        }
        out = static_cast<int32_t>(*v);
        return util::status::ok();
    };
}

}  // namespace

/** Byte count with an optional suffix: B, K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB (all powers
 *  of 1024, case-insensitive). nullopt when malformed or out of range. */
std::optional<uint64_t> parse_bytes(const std::string & s) {
    const std::string t = trim(s);
    size_t i = 0;
    while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) {
        ++i;
    }
    if (i == 0) {
        return std::nullopt;
    }
    uint64_t n = 0;
    const auto [p, ec] = std::from_chars(t.data(), t.data() + i, n);
    if (ec != std::errc() || p != t.data() + i) {
        return std::nullopt;
    }
    std::string unit = trim(t.substr(i));
    for (auto & c : unit) {
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    int shift = -1;
    if (unit.empty() || unit == "b") {
        shift = 0;
    } else {
        static const char units[] = "kmgt";
        for (int k = 0; k < 4; ++k) {
            const std::string u(1, units[k]);
            if (unit == u || unit == u + "b" || unit == u + "i" || unit == u + "ib") {
                shift = 10 * (k + 1);
            }
        }
    }
    if (shift < 0) {
        return std::nullopt;
    }
    if (shift > 0 && n > (std::numeric_limits<uint64_t>::max() >> shift)) {
        return std::nullopt;
    }
    return n << shift;
}

namespace {

value_parser bytes_min(uint64_t & out, uint64_t lo) {
    return [&out, lo](const std::string & s) -> util::status {
        const auto v = parse_bytes(s);
        if (!v || *v < lo) {
            return util::status::error("expected a byte count" +
                                       (lo > 0 ? " >= " + std::to_string(lo) : std::string()) +
                                       " such as 512MiB or 17179869184 (suffixes K, M, G, T are powers of 1024)");
        }
        out = *v;
        return util::status::ok();
    };
}

std::string format_bytes_default(uint64_t v) {
    if (v != 0 && v % (1ull << 30) == 0) {
        return std::to_string(v >> 30) + "GiB";
    }
    if (v != 0 && v % (1ull << 20) == 0) {
        return std::to_string(v >> 20) + "MiB";
    }
    return std::to_string(v);
}

std::string fmt_double(double v) {
    std::ostringstream os;
    os << v;
    return os.str();
}

/** The settings table as a cache::flag_sink: a tier's flags (cache/tier_table.h) become settings
 *  like every other, parsed by the same value parsers. An empty flag_spec::default_text shows the
 *  value the field holds when the flag is added (its default). */
class settings_sink final : public cache::flag_sink {
public:
    using adder = std::function<void(std::string names, std::string env, std::string value_name, std::string def,
                                     std::string help, value_parser parse, bool is_flag)>;
    explicit settings_sink(adder add) : add_(std::move(add)) {}

    void boolean(cache::flag_spec f, bool & out) override {
        put(std::move(f), out ? "true" : "false", server::boolean(out), true);
    }
    void text(cache::flag_spec f, std::string & out, bool allow_empty) override {
        put(std::move(f), out, server::text(out, allow_empty));
    }
    void checked_text(cache::flag_spec f, std::string & out,
                      std::function<util::expected<std::string>(const std::string &)> normalize) override {
        put(std::move(f), out, [&out, normalize = std::move(normalize)](const std::string & v) -> util::status {
            auto r = normalize(v);
            if (!r) {
                return r.error();
            }
            out = std::move(*r);
            return util::status::ok();
        });
    }
    void bytes(cache::flag_spec f, uint64_t & out, uint64_t min) override {
        put(std::move(f), format_bytes_default(out), bytes_min(out, min));
    }
    void seconds(cache::flag_spec f, double & out, bool allow_zero) override {
        put(std::move(f), fmt_double(out), server::seconds(out, allow_zero));
    }
    void integer(cache::flag_spec f, int32_t & out, int64_t lo, int64_t hi) override {
        put(std::move(f), std::to_string(out), int_in(out, lo, hi));
    }

private:
    void put(cache::flag_spec f, const std::string & shown, value_parser parse, bool is_flag = false) {
        add_(std::move(f.names), std::move(f.env), std::move(f.value_name),
             f.default_text.empty() ? shown : std::move(f.default_text), std::move(f.help), std::move(parse), is_flag);
    }
    adder add_;
};

// The settings table, bound to `c`. The order is the order of --help.
std::vector<std::unique_ptr<setting>> make_settings(server_config & c, const std::vector<cache::tier_row> & tiers) {
    const server_config d;  // defaults
    auto & cc = c.sched.cache;
    const auto & dc = d.sched.cache;
    std::vector<std::unique_ptr<setting>> s;
    auto add = [&](std::string names, std::string env, std::string value_name, std::string def, std::string help,
                   value_parser parse, bool is_flag = false) {
        auto st = std::make_unique<setting>();
        st->names = std::move(names);
        st->env = std::move(env);
        st->value_name = std::move(value_name);
        st->default_text = std::move(def);
        st->help = std::move(help);
        st->parse = std::move(parse);
        st->is_flag = is_flag;
        s.push_back(std::move(st));
    };
    // --- model and HTTP ---
    add("-m,--model", "LINEAGE_MODEL", "PATH", "(required)", "GGUF model file to serve", text(c.model_path, false));
    add("--n-gpu-layers,--gpu-layers", "LINEAGE_N_GPU_LAYERS", "N", std::to_string(d.n_gpu_layers),
        "model layers to offload to the GPU; -1 (or auto, all) = every layer llama.cpp can, 0 = CPU only",
        gpu_layers(c.n_gpu_layers));
    s.back()->llama_short = {"-ngl"};
    add("--mmap,!--no-mmap", "LINEAGE_MMAP", "[=BOOL]", "true",
        "memory-map the model file (llama.cpp decides when true: mmap unless a device cannot use it); "
        "--no-mmap reads the weights into memory instead (slower start, no page-outs)",
        boolean(c.use_mmap), true);
    add("--repack,!--no-repack", "LINEAGE_REPACK", "[=BOOL]", "true",
        "let llama.cpp put the weights in its extra CPU buffer types (repacked layouts, Intel AMX tiles) where "
        "they are faster, as llama-server does (bench-qwen35 on a Xeon with AMX: a prefill 6-8% faster, decode "
        "~8%, the same RSS); --no-repack leaves them off: a request computed beside others then computes what "
        "it computes alone (with them a batch of several sequences runs other kernels, and a greedy reply can "
        "part from the one computed alone; a restore computed alone still equals a cold run bit for bit); "
        "kimi-linear models never use them (at the engine pin the AMX buffer type aborts their context)",
        boolean(c.use_repack), true);
    s.back()->llama_short = {"-nr"};
    add("--mlock", "LINEAGE_MLOCK", "[=BOOL]", "false",
        "lock the weights in RAM so that they are never swapped out or compressed (may need a raised "
        "RLIMIT_MEMLOCK: ulimit -l)",
        boolean(c.use_mlock), true);
    add("--host", "LINEAGE_HOST", "HOST", d.host, "address to listen on", text(c.host, false));
    add("--port", "LINEAGE_PORT", "PORT", std::to_string(d.port), "TCP port to listen on", int_in(c.port, 1, 65535));
    add("--api-key", "LINEAGE_API_KEY", "KEY", "(none)",
        "require 'Authorization: Bearer KEY' on every endpoint except /health and /ready", text(c.api_key));
    add("--api-key-file", "LINEAGE_API_KEY_FILE", "PATH", "(none)",
        "tenants: a file of 'KEY TENANT' lines (# comments and blank lines allowed); each tenant has its own "
        "prompt cache (no hit across tenants), stats and reset; may be combined with --api-key (tenant default)",
        text(c.api_key_file));
    add("--admin-api-key", "LINEAGE_ADMIN_API_KEY", "KEY", "(none; --api-key when it is the only key)",
        "key for the global endpoints: all tenants' stats, reset of every tenant, GET /metrics", text(c.admin_api_key));
    add("--allowed-hosts", "LINEAGE_ALLOWED_HOSTS", "LIST", "(* with an API key, else none)",
        "host names a request's Host header may carry besides IP addresses and localhost (DNS-rebinding "
        "protection); comma-separated, * allows any; others get HTTP 403",
        name_list(c.allowed_hosts));
    add("-a,--alias", "LINEAGE_ALIAS", "NAME", "(model file name)",
        "model id reported by /v1/models and in responses (a bucket dimension of the cache key); as with "
        "llama-server, NAME,MORE,... also lists the others in /v1/models (as --model-alias)",
        text(c.alias));
    add("--model-alias", "LINEAGE_MODEL_ALIAS", "NAME", "(none)",
        "another model id listed by GET /v1/models (repeatable, or a comma-separated list; every endpoint "
        "accepts any model name, this is for clients that look for theirs in the list)",
        name_list(c.model_aliases));
    s.back()->repeatable = true;
    auto lora_parser = [](std::vector<lora_spec> & out, bool with_scale) -> value_parser {
        return [&out, with_scale](const std::string & v) { return parse_lora_specs(v, with_scale, out); };
    };
    add("--lora", "LINEAGE_LORA", "FILE", "(none)",
        "LoRA adapter GGUF applied at scale 1 (repeatable, or comma-separated); adapters get ids 0, 1, ... in "
        "the order --lora then --lora-scaled; GET/POST /lora-adapters and a request's 'lora' use them",
        lora_parser(c.loras, false));
    s.back()->repeatable = true;
    add("--lora-scaled", "LINEAGE_LORA_SCALED", "FILE:SCALE", "(none)",
        "LoRA adapter GGUF with its scale, as FILE:SCALE or FILE SCALE (repeatable, or comma-separated)",
        lora_parser(c.loras_scaled, true));
    s.back()->repeatable = true;
    s.back()->max_values = 2;
    add("--mmproj", "LINEAGE_MMPROJ", "FILE", "(none)",
        "multimodal projector GGUF for the model (llama.cpp's mtmd): images are then served (chat image_url "
        "parts and Responses input_image items with data: URIs, Anthropic base64 image blocks); without it a "
        "request with an image gets HTTP 400",
        text(c.mmproj));
    add("--image-max-pixels", "LINEAGE_IMAGE_MAX_PIXELS", "N", std::to_string(d.image_max_pixels),
        "largest image a request may send, width x height in pixels (read from the image's header before it is "
        "decoded); a larger one gets HTTP 400",
        int64_min(c.image_max_pixels, 1));
    add("--chat-template-file", "LINEAGE_CHAT_TEMPLATE_FILE", "PATH", "(the model's template)",
        "Jinja chat template to use instead of the one in the GGUF", text(c.chat_template_file));
    add("--jinja,!--no-jinja", "LINEAGE_JINJA", "[=BOOL]", "true",
        "accepted for llama-server command lines and does nothing: lineage always renders the chat template "
        "with Jinja (llama.cpp's common chat); false / --no-jinja is refused",
        boolean(c.jinja), true);
    add("--max-body-bytes", "LINEAGE_MAX_BODY_BYTES", "BYTES", format_bytes_default(d.max_body_bytes),
        "largest request body accepted; larger ones get HTTP 413", bytes_min(c.max_body_bytes, 1024));
    add("--max-json-depth", "LINEAGE_MAX_JSON_DEPTH", "N", std::to_string(d.max_json_depth),
        "deepest nesting of arrays/objects accepted in a request body (checked before parsing); deeper "
        "bodies get HTTP 400",
        int_in(c.max_json_depth, 2, 1024));
    add("--max-tools", "LINEAGE_MAX_TOOLS", "N", std::to_string(d.limits.max_tools),
        "most tools (function definitions) one request may send; more get HTTP 400 too_many_tools (agents send "
        "20-100; rendering costs ~0.7 ms a tool)",
        int64_min(c.limits.max_tools, 1));
    add("--max-tools-bytes", "LINEAGE_MAX_TOOLS_BYTES", "BYTES", format_bytes_default(d.limits.max_tools_bytes),
        "most bytes of one request's tool names, descriptions and parameter schemas together; more get HTTP 400 "
        "tools_too_large",
        bytes_min(c.limits.max_tools_bytes, 1024));
    add("--max-messages", "LINEAGE_MAX_MESSAGES", "N", std::to_string(d.limits.max_messages),
        "most messages in one conversation (a Responses request: its input items plus the stored conversation it "
        "continues); more get HTTP 400 too_many_messages (rendering costs ~0.3 ms a message)",
        int64_min(c.limits.max_messages, 1));
    add("--max-content-parts", "LINEAGE_MAX_CONTENT_PARTS", "N", std::to_string(d.limits.max_content_parts),
        "most content parts over all messages of a request (text parts, images and tool calls count one each, a "
        "plain string content one); more get HTTP 400 too_many_content_parts",
        int64_min(c.limits.max_content_parts, 1));
    add("--max-prompt-bytes", "LINEAGE_MAX_PROMPT_BYTES", "BYTES", format_bytes_default(d.limits.max_prompt_bytes),
        "most bytes of text given to the tokenizer for one request (the rendered chat prompt, a /v1/completions "
        "text prompt, /tokenize's content); more get HTTP 400 prompt_too_large before tokenizing",
        bytes_min(c.limits.max_prompt_bytes, 1024));
    add("--max-logit-bias", "LINEAGE_MAX_LOGIT_BIAS", "N", std::to_string(d.limits.max_logit_bias),
        "most logit_bias entries one request may send (OpenAI's API takes 300); more get HTTP 400 "
        "too_many_logit_bias (the sampler walks them every generated token)",
        int64_min(c.limits.max_logit_bias, 1));
    add("--max-grammar-ms", "LINEAGE_MAX_GRAMMAR_MS", "MS", fmt_double(d.limits.max_grammar_ms),
        "most milliseconds a generated token may spend enforcing a request's grammar, JSON Schema or "
        "response_format (measured over the vocabulary before the request is queued); costlier constraints get "
        "HTTP 400 grammar_too_costly, as every other request waits while one is enforced, and a request whose "
        "step takes longer while it runs is ended with that error",
        milliseconds(c.limits.max_grammar_ms));
    add("--max-grammar-alternatives", "LINEAGE_MAX_GRAMMAR_ALTERNATIVES", "N",
        std::to_string(d.limits.max_grammar_alternatives),
        "most alternatives in a request's constraint ('|' in a grammar; enum values, properties and anyOf/oneOf "
        "branches in a JSON Schema); more get HTTP 400 grammar_too_large before the grammar is built",
        int64_min(c.limits.max_grammar_alternatives, 1));
    add("--memory-trim-interval", "LINEAGE_MEMORY_TRIM_INTERVAL", "SECONDS", fmt_double(d.memory_trim_interval_s),
        "every this many seconds, if requests ended since the last time, give the heap memory they freed back to "
        "the system (glibc malloc_trim), so that RSS returns to its baseline after a burst; 0 = never",
        seconds(c.memory_trim_interval_s, /*allow_zero=*/true));
    add("--max-uri-bytes", "LINEAGE_MAX_URI_BYTES", "BYTES", std::to_string(d.max_uri_bytes),
        "longest request target (path + query) accepted; longer ones get HTTP 414 (above 32 KiB the connection "
        "is closed without a status, a cpp-httplib limit)",
        bytes_min(c.max_uri_bytes, 256));
    add("--max-header-bytes", "LINEAGE_MAX_HEADER_BYTES", "BYTES", format_bytes_default(d.max_header_bytes),
        "most bytes of request headers (names + values) accepted; more, or more than 100 header lines, get HTTP 431",
        bytes_min(c.max_header_bytes, 1024));
    add("--http-threads", "LINEAGE_HTTP_THREADS", "N", std::to_string(d.http_threads),
        "HTTP worker threads; an open connection (streaming, slow or idle) holds one, so this many connections "
        "are served at once; must exceed --parallel",
        int_in(c.http_threads, 2, 65536));
    add("--http-nice", "LINEAGE_HTTP_NICE", "N", std::to_string(d.http_nice),
        "nice value (1-19; 0 = the engine's priority) at which a request with a body over 256 KiB or a grammar or "
        "JSON Schema is parsed, rendered, tokenized and probed: such work then takes the CPU the engine leaves, so "
        "that costly bodies on a machine with few cores slow the other requests less; other requests are "
        "prepared at the engine's priority",
        int_in(c.http_nice, 0, 19));
    add("--http-queue", "LINEAGE_HTTP_QUEUE", "N", std::to_string(d.http_queue),
        "accepted connections waiting for a free worker; beyond it new connections are closed at once; 0 = "
        "no bound",
        int_min(c.http_queue, 0));
    add("--http-read-timeout", "LINEAGE_HTTP_READ_TIMEOUT", "SECONDS", fmt_double(d.http_read_timeout_s),
        "a request's next bytes (request line, headers, body) must arrive within this time, else the connection "
        "is closed",
        seconds(c.http_read_timeout_s));
    add("--http-write-timeout", "LINEAGE_HTTP_WRITE_TIMEOUT", "SECONDS", fmt_double(d.http_write_timeout_s),
        "a client must take response bytes within this time, else the connection is closed",
        seconds(c.http_write_timeout_s));
    add("--http-keep-alive-max", "LINEAGE_HTTP_KEEP_ALIVE_MAX", "N", std::to_string(d.http_keep_alive_max),
        "requests served on one connection before it is closed", int_in(c.http_keep_alive_max, 1, 1000000));
    add("--stream-keepalive", "LINEAGE_STREAM_KEEPALIVE", "SECONDS", fmt_double(d.stream_keepalive_s),
        "a streamed request whose output has not started within this many seconds (queued, or a long prefill) gets "
        "its response headers then and an SSE comment line every this many seconds until it starts, so clients "
        "(Node's fetch gives up waiting for headers after 300 s) and proxies (nginx's 60 s read timeout) keep the "
        "connection; an error after that comes as an error event in the stream, not as an HTTP status; 0 = "
        "headers with the first token",
        seconds(c.stream_keepalive_s, /*allow_zero=*/true));
    add("--http-keep-alive-timeout", "LINEAGE_HTTP_KEEP_ALIVE_TIMEOUT", "SECONDS",
        std::to_string(d.http_keep_alive_timeout_s), "an idle kept-alive connection is closed after this many whole seconds",
        int_in(c.http_keep_alive_timeout_s, 1, 3600));
    add("--log-level", "LINEAGE_LOG_LEVEL", "LEVEL", d.log_level,
        "trace|debug|info|warn|error (trace adds llama.cpp's own debug lines, which quote prompts and replies)",
        one_of(c.log_level, {"trace", "debug", "info", "warn", "error"}));
    add("--metrics", "LINEAGE_METRICS", "[=BOOL]", "false",
        "serve GET /metrics in the Prometheus text format (404 when off)", boolean(c.metrics), true);
    add("--cache-page", "LINEAGE_CACHE_PAGE", "[=BOOL]", "true",
        "serve the cache page GET /cache (entries and restore points, tier bytes, hits and misses, the last "
        "requests; embedded, fetches nothing; behind the same keys as GET /v1/cache/stats); 404 when off",
        boolean(c.cache_page), true);
    add("-n,--n-predict", "LINEAGE_N_PREDICT", "N", std::to_string(d.n_predict),
        "tokens generated for a request that sets no max_tokens / max_output_tokens (as llama-server's -n); "
        "-1 = until end of generation or the context is full",
        int_min(c.n_predict, -1));
    // --- engine and batching ---
    add("--parallel", "LINEAGE_PARALLEL", "N", std::to_string(d.sched.n_parallel),
        "sequences decoded together (continuous batching slots)", int_in(c.sched.n_parallel, 1, 256));
    s.back()->llama_short = {"-np"};
    add("-c,--ctx-size", "LINEAGE_CTX_SIZE", "TOKENS", "0",
        "tokens one sequence (prompt + completion) may hold; the KV pool holds this many for each of the "
        "--parallel + --cache-device-slots sequences; 0 = the model's training context, capped at 16384",
        int_min(c.sched.n_ctx, 0));
    add("--kv-unified", "LINEAGE_KV_UNIFIED", "[=BOOL]", "false",
        "one KV pool shared by all sequences: sequences with a common prefix share cells instead of copies, "
        "but a request's logits then depend in the low bits on the other sequences held (greedy near-ties "
        "can differ from a cold run); off: one buffer per sequence, a restore computes exactly as a cold run (of a "
        "request computed alone; beside other requests the batch shape can move the low bits: docs/prompt-cache.md "
        "\"What a hit guarantees\")",
        boolean(c.sched.kv_unified), true);
    add("--place-sequences", "LINEAGE_PLACE_SEQUENCES", "[=BOOL]", "true",
        "with one KV buffer per sequence, move a request's restored sequence next to a running request's (one "
        "state copy) when it is next to none, to a free id there or to a parked entry's, which goes to RAM: "
        "llama.cpp computes sequences side by side in one micro-batch only when their ids are consecutive, so two "
        "conversations decoding on ids 0 and 2 cost two graphs a step; no effect with --kv-unified",
        boolean(c.sched.place_sequences), true);
    add("-b,--batch-size", "LINEAGE_BATCH_SIZE", "TOKENS", std::to_string(d.sched.n_batch),
        "tokens per llama_decode call (prefill chunk size); at least --parallel + --cache-device-slots",
        int_min(c.sched.n_batch, 1));
    add("--ubatch-size", "LINEAGE_UBATCH_SIZE", "TOKENS", std::to_string(d.sched.n_ubatch),
        "physical micro-batch size", int_min(c.sched.n_ubatch, 1));
    add("-t,--threads", "LINEAGE_THREADS", "N", "0",
        "CPU threads for the engine, at most 512 (ggml's GGML_MAX_N_THREADS); 0 = all hardware threads",
        int_in(c.sched.n_threads, 0, max_threads));
    add("--threads-batch", "LINEAGE_THREADS_BATCH", "N", "0",
        "CPU threads for a prefill (a batch of several tokens), at most 512; 0 = as --threads",
        int_in(c.sched.n_threads_batch, 0, max_threads));
    s.back()->llama_short = {"-tb"};
    add("--flash-attn", "LINEAGE_FLASH_ATTN", "on|off|auto", "auto",
        "flash attention; auto = llama.cpp decides per device (and turns it on for a quantized V cache); a "
        "quantized --cache-type-v needs it, so off with one is refused",
        flash_attn(c.sched.flash_attn));
    s.back()->llama_short = {"-fa"};
    {
        std::string types;
        for (const auto & t : engine::kv_cache_types()) {
            types += (types.empty() ? "" : ", ") + t;
        }
        add("--cache-type-k", "LINEAGE_CACHE_TYPE_K", "TYPE", d.sched.type_k,
            "KV cache data type of K: " + types +
                "; a state stored in the cache (device, RAM, disk, Redis) restores only into the same K and V "
                "types (they are a bucket dimension of the cache key), a quantized type needs a head size that is a "
                "multiple of its block",
            one_of(c.sched.type_k, engine::kv_cache_types()));
        s.back()->llama_short = {"-ctk"};
        add("--cache-type-v", "LINEAGE_CACHE_TYPE_V", "TYPE", d.sched.type_v,
            "KV cache data type of V: as --cache-type-k; a quantized type needs flash attention", 
            one_of(c.sched.type_v, engine::kv_cache_types()));
        s.back()->llama_short = {"-ctv"};
    }
    add("--cache-device-bytes", "LINEAGE_CACHE_DEVICE_BYTES", "BYTES", "0",
        "what the device may hold: the model, and the KV cache of the --parallel and the parked "
        "(--cache-device-slots) sequences at --ctx-size tokens each; startup logs this plan and refuses one "
        "that does not fit, with its numbers; 0 = the device's memory as ggml reports it (the GPUs' free memory "
        "before the model loads; on the CPU alone the host's physical memory)",
        bytes_min(c.sched.device_budget_bytes, 0));
    // --- prompt cache ---
    add("--prompt-cache-enabled,--cache-prompt,!--no-cache-prompt", "LINEAGE_PROMPT_CACHE_ENABLED", "[=BOOL]", "true",
        "enable/disable the prompt cache (--cache-prompt / --no-cache-prompt are aliases); when no flag is given "
        "and LINEAGE_PROMPT_CACHE_ENABLED is unset, LINEAGE_CACHE_PROMPT and then LLAMA_ARG_CACHE_REUSE are read",
        boolean(cc.enabled), true);
    s.back()->env_aliases = {"LINEAGE_CACHE_PROMPT"};
    add("--lineage", "LINEAGE_LINEAGE", "[=BOOL]", "true",
        "lineage mode (checkpoints at turn, guard, anchor and divergence points); false = exact mode, "
        "whole-prompt snapshots only",
        boolean(cc.lineage), true);
    s.back()->env_aliases = {"APC_LINEAGE"};  // older name, read when the LINEAGE_* one is unset
    add("--prompt-cache-capacity-bytes,--cache-ram-bytes", "LINEAGE_PROMPT_CACHE_CAPACITY_BYTES", "BYTES", "0",
        "dense models: byte budget of the host-RAM cache tier (anchors, demoted entries); 0 = model-aware: "
        "max(2 GiB, min(6 entries of min(ctx, 8192) tokens, a quarter of the memory left after the model)); "
        "--cache-ram-bytes and LINEAGE_CACHE_RAM_BYTES are aliases",
        bytes_min(cc.kv_capacity_bytes, 0));
    s.back()->env_aliases = {"LINEAGE_CACHE_RAM_BYTES"};
    add("--cache-ram", "LINEAGE_CACHE_RAM", "MIB", "-1",
        "llama-server's flag: the RAM tier's budget in MiB, for dense and hybrid models alike (as "
        "--prompt-cache-capacity-bytes and --prompt-cache-snapshot-capacity-bytes N MiB, which it may not be "
        "combined with); -1 = unset (those flags, else model-aware); 0, llama-server's 'no RAM cache', is "
        "refused: use --no-cache-prompt",
        [&c](const std::string & v) -> util::status {
            const auto n = to_int(v);
            if (!n || *n < -1 || *n == 0 || *n > (std::numeric_limits<int64_t>::max() >> 20)) {
                return util::status::error(
                    "expected a number of MiB >= 1, or -1 (unset); lineage has no switch for the RAM tier "
                    "alone: --no-cache-prompt turns the cache off");
            }
            c.cache_ram_mib = *n;
            return util::status::ok();
        });
    s.back()->llama_short = {"-cram"};
    add("--prompt-cache-snapshot-capacity-bytes", "LINEAGE_PROMPT_CACHE_SNAPSHOT_CAPACITY_BYTES", "BYTES", "0",
        "hybrid models: byte budget of the host-RAM cache tier (checkpoints, anchors, demoted entries); 0 = "
        "model-aware as above with a floor of 512 MiB",
        bytes_min(cc.snapshot_capacity_bytes, 0));
    add("--prompt-cache-snapshot-max-entries", "LINEAGE_PROMPT_CACHE_SNAPSHOT_MAX_ENTRIES", "N",
        std::to_string(dc.snapshot_max_entries),
        "hybrid models: maximum live conversation entries (device and RAM tiers; anchors not counted)",
        int_min(cc.snapshot_max_entries, 1));
    add("--prompt-cache-snapshot-ttl", "LINEAGE_PROMPT_CACHE_SNAPSHOT_TTL", "SECONDS", fmt_double(dc.snapshot_ttl_s),
        "hybrid models: an entry expires this long after its last hit",
        seconds(cc.snapshot_ttl_s));
    add("--cache-device-slots", "LINEAGE_CACHE_DEVICE_SLOTS", "N", std::to_string(dc.device_slots),
        "finished sequences kept parked on the device, besides the --parallel slots; -1 = auto: 4 when the model "
        "runs on a GPU, 1 on the CPU alone (there a parked sequence is a KV buffer in host RAM, resident as far as "
        "tokens were written to it, and the RAM tier keeps the same state: one spare sequence for a "
        "restore that copies a parked entry), lowered where --parallel leaves less room; --parallel + "
        "--cache-device-slots <= 256 (llama.cpp's LLAMA_MAX_SEQ) and <= --batch-size",
        int_in(cc.device_slots, -1, max_sequences - 1));
    add("--prompt-cache-min-prefix", "LINEAGE_PROMPT_CACHE_MIN_PREFIX", "TOKENS", std::to_string(dc.min_prefix),
        "minimum prompt length before an entry is stored", int_min(cc.min_prefix, 0));
    add("--prompt-cache-max-entries", "LINEAGE_PROMPT_CACHE_MAX_ENTRIES", "N", std::to_string(dc.max_entries),
        "dense models: maximum live conversation entries (device and RAM tiers; anchors not counted)",
        int_min(cc.max_entries, 1));
    add("--prompt-cache-ttl", "LINEAGE_PROMPT_CACHE_TTL", "SECONDS", fmt_double(dc.ttl_s),
        "dense models: an entry expires this long after its last hit", seconds(cc.ttl_s));
    add("--prompt-cache-hash", "LINEAGE_PROMPT_CACHE_HASH", "ALGO", std::string(cache::to_string(dc.key_hash)),
        "digest of the cache key (bucket, template_sig): sha256 (OpenSSL) or xxh3 (XXH3-128, faster, not "
        "cryptographic)",
        hash_name(cc.key_hash));
    add("--apc-enabled", "LINEAGE_APC_ENABLED", "[=BOOL]", dc.apc_enabled ? "true" : "false",
        "dense models: Automatic Prefix Caching, block hash chains per entry; a partial match is clamped to whole "
        "agreeing blocks (off by default: lineage restores any prefix of a dense entry); hybrid models never use it",
        boolean(cc.apc_enabled), true);
    s.back()->env_aliases = {"APC_ENABLED"};  // older name, read when the LINEAGE_* one is unset
    add("--apc-block-size", "LINEAGE_APC_BLOCK_SIZE", "TOKENS", std::to_string(dc.apc_block_size), "tokens per APC block",
        int_in(cc.apc_block_size, 1, 1 << 20));
    s.back()->env_aliases = {"APC_BLOCK_SIZE"};  // older name, read when the LINEAGE_* one is unset
    add("--apc-num-blocks", "LINEAGE_APC_NUM_BLOCKS", "N", "0",
        "most APC block hashes held over all entries; 0 = --prompt-cache-max-entries x 512",
        int64_min(cc.apc_num_blocks, 0));
    s.back()->env_aliases = {"APC_NUM_BLOCKS"};  // older name, read when the LINEAGE_* one is unset
    add("--apc-hash", "LINEAGE_APC_HASH", "ALGO", std::string(cache::to_string(dc.apc_hash)),
        "hash of the APC block chains: sha256 or xxh3", hash_name(cc.apc_hash));
    s.back()->env_aliases = {"APC_HASH"};  // older name, read when the LINEAGE_* one is unset
    add("--cache-trace", "LINEAGE_CACHE_TRACE", "[=BOOL]", "false",
        "log one INFO line 'cache-trace: ...' per cache decision: the restore point taken, why other entries "
        "were not, captures, absorption, thinning, evictions",
        boolean(cc.trace), true);
    add("--cache-warmup", "LINEAGE_CACHE_WARMUP", "[=BOOL]", "true",
        "after a reply, extend the conversation's cache entry over the reply as the next request will render "
        "it, in the background on an idle engine (preempted by any request), so the next turn prefills only its "
        "own message",
        boolean(cc.warmup), true);
    add("--cache-guard-distance", "LINEAGE_CACHE_GUARD_DISTANCE", "TOKENS", std::to_string(dc.guard_distance),
        "guard checkpoint this many tokens before the prompt end", int_min(cc.guard_distance, 1));
    add("--cache-guard-min-suffix", "LINEAGE_CACHE_GUARD_MIN_SUFFIX", "TOKENS", std::to_string(dc.guard_min_suffix),
        "take a guard checkpoint only when the uncached suffix is at least this long",
        int_min(cc.guard_min_suffix, 0));
    add("--cache-resend-checkpoint", "LINEAGE_CACHE_RESEND_CHECKPOINT", "[=BOOL]", "true",
        "hybrid models: checkpoint at prompt - 1 so a verbatim resend or regenerate restores all but one token "
        "(one extra 1-token forward per request; after a warm-up of the next turn ran, a resend restores up to "
        "the history boundary instead); replaces the prompt - guard-distance guard",
        boolean(cc.resend_checkpoint), true);
    add("--cache-guard-merge", "LINEAGE_CACHE_GUARD_MERGE", "TOKENS", std::to_string(dc.guard_merge),
        "hybrid models: no prompt - 1 checkpoint when a restore point lies at most this many tokens before it (on "
        "a user turn the history boundary, the generation prompt's few tokens back): a resend restores that point "
        "and computes those tokens, and every such request saves the forward pass the checkpoint would cut; "
        "0 = always take it",
        int_min(cc.guard_merge, 0));
    add("--cache-guard-rollback", "LINEAGE_CACHE_GUARD_ROLLBACK", "[=BOOL]", "false",
        "hybrid models whose architecture llama.cpp can roll back (qwen35, nemotron_h, lfm2, ...): take the "
        "prompt - 1 checkpoint by rolling the recurrent state back one token after the prefill instead of "
        "splitting the prefill (one forward pass less per request; the last prompt token is decoded again with "
        "the first generated one; the recurrent memory doubles; a resend then equals the first answer in its "
        "greedy tokens, not bit for bit in its logits; every forward pass then runs llama.cpp's snapshot-writing "
        "recurrent kernel, which made the agent trace slower overall on a CPU: docs/benchmarks); false = split at "
        "prompt - 1",
        boolean(cc.guard_rollback), true);
    add("--cache-divergence-min-gain", "LINEAGE_CACHE_DIVERGENCE_MIN_GAIN", "TOKENS",
        std::to_string(dc.divergence_min_gain), "minimum gain of a divergence checkpoint",
        int_min(cc.divergence_min_gain, 0));
    add("--cache-divergence-slack", "LINEAGE_CACHE_DIVERGENCE_SLACK", "TOKENS", std::to_string(dc.divergence_slack),
        "hybrid models: a divergence checkpoint moves back to the start of its line when that is at most this many "
        "tokens earlier (else back by --cache-anchor-slack), so a variation that parts a little earlier next time "
        "still restores it; 0 = at the exact divergence token",
        int_min(cc.divergence_slack, 0));
    add("--cache-last-user-checkpoint", "LINEAGE_CACHE_LAST_USER_CHECKPOINT", "[=BOOL]", "true",
        "hybrid models: a checkpoint at the start of the last user message, so an edit of that message restores up "
        "to it instead of the previous turn",
        boolean(cc.last_user_checkpoint), true);
    add("--cache-last-user-min-gain", "LINEAGE_CACHE_LAST_USER_MIN_GAIN", "TOKENS",
        std::to_string(dc.last_user_min_gain),
        "hybrid models: the last-user-message checkpoint is taken only where it lies at least this many tokens after "
        "the restore point (a split costs about one forward pass; on a warm user turn that point is a few tokens "
        "after the restored history boundary, which an edit then restores); 0 = wherever it lies after it",
        int_min(cc.last_user_min_gain, 0));
    add("--cache-keep-reply", "LINEAGE_CACHE_KEEP_REPLY", "[=BOOL]", "true",
        "hybrid models: an entry keeps the state after the reply (not only the prompt end), so an "
        "agent-loop step that sends the reply back verbatim prefills only what follows it; false = the prompt end only",
        boolean(cc.keep_reply), true);
    add("--cache-message-rungs", "LINEAGE_CACHE_MESSAGE_RUNGS", "N", std::to_string(dc.message_rungs),
        "hybrid models: most checkpoints (message rungs) inside the last user message, so an edit of it restores "
        "up to the rung before the edit; only the newest message keeps them, each is one recurrent state in RAM and "
        "one more prefill split (about one forward pass) per user turn; 0 = none",
        int_min(cc.message_rungs, 0));
    add("--cache-message-step", "LINEAGE_CACHE_MESSAGE_STEP", "TOKENS", std::to_string(dc.message_step),
        "message rungs this many tokens apart (stretched so that --cache-message-rungs cover a long message)",
        int_min(cc.message_step, 1));
    add("--cache-message-pass-rungs", "LINEAGE_CACHE_MESSAGE_PASS_RUNGS", "N", std::to_string(dc.message_pass_rungs),
        "hybrid models: most checkpoints taken inside a long last user message at the end of the prefill pass "
        "that reaches each (no split, only the state copy), so that a new session whose first message repeats "
        "a long context block, a resumed one, or an edit late in a long message restores up to the pass end "
        "before where it parts instead of the message start; 0 = none",
        int_min(cc.message_pass_rungs, 0));
    add("--cache-message-pass-step", "LINEAGE_CACHE_MESSAGE_PASS_STEP", "TOKENS", std::to_string(dc.message_pass_step),
        "pass-end message rungs this many tokens apart, walking back from the message's end; the default is "
        "one rung per default batch",
        int_min(cc.message_pass_step, 1));
    add("--cache-reply-step", "LINEAGE_CACHE_REPLY_STEP", "TOKENS", std::to_string(dc.reply_step),
        "hybrid models with --cache-keep-reply: the recurrent state is taken every this many decoded tokens "
        "(no prefill is split), and the entry keeps the last one before where the reply's text stops "
        "tokenizing back to the decoded tokens, so an agent-loop step that sends the reply back restores up "
        "to there instead of the prompt end; 0 = none",
        int_min(cc.reply_step, 0));
    add("--cache-ladder-step", "LINEAGE_CACHE_LADDER_STEP", "TOKENS", std::to_string(dc.ladder_step),
        "hybrid models: when a new system prompt is pinned as an anchor, checkpoints (ladder rungs) are taken "
        "inside it, so a new session whose system text ends differently (a folder, a date) restores up to where "
        "it parts: before its last --cache-ladder-near-tokens, one at the first prefill pass end at or after "
        "every this many tokens (no extra forward pass); 0 = no ladder",
        int_min(cc.ladder_step, 0));
    add("--cache-ladder-near-step", "LINEAGE_CACHE_LADDER_NEAR_STEP", "TOKENS", std::to_string(dc.ladder_near_step),
        "ladder rungs at line starts at most this many tokens apart in the last --cache-ladder-near-tokens of the "
        "system prompt (each ends a prefill pass: one more forward pass)",
        int_min(cc.ladder_near_step, 1));
    add("--cache-ladder-near-tokens", "LINEAGE_CACHE_LADDER_NEAR_TOKENS", "TOKENS",
        std::to_string(dc.ladder_near_tokens),
        "the end of the system prompt (where agents write per-session lines) that gets the near step",
        int_min(cc.ladder_near_tokens, 0));
    add("--cache-ladder-max-rungs", "LINEAGE_CACHE_LADDER_MAX_RUNGS", "N", std::to_string(dc.ladder_max_rungs),
        "most rungs per anchor (the far step stretches to fit); each is one recurrent state in RAM",
        int_min(cc.ladder_max_rungs, 0));
    add("--cache-ladder-volatile-rungs", "LINEAGE_CACHE_LADDER_VOLATILE_RUNGS", "N",
        std::to_string(dc.ladder_volatile_rungs),
        "hybrid models: on a new system prompt, at most this many more rungs, each a prefill split right before "
        "an absolute path or a date that lies before the near zone (tool descriptions included), so that a new "
        "session in another folder restores up to it (more such places: the first half of them and the last "
        "half); 0 = none",
        int_min(cc.ladder_volatile_rungs, 0));
    add("--cache-ladder-defer", "LINEAGE_CACHE_LADDER_DEFER", "[=BOOL]", "true",
        "hybrid models: the near and volatile ladder rungs (each a prefill split) of a new system prompt are not "
        "split while its prefill has the engine to itself: a background ladder job makes them on the idle engine "
        "afterwards (after the warm-ups of next turns; a request preempts it), or right before the plan of a new "
        "session that would restore them; beside other requests the prefill splits at them; false = always split",
        boolean(cc.ladder_defer), true);
    add("--cache-anchor-slack", "LINEAGE_CACHE_ANCHOR_SLACK", "TOKENS", std::to_string(dc.anchor_slack),
        "tokens of BPE slack taken off the end of the system prompt + tools anchor",
        int_min(cc.anchor_slack, 0));
    add("--cache-max-checkpoints", "LINEAGE_CACHE_MAX_CHECKPOINTS", "N", std::to_string(dc.max_checkpoints),
        "checkpoints kept per conversation lineage", int_min(cc.max_checkpoints, 0));
    add("--cache-max-anchors", "LINEAGE_CACHE_MAX_ANCHORS", "N", std::to_string(dc.max_anchors),
        "pinned system-prompt anchors kept; 0 = no anchors", int_min(cc.max_anchors, 0));
    add("--cache-max-anchor-bytes", "LINEAGE_CACHE_MAX_ANCHOR_BYTES", "BYTES",
        format_bytes_default(dc.max_anchor_bytes), "byte cap of the anchors, inside the total budget",
        bytes_min(cc.max_anchor_bytes, 0));
    add("--cache-ram-share-prefix", "LINEAGE_CACHE_RAM_SHARE_PREFIX", "[=BOOL]", "true",
        "an entry that leaves the device for RAM is held as a patch over the pinned anchor (system prompt + "
        "tools) its tokens continue: the anchor's KV rows it repeats byte for byte are read from the anchor, not "
        "copied, so the RAM budget holds more conversations on the same system prompts; restoring it costs one "
        "more copy of its state; false = every RAM entry holds its whole state",
        boolean(cc.ram_share_prefix), true);
    add("--cache-eviction", "LINEAGE_CACHE_EVICTION", "POLICY", cache::to_string(dc.eviction),
        "what leaves RAM first when its budget is full: value (the prefill time a copy saves beyond the next "
        "restore point below it, times how likely it is to be restored again, learned from this run, per byte; "
        "a parked entry worth less than what it would push out is not kept in RAM) or recency (least recently "
        "used first)",
        [&cc](const std::string & v) -> util::status {
            const std::string t = trim(v);
            if (t == "value" || t == "recency") {
                cc.eviction = t == "value" ? cache::eviction_policy::value : cache::eviction_policy::recency;
                return util::status::ok();
            }
            return util::status::error("expected one of value|recency");
        });
    add("--cache-ram-protect", "LINEAGE_CACHE_RAM_PROTECT", "FRACTION", fmt_double(dc.ram_protect_share),
        "--cache-eviction value: share of the RAM budget left by the pinned anchors (their own states; their "
        "ladder rungs are victims too) within which the live "
        "conversations' entries (likely to come back: restored at least once, made by a prompt that sends an "
        "earlier reply back, or on a system text whose first turns have come back; used within the last minute "
        "or four reuse gaps) are "
        "evicted only after every other copy; 0 = none protected, 1 = all",
        [&cc](const std::string & v) -> util::status {
            const std::string t = trim(v);
            double x = 0;
            const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), x);
            if (t.empty() || ec != std::errc() || p != t.data() + t.size() || !(x >= 0 && x <= 1)) {
                return util::status::error("expected a fraction between 0 and 1");
            }
            cc.ram_protect_share = x;
            return util::status::ok();
        });
    // --- the tiers below RAM: each tier's own flags (cache/tier/<name>/<name>_flags.cpp), in the
    // order of cache::tier_table() ---
    settings_sink sink(add);
    for (const cache::tier_row & row : tiers) {
        row.flags(sink, cc);
    }
    // --- what every tier below RAM follows ---
    add("--cache-ram-release-s", "LINEAGE_CACHE_RAM_RELEASE_S", "SECONDS|auto", "auto",
        "an entry in RAM that is on disk and has been unused this long gives its RAM back: its next hit reads the "
        "file (from the page cache while the kernel keeps it; ~80 ms more than from RAM for a 2k-token anchor on "
        "2 CPU cores; an anchor read back is pinned again on a GPU, stays a file on the CPU alone); 0 = off (RAM "
        "keeps every entry within its budget, and read-back anchors are pinned again); "
        "auto = " + fmt_double(cache::config::auto_ram_release_s_cpu) + " on the CPU alone (the file is in the "
        "page cache: a RAM copy would hold the same bytes twice), " + fmt_double(cache::config::auto_ram_release_s_gpu) +
        " when the model runs on a GPU",
        seconds_or_auto(cc.ram_release_s));
    add("--cache-tier-cost", "LINEAGE_CACHE_TIER_COST", "[=BOOL]", "true",
        "read a copy from disk or Redis only where its read is estimated to cost less than recomputing the "
        "tokens it adds, and write one only where it would be worth reading back (at shutdown: where that saves "
        "more than the write delays the exit), from this run's measured prefill rate and the tiers' measured "
        "read and write rates; every copy is worth it until a prefill has been measured. false = read and write "
        "every copy the triggers name",
        boolean(cc.tier_cost), true);
    add("--cache-tier-bandwidth", "LINEAGE_CACHE_TIER_BANDWIDTH", "BYTES", "measured",
        "bytes per second the tier cost rule assumes for reading and writing a copy (a restore from the file to "
        "the state applied), instead of measuring it (512MiB until a read or write of 16MiB or more is measured); 0 = measured",
        bytes_min(cc.tier_bandwidth_bytes_per_s, 0));
    // --- stored responses (POST /v1/responses with store: true) ---
    add("--responses-store", "LINEAGE_RESPONSES_STORE", "PATH", "<--cache-dir>/responses.sqlite",
        "SQLite file of the stored Responses API responses (previous_response_id, GET/DELETE /v1/responses/{id}); "
        "they survive a restart. 'memory' keeps them in memory only, the default when the disk tier is off",
        text(c.responses_store));
    add("--responses-ttl-s", "LINEAGE_RESPONSES_TTL_S", "SECONDS", std::to_string(static_cast<int64_t>(d.responses_ttl_s)),
        "a stored response is deleted this long after it was created", seconds(c.responses_ttl_s));
    add("--responses-capacity-bytes", "LINEAGE_RESPONSES_CAPACITY_BYTES", "BYTES",
        format_bytes_default(d.responses_capacity_bytes),
        "byte cap of the stored responses (bodies + conversations); least recently used ones are deleted first",
        bytes_min(c.responses_capacity_bytes, 1));
    // --- test instruments ---
    add("--test-reply-script", "LINEAGE_TEST_REPLY_SCRIPT", "FILE", "(none)",
        "TEST INSTRUMENT, not for serving: answer every request with a reply from this JSON script, generated "
        "token by token with the sampler forced to the reply's tokens (the test models have random weights; with "
        "a script, real agents call their tools); a reply is chosen by what the request's new input, system text "
        "and tools contain, and the file is read again when it changes; a request no reply matches gets HTTP 400 "
        "no_scripted_reply (docs/testing.md \"Scripted replies\")",
        text(c.test_reply_script));
    return s;
}

std::string describe(const setting & st) {
    std::string help = st.help;
    for (const auto & alias : st.env_aliases) {
        if (help.find(alias) == std::string::npos) {
            help += " (" + alias + " is read when " + st.env + " is unset)";
        }
    }
    std::string also;
    for (const auto & n : st.llama_short) {
        also += (also.empty() ? " (llama-server's " : ", ") + n;
    }
    return help + (also.empty() ? "" : also + ")") + "  [env " + st.env + "; default " + st.default_text + "]";
}

/** The first long name of `st` ("--parallel"). */
std::string long_name(const setting & st) {
    std::stringstream ss(st.names);
    std::string part;
    while (std::getline(ss, part, ',')) {
        if (part.rfind("--", 0) == 0) {
            return part;
        }
    }
    return st.names;
}

/** CLI11's formatter without the default values of flags in the names: a negated alias
 *  ("--no-cache-prompt") would otherwise print as "--no-cache-prompt{false}"; the help text
 *  gives every default. */
class help_formatter : public CLI::Formatter {
public:
    std::string make_option_name(const CLI::Option * opt, bool is_positional) const override {
        if (is_positional) {
            return opt->get_name(true, false);
        }
        std::string names = opt->get_name(false, true);
        for (auto open = names.find('{'); open != std::string::npos; open = names.find('{')) {
            names.erase(open, names.find('}', open) + 1 - open);
        }
        return names;
    }
};

std::unique_ptr<CLI::App> make_app(const char * program, std::vector<std::unique_ptr<setting>> & settings) {
    auto app = std::make_unique<CLI::App>(
        "lineage-server: an OpenAI-compatible LLM inference server built around its prompt cache.\n"
        "Every flag can also be set by the environment variable shown; the flag wins when both are set.",
        program);
    app->formatter(std::make_shared<help_formatter>());
    app->get_formatter()->column_width(40);
    app->footer("Endpoints: " + endpoint_list() + ".");
    for (auto & st : settings) {
        if (st->is_flag) {
            st->opt = app->add_flag(st->names, st->raw, describe(*st));
            if (!st->value_name.empty()) {
                st->opt->type_name(st->value_name);
            }
        } else {
            st->opt = app->add_option(st->names, st->raw, describe(*st))->type_name(st->value_name);
            if (st->max_values > 1) {
                st->opt->expected(1, st->max_values);
            }
            if (st->repeatable) {
                st->opt->multi_option_policy(CLI::MultiOptionPolicy::Join)->delimiter(',');
            }
        }
    }
    return app;
}

std::string display_name(const setting & st) {
    // "-m,--model" -> "--model"; "--cache-prompt,!--no-cache-prompt" -> "--cache-prompt"
    std::string best;
    std::stringstream ss(st.names);
    std::string part;
    while (std::getline(ss, part, ',')) {
        if (auto b = part.find('{'); b != std::string::npos) {
            part.resize(b);
        }
        if (part.rfind("--", 0) == 0) {
            return part;
        }
        if (best.empty()) {
            best = part;
        }
    }
    return best;
}

// The command line as CLI11 takes it (in reverse order), with llama-server's single-dash names
// ("-np 4", "-fa=on") rewritten to the long ones.
std::vector<std::string> cli_args(int argc, const char * const * argv,
                                  const std::vector<std::unique_ptr<setting>> & settings) {
    std::vector<std::string> args;
    for (int i = argc - 1; i >= 1; --i) {
        std::string a = argv[i] ? argv[i] : "";
        for (const auto & st : settings) {
            for (const auto & n : st->llama_short) {
                if (a == n || a.rfind(n + "=", 0) == 0) {
                    a = long_name(*st) + a.substr(n.size());
                }
            }
        }
        args.push_back(std::move(a));  // CLI11 takes them in reverse order
    }
    return args;
}

/** The variable `name` from `env`; nullopt when unset. */
std::optional<std::string> env_value(const env_lookup & env, const std::string & name) {
    const char * v = env ? env(name.c_str()) : nullptr;
    if (!v) {
        return std::nullopt;
    }
    return std::string(v);
}

// Each setting's value from its flag, else its variable, else an older variable, through the
// setting's parser; what a parser refuses goes to `errors`, one line a setting.
void read_settings(std::vector<std::unique_ptr<setting>> & settings, const env_lookup & env, server_config & c,
                   std::vector<std::string> & errors) {
    auto lookup = [&](const std::string & name) { return env_value(env, name); };
    for (auto & st : settings) {
        if (st->opt->count() > 0) {
            if (const util::status err = st->parse(st->raw); !err.is_ok()) {
                errors.push_back(display_name(*st) + " '" + st->raw + "': " + err.message());
            }
        } else if (auto v = lookup(st->env)) {
            if (const util::status err = st->parse(*v); !err.is_ok()) {
                errors.push_back(st->env + "='" + *v + "' (environment): " + err.message());
            }
        } else if (auto alias = std::find_if(st->env_aliases.begin(), st->env_aliases.end(),
                                             [&](const std::string & a) { return lookup(a).has_value(); });
                   alias != st->env_aliases.end()) {
            const std::string a = *lookup(*alias);
            if (const util::status err = st->parse(a); !err.is_ok()) {
                errors.push_back(*alias + "='" + a + "' (environment): " + err.message());
            }
        } else if (st->env == "LINEAGE_PROMPT_CACHE_ENABLED") {
            // llama.cpp compatibility alias (docs/prompt-cache.md "llama-server's flags"): read
            // only when neither the flag nor LINEAGE_PROMPT_CACHE_ENABLED (nor
            // LINEAGE_CACHE_PROMPT) is set. Non-zero integers and true values enable.
            if (auto a = lookup("LLAMA_ARG_CACHE_REUSE")) {
                if (auto b = to_bool(*a)) {
                    c.sched.cache.enabled = *b;
                } else if (auto n = to_int(*a)) {
                    c.sched.cache.enabled = *n > 0;
                } else {
                    errors.push_back("LLAMA_ARG_CACHE_REUSE='" + *a +
                                     "' (environment): expected a boolean or a non-negative integer");
                }
            }
        }
    }
}

// The settings read together: the model's alias list, then --jinja, --cache-ram against the
// byte budgets and a quantized V cache, each checked only while nothing failed before it.
void check_combinations(server_config & c, std::vector<std::string> & errors) {
    if (const auto comma = c.alias.find(','); comma != std::string::npos) {
        // llama-server's -a NAME,MORE: the first names the model, the others are listed too.
        std::vector<std::string> names;
        (void)name_list(names)(c.alias);  // a name list never fails
        c.alias = names.empty() ? "" : names[0];
        for (size_t i = 1; i < names.size(); ++i) {
            if (std::find(c.model_aliases.begin(), c.model_aliases.end(), names[i]) == c.model_aliases.end()) {
                c.model_aliases.push_back(names[i]);
            }
        }
    }
    if (errors.empty() && !c.jinja) {
        errors.push_back("--jinja false (or --no-jinja): lineage always renders the chat template with Jinja; drop "
                         "the flag");
    }
    if (errors.empty() && c.cache_ram_mib > 0) {
        if (c.sched.cache.kv_capacity_bytes != 0 || c.sched.cache.snapshot_capacity_bytes != 0) {
            errors.push_back("--cache-ram " + std::to_string(c.cache_ram_mib) +
                             " and --prompt-cache-capacity-bytes / --prompt-cache-snapshot-capacity-bytes both set "
                             "the RAM tier's budget: give one of them");
        } else {
            c.sched.cache.kv_capacity_bytes = static_cast<uint64_t>(c.cache_ram_mib) << 20;
            c.sched.cache.snapshot_capacity_bytes = static_cast<uint64_t>(c.cache_ram_mib) << 20;
        }
    }
    if (errors.empty() && c.sched.flash_attn == 0 && engine::kv_type_is_quantized(c.sched.type_v)) {
        errors.push_back("--cache-type-v " + c.sched.type_v +
                         " with --flash-attn off: llama.cpp stores a quantized V cache only with flash attention; "
                         "use --flash-attn on or auto, or an unquantized --cache-type-v (f16, bf16, f32)");
    }
}

// What the settings leave to a default or a merge: the disk tier's folder, the one LoRA list,
// the responses store's path.
void fill_defaults(const env_lookup & env, server_config & c) {
    if (!c.sched.cache.disk) {
        c.sched.cache.disk_dir.clear();
    } else if (c.sched.cache.disk_dir.empty()) {
        // Per-user default (XDG Base Directory specification: $XDG_CACHE_HOME, else ~/.cache).
        if (auto x = env_value(env, "XDG_CACHE_HOME"); x && !x->empty()) {
            c.sched.cache.disk_dir = *x + "/lineage/prompt-cache";
        } else if (auto h = env_value(env, "HOME"); h && !h->empty()) {
            c.sched.cache.disk_dir = *h + "/.cache/lineage/prompt-cache";
        }
    }
    c.loras.insert(c.loras.end(), c.loras_scaled.begin(), c.loras_scaled.end());
    c.loras_scaled.clear();
    for (const auto & l : c.loras) {
        c.sched.lora_paths.push_back(l.path);
    }
    if (c.responses_store == "memory") {
        c.responses_store = ":memory:";
    } else if (c.responses_store.empty()) {
        c.responses_store = c.sched.cache.disk_dir.empty() ? ":memory:" : c.sched.cache.disk_dir + "/responses.sqlite";
    }
}

// The sequence, thread and batch counts against each other and llama.cpp's limits, each checked
// only while nothing failed before it.
void check_capacity(server_config & c, std::vector<std::string> & errors) {
    // Checked with the sequences the flag means; auto with its smallest value (the CPU's): the
    // backend is not known yet, and auto's GPU value is lowered to fit once it is
    // (scheduler::with_device_settings).
    const bool auto_slots = c.sched.cache.device_slots < 0;
    const int32_t device_slots = auto_slots ? cache::config::auto_device_slots_cpu : c.sched.cache.device_slots;
    const std::string slots_flag = auto_slots
                                       ? "--cache-device-slots auto (at least " + std::to_string(device_slots) + ")"
                                       : "--cache-device-slots " + std::to_string(device_slots);
    if (errors.empty() && static_cast<int64_t>(c.sched.n_parallel) + device_slots > max_sequences) {
        errors.push_back("--parallel " + std::to_string(c.sched.n_parallel) + " + " + slots_flag + " = " +
                         std::to_string(c.sched.n_parallel + device_slots) + " sequences; llama.cpp holds at most " +
                         std::to_string(max_sequences) + ": lower one of them");
    }
    const int64_t n_seq = static_cast<int64_t>(c.sched.n_parallel) + device_slots;
    if (errors.empty() && c.http_threads <= c.sched.n_parallel) {
        errors.push_back("--http-threads " + std::to_string(c.http_threads) + " is not more than --parallel " +
                         std::to_string(c.sched.n_parallel) +
                         ": every running request holds an HTTP thread, leave some for /health and new requests");
    }
    if (errors.empty() && c.sched.n_batch < n_seq) {
        // llama.cpp reserves one output row per sequence inside a batch (GGML_ASSERT otherwise).
        errors.push_back("--batch-size " + std::to_string(c.sched.n_batch) + " is smaller than --parallel + " +
                         slots_flag + " = " + std::to_string(n_seq) +
                         " sequences; llama.cpp needs a batch that holds one token of each: raise --batch-size");
    }
}

}  // namespace

std::string config_help(const char * program, const std::vector<cache::tier_row> & tiers) {
    server_config c;
    auto settings = make_settings(c, tiers);
    return make_app(program, settings)->help();
}

config_result parse_config(int argc, const char * const * argv, const env_lookup & env,
                           const std::vector<cache::tier_row> & tiers) {
    config_result r;
    server_config c;
    auto settings = make_settings(c, tiers);
    const char * program = argc > 0 && argv && argv[0] ? argv[0] : "lineage-server";
    auto app = make_app(program, settings);
    std::vector<std::string> args = cli_args(argc, argv, settings);
    try {
        app->parse(args);
    } catch (const CLI::CallForHelp &) {
        r.exit_code = 0;
        r.output = app->help();
        return r;
    } catch (const CLI::ParseError & e) {
        r.exit_code = 1;
        r.output = std::string("error: ") + e.what() + "\nrun with --help for the list of flags";
        return r;
    }

    std::vector<std::string> errors;
    read_settings(settings, env, c, errors);
    check_combinations(c, errors);
    fill_defaults(env, c);
    check_capacity(c, errors);
    if (errors.empty()) {
        if (const util::status err = load_tenant_keys(c.api_key_file, c.api_key, c.admin_api_key, c.tenant_keys);
            !err.is_ok()) {
            errors.push_back(err.message());
        }
    }
    if (errors.empty() && c.model_path.empty()) {
        errors.push_back("no model given: pass -m/--model PATH or set LINEAGE_MODEL");
    }
    if (!errors.empty()) {
        r.exit_code = 1;
        for (const auto & e : errors) {
            r.output += "error: " + e + "\n";
        }
        r.output += "run with --help for the list of flags";
        return r;
    }
    r.config = std::move(c);
    return r;
}

}  // namespace lineage::server
