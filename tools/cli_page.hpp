// SPDX-License-Identifier: Apache-2.0
// The live page that `gpushare metrics --listen` serves at GET /: plain HTML, CSS and one small
// script, all in this header, so that it needs nothing from the network (an air-gapped node shows
// it as well). The script reads GET /status.json (the document of `gpushare status --json
// --interval 0`) every 2 s and keeps the history of each session's device share itself: the
// server keeps none. Table content reaches the page only through that JSON and only as text
// (textContent, createElement): a session name with markup shows as its characters. The CSP
// (exporter_page_csp) lets only the script and style that carry the response's nonce run. See
// docs/cli.md, "The live page".
#pragma once

#include <string>
#include <string_view>

namespace gpushare::cli {

/// Where the page reads its data from (every 2 s: REFRESH_MS in the script).
inline constexpr std::string_view exporter_status_path = "/status.json";

/// The placeholder that exporter_page() replaces with the response's nonce.
inline constexpr std::string_view exporter_page_nonce_mark = "@NONCE@";

/// The page's template: "@NONCE@" stands for the nonce of its <style> and <script>.
inline constexpr std::string_view exporter_page_template = R"PAGE(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>gpushare</title>
<style nonce="@NONCE@">
body{font:14px/1.4 system-ui,sans-serif;margin:1em 2em;color:#222;background:#fafafa}
h1{font-size:1.4em;margin:0 0 .2em}
h2{font-size:1.1em;margin:1.4em 0 .2em}
.note{color:#666;font-size:.9em}
.error{color:#b00020;font-weight:bold}
table{border-collapse:collapse;margin:.4em 0;background:#fff}
th,td{border-bottom:1px solid #ddd;padding:.3em .6em;text-align:left;vertical-align:middle}
th{background:#f0f0f0;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.state-running{color:#0a7d32;font-weight:600}
.state-waiting{color:#b36b00;font-weight:600}
.state-idle{color:#666}
.holder{font-weight:bold}
.bar{position:relative;width:14em;height:.9em;background:#e8e8e8;border-radius:2px}
.bar .reserved{position:absolute;left:0;top:0;bottom:0;background:#4a7fd4}
.bar .reclaimable{position:absolute;top:0;bottom:0;background:#9cc0f5}
.bar .limit{position:absolute;top:-2px;bottom:-2px;width:2px;background:#b00020}
.legend{font-size:.85em;color:#555}
svg.share{background:#f4f7fb;border:1px solid #dde}
svg.share polyline{fill:none;stroke:#0a7d32;stroke-width:1.5}
</style></head>
<body>
<h1>gpushare</h1>
<p class="note">Every table of this exporter, read again every 2 s from
<a href="/status.json">/status.json</a>; Prometheus metrics: <a href="/metrics">/metrics</a>.
Memory bars: <span class="legend">dark: reserved, light: of it reclaimable, red line: the
session's limit; scaled to the table's capacity.</span> Device share: the fraction of wall time
each session held the device, over the last 5 minutes this page has been open.</p>
<p id="status" class="note">loading&hellip;</p>
<div id="tables"></div>
<script nonce="@NONCE@">
"use strict";
const REFRESH_MS = 2000, HISTORY_MS = 5 * 60 * 1000;
const history = new Map(); // "table/slot/generation" -> [{t: unix ms, share: 0..1}]
const last = new Map();    // "table/slot/generation" -> {ns: generated, used: device ns}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}
function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let u = 0;
  while (n >= 1024 && u < units.length - 1) { n /= 1024; u++; }
  return (u === 0 ? String(n) : n.toFixed(1)) + " " + units[u];
}
function sessionKey(t, s) { return t.object_name + "/" + s.slot + "/" + s.generation; }
function usedNs(s) { return s.device_ns + (s.active_guards > 0 ? s.in_guard_ns : 0); }

function record(doc) {
  const now = doc.generated_unix_ns, seen = new Set();
  for (const t of doc.tables) for (const s of t.sessions) {
    const k = sessionKey(t, s), used = usedNs(s), prev = last.get(k);
    seen.add(k);
    last.set(k, {ns: now, used: used});
    if (!prev || now <= prev.ns) continue;
    const share = Math.min(1, Math.max(0, (used - prev.used) / (now - prev.ns)));
    const h = history.get(k) || [];
    h.push({t: now / 1e6, share: share});
    while (h.length && h[0].t < now / 1e6 - HISTORY_MS) h.shift();
    history.set(k, h);
  }
  for (const k of [...last.keys()]) if (!seen.has(k)) { last.delete(k); history.delete(k); }
}

function shareLine(points, nowMs) {
  const NS = "http://www.w3.org/2000/svg", w = 160, h = 28;
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("class", "share");
  svg.setAttribute("width", w); svg.setAttribute("height", h);
  svg.setAttribute("viewBox", "0 0 " + w + " " + h);
  const line = document.createElementNS(NS, "polyline");
  line.setAttribute("points", points.map(p =>
    ((1 - (nowMs - p.t) / HISTORY_MS) * w).toFixed(1) + "," +
    ((1 - p.share) * (h - 2) + 1).toFixed(1)).join(" "));
  svg.appendChild(line);
  return svg;
}

function memoryCell(t, s) {
  const td = el("td"), bar = el("div", null, "bar");
  const lim = s.memory_limit_bytes, rec = s.reclaim.reclaimable_bytes;
  let scale = t.capacity_unlimited ? 0 : t.capacity_bytes;
  if (!scale) for (const o of t.sessions) // unlimited capacity: the largest reserve or limit
    scale = Math.max(scale, o.reserved_bytes,
                     o.memory_limit_bytes < 2 ** 62 ? o.memory_limit_bytes : 0);
  const pct = v => Math.min(100, scale ? v * 100 / scale : 0) + "%";
  const r = el("div", null, "reserved"); r.style.width = pct(s.reserved_bytes); bar.appendChild(r);
  const c = el("div", null, "reclaimable");
  c.style.left = pct(s.reserved_bytes - Math.min(rec, s.reserved_bytes));
  c.style.width = pct(Math.min(rec, s.reserved_bytes)); bar.appendChild(c);
  const limited = lim > 0 && lim < t.capacity_bytes;
  if (limited) { const l = el("div", null, "limit"); l.style.left = pct(lim); bar.appendChild(l); }
  td.appendChild(bar);
  td.appendChild(el("div", bytes(s.reserved_bytes) + " reserved, " + bytes(rec) +
    " reclaimable, limit " + (limited ? bytes(lim) : "none"), "legend"));
  return td;
}

function sessionRow(doc, t, s) {
  const tr = el("tr");
  tr.dataset.session = sessionKey(t, s);
  const holds = s.holds_device;
  tr.appendChild(el("td", s.name, "name" + (holds ? " holder" : "")));
  tr.appendChild(el("td", s.slot, "num"));
  tr.appendChild(el("td", s.pid, "num"));
  tr.appendChild(el("td", s.state, "state state-" + s.state));
  tr.appendChild(el("td", s.priority_name, "priority"));
  tr.appendChild(el("td", holds ? "yes" : "", "holds"));
  tr.appendChild(el("td", s.share, "num"));
  tr.appendChild(memoryCell(t, s));
  const h = history.get(sessionKey(t, s)) || [], td = el("td", null, "share");
  td.appendChild(shareLine(h, doc.generated_unix_ns / 1e6));
  const latest = h.length ? (h[h.length - 1].share * 100).toFixed(1) + "%" : "\u2013";
  td.appendChild(el("span", " " + latest));
  tr.appendChild(td);
  return tr;
}

function tableSection(doc, t) {
  const sec = el("section");
  sec.dataset.table = t.object_name;
  if (!t.sessions.length && !t.dead_sessions.length) { // an empty table: one line, not a block
    sec.className = "empty";
    sec.appendChild(el("p", "table " + t.key + " (domain " + t.domain + "): no sessions \u00b7 " +
      t.object_name + " \u00b7 capacity " +
      (t.capacity_unlimited ? "unlimited" : bytes(t.capacity_bytes)), "note"));
    return sec;
  }
  sec.appendChild(el("h2", "table " + t.key + " (domain " + t.domain + ")"));
  const holder = t.sessions.find(s => s.holds_device);
  sec.appendChild(el("p", t.object_name + " \u00b7 capacity " +
    (t.capacity_unlimited ? "unlimited" : bytes(t.capacity_bytes)) + " \u00b7 reserved " +
    bytes(t.reserved_bytes) + " \u00b7 " + t.live_sessions + " sessions \u00b7 device holder: " +
    (holder ? holder.name + " (slot " + holder.slot + ")" : "none") +
    (t.dead_sessions.length ? " \u00b7 " + t.dead_sessions.length +
      " dead sessions not reclaimed yet" : ""), "note"));
  const table = el("table"), head = el("tr");
  for (const c of ["session", "slot", "pid", "state", "priority", "holder", "share", "memory",
                   "device share (5 min)"]) head.appendChild(el("th", c));
  table.appendChild(el("thead")).appendChild(head);
  const body = table.appendChild(el("tbody"));
  for (const s of t.sessions) body.appendChild(sessionRow(doc, t, s));
  if (!t.sessions.length) body.appendChild(el("tr")).appendChild(el("td", "no sessions"));
  sec.appendChild(table);
  return sec;
}

function render(doc) {
  const out = el("div");
  out.id = "tables";
  for (const t of doc.tables) out.appendChild(tableSection(doc, t));
  for (const u of doc.unreadable)
    out.appendChild(el("p", "cannot read " + u.object_name + ": " + u.message, "error"));
  if (!doc.tables.length && !doc.unreadable.length)
    out.appendChild(el("p", "no gpushare tables here", "note"));
  document.getElementById("tables").replaceWith(out);
  const st = document.getElementById("status");
  st.className = "note";
  st.textContent = "updated " + new Date(doc.generated_unix_ns / 1e6).toLocaleTimeString() +
    " \u00b7 gpushare " + doc.gpushare_version;
}

// An exporter with --token-file: the token comes after "#token=" in the page's address (a
// fragment, which the browser never sends to a server), and goes with each request.
const token = new URLSearchParams(location.hash.slice(1)).get("token");
const headers = token ? {Authorization: "Bearer " + token} : {};

async function refresh() {
  try {
    const r = await fetch("/status.json", {cache: "no-store", headers: headers});
    if (!r.ok) throw new Error("HTTP " + r.status + ": " + (await r.text()));
    const doc = await r.json();
    record(doc);
    render(doc);
  } catch (e) {
    const st = document.getElementById("status");
    st.className = "error";
    st.textContent = "cannot read /status.json (" + e.message + "): is the exporter running? " +
      "Retrying every 2 s.";
  }
}
refresh();
setInterval(refresh, REFRESH_MS);
</script>
</body></html>
)PAGE";

/// The Content-Security-Policy of the page served with `nonce`: nothing from elsewhere, no
/// plug-ins, no framing; only the page's own <style> and <script> (they carry the nonce) and
/// fetches from this server (/status.json).
inline std::string exporter_page_csp(std::string_view nonce) {
  const std::string n = std::string("'nonce-").append(nonce).append("'");
  return std::string("default-src 'none'; script-src ")
      .append(n)
      .append("; style-src ")
      .append(n)
      .append("; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; "
              "frame-ancestors 'none'");
}

/// The page with `nonce` in place of every "@NONCE@".
inline std::string exporter_page(std::string_view nonce) {
  std::string out(exporter_page_template);
  for (std::size_t at = 0; (at = out.find(exporter_page_nonce_mark, at)) != std::string::npos;
       at += nonce.size())
    out.replace(at, exporter_page_nonce_mark.size(), nonce);
  return out;
}

} // namespace gpushare::cli
