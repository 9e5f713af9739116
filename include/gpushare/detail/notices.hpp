// SPDX-License-Identifier: Apache-2.0
// The one channel of the library's notices (<gpushare/notices.hpp>): the handler this process
// set, and what it already delivered. The library writes to no stream but through here.
#pragma once

#include <cstdio>
#include <mutex>
#include <set>
#include <string>

#include <gpushare/types.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// "gpushare: <text>" (or "gpushare: warning: <text>") and a newline on stderr.
inline void write_notice_to_stderr(const notice& n) {
  std::fprintf(stderr, "gpushare: %s%s\n", n.severity == notice::kind::warning ? "warning: " : "",
               n.text.c_str());
}

struct notice_state {
  std::mutex m;
  notice_handler handler = write_notice_to_stderr;
  std::set<std::string> delivered; ///< the keys of what this process has delivered
};

inline notice_state& notices() {
  static notice_state s;
  return s;
}

/// Hands `n` to the handler unless this process already delivered a notice with key `key` (the
/// notice's text if empty). The handler runs under the notices' mutex: notices arrive one at a
/// time, in order, and a handler must not raise one itself.
inline void deliver_notice(const notice& n, const std::string& key = {}) {
  notice_state& s = notices();
  const std::lock_guard<std::mutex> lock(s.m);
  if (!s.delivered.insert(key.empty() ? n.text : key).second || !s.handler) return;
  s.handler(n);
}

} // namespace detail
} // namespace v0
} // namespace gpushare
