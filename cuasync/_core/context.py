"""The execution context of one submission and the execution lock around submissions.

Submission runs synchronously on the calling thread under one process-wide lock. A
thread that is already submitting (a ``then`` closure, a ``map`` that runs during
submission) and tries to execute another op gets :class:`ReentrancyError` instead of
a deadlock or interleaved streams. ``then_unchecked`` releases the lock for its closure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .._native import NATIVE, ContextCore
from ..errors import ArgumentError, CaptureError, InvalidDeviceError, ReentrancyError

if TYPE_CHECKING:
    from .device import Device, Stream
    from .memory import Allocation

#: The execution lock, and the per-thread flag saying the thread holds it. Submission
#: paths take them inline (``with LOCK: LOCAL.active = True ...``): a context manager
#: around them costs more than the rest of a small submission. It is the native
#: module's ``EXEC_LOCK`` (an ``ExecLock``: threading.Lock's methods), which native code
#: takes without a method call (the express core, a DLPack capsule's release).
LOCK: Any = NATIVE.EXEC_LOCK


#: Per-thread submission state: ``active`` while the thread holds :data:`LOCK`,
#: ``traced`` inside a traced submission; thread-locals of the native module
#: (``ThreadFlags``), which the native core sets without an attribute lookup.
LOCAL: Any = NATIVE.ThreadFlags()


def submitting() -> bool:
    """Whether the current thread holds the execution lock."""
    return getattr(LOCAL, "active", False)


def check_not_submitting(what: str) -> None:
    if submitting():
        raise ReentrancyError(
            f"{what} was called while this thread is submitting another op (inside a then() "
            "closure). Return the op from the closure instead, or use then_unchecked()."
        )


@contextmanager
def released() -> Iterator[None]:
    """Temporarily leave the execution lock (``then_unchecked``)."""
    LOCAL.active = False
    LOCK.release()
    try:
        yield
    finally:
        LOCK.acquire()
        LOCAL.active = True


class ExecutionContext(ContextCore):
    """Everything one submission needs: its stream, its sequence number, what it retains.

    ``stream`` and ``device``: where the work goes; ``seq``: the submission's number on
    that stream; ``retained``: objects kept alive until the work completes (see
    :meth:`retain`); ``errors``: errors the device work itself reports (see
    :meth:`error_box`); ``checks``: functions run when the work has completed, before
    the output is realized (see :meth:`check_when_done`); ``capturing``: whether the
    stream is recording a graph, and then
    ``accesses``: the ``(allocation, written)`` pairs recorded for each launch. ``fuse``
    and ``deferred`` are cuasync's own (a last launch fused with the completion flag's
    write): a custom op leaves them alone.
    """

    __slots__ = ()  # its fields are the native base's (``ContextCore``)

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        #: The op whose last launch may be deferred to the completion's flag write (one
        #: driver call for both: see ``Hub.attach``), and that launch once deferred.
        self.fuse: Any = None
        self.deferred: Any = None
        self.device: Device = stream.device
        self.retained: list[Any] = []
        #: Errors raised by this submission's device work itself (an emulated kernel's
        #: numpy twin): the submission fails with the first when it completes.
        self.errors: list[BaseException] | None = None
        self.checks: list[Callable[[], None]] | None = None
        if stream._capturing:
            # Nothing runs while capturing: accesses are recorded, each launch replays them.
            self.capturing = True
            self.accesses: list[tuple[Allocation, bool]] | None = []
            self.seq = stream._submitted
        else:
            self.capturing = False
            self.accesses = None
            stream._submitted += 1
            self.seq = stream._submitted

    @classmethod
    def submitted(
        cls, stream: Stream, seq: int, retained: list[Any], errors: list[BaseException]
    ) -> ExecutionContext:
        """The context of submission ``seq`` on ``stream``, which the express path has
        already enqueued without one (``retained``: what it used; ``errors``: its box)."""
        ctx = cls.__new__(cls)
        ctx.stream = stream
        ctx.fuse = ctx.deferred = None
        ctx.device = stream.device
        ctx.retained = retained
        ctx.errors = errors
        ctx.checks = None
        ctx.capturing = False
        ctx.accesses = None
        ctx.seq = seq
        return ctx

    @property
    def handle(self) -> int:
        """The driver handle of ``stream``, to pass to a foreign library's launch.

        >>> my_library.fill(ctx.write(t.allocation), 0, t.nbytes, stream=ctx.handle)
        """
        return self.stream.handle

    def error_box(self) -> list[BaseException]:
        """The list device work appends its own errors to (see ``errors``)."""
        if self.errors is None:
            self.errors = []
        return self.errors

    def check_when_done(self, check: Callable[[], None]) -> None:
        """Run ``check`` when this submission's work has completed, before its output is
        realized; what it raises fails the submission (and every op sharing it), as an
        error the device work reported. For a result the device computes on the side
        and a host copy brings back (a checked cast's overflow flag)::

            ctx.check_when_done(lambda: _raise_if_set(flag_on_host))
        """
        if self.checks is None:
            self.checks = []
        self.checks.append(check)

    def retain(self, obj: Any) -> None:
        """Keep ``obj`` alive until this submission's completion is observed."""
        self.retained.append(obj)

    def _check_device(self, alloc: Allocation, argument: str) -> None:
        if alloc.device is not self.device:
            raise InvalidDeviceError(
                f"{argument} lives on device {alloc.device.ordinal} but the op runs on a stream "
                f"of device {self.device.ordinal}; copy it there first or schedule the op on "
                f"device {alloc.device.ordinal}"
            )

    def read(self, alloc: Allocation, argument: str = "tensor") -> int:
        """Declare a read of ``alloc`` by the work about to be enqueued; returns its pointer."""
        if alloc.device is not self.device:  # (checked inline: every tensor argument)
            self._check_device(alloc, argument)
        if self.accesses is None:
            alloc.use(self.stream, self.seq, False)
        else:
            self.accesses.append((alloc, False))
        self.retained.append(alloc)
        return alloc.ptr

    def write(self, alloc: Allocation, argument: str = "tensor") -> int:
        """Declare a write of ``alloc``; returns its pointer."""
        if alloc.device is not self.device:
            self._check_device(alloc, argument)
        if alloc.readonly:
            raise ArgumentError(read_only_message(argument))
        if self.accesses is None:
            alloc.use(self.stream, self.seq, True)
        else:
            self.accesses.append((alloc, True))
        self.retained.append(alloc)
        return alloc.ptr

    def reject_in_capture(self, what: str) -> None:
        """Raise :class:`~cuasync.errors.CaptureError` if this submission is recording a graph.

        For a custom op that allocates device memory, which a graph cannot replay:

        >>> ctx.reject_in_capture("my_library.alloc_and_fill")
        """
        if self.capturing:
            raise CaptureError(
                f"{what} allocates device memory, which cannot be recorded into a CUDA graph: "
                "every replay would reuse one allocation baked in at capture. Pre-allocate the "
                "tensor before capture (e.g. `buf = await cuasync.empty(shape)`) and record an "
                "op that writes into it (a kernel launch, cuasync.memcpy, cuasync.fill)"
            )


def no_capture(stream: Stream, what: str) -> None:
    if stream._capturing:
        raise CaptureError(
            f"{what} would wait for the device while stream {stream.handle:#x} is capturing a "
            "graph; record ops into the graph and wait on graph.launch() instead"
        )


def read_only_message(argument: str) -> str:
    """What an op writing read-only memory says (its producer exported it so)."""
    return (
        f"{argument} is read-only memory (its producer exported it read-only, through "
        "DLPack or the CUDA array interface); write into a copy instead: "
        "`copy = await tensor.dup()`"
    )
