# SPDX-License-Identifier: Apache-2.0
from dataclasses import dataclass
from typing import Any, List, Optional, Union

Size = Union[int, str]

@dataclass(frozen=True)
class VllmPlan:
    kv_cache_memory_bytes: int
    gpu_memory_utilization: Optional[float]
    flags: List[str]

@dataclass(frozen=True)
class SglangPlan:
    mem_fraction_static: float
    kv_budget: int
    max_total_tokens: Optional[int]
    flags: List[str]

def budget_of(session: Any) -> int: ...
def plan_vllm(
    *,
    budget: Union[Size, Any] = ...,
    weights: Size = ...,
    activation_peak: Size = ...,
    cuda_graphs: Size = ...,
    enforce_eager: bool = ...,
    margin: Size = ...,
    device_total: Size = ...,
) -> VllmPlan: ...
def plan_sglang(
    *,
    budget: Union[Size, Any] = ...,
    weights: Size = ...,
    free_at_start: Size = ...,
    activation_peak: Size = ...,
    cuda_graphs: Size = ...,
    disable_cuda_graph: bool = ...,
    margin: Size = ...,
    kv_bytes_per_token: Size = ...,
    layers: int = ...,
    kv_heads: int = ...,
    head_dim: int = ...,
    dtype_bytes: int = ...,
) -> SglangPlan: ...
