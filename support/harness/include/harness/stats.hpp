// SPDX-License-Identifier: Apache-2.0
// Small statistics for the demos' reports: percentiles, and Poisson request arrivals.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace demo {

/// The p-th percentile (0 < p <= 100) by the nearest-rank method; 0 for no samples.
inline double percentile(std::vector<double> samples, double p) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(samples.size()));
  const auto index = static_cast<std::size_t>(std::max(rank, 1.0)) - 1;
  return samples[std::min(index, samples.size() - 1)];
}

/// Arrival times (ns from the start) of a Poisson process of `rate_per_s` over `duration_ns`:
/// exponentially distributed gaps. A fixed seed gives every phase the same arrivals.
inline std::vector<std::uint64_t> poisson_arrivals(double rate_per_s, std::uint64_t duration_ns,
                                                   std::uint32_t seed = 20261121) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap_s(rate_per_s);
  std::vector<std::uint64_t> arrivals;
  double t_s = 0;
  for (;;) {
    t_s += gap_s(rng);
    const double t_ns = t_s * 1e9;
    if (t_ns >= static_cast<double>(duration_ns)) break;
    arrivals.push_back(static_cast<std::uint64_t>(t_ns));
  }
  return arrivals;
}

} // namespace demo
