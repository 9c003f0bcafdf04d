"""Tiled matrix products: a CUDA kernel (``kernels/tiled_gemm.cu``) and its numpy twin.

Two kinds of product take it rather than cuBLAS:

- integer products, which wrap around as numpy's do (``int8 @ int8`` is int8, modulo
  2**8), for strided batches of any layout (int8 goes to cuBLAS where it takes it:
  :func:`cuasync._ops.gemm.gemm`);
- small float32 and float64 products in full precision (:func:`takes`): cuBLAS's host
  work for one call
  (its heuristic, its argument checks: 8-10 µs) is several times the whole product's,
  so below :data:`SMALL_MACS` multiply-adds one launch of this kernel answers sooner.
  They accumulate in their own type, as cuBLAS's full-precision GEMM does.

>>> launch(ctx, a3, b3, c3, 1, 0)      # (batch, m, k) @ (batch, k, n) -> (batch, m, n)
>>> takes(SUPPORTED["float32"], 1 * 64 * 64 * 64, "highest")   # True: no cuBLAS
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .._cancel_var import current_word
from .._core.context import ExecutionContext
from .._core.device import Device
from .._dtypes import DTYPES, dtype_name
from .._launch.builtin import KernelFiles
from .._launch.kernel import Kernel, trusted_launch
from .._launch.signature import Param
from .._tensor import Tensor

__all__ = [
    "BLOCK",
    "FILES",
    "SMALL_K",
    "SMALL_MACS",
    "SeenLaunch",
    "args",
    "grid",
    "kernel",
    "launch",
    "launch_op",
    "seen_launch",
    "takes",
    "takes_alpha",
]

_TILE = 16
_MAX_GRID = 65535
#: The launch's block: one thread per element of a 16 x 16 tile.
BLOCK = (_TILE, _TILE, 1)

#: The most multiply-adds (batch x m x n x k) of a float product this kernel takes: a
#: 128 x 128 x 128 product is a few microseconds of it, about what cuBLAS's host work
#: for the call costs before its kernel starts.
SMALL_MACS = 128**3
#: The longest sum (``k``) it takes: each thread adds its ``k`` terms in turn, so a long
#: sum over few outputs would be one slow block (cuBLAS splits it) and lose accuracy.
SMALL_K = 256

#: The float dtypes it takes (others, float16 and complex among them, stay on cuBLAS).
_FLOATS = frozenset(("float32", "float64"))

#: The kernels files it is compiled from (tests/kernels/test_builtin.py checks that every
#: shipped file is compiled somewhere).
FILES = ("cancel.cuh", "tiled_gemm.cu")
_KERNELS = KernelFiles(*FILES)


def takes(dtype: np.dtype[Any], macs: int, k: int, precision: str) -> bool:
    """Whether a float product of ``dtype``, ``macs`` multiply-adds, sums of ``k`` terms
    and ``precision`` takes this kernel (integer products always do:
    :func:`cuasync._ops.gemm.gemm` decides those). ``"tf32"`` products stay on cuBLAS,
    whose tensor cores they ask for."""
    return macs <= SMALL_MACS and k <= SMALL_K and dtype.name in _FLOATS and precision == "highest"


def _twin(dt: np.dtype[Any]) -> Callable[..., None]:
    """``ca_tiled_gemm`` in numpy: the views its sizes and strides make of the memory
    at ``c``, ``a`` and ``b`` (as the kernel indexes it); integers in uint64 (wrapping),
    cast to ``dt``, floats in ``dt``."""
    integer = dt.kind in "iu"
    size = dt.itemsize

    def run(c: np.ndarray, a: np.ndarray, b: np.ndarray, *args: Any) -> None:
        batch, m, n, k, sab, sam, sak, sbb, sbk, sbn, scb, scm, scn, alpha, beta = args
        va, vb, vc = (
            as_strided(x, shape, tuple(s * size for s in strides))
            for x, shape, strides in (
                (a, (batch, m, k), (sab, sam, sak)),
                (b, (batch, k, n), (sbb, sbk, sbn)),
                (c, (batch, m, n), (scb, scm, scn)),
            )
        )
        if integer:
            alpha, beta = (np.uint64(int(v)) for v in (alpha, beta))
            va, vb = (x.astype(np.int64).astype(np.uint64) for x in (va, vb))
        with np.errstate(all="ignore"):
            r = np.matmul(va, vb) * alpha
            if beta:
                r = r + (vc.astype(np.int64).astype(np.uint64) if integer else vc) * beta
        vc[...] = r.astype(dt)

    return run


def kernel(name: str) -> Kernel:
    """The kernel for dtype ``name`` (an integer dtype, float32 or float64), made once."""
    d = DTYPES[name]
    if name in _FLOATS:
        acc = wide = d.storage
    else:
        acc = "unsigned" if np.dtype(name).itemsize <= 4 else "unsigned long long"
        wide = "long long"
    expression = f"ca_tiled_gemm<{d.storage}, {acc}, {wide}>"
    found = _KERNELS._made.get(expression)
    return found if found is not None else _KERNELS.kernel(expression, _twin(np.dtype(name)))


def grid(batch: int, m: int, n: int) -> tuple[int, int, int]:
    """The launch's grid for ``batch`` products of ``m x n`` (its block: 16 x 16)."""
    return (
        min(-(-n // _TILE), _MAX_GRID),
        min(-(-m // _TILE), _MAX_GRID),
        min(batch, _MAX_GRID),
    )


def args(c: Tensor, a: Tensor, b: Tensor, alpha: complex, beta: complex) -> tuple[Any, ...]:
    """The kernel's arguments for views ``(batch, m, k)``, ``(batch, k, n)`` and
    ``(batch, m, n)``: integer scalars modulo the dtype's range (as the product), float
    ones their real parts."""
    batch, m, k = a.shape
    n = b.shape[2]
    if c.dtype.kind in "iu":
        mask = (1 << (64 if c.itemsize > 4 else 32)) - 1
        scalars: tuple[Any, Any] = (int(alpha.real) & mask, int(beta.real) & mask)
    elif c.itemsize == 4:  # (as C converts them, as cuBLAS's float32 scalars: 1e39 is inf)
        scalars = (ctypes.c_float(alpha.real).value, ctypes.c_float(beta.real).value)
    else:
        scalars = (alpha.real, beta.real)
    return (c, a, b, batch, m, n, k, *a.strides, *b.strides, *c.strides, *scalars)


def launch(
    ctx: ExecutionContext,
    a: Tensor,
    b: Tensor,
    c: Tensor,
    alpha: complex,
    beta: complex,
    *,
    scoped: bool = False,
) -> None:
    """Enqueue ``c = alpha * a @ b + beta * c`` for views ``(batch, m, k)``,
    ``(batch, k, n)`` and ``(batch, m, n)``. ``scoped``: ``c`` is a tensor the op made,
    so a cancelled scope may skip the launch."""
    if c.size == 0:
        return
    kernel(dtype_name(c.dtype))._enqueue_trusted(
        ctx,
        grid(a.shape[0], a.shape[1], b.shape[2]),
        BLOCK,
        args(c, a, b, alpha, beta),
        scoped=scoped,
    )


# -- a seen product's launch, made by the native core's maker ---------------------------------
class SeenLaunch(NamedTuple):
    """The launch of a small float product of a seen kind, made once: its ``kernel``,
    the kernel's three pointer ``params``, the ``grid``, the sizes and strides
    (``geometry``: ``(batch, m, n, k, *a's, *b's, *c's)``) and the range of the ``alpha``
    the kernel's parameter takes as it is."""

    kernel: Kernel
    params: tuple[Param, ...]
    grid: tuple[int, int, int]
    geometry: tuple[int, ...]
    alphas: tuple[float, float]


def seen_launch(a: Tensor, b: Tensor, c: Tensor) -> SeenLaunch:
    """The :class:`SeenLaunch` of views ``(batch, m, k)``, ``(batch, k, n)`` and
    ``(batch, m, n)`` of a float product :func:`takes`."""
    made = kernel(dtype_name(c.dtype))
    plan = made._plan_now()
    batch, m, k = a.shape
    n = b.shape[2]
    return SeenLaunch(
        made,
        tuple(p for p in made.params if p.pointer),
        grid(batch, m, n),
        (batch, m, n, k, *a.strides, *b.strides, *c.strides),
        (plan[16][3], plan[16][4]),  # (alpha's (low, high): see Kernel._make_plan)
    )


#: The launch writes ``c`` and reads ``a`` and ``b``.
_WRITES = (True, False, False)


def takes_alpha(seen: SeenLaunch, alpha: float) -> bool:
    """Whether :func:`launch_op` takes ``alpha`` as it is (a float in its parameter's
    finite range; the long way converts the others)."""
    low, high = seen.alphas
    return type(alpha) is float and low <= alpha <= high


def launch_op(
    seen: SeenLaunch,
    device: Device,
    operands: tuple[Tensor, Tensor, Tensor],
    alpha: float,
    beta: float,
    output: Tensor,
) -> Any:
    """The launch op, not yet taken, of ``seen``'s product of ``operands`` (``(c, a, b)``:
    tensors its geometry indexes from their first elements) into ``output`` (``c``'s
    tensor), its cancel word the scope's; the kernel prepared for ``device`` and
    ``alpha`` one :func:`takes_alpha` takes (the caller checks both first)."""
    made = seen.kernel
    prepared = made._prepared[device.ordinal]
    args = (*operands, *seen.geometry, alpha, beta, current_word(device.ordinal))
    return trusted_launch(
        made, prepared, device, args, operands, seen.params, _WRITES, output, seen.grid, BLOCK
    )
