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
    BadDirectory,
    Notice,
    OverLimit,
    PermissionDenied,
    LoanFigures,
    PlatformIdentity,
    ReclaimCounters,
    ReclaimFigures,
    RemovalResult,
    Reservation,
    Session,
    SessionClosed,
    SessionId,
    SessionInfo,
    StartupHold,
    StartupHolder,
    SystemCallError,
    Table,
    TableBusy,
    TableCorrupt,
    TableIncompatible,
    TableSnapshot,
    Timeout,
    UNLIMITED,
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
    "BadDirectory",
    "Notice",
    "OverLimit",
    "PermissionDenied",
    "LoanFigures",
    "PlatformIdentity",
    "ReclaimCounters",
    "ReclaimFigures",
    "RemovalResult",
    "Reservation",
    "Session",
    "SessionClosed",
    "SessionId",
    "SessionInfo",
    "StartupHold",
    "StartupHolder",
    "SystemCallError",
    "Table",
    "TableBusy",
    "TableCorrupt",
    "TableIncompatible",
    "TableSnapshot",
    "Timeout",
    "UNLIMITED",
    "__version__",
    "errors_by_code",
    "format_bytes",
    "format_duration",
    "format_percent",
    "list_tables",
    "parse_bytes",
    "startup",
    "table_name",
]


class startup:
    """The start-up lock of `key`'s table, held by a session of its own until the engine is ready.

        with gpushare.startup(key, timeout=600, name="vllm-a"):
            engine = start_engine(...)   # profiles free memory with nobody else starting
        # released here: the next engine starts

    Opens a Session with `settings` (name, domain, ...), takes the lock (waiting up to `timeout`,
    None: no end; Timeout names the holder), and on ready() or the end of the block releases it
    and leaves that session. A process that already has a Session for the table should use
    Session.startup() instead, so that its budget's session holds the lock.
    """

    def __init__(self, key, timeout=None, **settings):
        self._session = Session(key, **settings)
        try:
            self._hold = self._session.startup(timeout)
        except BaseException:
            self._session.leave()
            raise

    @property
    def held(self) -> bool:
        return self._hold.held

    @property
    def session(self) -> Session:
        return self._session

    def ready(self) -> None:
        """The engine is ready: release the lock and leave the session (idempotent)."""
        self._hold.ready()
        self._session.leave()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.ready()
        return False
