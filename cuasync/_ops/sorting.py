"""Sorting and searching: ``sort``, ``argsort`` (the array API standard's, with
``descending`` and ``stable``) and ``searchsorted``.

``sort``/``argsort`` run a bitonic sort of each row along ``axis``, in a workspace of
(key, index) pairs padded to a power of two ``P``: a kernel loads the rows, a kernel
sorts tiles of up to 2048 pairs in shared memory (a block each), a kernel stores the
values or the indices. Longer rows take, per merge stage past the tile, one launch per
compare-exchange step across tiles and one shared-memory launch for the rest. Pairs are
ordered by key, then by index, so the order is total: every sort is stable
(``stable=False`` is allowed, and gives the same order) and deterministic. NaNs sort
last, as numpy's (first when ``descending``, as array-api-strict's); equal keys keep
their order in both directions. float16 and bfloat16 keys are compared in float32
(exactly). Complex tensors are refused (DTypeError). ``searchsorted`` is a thread per
searched value, a binary search in the same order (NaN the largest).

>>> s = await cuasync.sort(x, axis=-1)
>>> i = await cuasync.argsort(x, descending=True)
>>> j = await cuasync.searchsorted(edges, values, side="right")
"""

from __future__ import annotations

import builtins
import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._core.context import ExecutionContext
from .._core.device import Device
from .._core.op import device_op
from .._core.output import Output
from .._dtypes import DTYPES, SUPPORTED, dtype_name
from .._first_use import unprepared
from .._launch import builtin
from .._launch.kernel import Kernel, program_kernels
from .._tensor import Shape, Tensor, contiguous_strides
from .._transfers.copies import empty
from .._transfers.device_copy import new_tensor
from ..errors import ArgumentError, DTypeError, ShapeError
from . import elementwise
from .codegen import _prelude, ctype, rounded
from .creation import full
from .dtype_functions import result_type
from .joins import take, take_kernel
from .manipulation import reshape
from .on_output import on_tensor
from .reductions import normalize_axes
from .scan import _kept, _operand
from .tensorop import TensorOp, flattened, tensor_op

__all__ = ["argsort", "isin", "searchsorted", "sort"]

#: The dtypes sort and searchsorted take.
SORT_DTYPES = frozenset(
    (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "bfloat16",
        "float32",
        "float64",
    )
)
_BLOCK = 256
_MAX_GRID = 1 << 16
#: Elements of a row sorted in shared memory at once (keys and indices: 32 KiB at most).
TILE = 2048


def _key(dt: str) -> str:
    """The dtype keys are compared in: float16 and bfloat16 as float32, bool as uint8."""
    return {"float16": "float32", "bfloat16": "float32", "bool": "uint8"}.get(dt, dt)


def _load(dt: str, v: str) -> str:
    if dt == "float16":
        return f"(float)ca_half_to_double({v})"
    if dt == "bfloat16":
        return f"ca_bf16_to_float({v})"
    return f"({ctype(_key(dt))})({v})"


def _decompose(nk: int, names: tuple[str, ...]) -> list[str]:
    """Statements adding row ``m``'s offset along the kept dims to each of ``names``."""
    lines = []
    for j in reversed(range(nk)):
        step = f"c = r % d{j}; r /= d{j};" if j else "c = r;"
        adds = " ".join(f"{n}o += c * {n}s{j};" for n in names)
        lines.append(f"        {step} {adds}")
    return lines


def body(dt: str, nk: int, values: bool) -> str:
    """The CUDA C++ of ``ca_sort_init``, ``ca_sort_step`` and ``ca_sort_store`` (without
    the elementwise prelude): rows of ``dt`` over ``nk`` kept (merged) dimensions,
    storing the sorted values (``values``) or their int64 indices."""
    key = ctype(_key(dt))
    out = DTYPES[dt].storage if values else "long long"
    dims = [f"long long d{j}" for j in range(nk)]
    result = rounded(dt, "keys[w]") if values else "idx[w]"
    grid = "long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x"
    stride = "t += (long long)gridDim.x * blockDim.x"
    return "\n".join(
        [
            f"typedef {key} ca_key;",
            "// (a, ia) before (b, ib): padding last, NaN last (first when descending), then",
            "// by key, then by index: a total order, so the sort is stable.",
            "__device__ __forceinline__ bool ca_before(ca_key a, long long ia, ca_key b,",
            "                                          long long ib, long long K, int desc) {",
            "    bool pa = ia >= K, pb = ib >= K;",
            "    if (pa || pb) return pa && pb ? ia < ib : pb;",
            "    bool na = a != a, nb = b != b;",
            "    if (na != nb) return desc ? na : nb;",
            "    if (!na && a != b) return desc ? a > b : a < b;",
            "    return ia < ib;",
            "}",
            "__global__ void ca_sort_init(ca_key* keys, long long* idx, "
            f"const {DTYPES[dt].storage}* x, long long M, long long K, long long P, "
            + ", ".join(["long long xk", *dims, *(f"long long xs{j}" for j in range(nk))])
            + ") {",
            f"    for ({grid}; t < M * P; {stride}) {{",
            "        long long m = t / P, k = t - m * P, r = m, c, xo = 0;",
            "        idx[t] = k;",
            "        if (k >= K) { keys[t] = (ca_key)0; continue; }",
            *_decompose(nk, ("x",)),
            f"        keys[t] = {_load(dt, 'x[xo + k * xk]')};",
            "    }",
            "}",
            "__global__ void ca_sort_step(ca_key* keys, long long* idx, long long M, "
            "long long K, long long P, long long kk, long long j, int desc) {",
            "    const long long half = P / 2;",
            f"    for ({grid}; t < M * half; {stride}) {{",
            "        long long m = t / half, r = t - m * half;",
            "        long long i = (r / j) * 2 * j + r % j;",
            "        long long a = m * P + i, b = a + j;",
            "        bool up = (i & kk) == 0;",
            "        ca_key ka = keys[a], kb = keys[b];",
            "        long long ia = idx[a], ib = idx[b];",
            "        bool swap = up ? ca_before(kb, ib, ka, ia, K, desc)",
            "                       : ca_before(ka, ia, kb, ib, K, desc);",
            "        if (swap) { keys[a] = kb; keys[b] = ka; idx[a] = ib; idx[b] = ia; }",
            "    }",
            "}",
            "// Every step with j < T of the stages kk_lo..kk_hi, on tiles of T elements in",
            "// shared memory (the same compare-exchanges as ca_sort_step, in one launch).",
            "__global__ void ca_sort_local(ca_key* keys, long long* idx, long long M, "
            "long long K, long long P, long long T, long long kk_lo, long long kk_hi, "
            "long long j_first, int desc) {",
            f"    __shared__ ca_key sk[{TILE}];",
            f"    __shared__ long long si[{TILE}];",
            "    const long long tiles = P / T;",
            "    for (long long b = blockIdx.x; b < M * tiles; b += gridDim.x) {",
            "        long long m = b / tiles, base = (b - m * tiles) * T, g0 = m * P + base;",
            "        for (long long e = threadIdx.x; e < T; e += blockDim.x) {",
            "            sk[e] = keys[g0 + e]; si[e] = idx[g0 + e];",
            "        }",
            "        __syncthreads();",
            "        for (long long kk = kk_lo; kk <= kk_hi; kk <<= 1) {",
            "            for (long long j = kk == kk_lo ? j_first : kk / 2; j > 0; j >>= 1) {",
            "                for (long long r = threadIdx.x; r < T / 2; r += blockDim.x) {",
            "                    long long i = (r / j) * 2 * j + r % j, c = i + j;",
            "                    bool up = ((base + i) & kk) == 0;",
            "                    ca_key ka = sk[i], kb = sk[c];",
            "                    long long ia = si[i], ib = si[c];",
            "                    bool swap = up ? ca_before(kb, ib, ka, ia, K, desc)",
            "                                   : ca_before(ka, ia, kb, ib, K, desc);",
            "                    if (swap) { sk[i] = kb; sk[c] = ka; si[i] = ib; si[c] = ia; }",
            "                }",
            "                __syncthreads();",
            "            }",
            "        }",
            "        for (long long e = threadIdx.x; e < T; e += blockDim.x) {",
            "            keys[g0 + e] = sk[e]; idx[g0 + e] = si[e];",
            "        }",
            "        __syncthreads();",
            "    }",
            "}",
            f"__global__ void ca_sort_store({out}* out, const ca_key* keys, const long long* idx, "
            + ", ".join(
                ["long long M", "long long K", "long long P", "long long ok", *dims]
                + [f"long long os{j}" for j in range(nk)]
            )
            + ") {",
            f"    for ({grid}; t < M * K; {stride}) {{",
            "        long long m = t / K, k = t - m * K, r = m, c, oo = 0;",
            *_decompose(nk, ("o",)),
            "        long long w = m * P + k;",
            f"        out[oo + k * ok] = {result};",
            "    }",
            "}",
        ]
    )


# -- the numpy twins --------------------------------------------------------------------------
def _before(ka: Any, ia: Any, kb: Any, ib: Any, k: int, desc: bool) -> np.ndarray:
    pa, pb = ia >= k, ib >= k
    na, nb = ka != ka, kb != kb
    with np.errstate(invalid="ignore"):
        order = (ka > kb) if desc else (ka < kb)
    by_key = np.where(na != nb, na if desc else nb, np.where(~na & (ka != kb), order, ia < ib))
    return np.where(pa | pb, np.where(pa & pb, ia < ib, pb), by_key)


def _twins(dt: str, values: bool) -> tuple[Callable[..., None], ...]:
    src, key = SUPPORTED[dt], SUPPORTED[_key(dt)]
    out_dt = src if values else np.dtype(np.int64)

    def init(
        keys: np.ndarray, idx: np.ndarray, x: np.ndarray, m: Any, k: Any, p: Any, *_: Any
    ) -> None:
        m, k, p = int(m), int(k), int(p)
        kv, iv = keys.view(key).reshape(m, p), idx.reshape(m, p)
        iv[...] = np.arange(p)
        kv[...] = 0
        kv[:, :k] = x.view(src).astype(key).reshape(m, k)

    def step(
        keys: np.ndarray, idx: np.ndarray, m: Any, k: Any, p: Any, kk: Any, j: Any, desc: Any
    ) -> None:
        m, k, p, kk, j = (int(v) for v in (m, k, p, kk, j))
        kv, iv = keys.view(key).reshape(m, p), idx.reshape(m, p)
        r = np.arange(p // 2)
        lo = (r // j) * 2 * j + r % j
        hi = lo + j
        up = (lo & kk) == 0
        ka, kb, ia, ib = kv[:, lo], kv[:, hi], iv[:, lo], iv[:, hi]
        swap = np.where(
            up, _before(kb, ib, ka, ia, k, bool(desc)), _before(ka, ia, kb, ib, k, bool(desc))
        )
        kv[:, lo], kv[:, hi] = np.where(swap, kb, ka), np.where(swap, ka, kb)
        iv[:, lo], iv[:, hi] = np.where(swap, ib, ia), np.where(swap, ia, ib)

    def store(
        out: np.ndarray, keys: np.ndarray, idx: np.ndarray, m: Any, k: Any, p: Any, *_: Any
    ) -> None:
        m, k, p = int(m), int(k), int(p)
        part = keys.view(key).reshape(m, p)[:, :k] if values else idx.reshape(m, p)[:, :k]
        out.view(out_dt)[...] = part.astype(out_dt).reshape(out.shape)

    def local(
        keys: np.ndarray, idx: np.ndarray, m: Any, k: Any, p: Any, t: Any, *rest: Any
    ) -> None:
        lo, hi, first, desc = (int(v) for v in rest)
        kk = lo
        while kk <= hi:  # the same compare-exchanges, over whole rows (j < T: in tiles)
            j = first if kk == lo else kk // 2
            while j:
                step(keys, idx, m, k, p, kk, j, desc)
                j //= 2
            kk *= 2

    return init, step, local, store


_kernels: dict[tuple[str, int, bool], tuple[Kernel, Kernel, Kernel, Kernel]] = {}
_lock = threading.Lock()


def sort_kernels(dt: str, nk: int, values: bool) -> tuple[Kernel, Kernel, Kernel, Kernel]:
    """The compiled-once ``ca_sort_init``, ``ca_sort_step``, ``ca_sort_local`` and
    ``ca_sort_store`` of ``dt``."""
    key = (dt, nk, values)
    with _lock:
        found = _kernels.get(key)
        if found is None:
            src = "\n".join([_prelude(), body(dt, nk, values)])
            init, step, local, store = _twins(dt, values)
            kernels = program_kernels(  # (one compile, one module for the four)
                src,
                {"ca_sort_init": init, "ca_sort_step": step, "ca_sort_local": local,
                 "ca_sort_store": store},
            )  # fmt: skip
            k = list(kernels.values())
            found = _kernels[key] = (k[0], k[1], k[2], k[3])
    return found


# -- the ops ----------------------------------------------------------------------------------
def _check_sortable(x: Tensor | TensorOp, name: str) -> str:
    dt = dtype_name(x.dtype)
    if dt not in SORT_DTYPES:
        raise DTypeError(
            f"{name}: x has dtype {dt}, which {name} does not take; it takes "
            f"{', '.join(sorted(SORT_DTYPES))}"
        )
    return dt


def _grid(n: int) -> int:
    return builtins.max(1, builtins.min(-(-n // _BLOCK), _MAX_GRID))


def _sort(name: str, x: Any, axis: Any, descending: Any, stable: Any, values: bool) -> TensorOp:
    x = _operand(x, name)
    dt = _check_sortable(x, name)
    for flag, arg in ((descending, "descending"), (stable, "stable")):
        if not isinstance(flag, (bool, np.bool_)):
            raise ArgumentError(f"{name}: {arg} must be a bool, got {flag!r}"[:200])
    if axis is None:  # (numpy's: x flattened, a 0-d x too)
        x, axis = reshape(x, (-1,)), 0
    if x.ndim == 0:
        raise ArgumentError(f"{name}: x is 0-d; sorting needs an axis")
    (a,) = normalize_axes(axis, x.ndim, name, allow_tuple=False)
    out_dtype = x.dtype if values else np.dtype(np.int64)
    shape = x.shape
    desc = int(bool(descending))

    def kernels(strides: Shape) -> tuple[Kernel, ...]:
        kdims = _kept(shape, strides, contiguous_strides(shape), a)[0]
        return sort_kernels(dt, len(kdims), values)

    def first_use(strides: Shape) -> Callable[[Device], tuple[tuple[Any, Device], ...]]:
        def prepare(on: Device) -> tuple[tuple[Any, Device], ...]:
            if not math.prod(shape):
                return ()
            return tuple((k, on) for k in kernels(strides) if on.ordinal not in k._prepared)

        return prepare

    def build(t: Tensor) -> TensorOp:
        def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
            out = new_tensor(ctx, shape, out_dtype, name)
            if out.size:
                _launch(ctx, t, out, a, kernels(t.strides), desc)
            return Output.ready(out)

        op = device_op(enqueue, t.device, name, first_use=first_use(t.strides))
        return tensor_op(op, shape, out_dtype)

    return on_tensor(x, name, shape, out_dtype, build, first_use(contiguous_strides(shape)))


def _launch(
    ctx: ExecutionContext, x: Tensor, out: Tensor, axis: int, ks: tuple[Kernel, ...], desc: int
) -> None:
    init, step, local, store = ks
    kdims, (ostr, xstr) = _kept(x.shape, x.strides, out.strides, axis)
    k, m = x.shape[axis], math.prod(kdims)
    p = 1 << builtins.max(k - 1, 0).bit_length()
    keys = new_tensor(ctx, (m * p,), np.dtype(SUPPORTED[_key(dtype_name(x.dtype))]), "sort keys")
    idx = new_tensor(ctx, (m * p,), np.dtype(np.int64), "sort indices")
    xv = builtin.storage_view(
        Tensor(x.allocation, (*kdims, k), x.dtype, (*xstr, x.strides[axis]), x.offset)
    )
    ov = builtin.storage_view(
        Tensor(out.allocation, (*kdims, k), out.dtype, (*ostr, out.strides[axis]), out.offset)
    )

    def launch(kernel: Kernel, *args: Any, n: int, block: int = 0) -> None:
        if block:  # a block per tile
            grid, threads = builtins.min(n, _MAX_GRID), builtins.min(builtins.max(block, 32), 1024)
        else:
            grid, threads = _grid(n), _BLOCK
        op = kernel.launch(*args, grid=grid, block=threads)
        op._take()
        op._enqueue(ctx)

    launch(init, keys, idx, xv, m, k, p, x.strides[axis], *kdims, *xstr, n=m * p)
    t = builtins.min(p, TILE)  # a tile in shared memory: every step with j < t at once
    if p > 1:
        launch(local, keys, idx, m, k, p, t, 2, t, 1, desc, n=m * p // t, block=t // 2)
    kk = 2 * t
    while kk <= p:  # longer rows: the steps with j >= t across tiles, one launch each
        j = kk // 2
        while j >= t:
            launch(step, keys, idx, m, k, p, kk, j, desc, n=m * p // 2)
            j //= 2
        launch(local, keys, idx, m, k, p, t, kk, kk, t // 2, desc, n=m * p // t, block=t // 2)
        kk *= 2
    launch(store, ov, keys, idx, m, k, p, out.strides[axis], *kdims, *ostr, n=m * k)


def sort(
    x: Tensor | TensorOp, /, *, axis: int | None = -1, descending: bool = False, stable: bool = True
) -> TensorOp:
    """``x`` sorted along ``axis`` (None: ``x`` flattened, as numpy's): NaNs last (first
    when ``descending``); always stable (equal elements keep their order), whatever
    ``stable`` says.

    >>> s = await cuasync.sort(x)                   # along the last axis
    >>> s = await cuasync.sort(x, axis=0, descending=True)
    """
    return _sort("sort", x, axis, descending, stable, values=True)


def argsort(
    x: Tensor | TensorOp, /, *, axis: int | None = -1, descending: bool = False, stable: bool = True
) -> TensorOp:
    """The int64 indices that sort ``x`` along ``axis`` (:func:`sort`'s order; stable;
    None: the indices into ``x`` flattened, as numpy's).

    >>> order = await cuasync.argsort(x, axis=-1)
    """
    return _sort("argsort", x, axis, descending, stable, values=False)


# -- searchsorted -----------------------------------------------------------------------------
def search_body(dt: str, nd: int) -> str:
    """The CUDA C++ of ``ca_search``: for each value of ``x2`` (``nd`` dims, strided),
    the insertion index in the sorted 1-d ``x1``."""
    key = ctype(_key(dt))
    st = DTYPES[dt].storage
    dims = [f"long long d{j}" for j in range(nd)] + [f"long long vs{j}" for j in range(nd)]
    return "\n".join(
        [
            f"typedef {key} ca_key;",
            "// a < b with NaN the largest (numpy's searchsorted order)",
            "__device__ __forceinline__ bool ca_lt(ca_key a, ca_key b) {",
            "    return a == a && (b != b || a < b);",
            "}",
            f"__global__ void ca_search(long long* out, const {st}* x1, const {st}* x2, "
            + ", ".join(["long long N", "long long S", "long long xs", "int right", *dims])
            + ") {",
            "    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < S;",
            "         t += (long long)gridDim.x * blockDim.x) {",
            "        long long r = t, c, vo = 0;",
            *(
                f"        {f'c = r % d{j}; r /= d{j};' if j else 'c = r;'} vo += c * vs{j};"
                for j in reversed(range(nd))
            ),
            f"        ca_key v = {_load(dt, 'x2[vo]')};",
            "        long long lo = 0, hi = N;",
            "        while (lo < hi) {",
            "            long long mid = lo + (hi - lo) / 2;",
            f"            ca_key e = {_load(dt, 'x1[mid * xs]')};",
            "            bool go_right = right ? !ca_lt(v, e) : ca_lt(e, v);",
            "            if (go_right) lo = mid + 1; else hi = mid;",
            "        }",
            "        out[t] = lo;",
            "    }",
            "}",
        ]
    )


def _search_twin(dt: str) -> Callable[..., None]:
    src = SUPPORTED[dt]

    def run(
        out: np.ndarray,
        x1: np.ndarray,
        x2: np.ndarray,
        n: Any,
        s: Any,
        xs: Any,
        right: Any,
        *_: Any,
    ) -> None:
        side: Any = "right" if int(right) else "left"
        wide = np.float64 if src.kind == "f" else src  # (bfloat16: via float64)
        found = np.searchsorted(
            x1.view(src).astype(wide),
            x2.view(src).astype(wide),
            side=side,
        )
        out[...] = found.reshape(out.shape)

    return run


_search_kernels: dict[tuple[str, int], Kernel] = {}


def search_kernel(dt: str, nd: int) -> Kernel:
    """The compiled-once ``ca_search`` of ``dt`` over ``nd`` dims of values."""
    with _lock:
        found = _search_kernels.get((dt, nd))
        if found is None:
            src = "\n".join([_prelude(), search_body(dt, nd)])
            found = _search_kernels[(dt, nd)] = Kernel(src, "ca_search", emulate=_search_twin(dt))
    return found


def searchsorted(
    x1: Tensor | TensorOp,
    x2: Tensor | TensorOp,
    /,
    *,
    side: str = "left",
    sorter: Tensor | TensorOp | None = None,
) -> TensorOp:
    """For each element of ``x2``, the index in the sorted 1-d ``x1`` where it would be
    inserted to keep the order (``side="left"``: before equal elements, ``"right"``:
    after them); int64, of ``x2``'s shape. ``sorter``: indices that sort ``x1``
    (:func:`argsort`'s). NaN counts as the largest, as numpy's.

    >>> j = await cuasync.searchsorted(edges, values)
    >>> j = await cuasync.searchsorted(x, v, sorter=await cuasync.argsort(x))
    """
    x1, x2 = _operand(x1, "searchsorted"), _operand(x2, "searchsorted")
    dt = _check_sortable(x1, "searchsorted")
    if x1.ndim != 1:
        raise ShapeError(f"searchsorted: x1 must be 1-d, it has shape {x1.shape}")
    if x2.dtype != x1.dtype:
        raise _mixed("searchsorted", x1, x2)
    if side not in ("left", "right"):
        raise ArgumentError(f'searchsorted: side must be "left" or "right", got {side!r}'[:200])
    if sorter is not None:
        if not isinstance(sorter, Tensor) or not isinstance(x1, Tensor):
            raise ArgumentError("searchsorted: sorter= takes tensors (await the ops first)")
        if sorter.shape != x1.shape or sorter.dtype.kind not in "iu":
            raise ArgumentError(
                f"searchsorted: sorter must be an integer tensor of x1's shape {x1.shape}, "
                f"got {dtype_name(sorter.dtype)} {sorter.shape}"
            )
        x1 = take(x1, sorter)
    shape, right = x2.shape, int(side == "right")
    searches = _searches(x1, dt, len(shape))

    def with_values(v: Tensor) -> TensorOp:
        def with_sorted(s: Tensor) -> TensorOp:
            def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
                out = new_tensor(ctx, shape, np.dtype(np.int64), "searchsorted")
                if out.size:
                    dims = tuple(d for d in v.shape)
                    kernel = search_kernel(dt, len(dims))
                    xv = builtin.storage_view(s)
                    vv = builtin.storage_view(v)
                    op = kernel.launch(
                        out, xv, vv, s.shape[0], out.size, s.strides[0], right, *dims,
                        *v.strides, grid=_grid(out.size), block=_BLOCK,
                    )  # fmt: skip
                    op._take()
                    op._enqueue(ctx)
                return Output.ready(out)

            op = device_op(enqueue, s.device, "searchsorted", first_use=searches[0])
            return tensor_op(op, shape, np.int64)

        return on_tensor(x1, "searchsorted", shape, np.int64, with_sorted, searches[0])

    return on_tensor(x2, "searchsorted", shape, np.int64, with_values, searches[1])


def _searches(
    x1: Tensor | TensorOp, dt: str, nd: int, *more: Kernel
) -> tuple[Callable[[Device], tuple[tuple[Any, Device], ...]], ...]:
    """The first uses of a binary search over the sorted ``x1`` for values of ``nd``
    axes (and of ``more`` kernels launched with it): once ``x1`` has run, and before
    (where ``x1`` is an op, its own first use too)."""

    def searching(on: Device) -> tuple[tuple[Any, Device], ...]:
        return unprepared((search_kernel(dt, nd), *more), on)

    def before(on: Device) -> tuple[tuple[Any, Device], ...]:
        first = x1._first_use(on) if isinstance(x1, TensorOp) else ()
        return (*first, *searching(on))

    return searching, before


def _mixed(name: str, x1: Any, x2: Any) -> DTypeError:
    """The refusal of operands of two dtypes, advising their common dtype (converting
    x2 to x1's would truncate floats or wrap integers, and answer wrongly)."""
    a, b = dtype_name(x1.dtype), dtype_name(x2.dtype)
    try:
        common = result_type(x1.dtype, x2.dtype)
    except DTypeError:
        common = None
    integers = x1.dtype.kind in "iu" and x2.dtype.kind in "iu"
    if integers and common is not None and common.kind not in "iu":
        return DTypeError(
            f"{name}: x1 is {a} and x2 {b}, which have no common integer dtype (numpy's "
            "float64 rounds integers past 2**53); convert one to the other's dtype where "
            "its values fit"
        )
    if common is None or dtype_name(common) not in SORT_DTYPES:
        return DTypeError(f"{name}: x1 is {a} and x2 {b}; convert them to one dtype {name} takes")
    c = dtype_name(common)
    fix = " and ".join(f"x{i}.astype('{c}')" for i, d in ((1, a), (2, b)) if d != c)
    return DTypeError(f"{name}: x1 is {a} and x2 {b}; convert them to {c} first: {fix}")


def isin(x1: Tensor | TensorOp, x2: Tensor | TensorOp, /, *, invert: bool = False) -> TensorOp:
    """Whether each element of ``x1`` is among the elements of ``x2`` (a bool tensor of
    ``x1``'s shape; ``invert=True``: whether it is not), as the array API's (2025.12)
    and numpy's: ``x2`` flattened and sorted, then a binary search per element of
    ``x1``. NaN is in nothing (NaN != NaN).

    >>> mask = await cuasync.isin(labels, wanted)
    """

    x1, x2 = _operand(x1, "isin"), _operand(x2, "isin")
    dt = _check_sortable(x1, "isin")
    if x2.dtype != x1.dtype:
        raise _mixed("isin", x1, x2)
    if not isinstance(invert, (bool, np.bool_)):
        raise ArgumentError(f"isin: invert must be a bool, got {invert!r}"[:200])
    shape = x1.shape
    if x2.size == 0:
        for v in (x1, x2):
            if isinstance(v, TensorOp):
                v._take()  # (nothing to compute from it)
        return full(shape, bool(invert), dtype="bool")
    ordered = sort(flattened(x2), axis=0)
    searches = _searches(ordered, dt, len(shape), take_kernel(x2.dtype.itemsize, "int64"))
    test = elementwise.not_equal if invert else elementwise.equal

    def compared(values: Tensor | None, on: Device) -> Sequence[tuple[Any, Device]]:
        """The comparison's kernel: of the new tensor ``take`` makes and ``values`` (x1's
        output; None: a new tensor too), planned on stand-ins, never executed."""
        made = [empty(shape, x1.dtype, device=on) for _ in range(1 if values is not None else 2)]
        probe = test(made[0], values if values is not None else made[1])
        probe._take()
        return probe._first_use(on)

    def with_values(v: Tensor) -> TensorOp:
        def first_use(on: Device) -> tuple[tuple[Any, Device], ...]:
            return (*searches[0](on), *compared(v, on))

        def with_sorted(s: Tensor) -> TensorOp:
            def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
                where = searchsorted(s, v)
                where._take()
                found = take(s, where._enqueue(ctx).get(), mode="clip")
                found._take()
                near = found._enqueue(ctx).get()
                result = test(near, v)
                result._take()
                return result._enqueue(ctx)

            op = device_op(enqueue, s.device, "isin", first_use=first_use)
            return tensor_op(op, shape, np.bool_)

        return on_tensor(ordered, "isin", shape, np.bool_, with_sorted, first_use)

    def first_use(on: Device) -> tuple[tuple[Any, Device], ...]:
        return (*searches[1](on), *compared(None, on))

    return on_tensor(x1, "isin", shape, np.bool_, with_values, first_use)
