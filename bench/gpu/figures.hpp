// SPDX-License-Identifier: Apache-2.0
// What one run of a scenario measured: named numbers ("qos.p99_ratio.gpushare") and named series
// of raw samples (latencies, per-window splits), in the order they were recorded, plus the
// statistics the summary takes over repeats, and (for the timing scenarios) the conditions they
// were measured in.
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <harness/conditions.hpp>
#include <harness/stats.hpp>

namespace bench {

class figures {
public:
  void set(const std::string& key, double value) {
    for (auto& [k, v] : values_)
      if (k == key) {
        v = value;
        return;
      }
    values_.emplace_back(key, value);
  }
  void add_series(const std::string& key, std::vector<double> samples) {
    series_.emplace_back(key, std::move(samples));
  }
  std::optional<double> get(std::string_view key) const {
    for (const auto& [k, v] : values_)
      if (k == key) return v;
    return std::nullopt;
  }
  const std::vector<std::pair<std::string, double>>& values() const { return values_; }
  const std::vector<std::pair<std::string, std::vector<double>>>& series() const { return series_; }

  /// A failure that ended the scenario early (its figures are then incomplete).
  std::string error;
  /// Remarks worth reading next to the figures (e.g. a job's out-of-memory message).
  std::vector<std::string> notes;
  /// What a timing scenario measured about its own conditions (the worst run-queue wait of its
  /// workers over all its phases, ...); nullopt for a scenario whose figures do not depend on
  /// timing. judged() says whether its figures can be trusted.
  std::optional<demo::conditions> measured;

  /// Judges `measured` (see demo::judge); trustworthy when nothing was measured.
  demo::verdict judged() const { return measured ? demo::judge(*measured) : demo::verdict{}; }
  bool trustworthy() const { return judged().trustworthy; }

  /// A timing scenario's conditions from its phases' CPU waits (%): the worst of them becomes
  /// the figure `<scenario>.cpu_wait_pct` and what `measured` judges.
  void measured_cpu_waits(const std::string& scenario, const std::vector<double>& phase_waits);

private:
  std::vector<std::pair<std::string, double>> values_;
  std::vector<std::pair<std::string, std::vector<double>>> series_;
};

/// The p-th percentile (0 < p <= 100), the harness's (nearest rank); NaN for no samples: a figure
/// that could not be measured is not a figure.
inline double percentile(std::vector<double> samples, double p) {
  return samples.empty() ? NAN : demo::percentile(std::move(samples), p);
}

inline double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

using demo::worst_cpu_wait; // the worst of some phases' CPU waits (harness/conditions.hpp)

inline void figures::measured_cpu_waits(const std::string& scenario,
                                        const std::vector<double>& phase_waits) {
  demo::conditions c;
  c.cpu_wait_pct = worst_cpu_wait(phase_waits);
  set(scenario + ".cpu_wait_pct", c.cpu_wait_pct);
  measured = c;
}

/// a / b, or NaN when b is not positive (a ratio that cannot be formed is not a figure).
inline double ratio(double a, double b) { return b > 0 ? a / b : NAN; }

} // namespace bench
