# SPDX-License-Identifier: Apache-2.0
"""From a session's memory budget to the flags inference engines understand.

The formulas are the engines' own start-up formulas (docs/python.md, "Engines that start
together"); the arithmetic is the C++ library's (include/gpushare/engines.hpp):

    import gpushare, gpushare.engines as engines
    with gpushare.Session(key, name="vllm-a", memory_limit="30GiB") as s, s.startup(timeout=600):
        plan = engines.plan_vllm(budget=s, weights="14GiB", activation_peak="2GiB",
                                 cuda_graphs="1GiB", margin="1GiB")
        argv += plan.flags   # ["--kv-cache-memory-bytes", "...", ...]
        ...  # start the engine; leave the `with` when it is ready

Sizes are ints (bytes) or strings ("14GiB"). `budget` may also be a Session or DeviceSession:
its memory limit is the budget. An unknown input raises gpushare.InvalidArgument naming what to
supply; gpushare does not guess model sizes.
"""

from dataclasses import dataclass, field
from typing import List, Optional

from . import _gpushare

__all__ = ["VllmPlan", "SglangPlan", "plan_vllm", "plan_sglang", "budget_of"]


@dataclass(frozen=True)
class VllmPlan:
    """vLLM's absolute KV-cache size, and a utilization that passes its start-up check."""

    kv_cache_memory_bytes: int
    gpu_memory_utilization: Optional[float]
    flags: List[str] = field(default_factory=list)


@dataclass(frozen=True)
class SglangPlan:
    """SGLang's --mem-fraction-static (relative to free memory at start) and token cap."""

    mem_fraction_static: float
    kv_budget: int
    max_total_tokens: Optional[int]
    flags: List[str] = field(default_factory=list)


def budget_of(session) -> int:
    """The memory budget of a Session or DeviceSession: its memory limit, in bytes."""
    info = session.info() if callable(getattr(session, "info", None)) else session.info
    limit = getattr(info, "memory_limit", None)
    if not isinstance(limit, int) or limit <= 0 or limit >= 1 << 63:
        raise _gpushare.InvalidArgument(
            "the session has no memory limit to use as the engine's budget: give it one "
            "(memory_limit=...) or pass budget= as a size"
        )
    return limit


_VLLM_INPUTS = frozenset(
    "budget weights activation_peak cuda_graphs enforce_eager margin device_total".split()
)
_SGLANG_INPUTS = frozenset(
    "budget weights free_at_start activation_peak cuda_graphs disable_cuda_graph margin "
    "kv_bytes_per_token layers kv_heads head_dim dtype_bytes".split()
)


def _inputs(engine, known, kw):
    unknown = sorted(set(kw) - known)
    if unknown:
        raise TypeError(
            f"{engine}: unknown input(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    b = kw.get("budget")
    if b is not None and not isinstance(b, (int, str)):
        kw["budget"] = budget_of(b)
    return kw


def plan_vllm(**inputs) -> VllmPlan:
    """--kv-cache-memory-bytes = budget - weights - activation_peak - cuda_graphs - margin.

    Inputs: budget, weights, activation_peak, cuda_graphs (or enforce_eager=True), margin, and
    optionally device_total (then --gpu-memory-utilization = budget / total is added, which
    only vLLM's start-up check reads once the bytes are given).
    """
    d = _gpushare._plan_vllm(**_inputs("plan_vllm", _VLLM_INPUTS, inputs))
    return VllmPlan(d["kv_cache_memory_bytes"], d["gpu_memory_utilization"], list(d["flags"]))


def plan_sglang(**inputs) -> SglangPlan:
    """--mem-fraction-static f with free_at_start x (1 - f) = what the engine must leave free.

    Inputs: budget, weights, free_at_start (measured under the start-up lock), activation_peak,
    cuda_graphs (or disable_cuda_graph=True), margin; for --max-total-tokens also
    kv_bytes_per_token, or layers, kv_heads, head_dim and dtype_bytes.
    """
    d = _gpushare._plan_sglang(**_inputs("plan_sglang", _SGLANG_INPUTS, inputs))
    return SglangPlan(
        d["mem_fraction_static"], d["kv_budget"], d["max_total_tokens"], list(d["flags"])
    )
