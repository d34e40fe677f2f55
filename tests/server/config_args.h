// parse_config as the server's config tests call it: the arguments after the program name and a
// fake environment (a map: a variable not in it is unset), so that no test reads the real one.
// Header-only, pure functions.
#pragma once

#include "server/config.h"

#include <map>
#include <string>
#include <vector>

namespace lineage::server::config_test {

using env_vars = std::map<std::string, std::string>;

/** parse_config of "lineage-server" followed by `args`, reading the environment from `vars`, with
 *  the flags of the tiers in `tiers`. */
inline config_result parse(std::vector<std::string> args, env_vars vars = {},
                           const std::vector<cache::tier_row> & tiers = cache::tier_table()) {
    args.insert(args.begin(), "lineage-server");
    std::vector<const char *> argv;
    for (const auto & a : args) {
        argv.push_back(a.c_str());
    }
    // The lambda's own copy of `vars` outlives the call.
    return parse_config(static_cast<int>(argv.size()), argv.data(), [vars](const char * name) -> const char * {
        auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
    }, tiers);
}

}  // namespace lineage::server::config_test
