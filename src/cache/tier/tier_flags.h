// cache::flag_sink: where a tier below RAM declares its command-line flags (docs/architecture.md
// "Tiers below RAM"). Each tier's folder has an `add_<name>_flags(flag_sink &, config &)` that
// names its flags, their environment variables, defaults and help, and binds each to the field it
// sets; the server's settings table (server/config.cpp) implements the sink with its value
// parsers, so a tier's flags reach --help, the environment and the errors of a bad value like
// every other flag, without the tier knowing the server.
// Thread safety: used while the server parses its configuration (one thread).
#pragma once

#include "util/status.h"

#include <cstdint>
#include <functional>
#include <string>

namespace lineage::cache {

/** One flag as --help shows it. */
struct flag_spec {
    std::string names;         ///< CLI11 names: "--cache-dir"; "--x,!--no-x" for a negatable switch
    std::string env;           ///< its environment variable: "LINEAGE_CACHE_DIR"
    std::string value_name;    ///< the value's name in --help: "PATH", "BYTES", "[=BOOL]"
    /** The default as --help shows it; empty: the value `out` holds when the flag is added (the
     *  field's default in cache::config), written as the type's values are ("16GiB", "30"). */
    std::string default_text;
    std::string help;          ///< one line (wrapped by --help)
};

/** Typed binders: each adds one flag that stores its parsed value into `out`, or reports what was
 *  wrong with it (the server names the flag and exits with status 2). `out` must outlive the
 *  parse. */
class flag_sink {
public:
    virtual ~flag_sink() = default;
    /** --name or --name=BOOL (true, false, 1, 0, yes, no, on, off). */
    virtual void boolean(flag_spec f, bool & out) = 0;
    /** Any text; empty only where `allow_empty`. */
    virtual void text(flag_spec f, std::string & out, bool allow_empty) = 0;
    /** Text that `normalize` accepts (e.g. a URL), stored as it returns it (trimmed, say); its
     *  error is the flag's error. */
    virtual void checked_text(flag_spec f, std::string & out,
                              std::function<util::expected<std::string>(const std::string &)> normalize) = 0;
    /** A byte count with an optional K/M/G/KiB/MiB/GiB suffix, at least `min` bytes. */
    virtual void bytes(flag_spec f, uint64_t & out, uint64_t min) = 0;
    /** Seconds (a decimal), > 0, or >= 0 where `allow_zero`. */
    virtual void seconds(flag_spec f, double & out, bool allow_zero) = 0;
    /** An integer in [lo, hi]. */
    virtual void integer(flag_spec f, int32_t & out, int64_t lo, int64_t hi) = 0;
};

}  // namespace lineage::cache
