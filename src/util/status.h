// util::status and util::expected<T>: the one way a fallible operation reports failure inside
// the process (after LevelDB's Status): ok, or an error with a message that says
// what was wrong. Exceptions stay for construction failures; reasons a caller branches on are
// enums (e.g. cache::eviction_reason, scheduler::failure_kind), not strings.
// Thread safety: value types.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace lineage::util {

class [[nodiscard]] status {
public:
    /** Success. */
    status() = default;
    static status ok() { return status(); }
    /** Failure; `message` says what was wrong (REQUIRES: non-empty). */
    static status error(std::string message) { return status(std::move(message)); }

    bool is_ok() const { return message_.empty(); }
    explicit operator bool() const { return is_ok(); }
    /** What was wrong ("" when ok). */
    const std::string & message() const { return message_; }

private:
    explicit status(std::string m) : message_(m.empty() ? std::string("unknown error") : std::move(m)) {}
    std::string message_;
};

/** A value or the error saying why there is none (std::expected is C++23). `E` is a status, or
 *  where a caller branches on the reason, a struct holding an enum beside the message (e.g.
 *  engine::render_error); it must be default-constructible. */
template <typename T, typename E = status>
class [[nodiscard]] expected {
public:
    expected(T v) : v_(std::move(v)) {}  // NOLINT: implicit, like std::expected
    expected(E e) : v_(std::move(e)) {}  // NOLINT; REQUIRES: e says what was wrong
    bool has_value() const { return std::holds_alternative<T>(v_); }
    explicit operator bool() const { return has_value(); }
    T & value() { return std::get<T>(v_); }
    const T & value() const { return std::get<T>(v_); }
    T & operator*() { return value(); }
    const T & operator*() const { return value(); }
    T * operator->() { return &value(); }
    const T * operator->() const { return &value(); }
    /** The failure (E{}, status::ok() for a status, when there is a value). */
    E error() const { return has_value() ? E{} : std::get<E>(v_); }

private:
    std::variant<T, E> v_;
};

}  // namespace lineage::util
