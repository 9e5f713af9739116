#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The qos scenario with PyTorch workloads like Tally's (issue 41, item 6), for a GPU machine.

An inference process (priority high) serves requests arriving at random (Poisson) at a load of
its solo capacity, next to a training process (priority low) that trains as fast as it can.
Each request is one forward pass of a model with synthetic weights:
  resnet  16 3x3 convolutions of 64 channels on a batch of 8 56x56 maps, then pool and a linear
  bert    12 transformer encoder layers (768 wide, 12 heads, 3072 feed-forward), 8 x 128 tokens
The training step is an 8-layer MLP (4096 wide, batch 4096, bfloat16): forward, backward, SGD.
Phases, each `--phase-seconds` long, `--repeats` times, in this order:
  solo       inference alone (its latency without a neighbour: the reference)
  unmanaged  both, without gpushare (the GPU time-slices the two contexts)
  gpushare   both in gpushare sessions: inference in a high-class guard per request, training
             in a low-class guard per layer (a hand-over point between layers)
  oracle     both, training pausing before each layer while a request is in service (a shared
             flag): what perfect cooperation at layer granularity gives
Printed per phase: inference p50 and p99 (ms), p99 / solo p99, the p99 excess over solo (ms),
training's throughput kept (of its solo rate) and its ceiling (1 - load). Also the floor: the
training layer's measured GPU time, the longest low-class kernel a request can find in flight.
The GPU's time slice between contexts is not measured (no API tells it).

Each run fits the device tool's 10-minute calls: one model and one load per call, e.g.
    python3 bench/gpu/torch_qos.py --model bert --load 0.5 --repeats 3 --phase-seconds 20
(4 phases x 3 repeats x 20 s = 4 minutes, plus start-up). Needs PyTorch with CUDA and the
gpushare Python module (PYTHONPATH=<build>/python). `--backend sim` runs the same harness on
the CPU with sleeps for GPU work (no torch, no GPU: for testing the harness; its figures mean
nothing). `--json PATH` writes every figure. Exit status: 0 done, 2 bad arguments or no GPU.
"""

import argparse
import glob
import json
import math
import multiprocessing
import os
import queue
import random
import statistics
import sys
import time

PHASES = ("solo", "unmanaged", "gpushare", "oracle")
MODELS = ("resnet", "bert")
LOADS = (0.2, 0.5, 0.8)


# ---- pure helpers (tested without torch: tests/plot/test_torch_qos.py) ----------------------

def percentile(values, p):
    """The p-th percentile (0-100) by linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    xs = sorted(values)
    k = (len(xs) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def arrivals(rate_per_s, seconds, seed):
    """Poisson arrival times in [0, seconds) at `rate_per_s`, seeded."""
    rng = random.Random(seed)
    t, out = 0.0, []
    while True:
        t += rng.expovariate(rate_per_s)
        if t >= seconds:
            return out
        out.append(t)


def summarize(phase_runs, solo_p99_ms, load, warmup_s):
    """Figures of one phase over its repeats: `phase_runs` is a list of dicts with "latencies"
    [(arrival_s, latency_ms)], "train_rate" (steps/s) and "train_solo" (steps/s)."""
    out = {"p50_ms": [], "p99_ms": [], "training_kept": []}
    for run in phase_runs:
        lat = [ms for at, ms in run["latencies"] if at >= warmup_s]
        out["p50_ms"].append(percentile(lat, 50))
        out["p99_ms"].append(percentile(lat, 99))
        if run.get("train_rate") is not None and run.get("train_solo"):
            out["training_kept"].append(run["train_rate"] / run["train_solo"])
    fig = {k: (statistics.median(v) if v else math.nan) for k, v in out.items()}
    fig["p99_over_solo"] = fig["p99_ms"] / solo_p99_ms if solo_p99_ms else math.nan
    fig["p99_excess_ms"] = fig["p99_ms"] - solo_p99_ms if solo_p99_ms else math.nan
    fig["training_ceiling"] = 1.0 - load
    fig["training_of_ceiling"] = fig["training_kept"] / fig["training_ceiling"]
    return fig


def table(model, load, figures, floor_ms, backend):
    """The printed table: a header line, then one row per phase."""
    label = "SIMULATED (sleeps, not GPU figures)" if backend == "sim" else "GPU"
    lines = ["=== torch_qos: %s at load %.2f, %s; floor (training layer) %.3f ms ===" %
             (model, load, label, floor_ms),
             "%-10s %9s %9s %12s %14s %14s %12s" % (
                 "phase", "p50 ms", "p99 ms", "p99 / solo", "p99 excess ms", "training kept",
                 "of ceiling")]
    for phase in PHASES:
        f = figures.get(phase)
        if f is None:
            continue
        kept = f["training_kept"]
        lines.append("%-10s %9.2f %9.2f %12.2f %14.2f %14s %12s" % (
            phase, f["p50_ms"], f["p99_ms"], f["p99_over_solo"], f["p99_excess_ms"],
            "-" if math.isnan(kept) else "%.3f" % kept,
            "-" if math.isnan(kept) else "%.2f" % f["training_of_ceiling"]))
    return "\n".join(lines)


def no_nan(x):
    """`x` with NaN figures as None (JSON has no NaN)."""
    if isinstance(x, dict):
        return {k: no_nan(v) for k, v in x.items()}
    if isinstance(x, float) and math.isnan(x):
        return None
    return x


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=MODELS, default="bert")
    p.add_argument("--load", type=float, default=0.5,
                   help="inference load, fraction of its solo capacity (Tally: 0.2, 0.5, 0.8)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--phase-seconds", type=float, default=20.0)
    p.add_argument("--warmup-seconds", type=float, default=2.0,
                   help="requests arriving earlier in a phase are not counted")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--backend", choices=("torch", "sim"), default="torch")
    p.add_argument("--seed", type=int, default=41)
    p.add_argument("--json", metavar="PATH")
    a = p.parse_args(argv)
    if not 0 < a.load < 1:
        p.error("--load must be between 0 and 1 (exclusive), not %g" % a.load)
    if a.repeats < 1:
        p.error("--repeats must be at least 1")
    if not a.phase_seconds > a.warmup_seconds >= 0:
        p.error("--phase-seconds must be longer than --warmup-seconds")
    return a


# ---- workloads -------------------------------------------------------------------------------

class SimBackend:
    """CPU stand-in: a request is a sleep of `request_ms`, a training layer one of `layer_ms`."""

    def __init__(self, model, device):
        self.request_s = (4.0 if model == "resnet" else 8.0) / 1000
        self.layer_s = 1.0 / 1000
        self.layers = 8

    def stream_handle(self):
        return 0

    def request(self):
        time.sleep(self.request_s)

    def wait(self):
        pass

    def train_layer(self, i):
        time.sleep(self.layer_s)

    def train_step_end(self):
        pass

    def layer_ms(self):
        return self.layer_s * 1000


class TorchBackend:
    """PyTorch models with synthetic weights on `device`, on a stream of their own."""

    def __init__(self, model, device):
        import torch  # only on the GPU machine
        self.torch = torch
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
        self.stream = torch.cuda.Stream()
        self.model = model
        self.layers = 8
        with torch.cuda.stream(self.stream), torch.no_grad():
            if model == "resnet":
                self.x = torch.randn(8, 64, 56, 56, device="cuda", dtype=torch.float16)
                self.convs = [torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.float16) * 0.05
                              for _ in range(16)]
                self.fc = torch.randn(64, 1000, device="cuda", dtype=torch.float16)
            else:
                layer = torch.nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True)
                self.encoder = torch.nn.TransformerEncoder(layer, 12, enable_nested_tensor=False)
                self.encoder = self.encoder.to("cuda", torch.float16).eval()
                self.x = torch.randn(8, 128, 768, device="cuda", dtype=torch.float16)
        self.mlp = None

    def stream_handle(self):
        return self.stream.cuda_stream

    def request(self):
        torch = self.torch
        with torch.cuda.stream(self.stream), torch.no_grad():
            if self.model == "resnet":
                h = self.x
                for w in self.convs:
                    h = torch.relu(torch.nn.functional.conv2d(h, w, padding=1))
                h = h.mean(dim=(2, 3)) @ self.fc
            else:
                h = self.encoder(self.x)
            self.out = h

    def wait(self):
        self.stream.synchronize()

    def _training_setup(self):
        torch = self.torch
        with torch.cuda.stream(self.stream):
            self.mlp = [torch.nn.Linear(4096, 4096).to("cuda", torch.bfloat16)
                        for _ in range(self.layers)]
            self.params = [p for m in self.mlp for p in m.parameters()]
            self.opt = torch.optim.SGD(self.params, lr=1e-4)
            self.tx = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
            self.acts = []

    def train_layer(self, i):
        """Layer i of the forward pass; the last one also runs backward and the step."""
        torch = self.torch
        if self.mlp is None:
            self._training_setup()
        with torch.cuda.stream(self.stream):
            if i == 0:
                self.opt.zero_grad(set_to_none=True)
                self.h = self.tx
            self.h = torch.relu(self.mlp[i](self.h))
            if i == self.layers - 1:
                self.h.float().square().mean().backward()
                self.opt.step()

    def train_step_end(self):
        pass

    def layer_ms(self):
        """The GPU time of one forward layer (the floor), median of 20, by CUDA events."""
        torch = self.torch
        if self.mlp is None:
            self._training_setup()
        times = []
        with torch.cuda.stream(self.stream), torch.no_grad():
            for _ in range(20):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record(self.stream)
                torch.relu(self.mlp[0](self.tx))
                b.record(self.stream)
                b.synchronize()
                times.append(a.elapsed_time(b))
        return statistics.median(times)


def backend_for(args):
    if args.backend == "sim":
        return SimBackend(args.model, args.device)
    return TorchBackend(args.model, args.device)


# ---- the two processes --------------------------------------------------------------------------

def domain():
    """The gpushare domain of this run's tables (removed at its end)."""
    return "torchqos-%d" % (os.getpid() if multiprocessing.parent_process() is None
                            else os.getppid())


def session_for(args, phase, name, priority):
    """A gpushare session in the gpushare phase (a host Session with the sim backend), else
    None."""
    if phase != "gpushare":
        return None
    import gpushare
    if args.backend == "sim":
        return gpushare.Session("torch-qos-sim", name=name, priority=priority, domain=domain())
    import gpushare.cuda as gcuda
    return gcuda.DeviceSession(args.device, name=name, priority=priority, domain=domain())


def guarded(ds, be):
    """The guard around one request or layer: on the backend's stream for a DeviceSession."""
    if args_backend_is_sim(ds):
        return ds.kernel()
    return ds.kernel(be.stream_handle())


def args_backend_is_sim(ds):
    return not hasattr(ds, "device")


def inference_main(args, phase, rate, seconds, seed, busy, ready, go, out):
    be = backend_for(args)
    ds = session_for(args, phase, "inference", "high")
    for _ in range(5):  # warm: cuDNN's algorithm search, allocator pools
        be.request()
        be.wait()
    ready.release()
    go.wait()
    start = time.monotonic()
    latencies = []
    for at in arrivals(rate, seconds, seed):
        now = time.monotonic() - start
        if now < at:
            time.sleep(at - now)
        busy.value = 1
        if ds is not None:
            with guarded(ds, be):
                be.request()
            ds.linger(0.002)  # the next request may be due: keep the gaps from training
        else:
            be.request()
        be.wait()
        busy.value = 0
        latencies.append((at, (time.monotonic() - start - at) * 1000))
    if ds is not None:
        ds.leave()
    out.put(("inference", latencies))


def training_main(args, phase, seconds, busy, ready, go, out):
    be = backend_for(args)
    ds = session_for(args, phase, "training", "low")
    for i in range(be.layers):  # warm
        be.train_layer(i)
    be.wait()
    ready.release()
    go.wait()
    start, steps = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        for i in range(be.layers):
            if phase == "oracle":
                while busy.value:
                    time.sleep(0.0001)
            if ds is not None:
                with guarded(ds, be):
                    be.train_layer(i)
            else:
                be.train_layer(i)
        steps += 1
    be.wait()
    elapsed = time.monotonic() - start
    if ds is not None:
        ds.leave()
    out.put(("training", steps / elapsed))


def run_phase(args, phase, rate, seed, with_training):
    """One phase: returns {"latencies", "train_rate"}."""
    ctx = multiprocessing.get_context("spawn")  # CUDA does not survive fork
    busy, out = ctx.Value("i", 0), ctx.Queue()
    ready, go = ctx.Semaphore(0), ctx.Event()
    procs = [ctx.Process(target=inference_main,
                         args=(args, phase, rate, args.phase_seconds, seed, busy, ready, go, out))]
    if with_training:
        procs.append(ctx.Process(target=training_main,
                                 args=(args, phase, args.phase_seconds, busy, ready, go, out)))
    for p in procs:
        p.start()
    for _ in procs:
        ready.acquire()
    go.set()
    try:
        results = dict(out.get(timeout=3 * args.phase_seconds + 300) for _ in procs)
    except queue.Empty:
        for p in procs:
            p.kill()
        raise RuntimeError("the %s phase's workers reported nothing in time" % phase)
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError("a %s worker failed (exit %s)" % (phase, p.exitcode))
    return {"latencies": results["inference"], "train_rate": results.get("training")}


def solo_service_s(args):
    """Mean service time of one request alone, serially (defines the load's arrival rate)."""
    be = backend_for(args)
    for _ in range(5):
        be.request()
        be.wait()
    t = time.monotonic()
    for _ in range(30):
        be.request()
        be.wait()
    return (time.monotonic() - t) / 30, be.layer_ms()


def solo_training_rate(args):
    ctx = multiprocessing.get_context("spawn")
    busy, out = ctx.Value("i", 0), ctx.Queue()
    ready, go = ctx.Semaphore(0), ctx.Event()
    p = ctx.Process(target=training_main,
                    args=(args, "solo", min(args.phase_seconds, 5.0), busy, ready, go, out))
    p.start()
    ready.acquire()
    go.set()
    rate = out.get(timeout=3 * args.phase_seconds + 300)[1]
    p.join()
    return rate


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.backend == "torch":
        try:
            import torch
        except ImportError:
            print("torch_qos: PyTorch is not installed here (use --backend sim to test the "
                  "harness)", file=sys.stderr)
            return 2
        if not torch.cuda.is_available():
            print("torch_qos: PyTorch sees no CUDA device", file=sys.stderr)
            return 2
    service_s, floor_ms = solo_service_s(args)
    rate = args.load / service_s
    train_solo = solo_training_rate(args)
    runs = {phase: [] for phase in PHASES}
    try:
        for r in range(args.repeats):
            for phase in PHASES:
                run = run_phase(args, phase, rate, args.seed + r, phase != "solo")
                run["train_solo"] = train_solo
                runs[phase].append(run)
                print("[%s, repeat %d] %d requests" % (phase, r + 1, len(run["latencies"])),
                      file=sys.stderr)
    finally:
        for path in glob.glob("/dev/shm/gpushare.%s.*" % domain()):
            os.unlink(path)
    solo_p99 = statistics.median(
        percentile([ms for at, ms in run["latencies"] if at >= args.warmup_seconds], 99)
        for run in runs["solo"])
    figures = {ph: summarize(runs[ph], solo_p99, args.load, args.warmup_seconds) for ph in PHASES}
    print(table(args.model, args.load, figures, floor_ms, args.backend))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(no_nan({"model": args.model, "load": args.load, "backend": args.backend,
                              "service_ms": service_s * 1000, "floor_ms": floor_ms,
                              "training_solo_steps_per_s": train_solo, "figures": figures}), f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
