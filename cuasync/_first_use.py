"""First use off the event loop: a kernel's compile and module load on the compile thread.

The first launch of a kernel on a device compiles it (NVRTC, or a read of the disk
cache: :mod:`cuasync.kernel_cache`) and loads its module: hundreds of milliseconds. An
``await`` that finds its kernel not yet prepared for the device hands that to one
dedicated thread and parks the task; the loop runs its other tasks meanwhile, and once
the kernel is ready the await submits as any other. Blocking calls (``sync()``,
``submit()``, ``wait()``) prepare inline, on their own thread, as before.

An op names the kernels it would launch before it is submitted (``DeviceOp._first_use``;
cuasync's ops give ``device_op`` a ``first_use``, most of them :func:`launching`): its
``await`` prepares those not yet prepared here, all before any of its work is enqueued.

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
from collections.abc import Callable, Generator, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from ._backends import get_backend
from ._exceptions import fresh

if TYPE_CHECKING:
    from ._backends.base import PreparedKernel
    from ._core.device import Device

__all__ = [
    "CUBLAS", "Library", "Unprepared", "launching", "prepare_now", "prepare_off_loop",
    "prepare_then", "stats", "unprepared",
]  # fmt: skip

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
#: Preparations handed to the compile thread by an await (for tests and the bench).
_off_loop = 0
#: The preparations queued or running on the compile thread, by their pairs' kernels
#: and devices (the future keeps them alive, so an ``id`` is not reused meanwhile).
_in_flight: dict[tuple[tuple[int, int], ...], Future[list[PreparedKernel]]] = {}
_in_flight_lock = threading.Lock()


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
    global _pool, _lock, _in_flight_lock
    _pool = None
    _lock = threading.Lock()
    _in_flight.clear()
    _in_flight_lock = threading.Lock()


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


class Library:
    """A library an op calls, named in its first use as a kernel is: loading it and
    making its handle for a device (``prepare``, the backend's) takes hundreds of
    milliseconds once per process, which a first ``await`` hands to the compile thread.

    >>> unprepared([copy_kernel(dtype), CUBLAS], device)   # a first matmul's first use
    """

    __slots__ = ("_prepare_on", "_prepared", "name")

    def __init__(self, name: str, prepare: Callable[[int], None]) -> None:
        self.name = name
        self._prepare_on = prepare
        #: The ordinals it is ready on (what :func:`unprepared` reads of a kernel).
        self._prepared: dict[int, bool] = {}

    def _prepare(self, device: Device) -> bool:
        if device.ordinal not in self._prepared:
            self._prepare_on(device.ordinal)
            self._prepared[device.ordinal] = True
        return True

    def prepared_on(self, ordinal: int) -> None:
        """Record that it is ready on device ``ordinal``: a call made there outside an
        ``await`` (``sync()``, ``submit()``) loaded it inline."""
        self._prepared[ordinal] = True

    def __repr__(self) -> str:
        return f"<library {self.name}>"


#: cuBLAS (every matrix product but the integer kernels'): its libraries and the
#: device's handle (:meth:`Backend.prepare_gemm`).
CUBLAS = Library("cuBLAS", lambda ordinal: get_backend().prepare_gemm(ordinal))


def unprepared(kernels: Iterable[Any], device: Device) -> tuple[tuple[Any, Device], ...]:
    """The ``(kernel, device)`` pairs of ``kernels`` not yet prepared for ``device``
    (each once): what an op launching them declares as its first use.

    >>> unprepared([builtin.kernel("fill", "4")], device)
    ((<cuasync.Kernel ca_fill<unsigned int>>, <cuasync.Device 0>),)
    """
    seen: dict[int, tuple[Any, Device]] = {}
    for kernel in kernels:
        if device.ordinal not in kernel._prepared:
            seen.setdefault(id(kernel), (kernel, device))
    return tuple(seen.values())


def launching(*kernels: Any) -> Callable[[Device], tuple[tuple[Any, Device], ...]]:
    """The ``first_use`` of an op whose kernels are known when it is built (given to
    ``device_op``): ``kernels`` not yet prepared for the device it runs on.

    >>> device_op(enqueue, device, "take", first_use=launching(take_kernel(4, "int64")))
    """
    return lambda device: unprepared(kernels, device)


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
    future = _on_compile_thread(pairs)
    wake, parked = adapter.park()
    future.add_done_callback(lambda _: wake(None))  # (from the compile thread)
    yield from parked()
    return _outcome(future)


def prepare_then(
    pairs: Sequence[tuple[Any, Device]], done: Callable[[BaseException | None], None]
) -> None:
    """Prepare each ``(kernel, device)`` on the compile thread, then call ``done(error)``
    there (None: prepared): an op watched as an asyncio future (``op_future``), which has
    no task to park.

    >>> prepare_then([(kernel, device)], lambda error: adapter.call_from_thread(then, error))
    """
    _on_compile_thread(pairs).add_done_callback(lambda f: done(_error(f)))


def _on_compile_thread(pairs: Sequence[tuple[Any, Device]]) -> Future[list[PreparedKernel]]:
    """:func:`prepare_now` of ``pairs`` submitted to the compile thread (counted in
    :func:`stats`), or the preparation of the same pairs already queued or running
    there: awaits of one new kernel share one compile, and one compile error (a kernel
    that fails is compiled again only by an await that comes after the failure)."""
    global _off_loop
    key = tuple((id(kernel), device.ordinal) for kernel, device in pairs)
    pool = _compile_thread()
    with _in_flight_lock:
        _off_loop += 1
        future = _in_flight.get(key)
        if future is not None:
            return future
        future = _in_flight[key] = pool.submit(prepare_now, pairs)
    future.add_done_callback(lambda f: _landed(key, f))  # (at once if done already)
    return future


def _landed(key: tuple[tuple[int, int], ...], future: Future[Any]) -> None:
    with _in_flight_lock:
        if _in_flight.get(key) is future:
            del _in_flight[key]


def _error(future: Future[Any]) -> BaseException | None:
    """The future's exception, a new one for each awaiter of a shared preparation,
    chained to it (one exception object raised by several tasks would gather all their
    tracebacks; the compile thread's stays on the original)."""
    error = future.exception()
    return None if error is None else fresh(error)


def _outcome(future: Future[list[PreparedKernel]]) -> list[PreparedKernel]:
    error = _error(future)
    if error is not None:
        raise error
    return future.result()


def stats() -> int:
    """How many awaits handed a first use to the compile thread in this process."""
    return _off_loop
