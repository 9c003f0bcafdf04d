"""The built-in kernels: one :class:`~cuasync.Kernel` per family and dtype, and their launches.

The CUDA source is ``cuasync/kernels/*.cu`` (package data), compiled as one translation
unit; each kernel is a template instantiation of it, chosen by a name expression such as
``"ca_convert<float, 11>"`` (the dtype's storage type and code, from
:data:`~cuasync._dtypes.DTYPES`), with its numpy twin from :mod:`cuasync._launch.twins` for the
emulator.

>>> k = kernel("convert", "float16")            # ca_convert<unsigned short, 9>
>>> launch(ctx, k, n, out, src, code, n, *dims, *strides)   # inside an op's enqueue
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable
from importlib import resources
from typing import Any

import numpy as np

from .._core.context import ExecutionContext
from .._dtypes import DTYPES, SUPPORTED, dtype_name
from .._tensor import Tensor, contiguous_strides
from . import twins as _twins
from .kernel import Kernel

#: The translation unit's files, in order: the shared code, then each family.
_FILES = (
    "cast.cuh",
    "cancel.cuh",
    "index.cuh",
    "fill.cu",
    "linspace.cu",
    "arange.cu",
    "convert.cu",
    "random.cu",
)

#: The float dtypes ``rand`` and ``randn`` make (not FP8: storage only).
RANDOM_DTYPES = tuple(name for name, d in DTYPES.items() if d.kind == "f" and d.arithmetic)

#: The dtypes the kernels store as bits, and the unsigned integer dtype of their size.
BIT_DTYPES: dict[str, str] = {
    name: {"unsigned char": "uint8", "unsigned short": "uint16"}[DTYPES[name].storage]
    for name in ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
}

#: ``fill`` only moves bits: one instantiation per element size, storing it as this dtype.
FILL_DTYPES: dict[int, str] = {
    SUPPORTED[name].itemsize: name for name in ("uint8", "uint16", "uint32", "uint64", "complex128")
}

#: Threads per block of the built-in and generated kernels' launches.
BLOCK = 256
_MAX_BLOCKS = 1 << 16


@functools.cache
def source() -> str:
    """The CUDA source of every built-in kernel."""
    files = resources.files("cuasync.kernels")
    text = "\n".join((files / name).read_text(encoding="utf-8") for name in _FILES)
    # The leading newline keeps the text 0.1 compiled, and so the kernel cache's keys.
    return "\n" + text


class KernelFiles:
    """Kernels compiled from some files of ``cuasync/kernels`` beside the built-in
    translation unit (take and tril/triu, the indexing family), each made once.

    >>> joins = KernelFiles("index.cuh", "joins.cu")
    >>> joins.kernel("ca_tri<unsigned int>", tri_twin)
    """

    def __init__(self, *files: str) -> None:
        self.files = files
        self._made: dict[str, Kernel] = {}
        self._lock = threading.Lock()

    @functools.cached_property
    def source(self) -> str:
        kernels = resources.files("cuasync.kernels")
        return "\n".join((kernels / name).read_text(encoding="utf-8") for name in self.files)

    def kernel(self, expression: str, twin: Callable[..., None]) -> Kernel:
        """The kernel ``expression`` (a template instantiation), made once."""
        found = self._made.get(expression)
        if found is None:
            with self._lock:
                found = self._made.get(expression)
                if found is None:
                    found = self._made[expression] = Kernel(self.source, expression, emulate=twin)
        return found


def storage(itemsize: int) -> str:
    """The C type a kernel that only moves bits stores elements of ``itemsize`` bytes as."""
    return DTYPES[FILL_DTYPES[itemsize]].storage


# -- the kernels ------------------------------------------------------------------------
_kernels: dict[tuple[str, str], Kernel] = {}
_kernels_lock = threading.Lock()

_TWINS = {
    "linspace": _twins.linspace_twin,
    "arange": _twins.arange_twin,
    "convert": _twins.convert_twin,
    "convert_checked": _twins.convert_checked_twin,
    "rand": _twins.rand_twin,
    "randn": _twins.randn_twin,
}


def _make(family: str, key: str) -> Kernel:
    if family == "fill":
        storage = DTYPES[FILL_DTYPES[int(key)]].storage
        return Kernel(source(), f"ca_fill<{storage}>", emulate=_twins.fill_twin)
    d = DTYPES[key]
    expression = f"ca_{family}<{d.storage}, {d.code}>"
    return Kernel(source(), expression, emulate=_TWINS[family](SUPPORTED[key]))


def kernel(family: str, key: str) -> Kernel:
    """The kernel of ``family`` for ``key``: a dtype name, or an element size for ``fill``."""
    found = _kernels.get((family, key))
    if found is None:
        with _kernels_lock:
            found = _kernels.get((family, key))
            if found is None:
                found = _kernels[(family, key)] = _make(family, key)
    return found


def builtin_kernels() -> list[Kernel]:
    """Every built-in kernel, one per dtype instantiation (for compile checks)."""
    keys: list[tuple[str, str]] = [("fill", str(size)) for size in FILL_DTYPES]
    names = list(SUPPORTED)
    keys += [
        (family, name)
        for family in ("linspace", "arange", "convert", "convert_checked")
        for name in names
    ]
    keys += [
        (family, name) for family in ("rand", "randn") for name in RANDOM_DTYPES if name in names
    ]
    return [kernel(family, key) for family, key in keys]


# -- launching -------------------------------------------------------------------------
def blocks(work: int, block: int = BLOCK, most: int = _MAX_BLOCKS) -> int:
    """Blocks of ``block`` threads (:data:`BLOCK`) for ``work`` threads' worth (at most
    ``most``, 65536 by default: the kernels loop over the rest)."""
    return max(1, min((work + block - 1) // block, most))


def launch(
    ctx: ExecutionContext,
    kernel: Kernel,
    work: int,
    *args: Any,
    block: int = BLOCK,
    most: int = _MAX_BLOCKS,
    scoped: bool = False,
) -> None:
    """Enqueue one launch of ``kernel`` in this op's execution context (the arguments
    are cuasync's own: only scalars are converted, see ``Kernel._enqueue_trusted``);
    none where there is no work (an empty view's pointer is never handed to a kernel).
    ``work`` threads in blocks of ``block``, at most ``most`` blocks (the kernels'
    grid-stride loops do the rest). ``scoped``: the kernel takes the current cancel
    scope's word (a kernel that checks it, writing only a tensor the op made: a write
    into a tensor others may hold always runs; docs/cancellation.md).

    >>> launch(ctx, kernel, n, out, x, n, scoped=True)
    """
    if work == 0:
        return
    grid = (blocks(work, block, most), 1, 1)
    kernel._enqueue_trusted(ctx, grid, (block, 1, 1), args, scoped=scoped)


def launch_op(
    kernel: Kernel, work: int, *args: Any, block: int = BLOCK, most: int = _MAX_BLOCKS
) -> Any:
    """The launch op of :func:`launch`'s one launch (``kernel[grid, block](*args)``, not
    yet taken, its cancel word the scope's where it takes one), for an op the native core
    submits as a raw launch (``ExpressLaunches.pending_launches``); ``work`` > 0.

    >>> op = launch_op(kernel, n, out, x, n)
    """
    return kernel[blocks(work, block, most), block](*args)


def bit_view(t: Tensor, storage_dtype: str) -> Tensor:
    """``t`` as the unsigned integers a kernel stores (same layout, same allocation)."""
    dt = SUPPORTED[storage_dtype]
    if dt == t.dtype:
        return t
    return Tensor(t.allocation, t.shape, dt, t.strides, t.offset)


def storage_view(t: Tensor) -> Tensor:
    """``t`` as its kernels' C type sees it: float16 and bfloat16 as uint16 bits, FP8 as
    uint8 bits."""
    bits = BIT_DTYPES.get(dtype_name(t.dtype))
    return bit_view(t, bits) if bits is not None else t


def flat(t: Tensor) -> Tensor:
    """A contiguous ``t`` as one dimension, in its storage type."""
    return storage_view(Tensor(t.allocation, (t.size,), t.dtype, None, t.offset))


def chunks(t: Tensor) -> list[tuple[Tensor, list[int], list[int], int]]:
    """Split a view into sub-views of at most 4 merged dimensions.

    Returns ``(sub-view, [d1, d2, d3], [s0, s1, s2, s3], first linear index)`` for each.
    """
    if t.strides == contiguous_strides(t.shape):  # (dense: one dimension, as merged below)
        size = t.size
        if size:
            line = Tensor(t._alloc, (size,), t.dtype, (1,), t.offset)
            return [(line, [1, 1, size], [0, 0, 0, 1], 0)]
    merged: list[tuple[int, int]] = []
    for d, s in zip(t.shape, t.strides, strict=True):
        if d == 1:
            continue
        if merged and merged[-1][1] == s * d:
            merged[-1] = (merged[-1][0] * d, s)
        else:
            merged.append((d, s))
    if not merged:
        merged = [(1, 1)]
    outer, inner = merged[:-4], merged[-4:]
    padded = [(1, 0)] * (4 - len(inner)) + inner
    dims = [d for d, _ in padded]
    strides = [s for _, s in padded]
    shape = tuple(d for d, _ in inner)
    size = math.prod(shape)
    if not outer:  # (one sub-view: most tensors)
        sub = Tensor(t.allocation, shape, t.dtype, tuple(s for _, s in inner), t.offset)
        return [(sub, dims[1:], strides, 0)]
    out = []
    for k, index in enumerate(np.ndindex(*(d for d, _ in outer))):
        offset = t.offset + sum(i * s for i, (_, s) in zip(index, outer, strict=True))
        sub = Tensor(t.allocation, shape, t.dtype, tuple(s for _, s in inner), offset)
        out.append((sub, dims[1:], strides, k * size))
    return out
