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
from typing import TYPE_CHECKING as _TYPE_CHECKING
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
from ._dtypes import SUPPORTED as _SUPPORTED
from ._interop.convert import asarray as asarray
from ._interop.dlpack import from_dlpack as from_dlpack
from ._interop.wait import wait as wait
from ._launch.cancel import CancelScope as CancelScope
from ._launch.cancel import cancel_scope as cancel_scope
from ._launch.kernel import CompileOptions as CompileOptions
from ._launch.kernel import Kernel as Kernel
from ._launch.module import Module as Module
from ._launch.partition import MappedPartition as MappedPartition
from ._launch.partition import Partition as Partition
from ._launch.warmup import warmup as warmup
from ._ops import methods as _methods
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
from ._ops.manipulation import broadcast_arrays as broadcast_arrays
from ._ops.manipulation import broadcast_shapes as broadcast_shapes
from ._ops.manipulation import concat as concat
from ._ops.manipulation import matrix_transpose as matrix_transpose
from ._ops.manipulation import meshgrid as meshgrid
from ._ops.manipulation import moveaxis as moveaxis
from ._ops.manipulation import repeat as repeat
from ._ops.manipulation import reshape as reshape
from ._ops.manipulation import roll as roll
from ._ops.manipulation import tile as tile
from ._ops.manipulation import unstack as unstack
from ._ops.products import dot as dot
from ._ops.products import einsum as einsum
from ._ops.products import inner as inner
from ._ops.products import outer as outer
from ._ops.products import vecdot as vecdot
from ._ops.reductions import argmax as argmax
from ._ops.reductions import argmin as argmin
from ._ops.reductions import max as max
from ._ops.reductions import mean as mean
from ._ops.reductions import min as min
from ._ops.reductions import prod as prod
from ._ops.reductions import sum as sum
from ._ops.reductions import vdot as vdot
from ._ops.scan import cumprod as cumprod
from ._ops.scan import cumsum as cumsum
from ._ops.scan import cumulative_prod as cumulative_prod
from ._ops.scan import cumulative_sum as cumulative_sum
from ._ops.sets import nonzero as nonzero
from ._ops.sets import unique_all as unique_all
from ._ops.sets import unique_counts as unique_counts
from ._ops.sets import unique_inverse as unique_inverse
from ._ops.sets import unique_values as unique_values
from ._ops.sets import where as where
from ._ops.sorting import argsort as argsort
from ._ops.sorting import isin as isin
from ._ops.sorting import searchsorted as searchsorted
from ._ops.sorting import sort as sort
from ._ops.statistics import all as all
from ._ops.statistics import any as any
from ._ops.statistics import count_nonzero as count_nonzero
from ._ops.statistics import diff as diff
from ._ops.statistics import std as std
from ._ops.statistics import var as var
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

# the array API namespace: elementwise functions, constants, dtypes (issue 34)
# isort: split
from ._namespace import __array_api_version__ as __array_api_version__
from ._namespace import __array_namespace_info__ as __array_namespace_info__
from ._namespace import bool as bool
from ._namespace import check_api_version as _check_api_version
from ._namespace import complex64 as complex64
from ._namespace import complex128 as complex128
from ._namespace import e as e
from ._namespace import float16 as float16
from ._namespace import float32 as float32
from ._namespace import float64 as float64
from ._namespace import inf as inf
from ._namespace import int8 as int8
from ._namespace import int16 as int16
from ._namespace import int32 as int32
from ._namespace import int64 as int64
from ._namespace import nan as nan
from ._namespace import newaxis as newaxis
from ._namespace import pi as pi
from ._namespace import uint8 as uint8
from ._namespace import uint16 as uint16
from ._namespace import uint32 as uint32
from ._namespace import uint64 as uint64
from ._ops.dtype_functions import astype as astype
from ._ops.dtype_functions import can_cast as can_cast
from ._ops.dtype_functions import finfo as finfo
from ._ops.dtype_functions import finfo_object as finfo_object
from ._ops.dtype_functions import iinfo as iinfo
from ._ops.dtype_functions import iinfo_object as iinfo_object
from ._ops.dtype_functions import isdtype as isdtype
from ._ops.dtype_functions import result_type as result_type
from ._ops.elementwise_api import acos as acos
from ._ops.elementwise_api import acosh as acosh
from ._ops.elementwise_api import arccos as arccos
from ._ops.elementwise_api import arccosh as arccosh
from ._ops.elementwise_api import arcsin as arcsin
from ._ops.elementwise_api import arcsinh as arcsinh
from ._ops.elementwise_api import arctan as arctan
from ._ops.elementwise_api import arctan2 as arctan2
from ._ops.elementwise_api import arctanh as arctanh
from ._ops.elementwise_api import asin as asin
from ._ops.elementwise_api import asinh as asinh
from ._ops.elementwise_api import atan as atan
from ._ops.elementwise_api import atan2 as atan2
from ._ops.elementwise_api import atanh as atanh
from ._ops.elementwise_api import bitwise_and as bitwise_and
from ._ops.elementwise_api import bitwise_invert as bitwise_invert
from ._ops.elementwise_api import bitwise_left_shift as bitwise_left_shift
from ._ops.elementwise_api import bitwise_or as bitwise_or
from ._ops.elementwise_api import bitwise_right_shift as bitwise_right_shift
from ._ops.elementwise_api import bitwise_xor as bitwise_xor
from ._ops.elementwise_api import ceil as ceil
from ._ops.elementwise_api import copysign as copysign
from ._ops.elementwise_api import cosh as cosh
from ._ops.elementwise_api import floor as floor
from ._ops.elementwise_api import floor_divide as floor_divide
from ._ops.elementwise_api import hypot as hypot
from ._ops.elementwise_api import invert as invert
from ._ops.elementwise_api import isfinite as isfinite
from ._ops.elementwise_api import isinf as isinf
from ._ops.elementwise_api import isnan as isnan
from ._ops.elementwise_api import left_shift as left_shift
from ._ops.elementwise_api import log2 as log2
from ._ops.elementwise_api import log10 as log10
from ._ops.elementwise_api import logaddexp as logaddexp
from ._ops.elementwise_api import logical_and as logical_and
from ._ops.elementwise_api import logical_not as logical_not
from ._ops.elementwise_api import logical_or as logical_or
from ._ops.elementwise_api import logical_xor as logical_xor
from ._ops.elementwise_api import nextafter as nextafter
from ._ops.elementwise_api import positive as positive
from ._ops.elementwise_api import pow as pow
from ._ops.elementwise_api import reciprocal as reciprocal
from ._ops.elementwise_api import right_shift as right_shift
from ._ops.elementwise_api import round as round
from ._ops.elementwise_api import signbit as signbit
from ._ops.elementwise_api import sinh as sinh
from ._ops.elementwise_api import square as square
from ._ops.elementwise_api import tan as tan
from ._ops.elementwise_api import trunc as trunc

#: ml_dtypes' bfloat16 dtype (a numpy dtype, as ``cuasync.float32``); only annotated
#: here: ``__getattr__`` imports ml_dtypes at its first use (1-2 s, not at import).
bfloat16: _np.dtype[_Any]

if _TYPE_CHECKING:
    import numpy as _np

__version__ = "0.2.0.dev0"

# Plumbing that moved to cuasync.lowlevel in 0.2; importable from here for one release.
_MOVED = frozenset({"DevicePointer", "ExecutionContext", "Output", "device_op"})
_warned: set[str] = set()


def __getattr__(name: str) -> _Any:
    if name == "bfloat16":  # ml_dtypes' dtype: imported at the first use (1-2 s)
        return _SUPPORTED["bfloat16"]
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
    "CancelScope",
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
    "all",
    "angle",
    "any",
    "arange",
    "argmax",
    "argmin",
    "argsort",
    "asarray",
    "backend_name",
    "broadcast_arrays",
    "broadcast_shapes",
    "broadcast_to",
    "cancel_scope",
    "clip",
    "concat",
    "conj",
    "concatenate",
    "convert",
    "cos",
    "count_nonzero",
    "cumprod",
    "cumsum",
    "cumulative_prod",
    "cumulative_sum",
    "device_count",
    "diagonal",
    "diff",
    "divide",
    "dot",
    "dot_general",
    "download_into",
    "download_pending",
    "dup",
    "dynamic_slice",
    "dynamic_update_slice",
    "einsum",
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
    "inner",
    "isin",
    "kernel_cache",
    "less",
    "less_equal",
    "linalg",
    "linspace",
    "log",
    "log1p",
    "lowlevel",
    "matmul",
    "matrix_transpose",
    "max",
    "maximum",
    "mean",
    "memcpy",
    "meshgrid",
    "min",
    "minimum",
    "moveaxis",
    "multiply",
    "negative",
    "nonzero",
    "not_equal",
    "ones",
    "ones_like",
    "outer",
    "pad",
    "permute_dims",
    "power",
    "prod",
    "rand",
    "randn",
    "real",
    "remainder",
    "repeat",
    "reshape",
    "roll",
    "rsqrt",
    "scatter",
    "searchsorted",
    "set_default_device",
    "shared",
    "sign",
    "sin",
    "sort",
    "sqrt",
    "squeeze",
    "stack",
    "stats",
    "std",
    "subtract",
    "sum",
    "take",
    "take_along_axis",
    "tanh",
    "tensordot",
    "tile",
    "to_host",
    "trace",
    "tracing",
    "tril",
    "triu",
    "unique_all",
    "unique_counts",
    "unique_inverse",
    "unique_values",
    "unstack",
    "upload_pending",
    "use_device",
    "use_policy",
    "value",
    "var",
    "vdot",
    "vecdot",
    "wait",
    "warmup",
    "where",
    "zeros",
    "zeros_like",
    "zip",
]

# the array API namespace: elementwise functions, constants, dtypes (issue 34)
__all__ += [
    "__array_api_version__",
    "__array_namespace_info__",
    "acos",
    "acosh",
    "arccos",
    "arccosh",
    "arcsin",
    "arcsinh",
    "arctan",
    "arctan2",
    "arctanh",
    "asin",
    "asinh",
    "astype",
    "atan",
    "atan2",
    "atanh",
    "bfloat16",
    "bitwise_and",
    "bitwise_invert",
    "bitwise_left_shift",
    "bitwise_or",
    "bitwise_right_shift",
    "bitwise_xor",
    "bool",
    "can_cast",
    "ceil",
    "complex128",
    "complex64",
    "copysign",
    "cosh",
    "e",
    "finfo",
    "finfo_object",
    "float16",
    "float32",
    "float64",
    "floor",
    "floor_divide",
    "hypot",
    "iinfo",
    "iinfo_object",
    "inf",
    "int16",
    "int32",
    "int64",
    "int8",
    "invert",
    "isdtype",
    "isfinite",
    "isinf",
    "isnan",
    "left_shift",
    "log10",
    "log2",
    "logaddexp",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "nan",
    "newaxis",
    "nextafter",
    "pi",
    "positive",
    "pow",
    "reciprocal",
    "result_type",
    "right_shift",
    "round",
    "signbit",
    "sinh",
    "square",
    "tan",
    "trunc",
    "uint16",
    "uint32",
    "uint64",
    "uint8",
]

# The operators' module sits below every op, so this module, which imports them all, fills
# what Tensor's methods there hand out: the array API namespace (``x.__array_namespace__()``
# is this module) and the names of cuasync's own functions (``np.sum(t)`` is refused with
# "use cuasync.sum(...)").
import cuasync as _this  # noqa: E402  (this module itself, from sys.modules)

_operators.implementation.namespace = _this
_operators.implementation.check_api_version = _check_api_version
_operators.implementation.public_names = frozenset(__all__)
_methods.namespace = _this  # (x.sum(), x.squeeze(), ...: the functions of this module)
