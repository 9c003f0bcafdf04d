"""Integer matrix products: a tiled CUDA kernel (``kernels/igemm.cu``) and its numpy twin.

numpy's integer ``matmul`` wraps around (``int8 @ int8`` is int8, modulo 2**8); so do
these, for strided batches of any layout (0 batch strides broadcast). int8 products go
to cuBLAS instead where it takes them (:func:`cuasync._ops.gemm.gemm`); this kernel is
every other integer dtype, and int8 where cuBLAS does not apply.

>>> launch(ctx, a3, b3, c3, 1, 0)      # (batch, m, k) @ (batch, k, n) -> (batch, m, n)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from importlib import resources
from typing import Any

import numpy as np

from .._core.context import ExecutionContext
from .._dtypes import DTYPES, dtype_name
from .._launch.kernel import Kernel
from .._tensor import Tensor

__all__ = ["kernel", "launch"]

_TILE = 16
_MAX_GRID = 65535


def _twin(dt: np.dtype[Any]) -> Callable[..., None]:
    """``ca_igemm`` in numpy: the product in uint64 (wrapping), cast to ``dt``."""

    def run(c: np.ndarray, a: np.ndarray, b: np.ndarray, *args: Any) -> None:
        alpha, beta = (np.uint64(int(v)) for v in args[-2:])
        wide = [x.astype(np.int64).astype(np.uint64) for x in (a, b)]
        with np.errstate(all="ignore"):
            r = np.matmul(wide[0], wide[1]) * alpha
            if beta:
                r = r + c.astype(np.int64).astype(np.uint64) * beta
        c[...] = r.astype(dt)

    return run


#: The kernels files its kernels are compiled from (tests/kernels/test_builtin.py checks that
#: every shipped file is compiled somewhere).
FILES = ("igemm.cu",)


@functools.cache
def kernel(name: str) -> Kernel:
    """The compiled-once kernel for integer dtype ``name``."""
    d = DTYPES[name]
    acc = "unsigned" if np.dtype(name).itemsize <= 4 else "unsigned long long"
    source = resources.files("cuasync.kernels").joinpath(FILES[0]).read_text("utf-8")
    return Kernel(source, f"ca_igemm<{d.storage}, {acc}>", emulate=_twin(np.dtype(name)))


def launch(
    ctx: ExecutionContext, a: Tensor, b: Tensor, c: Tensor, alpha: complex, beta: complex
) -> None:
    """Enqueue ``c = alpha * a @ b + beta * c`` for views ``(batch, m, k)``,
    ``(batch, k, n)`` and ``(batch, m, n)``; ``alpha`` and ``beta`` are integers
    (computed modulo the dtype's range, as the product)."""
    batch, m, k = a.shape
    n = b.shape[2]
    if c.size == 0:
        return
    bits = 64 if c.itemsize > 4 else 32
    mask = (1 << bits) - 1
    grid = (
        min(-(-n // _TILE), _MAX_GRID),
        min(-(-m // _TILE), _MAX_GRID),
        min(batch, _MAX_GRID),
    )
    kernel(dtype_name(c.dtype))._enqueue_trusted(
        ctx,
        grid,
        (_TILE, _TILE, 1),
        (
            c, a, b, batch, m, n, k,
            *a.strides, *b.strides, *c.strides,
            int(alpha.real) & mask, int(beta.real) & mask,
        ),
    )  # fmt: skip
