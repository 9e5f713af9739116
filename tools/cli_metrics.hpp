// SPDX-License-Identifier: Apache-2.0
// `gpushare metrics`: every table's and session's figures in the Prometheus text format (the
// command itself, printing or serving them, is cli_exporter.hpp).
#pragma once

#include <cstdint>
#include <string>

#include <gpushare/version.hpp>

#include "cli_args.hpp"
#include "cli_groups.hpp"
#include "cli_identity.hpp"
#include "cli_prometheus.hpp"
#include "cli_reclaim.hpp"
#include "cli_sample.hpp"
#include "cli_status.hpp"

namespace gpushare::cli {

/// The metric families of the tool, the tables and the devices, in output order: name, type,
/// help.
inline void declare_table_metrics(exposition& x) {
  x.declare("gpushare_info", "gauge",
            "Version of the gpushare tool that wrote these metrics (always 1).");
  x.declare("gpushare_table_up", "gauge",
            "1 if the table could be read, 0 if not (see gpushare_table_error).");
  x.declare("gpushare_table_error", "gauge",
            "1 for a table that could not be read; the reason label says why.");
  x.declare("gpushare_table_capacity_bytes", "gauge",
            "Bytes the sessions of the table may reserve in total (9223372036854775808 means "
            "unlimited).");
  x.declare("gpushare_table_committed_bytes", "gauge",
            "Bytes committed to sessions: reservations, external usage and unused guarantees.");
  x.declare("gpushare_table_reserved_bytes", "gauge", "Bytes held by reservations.");
  x.declare("gpushare_table_available_bytes", "gauge",
            "Capacity minus committed bytes (9223372036854775808 means unlimited).");
  x.declare("gpushare_table_sessions", "gauge", "Live sessions in the table.");
  x.declare("gpushare_table_slots", "gauge", "Session slots of the table.");
  x.declare("gpushare_table_dead_sessions", "gauge",
            "Sessions whose process died and that no live process has reclaimed yet.");
  x.declare("gpushare_table_lock_repairs_total", "counter",
            "Times a process found the table lock's holder dead and repaired the table.");
  x.declare("gpushare_table_sessions_reclaimed_total", "counter",
            "Dead sessions whose slot and memory a live process reclaimed.");
  x.declare("gpushare_table_handovers_total", "counter",
            "Times the device went from one session to another.");
  x.declare("gpushare_table_queue_holds_total", "counter",
            "Memory growths refused because a waiting reserve ahead of them (a higher class, or "
            "its class and waiting longer) would not have fitted after them.");
  x.declare("gpushare_table_revocations_total", "counter",
            "Holds of the device revoked at a guard bound (max_guard): a holder ran one guard "
            "that long while others waited.");
  x.declare("gpushare_table_evictions_total", "counter",
            "Sessions ended by gpushare evict (table::evict).");
  x.declare("gpushare_table_startup_waiters", "gauge",
            "Threads of live sessions waiting for the table's start-up lock.");
  x.declare("gpushare_table_startup_takes_total", "counter",
            "Times a session took the table's start-up lock.");
  x.declare("gpushare_device_total_bytes", "gauge",
            "Device memory of the GPU behind the table, as a CUDA session last observed it.");
  x.declare("gpushare_device_free_bytes", "gauge",
            "Free device memory at the last observation by a CUDA session.");
  x.declare("gpushare_device_untracked_bytes", "gauge",
            "Device memory in use that no session of the table accounts for, at the last "
            "observation.");
  x.declare("gpushare_device_releasing_bytes", "gauge",
            "Device memory in use that dead sessions had accounted (being released), at the last "
            "observation.");
  x.declare("gpushare_device_observed_timestamp_seconds", "gauge",
            "Unix time of the last observation of the device.");
}

/// The session families, in output order (after the table and device families).
inline void declare_session_metrics(exposition& x) {
  x.declare("gpushare_session_info", "gauge",
            "Always 1; the pid label names the process of the session (the other session series "
            "have no pid label, so a restarted process continues them).");
  x.declare("gpushare_session_priority", "gauge", "Priority class of the session (0 to 7).");
  x.declare("gpushare_session_share", "gauge", "Weighted share of device time of the session.");
  x.declare("gpushare_session_compute_limit_ratio", "gauge",
            "Most device time the session may use, as a fraction (1 = no limit).");
  x.declare("gpushare_session_quantum_seconds", "gauge",
            "Device time the session may keep the device while equal-priority sessions wait.");
  x.declare("gpushare_session_memory_limit_bytes", "gauge",
            "Most memory the session may hold (reservations plus external usage).");
  x.declare("gpushare_session_memory_guarantee_bytes", "gauge",
            "Memory kept for the session at all times.");
  x.declare("gpushare_session_reserved_bytes", "gauge",
            "Bytes held by the session's reservations.");
  x.declare("gpushare_session_external_bytes", "gauge",
            "Bytes the session uses outside reservations (e.g. its CUDA context).");
  x.declare("gpushare_session_peak_bytes", "gauge",
            "Highest reservations plus external usage of the session.");
  x.declare("gpushare_session_holds_device", "gauge", "1 while the session holds the device.");
  x.declare("gpushare_session_holds_startup", "gauge",
            "1 while the session holds the table's start-up lock (its engine is starting).");
  x.declare("gpushare_session_active_guards", "gauge",
            "Guards of the session inside their region now.");
  x.declare("gpushare_session_waiting_for_device", "gauge",
            "Threads of the session waiting for the device now.");
  x.declare("gpushare_session_waiting_for_memory", "gauge",
            "Threads of the session waiting for memory now.");
  x.declare("gpushare_session_device_seconds_total", "counter",
            "Device time the session used in guards.");
  x.declare("gpushare_session_guards_total", "counter", "Guards the session completed.");
  x.declare("gpushare_session_device_waits_total", "counter",
            "Guards and yields of the session that had to wait for the device.");
  x.declare("gpushare_session_device_wait_seconds_total", "counter",
            "Time the session waited for the device.");
  x.declare("gpushare_session_handovers_total", "counter",
            "Times the session gave the device to another session.");
  x.declare("gpushare_session_compute_throttled_seconds_total", "counter",
            "Time the session's compute limit held it back.");
  x.declare("gpushare_session_reservations_total", "counter",
            "Reservations granted to the session.");
  x.declare("gpushare_session_reserve_waits_total", "counter",
            "Reservations of the session that had to wait for memory.");
  x.declare("gpushare_session_reserve_wait_seconds_total", "counter",
            "Time the session waited for memory.");
  x.declare("gpushare_session_revocations_total", "counter",
            "Times the session's hold of the device was revoked at its guard bound.");
}

/// Every metric family, in output order.
inline void declare_metrics(exposition& x) {
  declare_table_metrics(x);
  declare_reclaim_metrics(x);
  declare_group_metrics(x);
  declare_session_metrics(x);
  declare_session_reclaim_metrics(x);
}

inline std::string seconds_value(std::uint64_t ns) { return fixed_decimal(ns, 9); }

/// The samples of one live session; `l` holds the labels of its table.
inline void session_samples(exposition& x, label_set l, const session_info& i) {
  l.emplace_back("session", i.name);
  l.emplace_back("slot", std::to_string(i.id.slot));
  for (auto& label : identity_labels(i.identity)) l.push_back(std::move(label));
  l.emplace_back("group", i.group);
  label_set with_pid = l;
  with_pid.emplace_back("pid", std::to_string(i.pid));
  x.sample("gpushare_session_info", with_pid, 1);
  x.sample("gpushare_session_priority", l, static_cast<std::uint64_t>(i.priority));
  x.sample("gpushare_session_share", l, i.share);
  x.sample("gpushare_session_compute_limit_ratio", l, fixed_decimal(i.compute_limit_ppm, 6));
  x.sample("gpushare_session_quantum_seconds", l, seconds_value(i.quantum_ns));
  x.sample("gpushare_session_memory_limit_bytes", l, i.memory_limit);
  x.sample("gpushare_session_memory_guarantee_bytes", l, i.memory_guarantee);
  x.sample("gpushare_session_reserved_bytes", l, i.reserved);
  x.sample("gpushare_session_external_bytes", l, i.external);
  x.sample("gpushare_session_peak_bytes", l, i.peak);
  x.sample("gpushare_session_holds_device", l, i.holds_device ? 1 : 0);
  x.sample("gpushare_session_holds_startup", l, i.holds_startup ? 1 : 0);
  x.sample("gpushare_session_active_guards", l, i.active_guards);
  x.sample("gpushare_session_waiting_for_device", l, i.waiting_for_device);
  x.sample("gpushare_session_waiting_for_memory", l, i.waiting_for_memory);
  x.sample("gpushare_session_device_seconds_total", l, seconds_value(i.device_ns));
  x.sample("gpushare_session_guards_total", l, i.guards);
  x.sample("gpushare_session_device_waits_total", l, i.device_waits);
  x.sample("gpushare_session_device_wait_seconds_total", l, seconds_value(i.device_wait_ns));
  x.sample("gpushare_session_handovers_total", l, i.handovers);
  x.sample("gpushare_session_compute_throttled_seconds_total", l, seconds_value(i.cap_throttle_ns));
  x.sample("gpushare_session_reservations_total", l, i.reservations_granted);
  x.sample("gpushare_session_reserve_waits_total", l, i.reserve_waits);
  x.sample("gpushare_session_reserve_wait_seconds_total", l, seconds_value(i.reserve_wait_ns));
  x.sample("gpushare_session_revocations_total", l, i.revocations);
  session_reclaim_samples(x, l, i);
}

/// The exposition of one sample.
inline std::string metrics_text(const sample& s) {
  exposition x;
  declare_metrics(x);
  x.sample("gpushare_info",
           {{"version", GPUSHARE_VERSION_STRING}, {"layout", std::to_string(table_layout_version)}},
           1);
  for (const auto& t : s.tables) {
    if (!t.snapshot) {
      const label_set labels = {
          {"table", t.entry.object_name}, {"key", t.entry.key}, {"domain", t.entry.domain}};
      x.sample("gpushare_table_up", labels, 0);
      label_set with_reason = labels;
      with_reason.emplace_back("reason", gpushare::to_string(t.error.value_or(errc::system_error)));
      x.sample("gpushare_table_error", with_reason, 1);
      continue;
    }
    const table_snapshot& ts = *t.snapshot;
    const label_set labels = {{"table", ts.object_name}, {"key", ts.key}, {"domain", ts.domain}};
    x.sample("gpushare_table_up", labels, 1);
    x.sample("gpushare_table_capacity_bytes", labels, ts.capacity);
    x.sample("gpushare_table_committed_bytes", labels, ts.committed_total);
    x.sample("gpushare_table_reserved_bytes", labels, ts.reserved_total);
    x.sample("gpushare_table_available_bytes", labels, ts.available);
    x.sample("gpushare_table_sessions", labels, ts.sessions.size());
    x.sample("gpushare_table_slots", labels, ts.slot_count);
    x.sample("gpushare_table_dead_sessions", labels, ts.dead_sessions.size());
    x.sample("gpushare_table_lock_repairs_total", labels, ts.lock_repairs);
    x.sample("gpushare_table_sessions_reclaimed_total", labels, ts.sessions_reclaimed);
    x.sample("gpushare_table_handovers_total", labels, ts.handovers);
    x.sample("gpushare_table_queue_holds_total", labels, ts.queue_holds);
    x.sample("gpushare_table_revocations_total", labels, ts.revocations);
    x.sample("gpushare_table_evictions_total", labels, ts.evictions);
    x.sample("gpushare_table_startup_waiters", labels, ts.startup_waiters);
    x.sample("gpushare_table_startup_takes_total", labels, ts.startup_takes);
    if (ts.device_observed_unix_ns != 0) {
      label_set device = labels;
      device.emplace_back("device", ts.device_name);
      x.sample("gpushare_device_total_bytes", device, ts.device_total);
      x.sample("gpushare_device_free_bytes", device, ts.device_free);
      x.sample("gpushare_device_untracked_bytes", device, ts.device_untracked);
      x.sample("gpushare_device_releasing_bytes", device, ts.device_releasing);
      x.sample("gpushare_device_observed_timestamp_seconds", device,
               seconds_value(ts.device_observed_unix_ns));
    }
    reclaim_samples(x, labels, ts);
    group_samples(x, labels, ts);
    for (const session_info& i : ts.sessions) session_samples(x, labels, i);
  }
  return x.render();
}

} // namespace gpushare::cli
