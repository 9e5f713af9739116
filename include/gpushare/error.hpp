// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>

#include <gpushare/version.hpp>

namespace gpushare {
inline namespace v0 {

/// What went wrong. Every error gpushare throws carries one of these; the message says what was
/// wrong and what to do about it.
enum class errc {
  invalid_argument = 1,  ///< an option, size, name or percentage is out of range or malformed
  invalid_environment,   ///< a GPUSHARE_* environment variable holds an unusable value
  table_incompatible,    ///< the shared object is a table of another layout version or size
  table_corrupt,         ///< the shared object is not a gpushare table, or its header is damaged
  table_busy,            ///< the table's creator is still initialising it after the open timeout
  no_space,              ///< /dev/shm has no room for the table (ENOSPC)
  permission_denied,     ///< the table exists but this user may not open it
  no_free_slot,          ///< every session slot of the table is taken by a live session
  guarantee_unavailable, ///< the memory guarantee asked for cannot be promised now
  over_limit,            ///< a reservation exceeds the session's own memory limit (never fits)
  exceeds_capacity,      ///< a reservation exceeds the table's whole capacity (never fits)
  timeout,               ///< not enough memory became free, or no turn on the device came (a
                         ///< guard with a timeout), before the timeout
  session_closed,        ///< the session was moved from, closed, or belongs to the parent process
  system_error,          ///< an operating-system call failed unexpectedly (see the message)
  no_device,             ///< no usable GPU (CUDA layer)
  cuda_error,            ///< a CUDA call failed (CUDA layer; the message names the call)
  no_such_table,         ///< opening without creating: there is no table of that name (or only
                         ///< a creation its creator abandoned, which is not a table)
  bad_directory,         ///< the table directory (GPUSHARE_DIR) is missing, not a directory, on
                         ///< a network filesystem, or open to other users' files
};

/// The stable name of an error code, spelled as the enumerator: "no_free_slot", "timeout", ...
/// Meant for logs, JSON and metrics labels; it never changes for an existing code. A value outside
/// the enumeration (a cast integer) gives "unknown".
constexpr const char* to_string(errc e) noexcept {
  switch (e) {
  case errc::invalid_argument: return "invalid_argument";
  case errc::invalid_environment: return "invalid_environment";
  case errc::table_incompatible: return "table_incompatible";
  case errc::table_corrupt: return "table_corrupt";
  case errc::table_busy: return "table_busy";
  case errc::no_space: return "no_space";
  case errc::permission_denied: return "permission_denied";
  case errc::no_free_slot: return "no_free_slot";
  case errc::guarantee_unavailable: return "guarantee_unavailable";
  case errc::over_limit: return "over_limit";
  case errc::exceeds_capacity: return "exceeds_capacity";
  case errc::timeout: return "timeout";
  case errc::session_closed: return "session_closed";
  case errc::system_error: return "system_error";
  case errc::no_device: return "no_device";
  case errc::cuda_error: return "cuda_error";
  case errc::no_such_table: return "no_such_table";
  case errc::bad_directory: return "bad_directory";
  }
  return "unknown";
}

/// std::error_category for gpushare::errc, so codes can be compared with std::error_code.
inline const std::error_category& category() noexcept {
  struct category_impl final : std::error_category {
    const char* name() const noexcept override { return "gpushare"; }
    std::string message(int c) const override {
      switch (static_cast<errc>(c)) {
      case errc::invalid_argument: return "invalid argument";
      case errc::invalid_environment: return "invalid environment variable";
      case errc::table_incompatible: return "incompatible table";
      case errc::table_corrupt: return "corrupt table";
      case errc::table_busy: return "table still being initialised";
      case errc::no_space: return "no space for the table";
      case errc::permission_denied: return "permission denied";
      case errc::no_free_slot: return "no free session slot";
      case errc::guarantee_unavailable: return "memory guarantee unavailable";
      case errc::over_limit: return "request over the session's memory limit";
      case errc::exceeds_capacity: return "request exceeds the table's capacity";
      case errc::timeout: return "timed out waiting for memory or the device";
      case errc::session_closed: return "session closed";
      case errc::system_error: return "system error";
      case errc::no_device: return "no CUDA device available";
      case errc::cuda_error: return "CUDA error";
      case errc::no_such_table: return "no such table";
      case errc::bad_directory: return "unusable table directory";
      }
      return "unknown gpushare error";
    }
  };
  static const category_impl instance;
  return instance;
}

/// `e` as a std::error_code of category().
inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), category()};
}

/// The one exception type of gpushare. `code()` says which kind of failure it was; `what()` is a
/// full sentence for a human: what was wrong and what to do.
class error : public std::runtime_error {
public:
  /// An error of kind `code`; `message` is what what() returns.
  error(errc code, const std::string& message) : std::runtime_error(message), code_(code) {}
  /// Which kind of failure it was.
  errc code() const noexcept { return code_; }
  /// code() as a std::error_code.
  std::error_code error_code() const noexcept { return make_error_code(code_); }

private:
  errc code_;
};

namespace detail {
/// An error for a failed system call: names the call and the object, appends strerror(err).
inline error system_failure(errc code, const std::string& what, int err) {
  return error(code, what + ": " + std::strerror(err));
}
} // namespace detail

} // namespace v0
} // namespace gpushare

// Lets an errc convert to std::error_code (make_error_code()). Hidden from Doxygen, which
// cannot place a specialization of std:: declared outside namespace std.
/// \cond
template <> struct std::is_error_code_enum<gpushare::errc> : std::true_type {};
/// \endcond
