"""cuBLAS for the CUDA backend: ``libcublas`` through ctypes, one handle per device.

The library comes from NVIDIA's ``nvidia-cublas`` wheel (``nvidia/cu13/lib``, which
PyTorch's CUDA 13 builds install too), found with ``cuda.pathfinder`` (a dependency of
``cuda-bindings``), else from the system's loader path. It is loaded on the first
matrix product, never at import: where it is missing that product raises
:class:`~cuasync.errors.LibraryUnavailableError` saying how to install it.

* :func:`plan` turns a row-major ``(batch, m, k) @ (batch, k, n)`` of strided views into
  the column-major arguments of ``cublasGemmStridedBatchedEx`` (the transpose trick:
  a row-major ``C`` is a column-major ``C^T = B^T A^T``). Pure, so tested anywhere.
* :class:`Blas` owns the handles (one per device, created lazily on first use in that
  device's current context, kept for the process as the primary context is) and one
  workspace per stream, allocated stream-ordered from the device's pool and freed
  stream-ordered when cuasync destroys the stream. A real floating product goes through
  ``cublasLtMatmul`` with the descriptors and algorithm of its kind, made once
  (:mod:`.cublaslt`); the others bind the handle to the op's stream (``cublasSetStream``,
  once per change of stream) and to that stream's workspace, and call
  ``cublasGemmStridedBatchedEx``. Nothing here blocks, and nothing is released from a
  destructor.

>>> args = plan(a, b, c)   # views of shapes (2, 4, 3), (2, 3, 5), (2, 4, 5), contiguous
>>> args.m, args.n, args.k, args.transa, args.transb   # C^T = B^T A^T
(5, 4, 3, 0, 0)
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._dtypes import dtype_name
from ..errors import LibraryError, LibraryUnavailableError, ShapeError
from . import cublaslt
from .base import DeviceArray, matrix_layout
from .cublaslt import LtKinds
from .nvlib import open_nvidia

__all__ = ["Blas", "GemmArgs", "load", "plan", "status_name"]

_OP_N, _OP_T = 0, 1  # cublasOperation_t
_GEMM_DEFAULT = -1  # cublasGemmAlgo_t CUBLAS_GEMM_DEFAULT
_DEFAULT_MATH = 0  # cublasMath_t: no TF32 unless a compute type asks for it
_COMPUTE_32F, _COMPUTE_32F_FAST_TF32, _COMPUTE_64F = 68, 77, 70  # cublasComputeType_t
_COMPUTE_32I = 72
_R_8I, _R_32I = 3, 10  # cudaDataType: int8 inputs, int32 output (cuasync._ops.gemm)
_INT_MAX = 2**31 - 1

#: cudaDataType of each dtype, the compute type for "highest", and the C type of alpha/beta.
_TYPES: dict[str, tuple[int, int, Any]] = {
    "float16": (2, _COMPUTE_32F, ctypes.c_float),  # CUDA_R_16F, accumulated in float32
    "bfloat16": (14, _COMPUTE_32F, ctypes.c_float),  # CUDA_R_16BF
    "float32": (0, _COMPUTE_32F, ctypes.c_float),  # CUDA_R_32F
    "float64": (1, _COMPUTE_64F, ctypes.c_double),  # CUDA_R_64F
    "complex64": (4, _COMPUTE_32F, ctypes.c_float),  # CUDA_C_32F: scalars as 2 floats
    "complex128": (5, _COMPUTE_64F, ctypes.c_double),  # CUDA_C_64F
}

#: Bytes of the workspace each stream gets: what cuBLAS recommends for Hopper and newer,
#: 4 MiB before (cuBLAS docs, "cublasSetWorkspace").
WORKSPACE_BYTES = {True: 32 << 20, False: 4 << 20}

_INSTALL = (
    "install NVIDIA's cuBLAS wheel matching the driver: `pip install nvidia-cublas` "
    "(CUDA 13; `nvidia-cublas-cu12` for CUDA 12)"
)


@dataclass(frozen=True)
class GemmArgs:
    """The arguments of one ``cublasGemmStridedBatchedEx`` call, pointers in bytes;
    ``swapped``: cuBLAS's first operand is ``b`` (a row-major result, ``c^T = b^T a^T``)."""

    transa: int
    transb: int
    m: int
    n: int
    k: int
    a: int
    lda: int
    stride_a: int
    b: int
    ldb: int
    stride_b: int
    c: int
    ldc: int
    stride_c: int
    batch: int
    swapped: bool = False


def _layout(x: DeviceArray, what: str) -> tuple[str, int]:
    _, r, c = x.shape
    found = matrix_layout(r, c, x.strides[1], x.strides[2])
    if found is None or x.strides[0] < 0:
        raise ShapeError(f"{what}: strides {x.strides} of shape {x.shape} are not BLAS-readable")
    return found


def plan(a: DeviceArray, b: DeviceArray, c: DeviceArray) -> GemmArgs:
    """The column-major cuBLAS call computing row-major ``c[i] = a[i] @ b[i]``.

    A row-major matrix read column-major is its transpose. When ``c`` is row-major,
    cuBLAS computes ``c^T = b^T a^T``: the first operand is ``b`` (no transpose when
    ``b`` is row-major), the second ``a``. When ``c`` is column-major it computes
    ``c = a b``, transposing each row-major operand.
    """
    batch, m, k = a.shape
    n = b.shape[2]
    c_kind, ldc = _layout(c, "c")
    a_kind, lda = _layout(a, "a")
    b_kind, ldb = _layout(b, "b")
    for name, v in (("m", m), ("n", n), ("k", k), ("batch", batch), ("lda", lda)):
        if v > _INT_MAX:
            raise ShapeError(f"matrix product: {name}={v} exceeds cuBLAS's 32-bit limit")
    if max(ldb, ldc) > _INT_MAX:
        raise ShapeError("matrix product: a leading dimension exceeds cuBLAS's 32-bit limit")
    sa, sb, sc = a.strides[0], b.strides[0], c.strides[0]
    if c_kind == "row":  # c^T (n x m) = b^T (n x k) a^T (k x m)
        return GemmArgs(
            _OP_N if b_kind == "row" else _OP_T,
            _OP_N if a_kind == "row" else _OP_T,
            n, m, k,
            b.ptr, ldb, sb,
            a.ptr, lda, sa,
            c.ptr, ldc, sc,
            batch, True,
        )  # fmt: skip
    return GemmArgs(  # c (m x n) = a (m x k) b (k x n)
        _OP_N if a_kind == "col" else _OP_T,
        _OP_N if b_kind == "col" else _OP_T,
        m, n, k,
        a.ptr, lda, sa,
        b.ptr, ldb, sb,
        c.ptr, ldc, sc,
        batch,
    )  # fmt: skip


_load_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_load_error: str | None = None


def _open() -> ctypes.CDLL:
    return open_nvidia("cublas")


def _declare(lib: ctypes.CDLL) -> None:
    p, i, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
    lib.cublasCreate_v2.argtypes = [ctypes.POINTER(p)]
    lib.cublasSetStream_v2.argtypes = [p, p]
    lib.cublasSetWorkspace_v2.argtypes = [p, p, ctypes.c_size_t]
    lib.cublasSetMathMode.argtypes = [p, i]
    lib.cublasGetStatusName.argtypes = [i]
    lib.cublasGetStatusName.restype = ctypes.c_char_p
    lib.cublasGemmStridedBatchedEx.argtypes = [
        p, i, i, i, i, i,  # handle, transa, transb, m, n, k
        p, p, i, i, i64,  # alpha, A, Atype, lda, strideA
        p, i, i, i64,  # B, Btype, ldb, strideB
        p, p, i, i, i64,  # beta, C, Ctype, ldc, strideC
        i, i, i,  # batchCount, computeType, algo
    ]  # fmt: skip
    for fn in ("cublasCreate_v2", "cublasSetStream_v2", "cublasSetWorkspace_v2"):
        getattr(lib, fn).restype = i
    lib.cublasSetMathMode.restype = i
    lib.cublasGemmStridedBatchedEx.restype = i


def load() -> ctypes.CDLL:
    """``libcublas`` with the prototypes cuasync calls; raises LibraryUnavailableError."""
    global _lib, _load_error
    if _lib is not None:
        return _lib
    with _load_lock:
        if _lib is None and _load_error is None:
            try:
                lib = _open()
                _declare(lib)
                _lib = lib
            except (OSError, AttributeError) as exc:
                _load_error = str(exc)
        if _lib is None:
            raise LibraryUnavailableError(
                f"matrix products on the cuda backend need cuBLAS, which cannot be loaded "
                f"({_load_error}); {_INSTALL}"
            )
        return _lib


def status_name(status: int) -> str:
    """cuBLAS's name of a ``cublasStatus_t`` (cuBLASLt's too)."""
    name = load().cublasGetStatusName(status)
    return name.decode() if name else "CUBLAS_STATUS_?"


class Blas:
    """The cuBLAS state of one :class:`~cuasync._backends.cuda.CudaBackend`.

    ``alloc(nbytes, stream)`` and ``free(ptr, stream)`` are the backend's stream-ordered
    allocation calls, ``capturing(stream)`` whether a stream records a graph.
    """

    def __init__(
        self,
        alloc: Callable[[int, int], int],
        free: Callable[[int, int], None],
        capturing: Callable[[int], bool],
    ) -> None:
        self._alloc, self._free, self._capturing = alloc, free, capturing
        self._lock = threading.Lock()
        self._handles: dict[int, int] = {}  # ordinal -> cublasHandle_t
        self._workspaces: dict[int, tuple[int, int]] = {}  # stream -> (pointer, bytes)
        #: ordinal -> (stream, workspace pointer, bytes) its handle is bound to now. A
        #: handle is one state shared by every thread: binding and the call it is for
        #: happen under ``_bind_lock`` (ctypes releases the GIL in each call), and a
        #: call on the stream already bound skips binding.
        self._bound: dict[int, tuple[int, int, int]] = {}
        self._bind_lock = threading.Lock()
        #: cuBLASLt's handles and the kinds of product seen (None: no libcublasLt).
        self._lt: LtKinds | None = None
        self._lt_loaded = False

    def _check(self, lib: ctypes.CDLL, status: int, call: str) -> None:
        if status:
            raise LibraryError(status, status_name(status), call)

    def handle(self, ordinal: int) -> int:
        """The device's handle; its context must be current (the backend made it so)."""
        found = self._handles.get(ordinal)
        if found is not None:
            return found
        lib = load()
        with self._lock:
            if ordinal not in self._handles:
                h = ctypes.c_void_p()
                self._check(lib, lib.cublasCreate_v2(ctypes.byref(h)), "cublasCreate")
                self._check(lib, lib.cublasSetMathMode(h, _DEFAULT_MATH), "cublasSetMathMode")
                self._handles[ordinal] = int(h.value or 0)
            return self._handles[ordinal]

    def _lt_kinds(self) -> LtKinds | None:
        """cuBLASLt's state, made at the first call (None: no libcublasLt)."""
        if not self._lt_loaded:
            lib = cublaslt.load()
            with self._lock:
                if not self._lt_loaded:
                    self._lt = None if lib is None else LtKinds(lib, status_name)
                    self._lt_loaded = True
        return self._lt

    def prepare(self, ordinal: int) -> None:
        """Load the libraries and make the device's handles (its context current)."""
        self.handle(ordinal)
        kinds = self._lt_kinds()
        if kinds is not None:
            kinds.handle(ordinal)

    def workspace(self, stream: int, hopper: bool) -> tuple[int, int]:
        """``stream``'s workspace, allocated on it at first use; none while it captures.

        Two threads may both allocate one for a new stream (the allocation lets go of the
        GIL): the first published is the stream's, the other is freed at once."""
        found = self._workspaces.get(stream)
        if found is not None:
            return found
        if self._capturing(stream):  # an allocation would be baked into the graph
            return 0, 0
        nbytes = WORKSPACE_BYTES[hopper]
        mine = (self._alloc(nbytes, stream), nbytes)
        ws = self._workspaces.setdefault(stream, mine)
        if ws is not mine:
            self._free(mine[0], stream)
        return ws

    def forget_stream(self, stream: int) -> None:
        """Free ``stream``'s workspace after its work (before the stream is destroyed);
        a handle bound to it binds again at its next call (a new stream may reuse the
        handle's number).

        Never takes ``_bind_lock``: a stream's finalizer calls this, and a collection
        can run it on a thread that holds the lock (inside a gemm of another stream).
        Without the lock is safe: no gemm runs on a stream being destroyed, and each
        entry goes in one atomic ``pop``."""
        for ordinal, bound in list(self._bound.items()):
            if bound[0] == stream:
                self._bound.pop(ordinal, None)
        ws = self._workspaces.pop(stream, None)
        if ws is not None:
            self._free(ws[0], stream)

    def gemm(
        self,
        ordinal: int,
        stream: int,
        hopper: bool,
        a: DeviceArray,
        b: DeviceArray,
        c: DeviceArray,
        alpha: complex,
        beta: complex,
        precision: str,
    ) -> None:
        """Enqueue the product on ``stream`` (its device's context current): through
        ``cublasLtMatmul`` with the descriptors and algorithm of its kind where it has
        them (:mod:`.cublaslt`), else ``cublasGemmStridedBatchedEx``."""
        lib = load()
        ws, nbytes = self.workspace(stream, hopper)
        kinds = self._lt_kinds()
        if kinds is not None:
            found = kinds.by_views(ordinal, a, b, c, precision, nbytes, plan)
            if found is not None:
                kind, swapped = found
                first, second = (b, a) if swapped else (a, b)
                lt_handle = kinds.handle(ordinal)
                with self._bind_lock:  # (one call into the library at a time, as below)
                    kind.matmul(
                        lt_handle, first.ptr, second.ptr, c.ptr, alpha, beta, ws, nbytes, stream
                    )
                return
        args = plan(a, b, c)
        if dtype_name(a.dtype) == "int8":  # int8 in, int32 out and accumulated
            dtype, ctype, compute = _R_8I, _R_32I, _COMPUTE_32I
            al: Any = ctypes.c_int(int(alpha.real))
            be: Any = ctypes.c_int(int(beta.real))
        else:
            dtype, compute, scalar = _TYPES[dtype_name(c.dtype)]
            ctype = dtype
            if precision == "tf32":
                compute = _COMPUTE_32F_FAST_TF32
            pair = scalar * 2  # real scalars use the first, complex ones both
            al, be = pair(alpha.real, alpha.imag), pair(beta.real, beta.imag)
        handle = self.handle(ordinal)
        binding = (stream, ws, nbytes)
        with self._bind_lock:
            if self._bound.get(ordinal) != binding:
                self._bound.pop(ordinal, None)  # (unknown until both calls succeed)
                self._check(lib, lib.cublasSetStream_v2(handle, stream), "cublasSetStream")
                # SetStream resets the workspace to cuBLAS's own: bind this stream's again.
                status = lib.cublasSetWorkspace_v2(handle, ws, nbytes)
                self._check(lib, status, "cublasSetWorkspace")
                self._bound[ordinal] = binding
            status = lib.cublasGemmStridedBatchedEx(
                handle, args.transa, args.transb, args.m, args.n, args.k,
                ctypes.byref(al), args.a, dtype, args.lda, args.stride_a,
                args.b, dtype, args.ldb, args.stride_b,
                ctypes.byref(be), args.c, ctype, args.ldc, args.stride_c,
                args.batch, compute, _GEMM_DEFAULT,
            )  # fmt: skip
        self._check(lib, status, "cublasGemmStridedBatchedEx")
