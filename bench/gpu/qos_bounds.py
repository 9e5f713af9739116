#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks the qos scenario of a gpushare_bench_gpu JSON record against stated bounds.

CI runs it on the simulated run that tools/gpu-check.sh --simulated makes (cudasim: SIMULATED
figures, not GPU measurements), so that a change that makes the high class's latency or the
low class's throughput grossly worse fails CI (issue 41, item 7). The bounds are loose on
purpose: a 2-CPU machine running cudasim spreads these figures widely from run to run (see
docs/benchmarks.md), and a bound that noise can cross would make CI fail for nothing.

For each repeat whose conditions held (trustworthy), with gpushare:
  - inference p50 at most 3/4 of its p50 unmanaged (measured: 0.04-0.33 of it);
  - inference p50 at most 3x its p50 solo (measured: 1.3-1.8x);
  - training kept at least half of its ceiling, 1 - inference busy (measured: 0.72-0.90).
The median over those repeats must meet each bound. The p99 is printed, not judged: a quick
phase serves about 90 requests, so its p99 is one or two of them (CI saw gpushare's p99 at 0.04
to 0.70 of the unmanaged one). Exit status: 0 met (or nothing to judge: no qos scenario, no
trustworthy repeat, each said on stdout), 1 a bound missed, 2 unreadable input.

Usage: qos_bounds.py BENCH.json
"""

import json
import statistics
import sys

BOUNDS = [
    # (what, figure, reference figure, at most / at least, factor); None: printed, not judged
    ("inference p50 with gpushare / unmanaged", "qos.p50_ms.gpushare", "qos.p50_ms.unmanaged",
     "at most", 0.75),
    ("inference p50 with gpushare / solo", "qos.p50_ms.gpushare", "qos.p50_ms.solo", "at most",
     3.0),
    ("training kept / its ceiling", "qos.training_kept.gpushare", "qos.training_ceiling.gpushare",
     "at least", 0.5),
    ("inference p99 with gpushare / unmanaged", "qos.p99_ms.gpushare", "qos.p99_ms.unmanaged",
     None, None),
]


def ratios(repeats, figure, reference):
    out = []
    for r in repeats:
        f = r.get("figures", {})
        a, b = f.get(figure), f.get(reference)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0:
            out.append(a / b)
    return out


def main(argv):
    if len(argv) != 2:
        print("usage: qos_bounds.py BENCH.json", file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8") as f:
            record = json.load(f)
        repeats = record.get("results", {}).get("qos")
    except (OSError, ValueError, AttributeError) as e:
        print(f"qos_bounds: cannot read {argv[1]}: {e}", file=sys.stderr)
        return 2
    if not repeats:
        print("qos bounds: not judged (the record has no qos scenario)")
        return 0
    kept = [r for r in repeats if isinstance(r, dict) and r.get("trustworthy")]
    if not kept:
        print("qos bounds: not judged (no repeat's conditions held: the machine was too busy)")
        return 0
    label = "SIMULATED " if record.get("mode") != "gpu" else ""
    missed = 0
    for what, figure, reference, sense, factor in BOUNDS:
        values = ratios(kept, figure, reference)
        if not values:
            print(f"qos bounds: {what}: missing from the record")
            missed += 0 if sense is None else 1
            continue
        median = statistics.median(values)
        if sense is None:
            print(f"qos bounds ({label}{len(values)} repeats): {what} = {median:.3f} (not judged)")
            continue
        ok = median <= factor if sense == "at most" else median >= factor
        missed += 0 if ok else 1
        print(f"qos bounds ({label}{len(values)} repeats): {what} = {median:.3f}, "
              f"{sense} {factor}: {'met' if ok else 'MISSED'}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
