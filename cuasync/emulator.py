"""Knobs of the emulator backend, for tests and demos without a GPU.

>>> import cuasync.emulator as emu
>>> emu.set_delay(2000)          # every emulated command now takes >= 2 ms
>>> with emu.paused():           # hold all stream workers: work stays in flight
...     fut = op.submit()
>>> emu.inject_fault(device=0)   # the device's context becomes sticky-faulted
>>> with emu.peer_access(False):  # devices that cannot reach each other: copies are staged
...     y = await x.to(1)
>>> mod = emu.load_module({"scale": scale_twin})   # a "CUmodule" for Module.from_handle
>>> ctx = emu.create_context(0)  # another library's context, current here (cuCtxCreate)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ._backends import get_backend
from ._backends.emulator import EmulatorBackend
from ._config import RANGES
from .errors import ArgumentError, BackendUnavailableError

__all__ = [
    "active",
    "commands_enqueued",
    "create_context",
    "current_context",
    "delay",
    "destroy_context",
    "get_delay",
    "inject_fault",
    "load_module",
    "module_function",
    "pageable_copies",
    "paused",
    "peer_access",
    "peer_access_enabled",
    "peer_copies",
    "primary_context",
    "set_current_context",
    "set_delay",
    "set_peer_access",
    "unload_module",
]


def active() -> bool:
    """Whether this process runs on the emulator backend."""
    return isinstance(get_backend(), EmulatorBackend)


def _emulator() -> EmulatorBackend:
    backend = get_backend()
    if not isinstance(backend, EmulatorBackend):
        raise BackendUnavailableError(
            f"cuasync.emulator knobs need the emulator backend, but this process uses "
            f"{backend.name!r}; run with CUASYNC_BACKEND=emulator"
        )
    return backend


def set_delay(us: int) -> None:
    """Delay every emulated command by ``us`` microseconds (0 turns it off; at most
    10 s, as ``CUASYNC_EMU_DELAY_US``)."""
    low, high = RANGES["CUASYNC_EMU_DELAY_US"]
    if not isinstance(us, int) or isinstance(us, bool) or not low <= us <= high:
        raise ArgumentError(f"us must be an int from {low} to {high} (10 s), got {us!r}")
    _emulator().delay_us = us


def get_delay() -> int:
    """The current delay before each emulated command, in microseconds."""
    return _emulator().delay_us


@contextmanager
def delay(us: int) -> Iterator[None]:
    """Temporarily delay every emulated command by ``us`` microseconds."""
    previous = get_delay()
    set_delay(us)
    try:
        yield
    finally:
        set_delay(previous)


@contextmanager
def paused() -> Iterator[None]:
    """Hold every stream worker before its next command until the block exits."""
    backend = _emulator()
    backend.pause()
    try:
        yield
    finally:
        backend.resume()


def inject_fault(device: int = 0, code: int = 715) -> None:
    """Make ``device``'s context sticky-faulted, as a trapped kernel does on a GPU.

    Queued work stops, flags stop landing, queries and later calls raise
    :class:`cuasync.errors.DeviceFaultError` (``CUDA_ERROR_ILLEGAL_INSTRUCTION`` by default).
    """
    _emulator().inject_fault(device, code)


def commands_enqueued() -> int:
    """How many commands (copies, kernels, flag writes, ...) have been enqueued so far."""
    return _emulator().counts.enqueued


def set_peer_access(capable: bool) -> None:
    """Model devices that can (True, the default) or cannot access each other's memory.

    Without peer access, copies between devices are staged through pinned host memory;
    ``CUASYNC_EMU_PEER=off`` sets the same at start.
    """
    if not isinstance(capable, bool):
        raise ValueError(f"capable must be a bool, got {capable!r}")
    _emulator().set_peer_access(capable)


@contextmanager
def peer_access(capable: bool) -> Iterator[None]:
    """Temporarily model devices that can (or cannot) access each other's memory."""
    backend = _emulator()
    previous = backend.peer_capable
    set_peer_access(capable)
    try:
        yield
    finally:
        backend.set_peer_access(previous)


def peer_access_enabled(device: int, peer: int) -> bool:
    """Whether ``device`` has been given access to ``peer``'s memory (once per direction)."""
    return _emulator().peer_access_enabled(device, peer)


def peer_copies() -> int:
    """How many direct device-to-device copies between two devices were enqueued so far."""
    return _emulator().counts.peer_copies


def pageable_copies() -> int:
    """How many copies between the device and host memory that is not pinned (not from
    a pinned pool or ``PinnedHostBuffer``) were enqueued so far; cuasync issues none.

    >>> before = emu.pageable_copies(); await cuasync.from_host(a)
    >>> emu.pageable_copies() == before
    True
    """
    return _emulator().counts.pageable_copies


def load_module(twins: Mapping[str, Callable[..., Any]], device: int = 0) -> int:
    """Issue a module handle whose functions are numpy ``twins`` by name, as a library
    that loaded a cubin would hold a ``CUmodule``: what :meth:`cuasync.Module.from_handle`
    borrows on the emulator. Unload it with :func:`unload_module`.

    >>> h = emu.load_module({"scale": lambda x, a, n: x.__imul__(a)})
    >>> k = cuasync.Module.from_handle(h).kernel("scale", "float* x, float a, int n")
    """
    if not twins or not all(isinstance(n, str) and callable(f) for n, f in twins.items()):
        raise ValueError("twins must map function names to numpy functions (a non-empty dict)")
    return _emulator().load_twins(device, dict(twins))


def module_function(module: int, name: str) -> int:
    """The function handle of ``name`` in a :func:`load_module` module (``cuModuleGetFunction``),
    for :meth:`cuasync.Module.kernel_from_handle`.

    >>> fn = emu.module_function(h, "scale")
    """
    return _emulator().module_function(module, name)


def unload_module(module: int) -> None:
    """Unload a :func:`load_module` module, as its owner would (``cuModuleUnload``);
    raises :class:`cuasync.errors.DriverError` for a handle already unloaded.

    >>> emu.unload_module(h)
    """
    _emulator().module_unload(module)


# -- the thread's current context (a model of the driver's) ------------------------------
def create_context(device: int = 0) -> int:
    """A new context on ``device``, made current on this thread, as another library's
    ``cuCtxCreate`` would: cuasync's calls leave it current (they run in the device's
    primary context and put the caller's back). Destroy it with :func:`destroy_context`.

    >>> ctx = emu.create_context(0)
    >>> await cuasync.zeros((4,)); assert emu.current_context() == ctx
    """
    return _emulator().create_context(device)


def current_context() -> int:
    """The context current on this thread (``cuCtxGetCurrent``); 0: none."""
    return _emulator().current_context()


def set_current_context(ctx: int) -> None:
    """Make ``ctx`` current on this thread (``cuCtxSetCurrent``); 0: none."""
    _emulator().set_current_context(ctx)


def destroy_context(ctx: int) -> None:
    """Destroy a :func:`create_context` context (``cuCtxDestroy``)."""
    _emulator().destroy_context(ctx)


def primary_context(device: int = 0) -> int:
    """``device``'s primary context, the one cuasync uses (``cuDevicePrimaryCtxRetain``)."""
    return _emulator().primary_context(device)
