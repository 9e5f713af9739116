# SPDX-License-Identifier: Apache-2.0
# Type stubs of gpushare.cuda (the extension gpushare._gpushare_cuda).
from datetime import timedelta
from types import TracebackType
from typing import Dict, List, Literal, Optional, Type, Union

from . import (
    Amount,
    Bytes,
    Duration,
    Fraction,
    Handover,
    Notice,
    Priority,
    Reservation,
    Session,
    SessionId,
    SessionInfo,
    TableMode,
    TableSnapshot,
    TimeoutArg,
)

class DeviceInfo:
    @property
    def ordinal(self) -> int: ...
    @property
    def uuid(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def pci_bus_id(self) -> str: ...
    @property
    def total_memory(self) -> int: ...
    @property
    def compute_major(self) -> int: ...
    @property
    def compute_minor(self) -> int: ...

class DeviceKernelGuard:
    @property
    def active(self) -> bool: ...
    @property
    def stream(self) -> int: ...
    def finish(self) -> None: ...
    def __enter__(self) -> "DeviceKernelGuard": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...

class DeviceSession:
    def __init__(
        self,
        device: int = -1,
        *,
        name: Optional[str] = None,
        priority: Optional[Priority] = None,
        share: Optional[Union[int, str]] = None,
        memory_limit: Optional[Amount] = None,
        memory_guarantee: Optional[Amount] = None,
        compute_limit: Optional[Fraction] = None,
        compute_guarantee: Optional[Fraction] = None,
        pause_hold: Optional[Union[float, str]] = None,
        quantum: Optional[Duration] = None,
        handover: Optional[Handover] = None,
        max_guard: Optional[Duration] = None,
        reclaim_deadline: Optional[Duration] = None,
        domain: Optional[str] = None,
        table_mode: Optional[TableMode] = None,
        directory: Optional[str] = None,
        group: Optional[str] = None,
        group_memory_limit: Optional[Amount] = None,
        group_share: Optional[Union[int, str]] = None,
        capacity: Optional[Bytes] = None,
        open_timeout: TimeoutArg = None,
        pod: Optional[str] = None,
        pod_namespace: Optional[str] = None,
        container: Optional[str] = None,
        slurm_job_id: Optional[int] = None,
        slurm_step_id: Optional[Union[int, Literal["batch", "extern", "interactive"]]] = None,
        slurm_array_job_id: Optional[int] = None,
        slurm_array_task_id: Optional[int] = None,
        headroom: Optional[Amount] = None,
        context_overhead: Optional[Bytes] = None,
        allocation_timeout: TimeoutArg = None,
        drain_timeout: TimeoutArg = None,
        max_in_flight: Optional[Duration] = None,
        max_in_flight_lower: Optional[Duration] = None,
        drain: Optional[Literal["stream", "device"]] = None,
        guard_timing: Optional[Literal["batched", "each"]] = None,
    ) -> None: ...
    @property
    def host(self) -> Session: ...
    @property
    def device(self) -> DeviceInfo: ...
    def reserve(
        self, bytes: Bytes, timeout: TimeoutArg = None, reclaimable: bool = False
    ) -> Reservation: ...
    def try_reserve(self, bytes: Bytes, reclaimable: bool = False) -> Optional[Reservation]: ...
    def kernel(self, stream: int = 0, timeout: TimeoutArg = None) -> DeviceKernelGuard: ...
    def malloc(self, bytes: Bytes) -> int: ...
    def free(self, ptr: int) -> None: ...
    def yield_(self) -> None: ...
    def linger(self, duration: Duration) -> None: ...
    def give_way_due(self) -> bool: ...
    def synchronize(self) -> None: ...
    @property
    def stream_priority(self) -> int: ...
    def statistics(self) -> Dict[str, int]: ...
    def info(self) -> SessionInfo: ...
    def snapshot(self) -> TableSnapshot: ...
    def configure(
        self,
        *,
        priority: Optional[Priority] = None,
        share: Optional[Union[int, str]] = None,
        memory_limit: Optional[Amount] = None,
        memory_guarantee: Optional[Amount] = None,
        compute_limit: Optional[Fraction] = None,
        compute_guarantee: Optional[Fraction] = None,
        pause_hold: Optional[Union[float, str]] = None,
        quantum: Optional[Duration] = None,
        handover: Optional[Handover] = None,
        max_guard: Optional[Duration] = None,
    ) -> None: ...
    def set_external_usage(self, bytes: Bytes) -> None: ...
    def notices(self) -> List[Notice]: ...
    def leave(self) -> None: ...
    @property
    def context_overhead(self) -> int: ...
    @property
    def overhead_method(self) -> str: ...
    @property
    def joined(self) -> bool: ...
    @property
    def id(self) -> SessionId: ...
    @property
    def name(self) -> str: ...
    @property
    def table_name(self) -> str: ...
    def __enter__(self) -> "DeviceSession": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...
