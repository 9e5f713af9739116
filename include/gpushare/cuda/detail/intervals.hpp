// SPDX-License-Identifier: Apache-2.0
// The interval arithmetic behind a device session's device time: guarded regions of one session
// on several streams may overlap on the device, and the session occupied the device for the
// union of their intervals, not the sum. Free of CUDA headers, so plain C++ tests check it.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace gpushare {
inline namespace v0 {
namespace cuda {
namespace detail {

/// A set of disjoint, sorted half-open intervals [begin, end) on a timeline (ns), to which
/// intervals are added one at a time: add() returns how much of the new interval was not yet
/// covered, so the sum of what add() returns is the length of the union of all intervals added
/// (less what drop_before() forgot).
class interval_set {
public:
  using span = std::pair<std::int64_t, std::int64_t>;

  /// Adds [begin, end); returns the length of the part not covered before. An empty or
  /// reversed interval adds nothing.
  std::uint64_t add(std::int64_t begin, std::int64_t end) {
    if (end <= begin) return 0;
    // The first interval that ends at or after `begin` (it may touch or overlap the new one).
    auto first = std::lower_bound(spans_.begin(), spans_.end(), begin,
                                  [](const span& s, std::int64_t b) { return s.second < b; });
    std::uint64_t covered = 0;
    std::int64_t lo = begin, hi = end;
    auto last = first;
    for (; last != spans_.end() && last->first <= end; ++last) {
      const std::int64_t a = std::max(last->first, begin), b = std::min(last->second, end);
      if (b > a) covered += static_cast<std::uint64_t>(b - a);
      lo = std::min(lo, last->first);
      hi = std::max(hi, last->second);
    }
    if (first == last) {
      spans_.insert(first, span{lo, hi});
    } else {
      *first = span{lo, hi};
      spans_.erase(first + 1, last);
    }
    return static_cast<std::uint64_t>(end - begin) - covered;
  }

  /// Forgets the intervals that end at or before `t` (no interval added later reaches back
  /// before `t`).
  void drop_before(std::int64_t t) {
    const auto keep = std::lower_bound(spans_.begin(), spans_.end(), t,
                                       [](const span& s, std::int64_t v) { return s.second <= v; });
    spans_.erase(spans_.begin(), keep);
  }

  /// Forgets the oldest intervals beyond `n` (a bound on memory; only an interval added later
  /// that reaches back that far could then be counted twice).
  void keep_newest(std::size_t n) {
    if (spans_.size() > n)
      spans_.erase(spans_.begin(), spans_.begin() + static_cast<std::ptrdiff_t>(spans_.size() - n));
  }

  void clear() noexcept { spans_.clear(); }
  bool empty() const noexcept { return spans_.empty(); }
  std::size_t size() const noexcept { return spans_.size(); }
  const std::vector<span>& spans() const noexcept { return spans_; }

private:
  std::vector<span> spans_;
};

} // namespace detail
} // namespace cuda
} // namespace v0
} // namespace gpushare
