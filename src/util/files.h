// util::read_whole_file: a file's bytes in one string, for the small files the server reads whole
// (a chat template, a tenants' key file, a reply script).
// Thread safety: a free function; concurrent calls on different files are safe.
#pragma once

#include <fstream>
#include <iterator>
#include <optional>
#include <string>

namespace lineage::util {

/** The whole content of the file at `path` (bytes, as stored); nullopt when it cannot be opened or
 *  a read fails. Reads it all into memory: not for files of unbounded size. */
inline std::optional<std::string> read_whole_file(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
        return std::nullopt;
    }
    std::string out{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
    if (f.bad()) {
        return std::nullopt;
    }
    return out;
}

}  // namespace lineage::util
