"""The ``CUASYNC_*`` environment variables, read once (at first use), in one place.

=============================  ==========================================================
``CUASYNC_BACKEND``            ``auto`` (default), ``cuda`` or ``emulator``
``CUASYNC_EMU_DEVICES``        number of emulated devices (default 1; 1 to 64)
``CUASYNC_EMU_DELAY_US``       delay before each emulated command, microseconds (default 0;
                               at most 10 s)
``CUASYNC_EMU_MEMORY``         emulated device memory per device in bytes (default 1 GiB;
                               1 MiB to 1 TiB)
``CUASYNC_EMU_PEER``           whether emulated devices can access each other's memory:
                               ``on`` (default) or ``off`` (copies between them are staged
                               through pinned host memory, as on GPUs without peer access)
``CUASYNC_EMU_COMPILE``        whether the emulator compiles each ``Kernel``'s CUDA source with
                               NVRTC at its first launch, so device-code errors surface
                               without a GPU: ``auto`` (default: when NVRTC loads), ``on``
                               (NVRTC required) or ``off`` (only the ``emulate=`` twin runs)
``CUASYNC_SPIN_BUDGET_US``     inline spin before suspending an ``await`` (default 20; 0 off;
                               at most 1 s)
``CUASYNC_WAKE``               how a parked await of real-length work is woken: ``timer``
                               (default: its loop's thread wakes itself shortly before the
                               work's learned duration and spins briefly; see
                               ``cuasync/_core/wake.py``) or ``reactor`` (the reactor wakes
                               the loop once it sees the flag)
``CUASYNC_SLOTS``              flag slots in the reactor slab (default 16384; 1 to 2**20)
``CUASYNC_HOST_SYNC``          completion path: ``reactor`` (default), ``callback``
                               (``cuLaunchHostFunc`` for every await), ``callback-spin`` /
                               ``callback-block`` (``cuLaunchHostFunc_v2`` with
                               ``CU_HOST_TASK_SPINWAIT`` / ``CU_HOST_TASK_BLOCKING``; CUDA
                               13.2+, else ``BackendUnavailableError``; the emulator runs
                               them as ``callback``)
``CUASYNC_SUBMITTER``          ``on`` (default): an await of a launch that finds other tasks of
                               its asyncio or uvloop loop ready steps aside, its launch made by
                               the native submitter thread; ``off``: it launches and spins on
                               the loop thread
``CUASYNC_NATIVE``             ``on`` (default): launches, their awaits and small ``from_host``
                               calls take the native module's fast path where it is built;
                               ``off``: every op takes the generic Python path (completion
                               still uses the native reactor and flag slots)
``CUASYNC_STALE_US``           no-progress time before a slot's stream is probed (default 2000;
                               100 us to 60 s)
``CUASYNC_PINNED_IDLE_S``      seconds a pinned host block may stay idle in a pool before the
                               background watcher frees it (default 60; at most a day, 86400;
                               ``off``: never)
``CUASYNC_STAGING_THREADS``    threads that copy large pageable arrays into and out of pinned
                               staging memory (``from_host``, ``download_into``) while the
                               event loop goes on (default: half the CPUs the process may
                               use, 1 to 8; 0: none, the calling thread copies everything;
                               at most 64)
``CUASYNC_NVTX``               ``1`` turns NVTX ranges on (read at import; see
                               :func:`cuasync.trace`)
``CUASYNC_KERNEL_CACHE``       the on-disk cache of compiled kernels
                               (:mod:`cuasync.kernel_cache`): ``on`` (default:
                               ``$XDG_CACHE_HOME/cuasync/kernels``, else
                               ``~/.cache/cuasync/kernels``), ``off``, or a directory
``CUASYNC_GUARDS``             guarded regions (library calls, memsets and device copies a
                               cancelled scope skips; :mod:`cuasync._launch.guard`): ``auto``
                               (default: the backend's choice: every kind, on the emulator
                               and on CUDA), ``on``, ``off``, or ``memsets`` (memsets
                               only)
``CUASYNC_PEER``               copies between devices: ``auto`` (default: device to device
                               where the two can access each other's memory) or ``off``
                               (always staged through pinned host memory, as where peer
                               access is broken or slow)
=============================  ==========================================================

A numeric value outside its range raises ``ArgumentError`` at first use, naming the
variable and the range (:data:`RANGES`).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, cast

from ._native import PROCESS
from .errors import ArgumentError

_BACKENDS = ("auto", "cuda", "emulator")
_HOST_SYNC = ("reactor", "callback", "callback-spin", "callback-block")
_EMU_COMPILE = ("auto", "on", "off")
_ON_OFF = ("on", "off")
_PEER = ("auto", "off")
_WAKE = ("timer", "reactor")
_GUARDS = ("auto", "on", "off", "memsets")


#: The numeric variables' ranges, both ends included: a value outside raises
#: ``ArgumentError`` at first use naming the variable and its range (a huge value would
#: otherwise overflow deep inside, build enormous tables or stop an emulator thread).
RANGES: dict[str, tuple[int, int]] = {
    "CUASYNC_EMU_DEVICES": (1, 64),
    "CUASYNC_EMU_DELAY_US": (0, 10_000_000),  # 10 s
    "CUASYNC_EMU_MEMORY": (1 << 20, 1 << 40),  # 1 MiB to 1 TiB (a device's address window)
    "CUASYNC_SPIN_BUDGET_US": (0, 1_000_000),  # 1 s
    "CUASYNC_SLOTS": (1, 1 << 20),
    "CUASYNC_STALE_US": (100, 60_000_000),  # 60 s
    "CUASYNC_PINNED_IDLE_S": (0, 86_400),  # a day (``off``: never)
    "CUASYNC_STAGING_THREADS": (0, 64),
}


def number(name: str, default: float, *, kind: type[float] = int, off: bool = False) -> Any:
    """The numeric variable ``name`` as ``kind``, checked against ``RANGES[name]``.

    Unset or empty: ``default``; with ``off``, the value ``off`` reads as None. Every
    numeric ``CUASYNC_*`` variable is read here.

    >>> number("CUASYNC_SLOTS", 16384)   # CUASYNC_SLOTS=abc raises ArgumentError
    16384
    """
    low, high = RANGES[name]
    raw = os.environ.get(name, "").strip()
    if raw == "":
        return default
    if off and raw.lower() == "off":
        return None
    what = "an integer" if kind is int else "a number"
    expected = f"{name} must be {what} from {low} to {high}{' or off' if off else ''}"
    try:
        value = kind(raw)
    except (ValueError, OverflowError):
        value = None
    if value is None or not low <= value <= high:  # (NaN is in no range)
        raise ArgumentError(f"{expected}, got {raw!r}; unset it for the default, {default}")
    return value


def _default_staging_threads() -> int:
    """Half the CPUs this process may run on, 1 to 8: a host memcpy saturates memory
    bandwidth with a few threads, and the rest of the machine keeps its cores."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 2
    return max(1, min(8, cpus // 2))


def _choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = os.environ.get(name, default).strip().lower() or default
    if raw not in choices:
        raise ArgumentError(f"{name} must be one of {', '.join(choices)}; got {raw!r}")
    return raw


@dataclass(frozen=True)
class Config:
    backend: str
    emu_devices: int
    emu_delay_us: int
    emu_memory: int
    emu_peer: bool
    emu_compile: str
    spin_budget_us: int
    wake: str
    slots: int
    host_sync: str
    submitter: bool
    native: bool
    stale_us: int
    peer: str
    pinned_idle_s: float | None
    staging_threads: int
    kernel_cache: str
    guards: str


def _read() -> Config:
    return Config(
        backend=_choice("CUASYNC_BACKEND", "auto", _BACKENDS),
        emu_devices=number("CUASYNC_EMU_DEVICES", 1),
        emu_delay_us=number("CUASYNC_EMU_DELAY_US", 0),
        emu_memory=number("CUASYNC_EMU_MEMORY", 1 << 30),
        emu_peer=_choice("CUASYNC_EMU_PEER", "on", _ON_OFF) == "on",
        emu_compile=_choice("CUASYNC_EMU_COMPILE", "auto", _EMU_COMPILE),
        spin_budget_us=number("CUASYNC_SPIN_BUDGET_US", 20),
        wake=_choice("CUASYNC_WAKE", "timer", _WAKE),
        slots=number("CUASYNC_SLOTS", 16384),
        host_sync=_choice("CUASYNC_HOST_SYNC", "reactor", _HOST_SYNC),
        submitter=_choice("CUASYNC_SUBMITTER", "on", _ON_OFF) == "on",
        native=_choice("CUASYNC_NATIVE", "on", _ON_OFF) == "on",
        stale_us=number("CUASYNC_STALE_US", 2000),
        peer=_choice("CUASYNC_PEER", "auto", _PEER),
        pinned_idle_s=number("CUASYNC_PINNED_IDLE_S", 60.0, kind=float, off=True),
        staging_threads=number("CUASYNC_STAGING_THREADS", _default_staging_threads()),
        kernel_cache=os.environ.get("CUASYNC_KERNEL_CACHE", "").strip(),
        guards=_choice("CUASYNC_GUARDS", "auto", _GUARDS),
    )


class _ReadOnFirstUse:
    """``CONFIG``: the variables are read at first use, not at import.

    So a test runner (or the pytest plugin, which pytest imports early) can set
    ``CUASYNC_*`` variables after ``import cuasync`` and before cuasync does anything.
    """

    _config: Config | None = None

    def __getattr__(self, name: str) -> Any:
        config = self._config
        if config is None:
            config = _ReadOnFirstUse._config = _read()
        return getattr(config, name)


CONFIG: Config = cast(Config, _ReadOnFirstUse())


def config() -> Config:
    """The variables as read (reading them now if nothing has yet)."""
    if isinstance(CONFIG, Config):  # replaced, e.g. by a test
        return CONFIG
    return CONFIG._config or _read_once()


def _read_once() -> Config:
    _ReadOnFirstUse._config = _ReadOnFirstUse._config or _read()
    return _ReadOnFirstUse._config


def _read_debug_origins() -> bool:
    # Like asyncio's coroutine origin tracking: on under -X dev or PYTHONASYNCIODEBUG.
    return bool(sys.flags.dev_mode or os.environ.get("PYTHONASYNCIODEBUG"))


def debug_origins() -> bool:
    """Whether ops record where they were built (for the "never executed" warning): read
    once, and kept in ``PROCESS.debug_origins``, which the native ``from_host`` builder
    reads too (it leaves ops that record their origin to Python)."""
    on = PROCESS.debug_origins
    if on is None:
        on = PROCESS.debug_origins = _read_debug_origins()
    return on
