// SPDX-License-Identifier: Apache-2.0
// The help text of `gpushare run` (docs/cli.md, "run", says the same at more length).
#pragma once

#include <string_view>

namespace gpushare::cli {

inline constexpr std::string_view run_usage =
    R"(Usage: gpushare run --key GPU-... --memory SIZE [options] -- COMMAND [ARGS...]

Runs a program that does not use gpushare under a memory budget: joins the table of the key on
its behalf (a session named after the program, or --name), reserves SIZE in it, waiting for
other sessions to free it (--timeout), then starts the program and holds the session and the
reservation until the program ends. Other gpushare sessions see the budget as taken.

Options:
  --key K              the table: the GPU's UUID (nvidia-smi -L); default GPUSHARE_KEY
  --memory SIZE        the budget: 20GiB, 512MiB, 30% (of the table's capacity); default
                       GPUSHARE_MEMORY_LIMIT
  --guarantee SIZE     the session's memory guarantee
  --priority P         low, normal, high, critical or 0..7
  --share N            1..1000000
  --name NAME          the session's name in `gpushare status` (default: the program's name)
  --dir DIR            the table directory (default: GPUSHARE_DIR, else /dev/shm)
  --timeout DUR        how long to wait for the budget: 30s, 5min, none (default: none, wait
                       without end; says on stderr that it waits and who holds the memory)
  --library            the program uses gpushare itself: reserve nothing, and pass the budget
                       and settings as GPUSHARE_KEY, GPUSHARE_MEMORY_LIMIT, GPUSHARE_NAME, ...
                       so that the program's own session holds it (not both: the budget would
                       count twice)
  --pytorch            cap PyTorch's caching allocator: PYTORCH_ALLOC_CONF gets
                       per_process_memory_fraction:F, F = budget / the card's memory (merged into
                       a value already set, as is PYTORCH_CUDA_ALLOC_CONF when set). PyTorch 2.11
                       or later: a PyTorch that does not know the key fails at its first CUDA
                       allocation with "Unrecognized ... option" or "Unrecognized key"
  --card-memory SIZE   the card's total memory for --pytorch (default: the table's capacity, which
                       a CUDA session sets to the card's memory less a headroom)
  --ready-when C       report when the program has started: port:N (127.0.0.1:N accepts a TCP
                       connection), log:REGEX (a line of its stdout or stderr matches, ECMAScript;
                       its output still goes to this stdout and stderr unchanged), file:PATH
  --startup-timeout D  how long to wait for --ready-when (default 10min); then a warning, and
                       the program keeps running
  --serialize-startup  start only while holding the table's start-up lock, and keep it until the
                       program is ready (--ready-when, required), its wait for readiness times
                       out, or it exits: engines that profile free memory at start then start one
                       at a time. The lock is waited for up to --timeout; a dead holder's lock is
                       reclaimed, and `gpushare status` shows who holds it
  --engine E[,IN=V...] append the inference engine's flags for the budget to the command:
                       vllm gets --kv-cache-memory-bytes (budget - weights - activation_peak -
                       cuda_graphs - margin) and --gpu-memory-utilization (budget / the card's
                       memory, for its start-up check); sglang gets --mem-fraction-static (from
                       free_at_start) and, given the KV size per token, --max-total-tokens.
                       Inputs: vllm: weights, activation_peak, cuda_graphs (or
                       enforce_eager=true), margin; sglang: the same (disable_cuda_graph=true),
                       free_at_start, and kv_bytes_per_token or layers, kv_heads, head_dim,
                       dtype_bytes. e.g. --engine vllm,weights=14GiB,activation_peak=2GiB,
                       cuda_graphs=1GiB,margin=1GiB (a missing input is named; nothing is guessed)
  --reclaimable SIZE   the part of the budget the program can give back when a reserve of a
                       higher priority class waits (docs/design.md section 15); needs
                       --on-reclaim. The runner holds it as reclaimable memory
  --on-reclaim CMD     a shell command that makes the program free that memory, run when asked
                       (e.g. vLLM: 'curl -fsS -X POST localhost:8000/sleep?level=1'; SGLang:
                       'curl -fsS -d {} -H "Content-Type: application/json"
                       localhost:30000/release_memory_occupation'); it gets
                       GPUSHARE_RECLAIM_BYTES (asked) and GPUSHARE_RECLAIMABLE_BYTES. Once it
                       exits 0, the SIZE goes back to the table; if it fails (or runs over 60 s)
                       the program keeps it and is not asked again for 10 s
  --on-restore CMD     a shell command that makes the program take the memory again (vLLM:
                       'curl -fsS -X POST localhost:8000/wake_up'), run once nobody waits for
                       memory and SIZE is free again, after the runner took it back; it gets
                       GPUSHARE_RESTORE_BYTES. Without it the memory stays given back
  --dry-run            print the variables that would be added and the command; run nothing

Signals: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGWINCH sent to gpushare run go
to the program (those the terminal sends its whole process group, the program has already). If
gpushare run is killed, the program is killed too (SIGKILL, its parent-death signal) and the
session is reclaimed as any dead one is.

Not enforced: the budget is the table's bookkeeping. A program that does not use gpushare can
allocate more than it; only --pytorch caps PyTorch. Compute arbitration (priority classes,
shares, compute limits) needs guards around the program's GPU work, so it does not apply to an
unmodified program: --priority and --share are recorded in its session (and passed on with
--library) but do not schedule an unmodified program's kernels.

Exit codes: the program's (128 + N when signal N killed it); 2 bad command line; 125 gpushare
run itself failed (the budget was not free in time, no table access); 126 the command is not
executable; 127 the command was not found.
)";

} // namespace gpushare::cli
