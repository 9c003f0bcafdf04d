"""Conditional graph nodes (CUDA 12.4+): work on a stream that runs only if a cancel
word is unset when it starts, for library calls and copies that cannot check the word.

A guarded region is one executable graph, launched on the stream in the region's place:
a guard kernel (``cuasync/kernels/guard.cu``) reads the word and sets the condition of
an IF node, whose body holds what the region enqueued, captured into it with
``cuStreamBeginCaptureToGraph``. The graph is made, instantiated and launched per
region; its executable is destroyed once it has run (destroying one in flight waits for
it). The calls go through ``cuGetProcAddress`` addresses with ``ctypes``: the node
parameters are a tagged union that the Python bindings do not spell the same way in
every version.

>>> with ConditionalGraph(entry_points, context, stream, guard_function, word):
...     ...   # enqueue on `stream`: captured into the body
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["ConditionalGraph", "ENTRY_POINTS"]

#: The driver functions a guarded region calls (by name: ``cuGetProcAddress`` resolves
#: each at the driver's own version, the newest ABI: ``cuGraphAddNode`` is ``_v2``).
ENTRY_POINTS = (
    "cuGraphCreate",
    "cuGraphConditionalHandleCreate",
    "cuGraphAddNode",
    "cuGraphGetNodes",
    "cuStreamBeginCaptureToGraph",
    "cuStreamEndCapture",
    "cuGraphInstantiateWithFlags",
    "cuGraphLaunch",
    "cuGraphExecDestroy",
    "cuGraphDestroy",
    "cuLaunchKernel",
)

_u64, _u32, _p = ctypes.c_uint64, ctypes.c_uint32, ctypes.c_void_p
_CU = ctypes.c_int  # CUresult
_CAPTURE_RELAXED = 2  # CU_STREAM_CAPTURE_MODE_RELAXED
_NODE_CONDITIONAL = 13  # CU_GRAPH_NODE_TYPE_CONDITIONAL
_COND_IF = 0  # CU_GRAPH_COND_TYPE_IF


class _ConditionalParams(ctypes.Structure):
    _fields_ = [  # CUDA_CONDITIONAL_NODE_PARAMS
        ("handle", _u64),
        ("type", ctypes.c_int),
        ("size", _u32),
        ("phGraph_out", ctypes.POINTER(_p)),
        ("ctx", _p),
    ]


class _NodeParams(ctypes.Structure):
    _fields_ = [  # CUgraphNodeParams: a tagged union of 256 bytes
        ("type", ctypes.c_int),
        ("reserved0", ctypes.c_int * 3),
        ("conditional", _ConditionalParams),
        ("rest", ctypes.c_byte * (232 - ctypes.sizeof(_ConditionalParams))),
        ("reserved2", ctypes.c_longlong),
    ]


assert ctypes.sizeof(_NodeParams) == 256

_PROTOTYPES: dict[str, tuple[Any, ...]] = {
    "cuGraphCreate": (ctypes.POINTER(_p), _u32),
    "cuGraphConditionalHandleCreate": (ctypes.POINTER(_u64), _p, _p, _u32, _u32),
    "cuGraphAddNode": (
        ctypes.POINTER(_p),
        _p,
        ctypes.POINTER(_p),
        _p,
        ctypes.c_size_t,
        ctypes.POINTER(_NodeParams),
    ),
    "cuGraphGetNodes": (_p, ctypes.POINTER(_p), ctypes.POINTER(ctypes.c_size_t)),
    "cuStreamBeginCaptureToGraph": (_p, _p, _p, _p, ctypes.c_size_t, ctypes.c_int),
    "cuStreamEndCapture": (_p, ctypes.POINTER(_p)),
    "cuGraphInstantiateWithFlags": (ctypes.POINTER(_p), _p, ctypes.c_ulonglong),
    "cuGraphLaunch": (_p, _p),
    "cuGraphExecDestroy": (_p,),
    "cuGraphDestroy": (_p,),
    "cuLaunchKernel": (_p, *(ctypes.c_uint,) * 7, _p, ctypes.POINTER(_p), _p),
}


class Driver:
    """The entry points of :data:`ENTRY_POINTS` as ``ctypes`` functions; ``check(err,
    call)`` raises the backend's error for a failed call."""

    def __init__(self, addresses: Mapping[str, int], check: Callable[[int, str], None]) -> None:
        missing = [name for name in ENTRY_POINTS if name not in addresses]
        if missing:
            raise RuntimeError(f"the driver lacks {', '.join(missing)} (CUDA 12.4+)")
        self.check = check
        self.fn = {
            name: ctypes.CFUNCTYPE(_CU, *_PROTOTYPES[name])(addresses[name])
            for name in ENTRY_POINTS
        }

    def __call__(self, name: str, *args: Any) -> None:
        self.check(self.fn[name](*args), name)


class ConditionalGraph:
    """One guarded region on ``stream`` (a context manager; the stream's context current
    for its driver calls, which the backend sees to): entering builds the graph and
    starts capturing the stream into the IF node's body; leaving ends the capture and,
    unless the block raised, launches the graph on the stream."""

    def __init__(self, driver: Driver, context: int, stream: int, guard: int, word: int) -> None:
        self.driver, self.context, self.stream = driver, context, stream
        self.guard, self.word = guard, word
        self.graph = _p()
        #: The executable graph launched, for the caller to destroy once it has run
        #: (``cuGraphExecDestroy`` of one in flight waits for it: on an H200 it hung
        #: behind a gate).
        self.launched: Any = None

    def __enter__(self) -> None:
        d = self.driver
        d("cuGraphCreate", ctypes.byref(self.graph), 0)
        try:
            handle = _u64()
            d(
                "cuGraphConditionalHandleCreate",
                ctypes.byref(handle),
                self.graph,
                self.context,
                0,
                0,
            )
            guard_node = self._captured_guard(handle.value)
            body = self._if_node(handle.value, guard_node)
            d("cuStreamBeginCaptureToGraph", self.stream, body, None, None, 0, _CAPTURE_RELAXED)
        except BaseException:
            d.fn["cuGraphDestroy"](self.graph)
            raise

    def __exit__(self, kind: Any, error: Any, tb: Any) -> None:
        d = self.driver
        captured = _p()
        try:
            d("cuStreamEndCapture", self.stream, ctypes.byref(captured))
            if kind is None:
                graph_exec = _p()
                d("cuGraphInstantiateWithFlags", ctypes.byref(graph_exec), self.graph, 0)
                self.launched = graph_exec
                d("cuGraphLaunch", graph_exec, self.stream)
        finally:
            d.fn["cuGraphDestroy"](self.graph)

    def _captured_guard(self, handle: int) -> Any:
        """The guard kernel's launch, captured into the graph: its node."""
        d = self.driver
        d("cuStreamBeginCaptureToGraph", self.stream, self.graph, None, None, 0, _CAPTURE_RELAXED)
        values = (_u64 * 2)(handle, self.word)
        params = (_p * 2)(ctypes.addressof(values), ctypes.addressof(values) + 8)
        try:
            d("cuLaunchKernel", self.guard, 1, 1, 1, 1, 1, 1, 0, self.stream, params, None)
        finally:
            d("cuStreamEndCapture", self.stream, ctypes.byref(_p()))
        node, count = _p(), ctypes.c_size_t(1)
        d("cuGraphGetNodes", self.graph, ctypes.byref(node), ctypes.byref(count))
        return node

    def _if_node(self, handle: int, after: Any) -> Any:
        """An IF node on ``handle`` after the guard's node: its body graph."""
        body = _p()
        params = _NodeParams(type=_NODE_CONDITIONAL)
        params.conditional.handle = handle
        params.conditional.type = _COND_IF
        params.conditional.size = 1
        params.conditional.phGraph_out = ctypes.pointer(body)
        params.conditional.ctx = self.context
        node = _p()
        deps = (_p * 1)(after)
        self.driver(
            "cuGraphAddNode", ctypes.byref(node), self.graph, deps, None, 1, ctypes.byref(params)
        )
        # (the driver writes the body's handle where phGraph_out points, or points it at
        # an array of its own: either way it is the first entry there)
        return params.conditional.phGraph_out[0]
