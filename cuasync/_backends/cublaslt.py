"""cuBLASLt matmuls for the CUDA backend: descriptors and an algorithm per seen kind.

``cublasGemmStridedBatchedEx`` chooses its algorithm on every call (cuBLAS's heuristic),
which is most of a small product's host time. ``cublasLtMatmul`` takes the algorithm
as an argument: :class:`LtKinds` makes, once per kind of product (device, types,
transposes, sizes, leading dimensions, batch strides, workspace bound), the matmul
descriptor, the three matrix layouts and the heuristic's first algorithm, and later
products of that kind only call ``cublasLtMatmul`` (docs/performance.md measured 9.9
against 18.0 µs of host time through ctypes on an H200 for 64 x 64 float32). That call
is made from C (the native ``LtMatmul`` of each kind, ``reactor/python/blas.c``: its
fixed arguments are its own fields), not through ctypes, which converted all sixteen
arguments on every product.

Real floating types only (float16, bfloat16, float32, float64; "highest" or "tf32"):
complex and int8 products, a kind the heuristic has no algorithm for, a library
without ``libcublasLt``, and kinds past :data:`LIMIT` take ``cublasGemmStridedBatchedEx``
(``cublas.Blas.gemm``). The library comes from the ``nvidia-cublas`` wheel as
``libcublas`` does; descriptors live as long as the process (they hold no device memory).

>>> found = kinds.by_views(ordinal, a, b, c, "highest", workspace_bytes, plan)
>>> if found is not None:
...     kind, swapped = found       # (cuBLAS's first operand is b where swapped)
...     first, second = (b, a) if swapped else (a, b)
...     kind.matmul(lt_handle, first.ptr, second.ptr, c.ptr, alpha, beta, ws, ws_bytes, stream)
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._dtypes import dtype_name
from .._native import NATIVE
from ..errors import LibraryError
from .nvlib import open_nvidia

if TYPE_CHECKING:
    from .base import DeviceArray
    from .cublas import GemmArgs

__all__ = ["LIMIT", "LtKind", "LtKinds", "StatusName", "load"]

#: Kinds of product kept; later kinds take cublasGemmStridedBatchedEx.
LIMIT = 4096

_P, _I, _I64, _U64, _SIZE = (
    ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_uint64, ctypes.c_size_t
)  # fmt: skip
_DESC_TRANSA, _DESC_TRANSB = 3, 4  # cublasLtMatmulDescAttributes_t (int32 each)
_LAYOUT_BATCH_COUNT, _LAYOUT_BATCH_STRIDE = 5, 6  # cublasLtMatrixLayoutAttribute_t
_PREF_MAX_WORKSPACE = 1  # cublasLtMatmulPreferenceAttributes_t (uint64)
_PREF_MIN_ALIGNMENT = (5, 6, 7, 8)  # ...of A, B, C and D, in bytes (uint32; default 256)
_R_32F, _R_64F = 0, 1  # cudaDataType of the scales
#: dtype -> (cudaDataType, compute type for "highest", scale type, scale C type)
_TYPES: dict[str, tuple[int, int, int, Any]] = {
    "float16": (2, 68, _R_32F, ctypes.c_float),  # CUDA_R_16F, CUBLAS_COMPUTE_32F
    "bfloat16": (14, 68, _R_32F, ctypes.c_float),  # CUDA_R_16BF
    "float32": (0, 68, _R_32F, ctypes.c_float),
    "float64": (1, 70, _R_64F, ctypes.c_double),  # CUBLAS_COMPUTE_64F
}
_COMPUTE_32F_FAST_TF32 = 77


class _Heuristic(ctypes.Structure):
    """``cublasLtMatmulHeuristicResult_t``."""

    _fields_ = [
        ("algo", ctypes.c_uint64 * 8),
        ("workspace_size", _SIZE),
        ("state", _I),
        ("waves", ctypes.c_float),
        ("reserved", _I * 4),
    ]


_load_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_load_error: str | None = None


def _open() -> ctypes.CDLL:
    return open_nvidia("cublasLt")


def _declare(lib: ctypes.CDLL) -> None:
    out = ctypes.POINTER(_P)
    prototypes: dict[str, list[Any]] = {
        "cublasLtCreate": [out],
        "cublasLtMatmulDescCreate": [out, _I, _I],
        "cublasLtMatmulDescSetAttribute": [_P, _I, _P, _SIZE],
        "cublasLtMatrixLayoutCreate": [out, _I, _U64, _U64, _I64],
        "cublasLtMatrixLayoutSetAttribute": [_P, _I, _P, _SIZE],
        "cublasLtMatmulPreferenceCreate": [out],
        "cublasLtMatmulPreferenceSetAttribute": [_P, _I, _P, _SIZE],
        "cublasLtMatmulPreferenceDestroy": [_P],
        "cublasLtMatmulDescDestroy": [_P],
        "cublasLtMatrixLayoutDestroy": [_P],
        "cublasLtMatmulAlgoGetHeuristic": [
            _P,
            _P,
            _P,
            _P,
            _P,
            _P,
            _P,
            _I,
            ctypes.POINTER(_Heuristic),
            ctypes.POINTER(_I),
        ],
        # handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo,
        # workspace, its bytes, stream
        "cublasLtMatmul": [_P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _SIZE, _P],
    }
    for name, argtypes in prototypes.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = _I


def load() -> ctypes.CDLL | None:
    """``libcublasLt`` with the prototypes cuasync calls, or None where it cannot be
    loaded (products then take ``cublasGemmStridedBatchedEx``)."""
    global _lib, _load_error
    if _lib is not None or _load_error is not None:
        return _lib
    with _load_lock:
        if _lib is None and _load_error is None:
            try:
                lib = _open()
                _declare(lib)
                _lib = lib
            except (OSError, AttributeError) as exc:
                _load_error = str(exc)
        return _lib


def _alignment(ptr: int) -> int:
    """The largest power of two up to 256 that divides ``ptr``: an algorithm chosen for
    a pointer so aligned works for every pointer aligned as much (a kind's key has it)."""
    return min(ptr & -ptr, 256) if ptr else 256


#: A ``cublasStatus_t``'s name (``cublas.status_name``: cuBLAS names cuBLASLt's statuses).
StatusName = Callable[[int], str]


def _check(status: int, call: str, name: StatusName) -> None:
    if status:
        raise LibraryError(status, name(status), call)


def _address(fn: Any) -> int:
    """The C address of a library's entry point (a ctypes function pointer)."""
    return int(ctypes.cast(fn, ctypes.c_void_p).value or 0)


class LtKind:
    """One kind of product: its descriptor, layouts and algorithm (made by
    :meth:`LtKinds.get`). :meth:`matmul` enqueues it on given pointers and scales,
    through its native ``LtMatmul`` (the call made from C)."""

    __slots__ = ("_call", "_name", "a", "b", "c", "desc")

    def __init__(
        self,
        lib: ctypes.CDLL,
        desc: int,
        layouts: tuple[int, int, int],
        heuristic: _Heuristic,
        scale: Any,
        name: StatusName,
    ) -> None:
        self._name = name
        self.desc = desc
        self.a, self.b, self.c = layouts
        self._call = NATIVE.LtMatmul(
            _address(lib.cublasLtMatmul), desc, *layouts, bytes(heuristic.algo),
            scale is ctypes.c_double,
        )  # fmt: skip

    def matmul(
        self,
        handle: int,
        a: int,
        b: int,
        c: int,
        alpha: complex,
        beta: complex,
        workspace: int,
        workspace_bytes: int,
        stream: int,
    ) -> None:
        """``c = alpha * op(a) op(b) + beta * c`` on ``stream`` (cuBLAS's column-major
        operands: :class:`~.cublas.GemmArgs`'s ``a``, ``b`` and ``c``)."""
        status = self._call(
            handle, alpha.real, beta.real, a, b, c, workspace, workspace_bytes, stream
        )  # fmt: skip
        if status:
            _check(status, "cublasLtMatmul", self._name)


class LtKinds:
    """The cuBLASLt state of one ``cublas.Blas``: a handle per device and the kinds of
    product seen, each made once (None: that kind takes cublasGemmStridedBatchedEx)."""

    def __init__(self, lib: ctypes.CDLL, name: StatusName) -> None:
        self._lib = lib
        self._name = name
        self._lock = threading.Lock()
        self._handles: dict[int, int] = {}
        self._kinds: dict[tuple[Any, ...], LtKind | None] = {}  # (never emptied: see LIMIT)
        #: (kind, swapped) by the views' geometry (never emptied: at most LIMIT)
        self._by_views: dict[tuple[Any, ...], tuple[LtKind, bool] | None] = {}

    def _check(self, status: int, call: str) -> None:
        _check(status, call, self._name)

    def handle(self, ordinal: int) -> int:
        """The device's cuBLASLt handle (its context current: the backend made it so)."""
        found = self._handles.get(ordinal)
        if found is not None:
            return found
        with self._lock:
            if ordinal not in self._handles:
                h = _P()
                self._check(self._lib.cublasLtCreate(ctypes.byref(h)), "cublasLtCreate")
                self._handles[ordinal] = int(h.value or 0)
            return self._handles[ordinal]

    def by_views(
        self,
        ordinal: int,
        a: DeviceArray,
        b: DeviceArray,
        c: DeviceArray,
        precision: str,
        workspace_bytes: int,
        plan: Callable[[Any, Any, Any], GemmArgs],
    ) -> tuple[LtKind, bool] | None:
        """The kind of ``c = a @ b`` (batched views) and whether cuBLAS's first operand
        is ``b`` (a row-major ``c`` is computed as ``c^T = b^T a^T``), found by the views'
        dtype, shapes and strides and their pointers' alignments; ``plan`` (``cublas.plan``)
        makes the arguments on a miss. None: the product takes GemmEx (see :meth:`get`)."""
        key = (
            ordinal, c.dtype, precision, workspace_bytes, a.shape, a.strides, b.shape,
            b.strides, c.shape, c.strides,
            _alignment(a.ptr), _alignment(b.ptr), _alignment(c.ptr),
        )  # fmt: skip
        try:
            return self._by_views[key]
        except KeyError:
            pass
        args = plan(a, b, c)
        kind = self.get(ordinal, dtype_name(c.dtype), precision, args, workspace_bytes)
        found = None if kind is None else (kind, args.swapped)  # (never by pointers: a is b)
        if len(self._by_views) < LIMIT:
            self._by_views[key] = found
        return found

    def get(
        self, ordinal: int, dtype: str, precision: str, args: GemmArgs, workspace_bytes: int
    ) -> LtKind | None:
        """The kind of this product, made at its first sight; None where it takes
        ``cublasGemmStridedBatchedEx`` (a type cuBLASLt is not used for, no algorithm,
        more than :data:`LIMIT` kinds)."""
        key = (
            ordinal, dtype, precision, args.transa, args.transb, args.m, args.n, args.k,
            args.lda, args.ldb, args.ldc, args.stride_a, args.stride_b, args.stride_c,
            args.batch, workspace_bytes,
            _alignment(args.a), _alignment(args.b), _alignment(args.c),
        )  # fmt: skip
        kinds = self._kinds
        try:
            return kinds[key]
        except KeyError:
            pass
        types = _TYPES.get(dtype)
        if types is None or not (args.m and args.n and args.k):
            return None
        handle = self.handle(ordinal)
        with self._lock:
            if key not in kinds:
                if len(kinds) >= LIMIT:
                    return None
                kinds[key] = self._make(handle, types, precision, args, workspace_bytes, key[-3:])
            return kinds[key]

    def _make(
        self,
        handle: int,
        types: tuple[int, int, int, Any],
        precision: str,
        args: GemmArgs,
        workspace_bytes: int,
        alignments: tuple[int, int, int],
    ) -> LtKind | None:
        lib = self._lib
        dtype, compute, scale_type, scale = types
        if precision == "tf32" and compute == 68:
            compute = _COMPUTE_32F_FAST_TF32
        desc = _P()
        self._check(
            lib.cublasLtMatmulDescCreate(ctypes.byref(desc), compute, scale_type),
            "cublasLtMatmulDescCreate",
        )
        for attr, op in ((_DESC_TRANSA, args.transa), (_DESC_TRANSB, args.transb)):
            value = ctypes.c_int32(op)
            self._check(
                lib.cublasLtMatmulDescSetAttribute(desc, attr, ctypes.byref(value), 4),
                "cublasLtMatmulDescSetAttribute",
            )
        # the stored matrices, column-major: op(A) is m x k, op(B) k x n, C m x n
        a_shape = (args.m, args.k) if args.transa == 0 else (args.k, args.m)
        b_shape = (args.k, args.n) if args.transb == 0 else (args.n, args.k)
        layouts = []
        for (rows, cols), ld, stride in (
            (a_shape, args.lda, args.stride_a),
            (b_shape, args.ldb, args.stride_b),
            ((args.m, args.n), args.ldc, args.stride_c),
        ):
            layout = _P()
            self._check(
                lib.cublasLtMatrixLayoutCreate(ctypes.byref(layout), dtype, rows, cols, ld),
                "cublasLtMatrixLayoutCreate",
            )
            if args.batch > 1:
                count: Any = ctypes.c_int32(args.batch)
                offset: Any = ctypes.c_int64(stride)
                for attr, value, size in (
                    (_LAYOUT_BATCH_COUNT, count, 4),
                    (_LAYOUT_BATCH_STRIDE, offset, 8),
                ):
                    self._check(
                        lib.cublasLtMatrixLayoutSetAttribute(
                            layout, attr, ctypes.byref(value), size
                        ),
                        "cublasLtMatrixLayoutSetAttribute",
                    )
            layouts.append(int(layout.value or 0))
        pref = _P()
        self._check(
            lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "cublasLtMatmulPreferenceCreate"
        )
        try:
            settings: list[tuple[int, Any]] = [
                (_PREF_MAX_WORKSPACE, ctypes.c_uint64(workspace_bytes))
            ]
            a_align, b_align, c_align = alignments
            for attr, align in zip(
                _PREF_MIN_ALIGNMENT, (a_align, b_align, c_align, c_align), strict=True
            ):
                settings.append((attr, ctypes.c_uint32(align)))
            for attr, value in settings:
                status = lib.cublasLtMatmulPreferenceSetAttribute(
                    pref, attr, ctypes.byref(value), ctypes.sizeof(value)
                )
                self._check(status, "cublasLtMatmulPreferenceSetAttribute")
            found, heuristic = _I(0), _Heuristic()
            a, b, c = layouts
            status = lib.cublasLtMatmulAlgoGetHeuristic(
                handle, desc, a, b, c, c, pref, 1, ctypes.byref(heuristic), ctypes.byref(found)
            )
        finally:
            lib.cublasLtMatmulPreferenceDestroy(pref)
        if status or not found.value:  # (no algorithm for this kind: the other entry point)
            for layout_handle in layouts:
                lib.cublasLtMatrixLayoutDestroy(layout_handle)
            lib.cublasLtMatmulDescDestroy(desc)
            return None
        return LtKind(lib, int(desc.value or 0), (a, b, c), heuristic, scale, self._name)
