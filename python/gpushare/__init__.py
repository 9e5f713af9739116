# SPDX-License-Identifier: Apache-2.0
"""gpushare: processes share one GPU by cooperating through a shared-memory table.

    import gpushare
    with gpushare.Session("GPU-8f1e...", name="trainer", memory_limit="4GiB") as s:
        with s.reserve("1GiB", timeout=10):
            with s.kernel():
                ...  # work on the device

The CUDA layer (DeviceSession) is in gpushare.cuda, imported on demand: `import gpushare`
never needs the CUDA runtime. See docs/python.md.
"""

from ._gpushare import (
    MAX_PRIORITY,
    MIN_PRIORITY,
    CudaError,
    Error,
    Eviction,
    ExceedsCapacity,
    GuaranteeUnavailable,
    InvalidArgument,
    InvalidEnvironment,
    KernelGuard,
    NoDevice,
    NoFreeSlot,
    NoSpace,
    NoSuchTable,
    Notice,
    OverLimit,
    PermissionDenied,
    RemovalResult,
    Reservation,
    Session,
    SessionClosed,
    SessionId,
    SessionInfo,
    SystemCallError,
    Table,
    TableBusy,
    TableCorrupt,
    TableIncompatible,
    TableSnapshot,
    Timeout,
    __version__,
    errors_by_code,
    format_bytes,
    format_duration,
    format_percent,
    list_tables,
    parse_bytes,
    table_name,
)

__all__ = [
    "MAX_PRIORITY",
    "MIN_PRIORITY",
    "CudaError",
    "Error",
    "Eviction",
    "ExceedsCapacity",
    "GuaranteeUnavailable",
    "InvalidArgument",
    "InvalidEnvironment",
    "KernelGuard",
    "NoDevice",
    "NoFreeSlot",
    "NoSpace",
    "NoSuchTable",
    "Notice",
    "OverLimit",
    "PermissionDenied",
    "RemovalResult",
    "Reservation",
    "Session",
    "SessionClosed",
    "SessionId",
    "SessionInfo",
    "SystemCallError",
    "Table",
    "TableBusy",
    "TableCorrupt",
    "TableIncompatible",
    "TableSnapshot",
    "Timeout",
    "__version__",
    "errors_by_code",
    "format_bytes",
    "format_duration",
    "format_percent",
    "list_tables",
    "parse_bytes",
    "table_name",
]
