// SPDX-License-Identifier: Apache-2.0
// Notices: what the library has to tell a user that is not an error. A join that finds the
// table's capacity differs from the one it asked for, processes of one key split across tables
// by different domains or table modes, a misspelt GPUSHARE_* variable. The library never writes
// to a stream itself: each notice is a value (gpushare::notice, in types.hpp), kept by the
// session that raised it (session::notices()) and handed once per process to one handler, which
// the application may replace. The default handler writes one line to stderr ("gpushare: ..." or
// "gpushare: warning: ..."), so that a misconfiguration is not silent in a program that never
// asks.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <mutex>
#include <utility>

#include <gpushare/detail/notices.hpp>
#include <gpushare/types.hpp>

namespace gpushare {
inline namespace v0 {

/// The default handler: "gpushare: <text>" (or "gpushare: warning: <text>") and a newline on
/// stderr.
inline void write_notice_to_stderr(const notice& n) { detail::write_notice_to_stderr(n); }

/// Replaces the handler of this process's notices and returns the previous one. An empty handler
/// drops them (each session still keeps its own: session::notices()). Thread-safe; the handler
/// is called with the notices' mutex held, so it must not set a handler or raise a notice.
inline notice_handler set_notice_handler(notice_handler h) {
  detail::notice_state& s = detail::notices();
  const std::lock_guard<std::mutex> lock(s.m);
  return std::exchange(s.handler, std::move(h));
}

} // namespace v0
} // namespace gpushare
