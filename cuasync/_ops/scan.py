"""Cumulative sums and products: ``cumulative_sum``, ``cumulative_prod`` (the array API
standard's, with ``include_initial``) and numpy's ``cumsum``, ``cumprod``.

One generated kernel per (op, dtypes, kept dimensions): a block per row along the
scanned axis walks the row in tiles of ``blockDim.x`` elements; each tile is scanned in
shared memory (Hillis-Steele, a fixed order: results are deterministic), and the running
total of the tiles before it (the carry) is added. Small integers accumulate in int64
(uint64 when unsigned) as ``sum`` does, float16 and bfloat16 in float32 (each output
rounded once); integers wrap around as numpy's; complex ones add and multiply as the
elementwise kernels do. Float results differ from numpy's sequential sums by rounding
only (the tile scan adds in another order).

>>> c = await cuasync.cumulative_sum(x, axis=1)                  # same shape as x
>>> c = await cuasync.cumulative_sum(x, axis=0, include_initial=True)  # one row more
>>> p = await cuasync.cumprod(x)                                  # numpy's: flattened
"""

from __future__ import annotations

import builtins
import math
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from .._core.context import ExecutionContext
from .._core.device import Device
from .._core.op import FirstUse, device_op
from .._core.output import Output
from .._dtypes import DTYPES, SUPPORTED, DTypeLike, dtype_name
from .._launch import builtin
from .._launch.kernel import Kernel
from .._tensor import Shape, Tensor, contiguous_strides
from .._transfers.device_copy import new_tensor
from ..errors import ArgumentError
from .codegen import _prelude, ctype, rounded
from .on_output import on_tensor
from .reductions import _result_dtypes, check_dtype, normalize_axes
from .tensorop import TensorOp, flattened, merge_axes, tensor_op

__all__ = ["cumprod", "cumsum", "cumulative_prod", "cumulative_sum"]

#: Threads of a scanning block at most (the tile's shared memory: 1024 accumulators).
_BLOCK = 1024


def _operand(x: Any, name: str) -> Tensor | TensorOp:
    if isinstance(x, TensorOp) and x._consumed:
        x._take()  # raises OpConsumedError
    if isinstance(x, (Tensor, TensorOp)):
        return x
    if isinstance(x, np.ndarray):
        raise ArgumentError(
            f"{name}: x is a numpy array; upload it first: await cuasync.from_host(array)"
        )
    raise ArgumentError(f"{name}: x must be a cuasync.Tensor or TensorOp, got {type(x).__name__}")


def _scan(name: str, op: str, x: Any, axis: Any, dtype: Any, include_initial: bool) -> TensorOp:
    x = _operand(x, name)
    check_dtype(x.dtype, "x", name)
    if not isinstance(include_initial, (bool, np.bool_)):
        raise ArgumentError(
            f"{name}: include_initial must be a bool, got {include_initial!r}"[:200]
        )
    if axis is None:
        if x.ndim > 1:
            raise ArgumentError(
                f"{name}: x is {x.ndim}-d, so axis is required (the array API standard); "
                f"numpy's flattening scan is cuasync.{'cumsum' if op == 'sum' else 'cumprod'}"
            )
        if x.ndim == 0:
            raise ArgumentError(f"{name}: x is 0-d; a cumulative {op} needs at least one axis")
        axis = 0
    (a,) = normalize_axes(axis, x.ndim, name, allow_tuple=False)
    res, acc = _result_dtypes(op, x.dtype, dtype, name)
    shape = tuple(d + (1 if include_initial and j == a else 0) for j, d in enumerate(x.shape))
    spec = (op, dtype_name(x.dtype), acc, res)

    def first_use(strides: Shape) -> FirstUse:
        def prepare(on: Device) -> tuple[tuple[Any, Device], ...]:
            if not math.prod(shape):
                return ()
            kdims = _kept(x.shape, strides, contiguous_strides(shape), a)[0]
            kernel = scan_kernel(*spec, len(kdims))
            return () if on.ordinal in kernel._prepared else ((kernel, on),)

        return prepare

    def build(t: Tensor) -> TensorOp:
        def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
            out = new_tensor(ctx, shape, np.dtype(res), name)
            if out.size:
                _launch(ctx, spec, t, out, a, bool(include_initial))
            return Output.ready(out)

        op = device_op(enqueue, t.device, name, first_use=first_use(t.strides))
        return tensor_op(op, shape, np.dtype(res))

    dense = contiguous_strides(x.shape)
    return on_tensor(x, name, shape, np.dtype(res), build, first_use(dense))


def _kept(shape: Shape, xstrides: Shape, ostrides: Shape, axis: int) -> tuple[Shape, list[Shape]]:
    """The axes other than ``axis``, merged: their lengths, and the output's and the
    input's strides over them."""
    kept = [j for j in range(len(shape)) if j != axis]
    return merge_axes(
        tuple(shape[j] for j in kept),
        [tuple(ostrides[j] for j in kept), tuple(xstrides[j] for j in kept)],
    )


def _launch(
    ctx: ExecutionContext,
    spec: tuple[str, str, str, str],
    x: Tensor,
    out: Tensor,
    axis: int,
    initial: bool,
) -> None:
    kdims, (ostr, xstr) = _kept(x.shape, x.strides, out.strides, axis)
    k = x.shape[axis]
    m = math.prod(kdims)
    xv = builtin.storage_view(
        Tensor(x.allocation, (*kdims, k), x.dtype, (*xstr, x.strides[axis]), x.offset)
    )
    ov = builtin.storage_view(
        Tensor(
            out.allocation,
            (*kdims, out.shape[axis]),
            out.dtype,
            (*ostr, out.strides[axis]),
            out.offset,
        )
    )
    block = builtins.min(_BLOCK, builtins.max(32, 1 << builtins.max(k - 1, 0).bit_length()))
    kernel = scan_kernel(*spec, len(kdims))
    op = kernel.launch(
        ov, xv, m, k, x.strides[axis], out.strides[axis], int(initial), *kdims, *xstr, *ostr,
        grid=builtins.min(m, 1 << 20), block=block,
    )  # fmt: skip
    op._take()
    op._enqueue(ctx)


# -- the kernel ---------------------------------------------------------------------------
#: A complex accumulator's conversion (elementwise.cuh; any value, real ones with 0j).
_TO_COMPLEX = {"complex64": "ca_zc64", "complex128": "ca_zc128"}


def _load(dt: str, v: str, acc: str) -> str:
    if acc in _TO_COMPLEX:
        narrow = dt in ("float16", "bfloat16")
        return f"{_TO_COMPLEX[acc]}({_load(dt, v, 'float64') if narrow else v})"
    if dt == "float16":
        return f"({ctype(acc)})ca_half_to_double({v})"
    if dt == "bfloat16":
        return f"({ctype(acc)})ca_bf16_to_float({v})"
    return f"({ctype(acc)})({v})"


def body(op: str, dt: str, acc: str, out: str, nk: int) -> str:
    """The CUDA C++ of ``ca_scan`` (without the elementwise prelude) over ``nk`` kept
    (merged) dimensions: ``op`` ("sum" or "prod") of ``dt`` in ``acc``, stored as ``out``."""
    c = ctype(acc)
    sym = "*" if op == "prod" else "+"
    comb = f"(a) {sym} (b)"
    if DTYPES[acc].kind in "iu":  # wrap around as numpy does (signed overflow is UB in C++)
        comb = f"({c})((ca_u64)(a) {sym} (ca_u64)(b))"
    ident = f"(({c}){1 if op == 'prod' else 0})"
    store: Callable[[str, str], str] = rounded
    if acc in _TO_COMPLEX:  # numpy's complex arithmetic (elementwise.cuh), no FMA
        comb = f"{'ca_zmul' if op == 'prod' else 'ca_zadd'}(a, b)"
        ident = f"{_TO_COMPLEX[acc]}({1 if op == 'prod' else 0})"
        store = _complex_store
    params = [
        f"{DTYPES[out].storage}* out", f"const {DTYPES[dt].storage}* x",
        "long long M", "long long K",
        "long long xk", "long long ok", "int initial",
        *(f"long long d{j}" for j in range(nk)), *(f"long long xs{j}" for j in range(nk)),
        *(f"long long os{j}" for j in range(nk)),
    ]  # fmt: skip
    rows = []
    for j in reversed(range(nk)):
        step = f"c = r % d{j}; r /= d{j};" if j else "c = r;"
        rows.append(f"        {step} xo += c * xs{j}; oo += c * os{j};")
    return "\n".join(
        [
            f"__device__ __forceinline__ {c} ca_scan_comb({c} a, {c} b) {{ return {comb}; }}",
            f"__global__ void ca_scan({', '.join(params)}) {{",
            f"    __shared__ {c} buf[{_BLOCK}];",
            "    const long long tid = threadIdx.x, bs = blockDim.x;",
            "    for (long long m = blockIdx.x; m < M; m += gridDim.x) {",
            "        long long r = m, c, xo = 0, oo = 0;",
            *rows,
            f"        if (initial && tid == 0) out[oo] = {store(out, ident)};",
            "        if (initial) oo += ok;",
            f"        {c} carry = {ident};",
            "        for (long long t0 = 0; t0 < K; t0 += bs) {",
            "            long long k = t0 + tid;",
            f"            buf[tid] = k < K ? {_load(dt, 'x[xo + k * xk]', acc)} : {ident};",
            "            __syncthreads();",
            "            for (long long d = 1; d < bs; d <<= 1) {",
            f"                {c} a = tid >= d ? buf[tid - d] : {ident};",
            "                __syncthreads();",
            "                if (tid >= d) buf[tid] = ca_scan_comb(a, buf[tid]);",
            "                __syncthreads();",
            "            }",
            "            if (k < K)",
            f"                out[oo + k * ok] = {store(out, 'ca_scan_comb(carry, buf[tid])')};",
            "            carry = ca_scan_comb(carry, buf[bs - 1]);",
            "            __syncthreads();",
            "        }",
            "    }",
            "}",
        ]
    )


def _complex_store(out: str, value: str) -> str:
    """``value`` (complex) as the complex ``out`` stores it."""
    return f"{_TO_COMPLEX[out]}({value})"


def source(op: str, dt: str, acc: str, out: str, nk: int) -> str:
    """The whole translation unit of ``ca_scan``."""
    return "\n".join([_prelude(), body(op, dt, acc, out, nk)])


def twin(op: str, dt: str, acc: str, out: str) -> Callable[..., None]:
    """The numpy function the emulator runs for ``ca_scan`` (numpy's sequential scan)."""
    fn = np.cumprod if op == "prod" else np.cumsum
    src, acc_dt, out_dt = SUPPORTED[dt], SUPPORTED[acc], SUPPORTED[out]

    def run(
        o: np.ndarray, x: np.ndarray, m: Any, k: Any, xk: Any, ok: Any, initial: Any, *rest: Any
    ) -> None:
        res = o.view(out_dt)
        first = 1 if int(initial) else 0
        with np.errstate(all="ignore"):
            if first:
                res[..., 0] = out_dt.type(1 if op == "prod" else 0)
            values = fn(x.view(src).astype(acc_dt), axis=-1, dtype=acc_dt)
            res[..., first:] = values.astype(out_dt)

    return run


_kernels: dict[tuple[str, str, str, str, int], Kernel] = {}
_lock = threading.Lock()


def scan_kernel(op: str, dt: str, acc: str, out: str, nk: int) -> Kernel:
    """The compiled-once ``ca_scan`` of ``op`` over ``dt`` (in ``acc``, stored as ``out``)."""
    key = (op, dt, acc, out, nk)
    with _lock:
        found = _kernels.get(key)
        if found is None:
            found = _kernels[key] = Kernel(source(*key), "ca_scan", emulate=twin(op, dt, acc, out))
    return found


# -- the public functions ------------------------------------------------------------------
def cumulative_sum(
    x: Tensor | TensorOp,
    /,
    *,
    axis: int | None = None,
    dtype: DTypeLike = None,
    include_initial: bool = False,
) -> TensorOp:
    """The running sum along ``axis`` (optional for a 1-d ``x``), as the array API
    standard's: small integers and bools sum in int64 (uint64), ``dtype`` picks another;
    ``include_initial`` puts a 0 first (the axis grows by one).

    >>> c = await cuasync.cumulative_sum(x, axis=-1, include_initial=True)
    """
    return _scan("cumulative_sum", "sum", x, axis, dtype, include_initial)


def cumulative_prod(
    x: Tensor | TensorOp,
    /,
    *,
    axis: int | None = None,
    dtype: DTypeLike = None,
    include_initial: bool = False,
) -> TensorOp:
    """The running product along ``axis`` (optional for a 1-d ``x``); integers wrap
    around; ``include_initial`` puts a 1 first.

    >>> p = await cuasync.cumulative_prod(x, axis=0)
    """
    return _scan("cumulative_prod", "prod", x, axis, dtype, include_initial)


def cumsum(a: Tensor | TensorOp, axis: int | None = None, dtype: DTypeLike = None) -> TensorOp:
    """numpy's ``cumsum``: along ``axis``, or over ``a`` flattened (C order) when it is None.

    >>> c = await cuasync.cumsum(x)              # 1-d, x.size elements
    >>> c = await x.cumsum(axis=0)
    """
    if axis is None:
        a = flattened(_operand(a, "cumsum"))
        axis = 0
    return _scan("cumsum", "sum", a, axis, dtype, False)


def cumprod(a: Tensor | TensorOp, axis: int | None = None, dtype: DTypeLike = None) -> TensorOp:
    """numpy's ``cumprod``: along ``axis``, or over ``a`` flattened when it is None.

    >>> p = await cuasync.cumprod(x, axis=1)
    """
    if axis is None:
        a = flattened(_operand(a, "cumprod"))
        axis = 0
    return _scan("cumprod", "prod", a, axis, dtype, False)
