"""First use off the event loop: a kernel's compile and module load on the compile thread.

The first launch of a kernel on a device compiles it (NVRTC, or a read of the disk
cache: :mod:`cuasync.kernel_cache`) and loads its module: hundreds of milliseconds. An
``await`` that finds its kernel not yet prepared for the device hands that to one
dedicated thread and parks the task; the loop runs its other tasks meanwhile, and once
the kernel is ready the await submits as any other. Blocking calls (``sync()``,
``submit()``, ``wait()``) prepare inline, on their own thread, as before.

>>> prepared = yield from prepare_off_loop([(kernel, device)], adapter)

Loading a module may synchronize the device's context (CUDA's lazy loading): the
compile thread then waits for the work in flight on that device, gates included, while
the loop goes on; the await that needs the kernel waits with it. A gate the awaiting
task itself opens only after that await is never opened (on a GPU the await hangs; the
emulator raises ``UsageError`` after its bounded wait, see ``docs/kernels.md``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Generator, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._backends.base import PreparedKernel
    from ._core.device import Device

__all__ = ["Unprepared", "prepare_now", "prepare_off_loop", "stats", "warmup"]

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
#: Preparations handed to the compile thread by an await (for tests and the bench).
_off_loop = 0


def _compile_thread() -> ThreadPoolExecutor:
    """The one compile thread, started at the first off-loop preparation."""
    global _pool
    pool = _pool
    if pool is None:
        with _lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(
                    1, thread_name_prefix="cuasync-compile", initializer=_yield_cpu
                )
            pool = _pool
    return pool


def _yield_cpu() -> None:
    """Lower the compile thread's scheduling priority (Linux: per thread), so that where
    CPUs are scarce the loop thread runs first and NVRTC takes the time left."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):  # not Linux, or refused: the default priority
        pass


def _forget_in_child() -> None:
    """A forked child has no compile thread: it starts its own when it needs one."""
    global _pool, _lock
    _pool = None
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


class Unprepared:
    """What a launch op built inside a running event loop holds for a kernel not yet
    prepared on its device: its ``await`` prepares it on the compile thread; any other
    execution (``sync()``, ``submit()``, a graph capture) calls :meth:`resolve`, inline."""

    __slots__ = ("device", "kernel")

    def __init__(self, kernel: Any, device: Device) -> None:
        self.kernel = kernel
        self.device = device

    @property
    def name(self) -> str:
        """The kernel's name (for NVTX ranges, as a prepared kernel's)."""
        return str(self.kernel.name)

    def resolve(self) -> PreparedKernel:
        """The kernel prepared now, in this thread."""
        prepared: PreparedKernel = self.kernel._prepare(self.device)
        return prepared

    def __repr__(self) -> str:
        return f"<unprepared {self.name} on device {self.device.ordinal}>"


def prepare_now(pairs: Sequence[tuple[Any, Device]]) -> list[PreparedKernel]:
    """Prepare each ``(kernel, device)`` in this thread (the compile thread's job)."""
    return [kernel._prepare(device) for kernel, device in pairs]


def prepare_off_loop(
    pairs: Sequence[tuple[Any, Device]], adapter: Any
) -> Generator[Any, Any, list[PreparedKernel]]:
    """Prepare each ``(kernel, device)`` on the compile thread while the awaiting task
    is parked (``adapter``: its loop's, from ``running_adapter()``); returns what
    ``kernel._prepare(device)`` returned, or raises what it raised (a compile error).

    A cancelled await raises at once; the preparation goes on and is kept (the next
    use finds the kernel ready).
    """
    global _off_loop
    _off_loop += 1
    future: Future[list[PreparedKernel]] = _compile_thread().submit(prepare_now, pairs)
    wake, parked = adapter.park()
    future.add_done_callback(lambda _: wake(None))  # (from the compile thread)
    yield from parked()
    return future.result()


def stats() -> int:
    """How many awaits handed a first use to the compile thread in this process."""
    return _off_loop


class _OffLoop:
    """An awaitable: :func:`prepare_off_loop` on the running loop's adapter."""

    def __init__(self, pairs: list[tuple[Any, Device]]) -> None:
        self.pairs = pairs

    def __await__(self) -> Generator[Any, Any, list[PreparedKernel]]:
        from ._core.loops import running_adapter

        return prepare_off_loop(self.pairs, running_adapter())


def _devices(devices: Any) -> list[Device] | None:
    from ._core.device import Device
    from .errors import ArgumentError

    if devices is None:
        return None
    many = devices if isinstance(devices, (list, tuple)) else [devices]
    if not many or any(isinstance(d, bool) or not isinstance(d, (int, Device)) for d in many):
        raise ArgumentError(
            "devices must be a device (an int or a cuasync.Device), a list or tuple of them, "
            f"or None, got {devices!r}"[:200]
        )
    return [Device(d) for d in many]


def _pairs(things: Iterable[Any], devices: list[Device] | None) -> list[tuple[Any, Device]]:
    """The ``(kernel, device)`` pairs to prepare for ``things`` on ``devices``."""
    from ._core.device import get_default_device
    from ._core.op import DeviceOp
    from ._launch.kernel import _Launchable
    from .errors import ArgumentError

    pairs: list[tuple[Any, Device]] = []
    for i, thing in enumerate(things):
        if isinstance(thing, _Launchable):
            targets = devices or [getattr(thing, "device", None) or get_default_device()]
            pairs += [(thing, d) for d in targets if d.ordinal not in thing._prepared]
        elif isinstance(thing, DeviceOp):
            thing._take()  # an example: consumed, never executed (raises if it was)
            for d in devices or [thing.device or get_default_device()]:
                pairs += thing._first_use(d)
        else:
            raise ArgumentError(
                f"warmup() argument {i} must be a cuasync.Kernel (or a Module kernel) or an "
                f"op (an expression such as x * 2.0 + 1.0, a kernel launch), got "
                f"{type(thing).__name__}"
            )
    unique: dict[tuple[int, int], tuple[Any, Device]] = {}
    for kernel, device in pairs:
        unique.setdefault((id(kernel), device.ordinal), (kernel, device))
    return list(unique.values())


async def warmup(*things: Any, devices: Any = None) -> None:
    """Compile and load, ahead of traffic, the kernels ``things`` would launch, on the
    compile thread while this task waits (the loop goes on): their first awaits then
    compile and load nothing.

    ``things``: :class:`cuasync.Kernel` objects (or a ``Module``'s kernels), and example
    ops, never executed (consumed): an expression (``x * 2.0 + 1.0``, ``cuasync.exp(y)``)
    stands for every expression of its structure, dtypes and layout (contiguous or
    not), whatever its sizes and scalar values. ``devices``: a device or a list of them;
    by default a kernel's default device and an op's own. Compile errors raise here. The
    blocking form for one kernel is :meth:`cuasync.Kernel.compile`; kernels compiled
    before are read from the disk cache (:mod:`cuasync.kernel_cache`).

    >>> await cuasync.warmup(saxpy, x * 2.0 + 1.0, cuasync.exp(x), devices=[0, 1])
    """
    pairs = _pairs(things, _devices(devices))
    if pairs:
        await _OffLoop(pairs)
