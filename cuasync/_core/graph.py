"""CUDA graphs: capture ops once, replay them with one launch.

>>> graph = step_op.graph()                 # capture, instantiate, upload
>>> out = graph.take_output()               # the captured output (tensors computed by launches)
>>> for token in tokens:
...     graph.update(cuasync.memcpy(input_buf, token))   # on the graph's stream
...     await graph.launch()

Device pointers are baked in at capture, so allocating ops cannot be recorded; inputs
change by copying into pre-allocated tensors with :meth:`CudaGraph.update`. A graph
keeps every tensor it recorded alive for its own lifetime; each launch declares the
recorded reads and writes on its stream, so launches are ordered against other
streams like any op.
"""

from __future__ import annotations

import weakref
from types import TracebackType
from typing import Any, Generic, TypeVar

from .._backends import get_backend
from .._backends.base import CAPTURE_GLOBAL, CAPTURE_RELAXED, CAPTURE_THREAD_LOCAL
from .._exceptions import fresh, report_once
from ..errors import ArgumentError, CaptureError
from .context import LOCAL, LOCK, ExecutionContext, check_not_submitting
from .device import Device, Stream, get_default_device
from .memory import Allocation
from .op import DeviceFuture, DeviceOp, SharedOp, _FnOp, _NativeLaunchBase, _Value, _Zip
from .output import Output
from .process_local import ProcessLocal

__all__ = ["CudaGraph", "GraphScope", "graph_scope"]

T = TypeVar("T")
U = TypeVar("U")

_MODES = {
    "relaxed": CAPTURE_RELAXED,
    "global": CAPTURE_GLOBAL,
    "thread_local": CAPTURE_THREAD_LOCAL,
}


def _mode(mode: str) -> int:
    try:
        return _MODES[mode]
    except (KeyError, TypeError):
        raise ArgumentError(
            f"mode={mode!r} is not a capture mode; use one of {', '.join(_MODES)}"
        ) from None


def _is_graph_node(op: DeviceOp[Any]) -> bool:
    if isinstance(op, (_NativeLaunchBase, _Value)):
        return True
    if isinstance(op, _FnOp):
        return op._graph_node
    if isinstance(op, _Zip):
        return all(_is_graph_node(o) for o in op._ops)
    return False


def _destroy(graph: int, graph_exec: int) -> None:
    backend = get_backend()
    for fn, handle in ((backend.graph_exec_destroy, graph_exec), (backend.graph_destroy, graph)):
        try:
            fn(handle)
        except Exception as exc:  # a faulted context, or shutdown: leak it
            report_once("cuasync.graph", "destroy a graph", exc)


class CudaGraph(ProcessLocal, Generic[T]):
    """An instantiated CUDA graph and everything it recorded; ``T`` is its captured output.

    Build one with :meth:`DeviceOp.graph` or :meth:`CudaGraph.scope`. ``stream`` is the
    stream it was captured on, where its launches run unless executed elsewhere.
    """

    def __init__(
        self,
        stream: Stream,
        graph: int,
        graph_exec: int,
        ctx: ExecutionContext,
        output: T,
    ) -> None:
        self.stream = stream
        self._graph = graph
        self._exec = graph_exec
        self._retained = ctx.retained  # every tensor and buffer the graph's nodes touch
        self._accesses: list[tuple[Allocation, bool]] = list(ctx.accesses or [])
        self._output = output
        self._taken = False
        weakref.finalize(self, _destroy, graph, graph_exec)

    def __repr__(self) -> str:
        return f"<cuasync.CudaGraph on {self.stream!r}, {len(self._accesses)} tensor accesses>"

    @property
    def device(self) -> Device:
        """The device the graph runs on (its stream's)."""
        return self.stream.device

    def take_output(self) -> T | None:
        """The captured op's output, once (later calls return None).

        Its tensors hold what the latest completed launch computed.
        """
        if self._taken:
            return None
        self._taken = True
        return self._output

    def launch(self) -> DeviceOp[T]:
        """An op replaying the graph (on the graph's stream unless executed elsewhere).

        Its output is the captured output.

        >>> await graph.launch()
        """
        return _GraphLaunch(self)

    def update(self, op: DeviceOp[U]) -> DeviceFuture[U]:
        """Enqueue ``op`` now on the graph's stream, ordered before later launches there.

        Only graph nodes are accepted: kernel launches, ``memcpy`` into pre-allocated
        tensors, ``fill``, ``value`` (and ``zip`` of them).
        """
        if not isinstance(op, DeviceOp):
            raise ArgumentError(f"update() needs a cuasync.DeviceOp, got {type(op).__name__}")
        if not _is_graph_node(op):
            raise CaptureError(
                f"update() accepts graph nodes only (kernel launches, cuasync.memcpy into "
                f"pre-allocated tensors, cuasync.fill, cuasync.value), got {op!r}; allocating "
                "or host-side ops would change what the graph's baked-in pointers refer to"
            )
        return op.submit_on(self.stream)

    @staticmethod
    def scope(stream: Stream | None = None, *, mode: str = "relaxed") -> GraphScope:
        """Record ops into a graph: ``with CudaGraph.scope(s) as scope: scope.record(op)``.

        After the block, ``scope.graph`` is the instantiated graph.
        """
        return GraphScope(stream, mode)


class _GraphLaunch(DeviceOp[T]):
    __slots__ = ("_graph",)

    def __init__(self, graph: CudaGraph[T]) -> None:
        super().__init__(graph.device)
        self._graph = graph

    def _pick_stream(self) -> Stream:
        return self._graph.stream

    def _enqueue(self, ctx: ExecutionContext) -> Output[T]:
        graph = self._graph
        for alloc, write in graph._accesses:
            if write:
                ctx.write(alloc, "graph tensor")
            else:
                ctx.read(alloc, "graph tensor")
        if ctx.capturing:
            raise CaptureError("a graph launch cannot be recorded into another graph")
        get_backend().graph_launch(graph._exec, ctx.handle, ctx.error_box)
        ctx.retain(graph)
        return Output.ready(graph._output)

    def __repr__(self) -> str:
        return f"<cuasync.DeviceOp graph launch on {self._graph.stream!r}>"


class GraphScope:
    """Records ops into a CUDA graph (see :meth:`CudaGraph.scope`).

    ``graph`` is None inside the block, and the instantiated :class:`CudaGraph` after it.

    >>> with cuasync.CudaGraph.scope(stream) as scope:
    ...     scope.record(kernel[grid, block](x, y))
    ...     scope.record(cuasync.memcpy(out, y))
    >>> await scope.graph.launch()
    """

    def __init__(self, stream: Stream | None, mode: str) -> None:
        if stream is not None and not isinstance(stream, Stream):
            raise ArgumentError(f"stream must be a cuasync.Stream, got {type(stream).__name__}")
        self._mode = _mode(mode)
        self._stream = stream
        self._ctx: ExecutionContext | None = None
        self._outputs: list[Any] = []
        self.graph: CudaGraph[Any] | None = None

    def __enter__(self) -> GraphScope:
        stream = self._stream or get_default_device().new_stream()
        self._stream = stream
        self._ctx = _begin(stream, self._mode)
        return self

    def record(self, op: DeviceOp[T]) -> T:
        """Record ``op``'s device work into the graph; returns its (stream-ordered) output."""
        if self._ctx is None:
            raise CaptureError("record() is only valid inside 'with CudaGraph.scope(...)'")
        if not isinstance(op, DeviceOp):
            raise ArgumentError(f"record() needs a cuasync.DeviceOp, got {type(op).__name__}")
        value = _record(op, self._ctx)
        self._outputs.append(value)
        return value

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        ctx, self._ctx = self._ctx, None
        assert ctx is not None and self._stream is not None
        graph = _end(self._stream)
        if exc_type is not None:
            get_backend().graph_destroy(graph)
            return
        output = self._outputs[0] if len(self._outputs) == 1 else tuple(self._outputs)
        self.graph = _instantiate(self._stream, graph, ctx, output)


graph_scope = CudaGraph.scope


def _begin(stream: Stream, mode: int) -> ExecutionContext:
    check_not_submitting("graph capture")
    if stream._capturing:
        raise CaptureError(f"stream {stream.handle:#x} is already capturing a graph")
    fault = stream.device.fault
    if fault is not None:
        raise fresh(fault)
    with stream._lock:  # atomic for the background watcher's probes (see Hub.probe)
        get_backend().stream_begin_capture(stream.handle, mode)
        stream._capturing = True
    return ExecutionContext(stream)


def _end(stream: Stream) -> int:
    try:
        return get_backend().stream_end_capture(stream.handle)
    finally:
        stream._capturing = False


def _record(op: DeviceOp[T], ctx: ExecutionContext) -> T:
    if not isinstance(op, SharedOp):
        op._take()
    if op.device is not None and op.device is not ctx.device:
        raise CaptureError(
            f"the op's inputs live on device {op.device.ordinal} but the graph captures on "
            f"device {ctx.device.ordinal}"
        )
    check_not_submitting("record()")
    with LOCK:
        LOCAL.active = True
        try:
            return op._enqueue(ctx).get()
        finally:
            LOCAL.active = False


def _instantiate(stream: Stream, graph: int, ctx: ExecutionContext, output: T) -> CudaGraph[T]:
    backend = get_backend()
    try:
        graph_exec = backend.graph_instantiate(graph)
    except BaseException:
        backend.graph_destroy(graph)
        raise
    backend.graph_upload(graph_exec, stream.handle)
    return CudaGraph(stream, graph, graph_exec, ctx, output)


def capture(op: DeviceOp[T], stream: Stream | None = None, mode: str = "relaxed") -> CudaGraph[T]:
    """Capture ``op`` into an instantiated, uploaded graph (see :meth:`DeviceOp.graph`)."""
    if stream is not None and not isinstance(stream, Stream):
        raise ArgumentError(f"stream must be a cuasync.Stream, got {type(stream).__name__}")
    code = _mode(mode)
    target = stream or (op.device or get_default_device()).new_stream()
    ctx = _begin(target, code)
    try:
        value = _record(op, ctx)
    except BaseException:
        graph = _end(target)
        get_backend().graph_destroy(graph)
        raise
    return _instantiate(target, _end(target), ctx, value)


# DeviceOp.graph(); the op module sits below this one.
DeviceOp._capture = capture
