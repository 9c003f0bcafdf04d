"""A library routine (cuBLAS's GEMM) submitted as a launch op, by the native core.

A :class:`LibraryCall` is a launch op (``LaunchCore``'s fields) whose prepared "kernel"
is a :class:`PreparedCall`: a ``call`` made in place of a kernel launch (:class:`Calls`
makes it of a routine's work and the flag write after it). The native
core (``reactor/python/express.c``, ``BY_CALL``) gives it what it gives a kernel
launch (the checks, the execution lock, the stream's submission number, the access
records of its tensors, a completion slot, the spin and the settling) and, where it
would launch, calls ``call(stream, args, errors, flag_address, flag_value)``: the
routine enqueues its work on ``stream``, then the flag write. A stream the core does
not take runs :meth:`LibraryCall._enqueue` (the generic path): the same call with no
flag (the completion writes its own).

A seen matmul's cuBLAS product is made only where it is submitted at once
(``contract.py`` registers its maker in ``ExpressLaunches.pending_launches``), never on
a capturing stream and never inside a cancel scope: the long way runs those (it guards
a library call where the backend can; a call has no cancel word). A wait
(``cuasync.wait``) is one a user builds: its own stream (``_stream``) is the one waited
for, and its work refuses a capturing one.

>>> op = library_call(GEMM_CALL, device, (a, b, c, alpha, beta, "highest"), (a, b, c),
...                   (False, False, True), c, kind)
>>> await op                                    # -> c, written by the GEMM
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from .._backends import get_backend
from .._backends.base import PreparedKernel
from .._core.context import ExecutionContext
from .._core.device import Device, Stream
from .._core.output import Output, _Ready
from .._core.scheduling import stream_for
from .kernel import _Launch, launch_fields

__all__ = ["Call", "Calls", "LibraryCall", "PreparedCall", "Work", "library_call"]

#: ``call(stream, args, errors, flag_address, flag_value)``: enqueue the work of ``args``
#: on ``stream`` (a handle), then ``write_value32`` of the flag where ``flag_address`` is
#: not 0; ``errors()`` as in ``Backend.launch_kernel``.
Call = Callable[[int, tuple[Any, ...], Callable[[], list[BaseException]], int, int], None]
#: ``work(stream, args, errors)``: a routine's work on ``stream`` (a :class:`Calls`'s).
Work = Callable[[int, tuple[Any, ...], Callable[[], list[BaseException]]], None]


class PreparedCall(PreparedKernel):
    """A library routine on one device, as a launch op's prepared kernel: its ``call``
    (the native base's field, read by the core) is made where a kernel would launch.

    >>> PreparedCall("cublas gemm", 0, gemm_call)
    """

    __slots__ = ()

    def __init__(self, name: str, ordinal: int, call: Call) -> None:
        super().__init__(name, ordinal)
        self.call = call


class Calls:
    """One library routine's :class:`PreparedCall` on each device, each made once; its
    call is the routine's ``work`` on the stream, then the flag write.

    >>> GEMM = Calls("gemm", _gemm)     # _gemm(stream, args, errors)
    >>> GEMM.on(0)                      # the PreparedCall of device 0
    """

    __slots__ = ("_by_ordinal", "name", "work")

    def __init__(self, name: str, work: Work) -> None:
        self.name = name
        self.work = work
        self._by_ordinal: dict[int, PreparedCall] = {}

    def call(
        self,
        stream: int,
        args: tuple[Any, ...],
        errors: Callable[[], list[BaseException]],
        flag_address: int,
        flag_value: int,
    ) -> None:
        """The routine's :data:`Call`: its work, then the flag where there is one."""
        self.work(stream, args, errors)
        if flag_address:
            get_backend().write_value32(stream, flag_address, flag_value)

    def on(self, ordinal: int) -> PreparedCall:
        """The routine's prepared call on device ``ordinal``."""
        found = self._by_ordinal.get(ordinal)
        if found is None:
            found = self._by_ordinal.setdefault(
                ordinal, PreparedCall(self.name, ordinal, self.call)
            )
        return found


class LibraryCall(_Launch):
    """One call of a library routine on its tensors, as a launch op (see the module)."""

    __slots__ = ()

    def _trace_name(self) -> str:
        return str(self._prepared.name)

    def _first_use(self, device: Device) -> Sequence[tuple[Any, Device]]:
        return ()  # (made only once its library is loaded for the device)

    def _pick_stream(self) -> Stream:
        """Its own stream (``_stream``: a wait's, the stream it waits for), else the
        policy's next one."""
        own: Stream | None = self._stream
        return own if own is not None else stream_for(self._device)

    def _enqueue(self, ctx: ExecutionContext) -> Output[Any]:
        for tensor, written in zip(self._tensors, self._writes, strict=True):
            if written:
                ctx.write(tensor._alloc)
            else:
                ctx.read(tensor._alloc)
        self._prepared.call(ctx.stream.handle, self._args, ctx.error_box, 0, 0)
        return _Ready(self._output)

    def __repr__(self) -> str:
        consumed = " (consumed)" if self._consumed else ""
        return f"<cuasync.DeviceOp {self._prepared.name}{consumed}>"


def library_call(
    prepared: PreparedCall,
    device: Device,
    args: tuple[Any, ...],
    tensors: tuple[Any, ...],
    writes: tuple[bool, ...],
    output: Any,
    kind: Hashable,
    op_type: type[LibraryCall] = LibraryCall,
) -> Any:
    """The op calling ``prepared`` on ``args`` (on ``device``), reading ``tensors`` (or
    writing those ``writes`` marks), whose result is ``output``. Not yet taken.

    ``kind`` (hashable) is what the call's duration depends on (a product's sizes): an
    await that parks wakes early by the time learned for ``(prepared, kind)``, as a
    kernel's launch by its kernel and grid (``cuasync._core.wake``); it is kept as the
    op's grid, which a call does not otherwise have. ``op_type``: a subclass of
    :class:`LibraryCall` to make."""
    op = op_type.__new__(op_type)
    # (a call's grid is its kind; it has no block)
    return launch_fields(
        op, device, None, prepared, args, tensors, (), writes, output, kind, (1, 1, 1)
    )
