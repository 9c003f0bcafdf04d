"""cuasync: asyncio-native GPU futures.

Every device operation is a lazy awaitable :class:`DeviceOp`; its work is enqueued on
the first ``await`` (or ``.sync()``), and completion reaches the awaiting task through a
native reactor that watches flag words the GPU writes, without blocking the event loop.
Runtime failures raise :class:`DeviceError` (the tree is in :mod:`cuasync.errors`); the
plumbing for writing custom ops is in :mod:`cuasync.lowlevel`.

>>> import cuasync, numpy as np
>>> t = await cuasync.from_host(np.arange(4.0))
>>> await t.to_host()
array([0., 1., 2., 3.])
"""

from __future__ import annotations

import warnings as _warnings
from typing import Any as _Any

from . import errors as errors
from . import kernel_cache as kernel_cache
from . import linalg as linalg
from . import lowlevel as lowlevel
from ._backends import backend_name as backend_name
from ._core.completion import Stats as Stats
from ._core.completion import stats as stats
from ._core.device import Device as Device
from ._core.device import Event as Event
from ._core.device import MemoryInfo as MemoryInfo
from ._core.device import MemoryStats as MemoryStats
from ._core.device import SchedulingPolicy as SchedulingPolicy
from ._core.device import Stream as Stream
from ._core.device import device_count as device_count
from ._core.device import get_default_device as get_default_device
from ._core.device import set_default_device as set_default_device
from ._core.device import use_device as use_device
from ._core.graph import CudaGraph as CudaGraph
from ._core.graph import GraphScope as GraphScope
from ._core.graph import graph_scope as graph_scope
from ._core.op import DeviceFuture as DeviceFuture
from ._core.op import DeviceOp as DeviceOp
from ._core.op import SharedOp as SharedOp
from ._core.op import shared as shared
from ._core.op import value as value
from ._core.op import zip as zip
from ._core.priority import StreamPriorityRange as StreamPriorityRange
from ._core.properties import DeviceProperties as DeviceProperties
from ._core.scheduling import SingleStream as SingleStream
from ._core.scheduling import StreamPoolRoundRobin as StreamPoolRoundRobin
from ._core.scheduling import use_policy as use_policy
from ._core.trace import trace as trace
from ._core.trace import tracing as tracing
from ._interop.convert import asarray as asarray
from ._interop.dlpack import from_dlpack as from_dlpack
from ._interop.wait import wait as wait
from ._launch.kernel import CompileOptions as CompileOptions
from ._launch.kernel import Kernel as Kernel
from ._launch.module import Module as Module
from ._launch.partition import MappedPartition as MappedPartition
from ._launch.partition import Partition as Partition
from ._launch.warmup import warmup as warmup
from ._ops import operators as _operators
from ._ops.contract import dot_general as dot_general
from ._ops.contract import matmul as matmul
from ._ops.contract import tensordot as tensordot
from ._ops.creation import arange as arange
from ._ops.creation import convert as convert
from ._ops.creation import eye as eye
from ._ops.creation import eye_rect as eye_rect
from ._ops.creation import fill as fill
from ._ops.creation import full as full
from ._ops.creation import linspace as linspace
from ._ops.creation import ones as ones
from ._ops.creation import rand as rand
from ._ops.creation import randn as randn
from ._ops.elementwise import abs as abs
from ._ops.elementwise import add as add
from ._ops.elementwise import angle as angle
from ._ops.elementwise import clip as clip
from ._ops.elementwise import conj as conj
from ._ops.elementwise import cos as cos
from ._ops.elementwise import divide as divide
from ._ops.elementwise import equal as equal
from ._ops.elementwise import exp as exp
from ._ops.elementwise import expm1 as expm1
from ._ops.elementwise import greater as greater
from ._ops.elementwise import greater_equal as greater_equal
from ._ops.elementwise import imag as imag
from ._ops.elementwise import less as less
from ._ops.elementwise import less_equal as less_equal
from ._ops.elementwise import log as log
from ._ops.elementwise import log1p as log1p
from ._ops.elementwise import maximum as maximum
from ._ops.elementwise import minimum as minimum
from ._ops.elementwise import multiply as multiply
from ._ops.elementwise import negative as negative
from ._ops.elementwise import not_equal as not_equal
from ._ops.elementwise import power as power
from ._ops.elementwise import real as real
from ._ops.elementwise import remainder as remainder
from ._ops.elementwise import rsqrt as rsqrt
from ._ops.elementwise import sign as sign
from ._ops.elementwise import sin as sin
from ._ops.elementwise import sqrt as sqrt
from ._ops.elementwise import subtract as subtract
from ._ops.elementwise import tanh as tanh
from ._ops.elementwise import where as where
from ._ops.indexing import dynamic_slice as dynamic_slice
from ._ops.indexing import dynamic_update_slice as dynamic_update_slice
from ._ops.indexing import gather as gather
from ._ops.indexing import pad as pad
from ._ops.indexing import scatter as scatter
from ._ops.indexing import take_along_axis as take_along_axis
from ._ops.joins import concatenate as concatenate
from ._ops.joins import stack as stack
from ._ops.joins import take as take
from ._ops.joins import tril as tril
from ._ops.joins import triu as triu
from ._ops.like import empty_like as empty_like
from ._ops.like import full_like as full_like
from ._ops.like import ones_like as ones_like
from ._ops.like import zeros_like as zeros_like
from ._ops.reductions import argmax as argmax
from ._ops.reductions import argmin as argmin
from ._ops.reductions import max as max
from ._ops.reductions import mean as mean
from ._ops.reductions import min as min
from ._ops.reductions import prod as prod
from ._ops.reductions import sum as sum
from ._ops.reductions import vdot as vdot
from ._ops.tensorop import TensorOp as TensorOp
from ._ops.views import broadcast_to as broadcast_to
from ._ops.views import diagonal as diagonal
from ._ops.views import expand_dims as expand_dims
from ._ops.views import flip as flip
from ._ops.views import permute_dims as permute_dims
from ._ops.views import squeeze as squeeze
from ._tensor import Tensor as Tensor
from ._transfers.copies import dup as dup
from ._transfers.copies import empty as empty
from ._transfers.copies import from_host as from_host
from ._transfers.copies import memcpy as memcpy
from ._transfers.copies import to_host as to_host
from ._transfers.copies import zeros as zeros
from ._transfers.pending import PendingTransfer as PendingTransfer
from ._transfers.pending import download_pending as download_pending
from ._transfers.pending import upload_pending as upload_pending
from ._transfers.pinned import PinnedHostBuffer as PinnedHostBuffer
from ._transfers.pinned import PinnedPool as PinnedPool
from ._transfers.readback import download_into as download_into
from .errors import DeviceError as DeviceError

__version__ = "0.2.0.dev0"

# Plumbing that moved to cuasync.lowlevel in 0.2; importable from here for one release.
_MOVED = frozenset({"DevicePointer", "ExecutionContext", "Output", "device_op"})
_warned: set[str] = set()


def __getattr__(name: str) -> _Any:
    if name in _MOVED:
        if name not in _warned:
            _warned.add(name)
            _warnings.warn(
                f"cuasync.{name} moved to cuasync.lowlevel.{name}; the old name goes away "
                "in the next release",
                DeprecationWarning,
                stacklevel=2,
            )
        return getattr(lowlevel, name)
    raise AttributeError(f"module 'cuasync' has no attribute {name!r}")


__all__ = [
    "CompileOptions",
    "CudaGraph",
    "Device",
    "DeviceError",
    "DeviceFuture",
    "DeviceOp",
    "DeviceProperties",
    "Event",
    "GraphScope",
    "Kernel",
    "MappedPartition",
    "MemoryInfo",
    "MemoryStats",
    "Module",
    "Partition",
    "PendingTransfer",
    "PinnedHostBuffer",
    "PinnedPool",
    "SchedulingPolicy",
    "SharedOp",
    "SingleStream",
    "Stats",
    "Stream",
    "StreamPoolRoundRobin",
    "StreamPriorityRange",
    "Tensor",
    "TensorOp",
    "__version__",
    "abs",
    "add",
    "angle",
    "arange",
    "argmax",
    "argmin",
    "asarray",
    "backend_name",
    "broadcast_to",
    "clip",
    "conj",
    "concatenate",
    "convert",
    "cos",
    "device_count",
    "diagonal",
    "divide",
    "dot_general",
    "download_into",
    "download_pending",
    "dup",
    "dynamic_slice",
    "dynamic_update_slice",
    "empty",
    "empty_like",
    "equal",
    "errors",
    "exp",
    "expand_dims",
    "expm1",
    "eye",
    "eye_rect",
    "fill",
    "flip",
    "from_dlpack",
    "from_host",
    "full",
    "full_like",
    "gather",
    "get_default_device",
    "graph_scope",
    "greater",
    "greater_equal",
    "imag",
    "kernel_cache",
    "less",
    "less_equal",
    "linalg",
    "linspace",
    "log",
    "log1p",
    "lowlevel",
    "matmul",
    "max",
    "maximum",
    "mean",
    "memcpy",
    "min",
    "minimum",
    "multiply",
    "negative",
    "not_equal",
    "ones",
    "ones_like",
    "pad",
    "permute_dims",
    "power",
    "prod",
    "rand",
    "randn",
    "real",
    "remainder",
    "rsqrt",
    "scatter",
    "set_default_device",
    "shared",
    "sign",
    "sin",
    "sqrt",
    "squeeze",
    "stack",
    "stats",
    "subtract",
    "sum",
    "take",
    "take_along_axis",
    "tanh",
    "tensordot",
    "to_host",
    "trace",
    "tracing",
    "tril",
    "triu",
    "upload_pending",
    "use_device",
    "use_policy",
    "value",
    "vdot",
    "wait",
    "warmup",
    "where",
    "zeros",
    "zeros_like",
    "zip",
]

# numpy functions refused on device data name cuasync's own where there is one
# (``np.sum(t)``: "use cuasync.sum(...)"); the operators' module sits below this one.
_operators.implementation.public_names = frozenset(__all__)
