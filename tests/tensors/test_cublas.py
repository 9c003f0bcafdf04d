"""The cuBLAS layer of the CUDA backend, tested without a GPU.

``plan`` (row-major views to column-major GEMM arguments) is checked by running its
arguments through a numpy model of ``cublasGemmStridedBatchedEx``; ``Blas`` (handles,
workspaces, stream binding) against a fake library; loading, for its typed error.
"""

from __future__ import annotations

import ctypes
import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from cuasync._backends import cublas
from cuasync._backends.base import matrix_layout
from cuasync.errors import BackendUnavailableError, LibraryError, LibraryUnavailableError

ITEM = 8  # float64: pointers below are byte offsets into one flat buffer
F64 = np.dtype(np.float64)


@dataclass
class View:
    """A DeviceArray over the flat buffer (``ptr`` in bytes from its start)."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: np.dtype[Any] = F64

    def read(self, buf: np.ndarray) -> np.ndarray:
        return np.lib.stride_tricks.as_strided(
            buf[self.ptr // ITEM :], self.shape, tuple(s * ITEM for s in self.strides)
        )


def cublas_model(buf: np.ndarray, g: cublas.GemmArgs) -> None:
    """What cuBLAS computes, column-major: ``C = op(A) op(B)`` for each batch entry."""

    def mat(ptr: int, ld: int, rows: int, cols: int) -> np.ndarray:
        base = ptr // ITEM
        idx = base + np.arange(rows)[:, None] + np.arange(cols)[None, :] * ld
        return buf[idx]

    for i in range(g.batch):
        ra, ca = (g.m, g.k) if g.transa == 0 else (g.k, g.m)
        rb, cb = (g.k, g.n) if g.transb == 0 else (g.n, g.k)
        assert g.lda >= max(1, ra) and g.ldb >= max(1, rb) and g.ldc >= max(1, g.m)
        a = mat(g.a + i * g.stride_a * ITEM, g.lda, ra, ca)
        b = mat(g.b + i * g.stride_b * ITEM, g.ldb, rb, cb)
        c = (a if g.transa == 0 else a.T) @ (b if g.transb == 0 else b.T)
        base = (g.c + i * g.stride_c * ITEM) // ITEM
        idx = base + np.arange(g.m)[:, None] + np.arange(g.n)[None, :] * g.ldc
        buf[idx] = c


def layouts(rows: int, cols: int) -> list[tuple[tuple[int, int], int]]:
    """(strides, elements spanned) of a matrix: row-major, padded, column-major, padded."""
    return [
        ((cols, 1), rows * cols),
        ((cols + 3, 1), rows * (cols + 3)),
        ((1, rows), rows * cols),
        ((1, rows + 2), cols * (rows + 2)),
    ]


@pytest.mark.parametrize(("m", "k", "n"), [(3, 4, 5), (1, 4, 5), (3, 1, 5), (3, 4, 1), (1, 1, 1)])
def test_plan_matches_row_major_products(m: int, k: int, n: int) -> None:
    rng = np.random.default_rng(0)
    batch = 2
    for (sa, na), (sb, nb), (sc, nc) in itertools.product(
        layouts(m, k), layouts(k, n), layouts(m, n)
    ):
        for a_batch in (na, 0):  # 0: one matrix repeated over the batch
            buf = rng.standard_normal(4 * (na + nb + nc) * batch + 64)
            a = View(0, (batch, m, k), (a_batch, *sa))
            b = View(ITEM * na * batch, (batch, k, n), (nb, *sb))
            c = View(ITEM * (na + nb) * batch, (batch, m, n), (nc, *sc))
            want = np.matmul(a.read(buf), b.read(buf))
            cublas_model(buf, cublas.plan(a, b, c))
            np.testing.assert_allclose(c.read(buf), want, rtol=1e-12, atol=1e-12)


def test_matrix_layout() -> None:
    assert matrix_layout(4, 3, 3, 1) == ("row", 3)
    assert matrix_layout(4, 3, 1, 4) == ("col", 4)
    assert matrix_layout(4, 3, 6, 2) is None
    assert matrix_layout(4, 3, 2, 1) is None  # rows overlap
    assert matrix_layout(1, 5, 0, 3) == ("col", 3)  # a strided row
    assert matrix_layout(5, 1, 2, 0) == ("row", 2)  # a strided column
    assert matrix_layout(4, 3, -3, 1) is None


class FakeLib:
    """Records the cuBLAS calls :class:`cublas.Blas` makes; returns ``status``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.status = 0

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any) -> int:
            self.calls.append((name, args))
            if name == "cublasCreate_v2":
                args[0]._obj.value = 0x1234
            return self.status if name == "cublasGemmStridedBatchedEx" else 0

        return call

    def cublasGetStatusName(self, status: int) -> bytes:
        return b"CUBLAS_STATUS_INVALID_VALUE"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeLib:
    lib = FakeLib()
    monkeypatch.setattr(cublas, "_lib", lib)
    return lib


def test_blas_binds_the_stream_and_its_workspace(fake: FakeLib) -> None:
    allocated: list[tuple[int, int]] = []
    freed: list[tuple[int, int]] = []
    capturing = {30: True}

    def alloc(nbytes: int, stream: int) -> int:
        allocated.append((nbytes, stream))
        return 0x9000 + stream

    blas = cublas.Blas(alloc, lambda p, s: freed.append((p, s)), lambda s: capturing.get(s, False))
    a = View(0, (1, 2, 3), (6, 3, 1), np.dtype(np.float32))
    b = View(64, (1, 3, 4), (12, 4, 1), np.dtype(np.float32))
    c = View(128, (1, 2, 4), (8, 4, 1), np.dtype(np.float32))
    blas.gemm(0, 10, True, a, b, c, 1, 0, "highest")
    blas.gemm(0, 10, True, a, b, c, 2, 0.5, "tf32")
    blas.gemm(0, 20, False, a, b, c, 1, 0, "highest")
    blas.gemm(0, 30, True, a, b, c, 1, 0, "highest")  # capturing: no allocation
    names = [n for n, _ in fake.calls]
    assert names.count("cublasCreate_v2") == 1  # one handle for the device
    assert allocated == [(32 << 20, 10), (4 << 20, 20)]  # one workspace per stream
    sets = [args for n, args in fake.calls if n == "cublasSetWorkspace_v2"]
    assert [s[1:] for s in sets] == [  # bound again only when the stream changes
        (0x9000 + 10, 32 << 20),
        (0x9000 + 20, 4 << 20),
        (0, 0),
    ]
    streams = [args[1] for n, args in fake.calls if n == "cublasSetStream_v2"]
    assert streams == [10, 20, 30]
    for i, name in enumerate(names):  # the workspace is bound after the stream, each time
        if name == "cublasSetStream_v2":
            assert names[i + 1] == "cublasSetWorkspace_v2"
            assert names[i + 2] == "cublasGemmStridedBatchedEx"
    gemms = [args for n, args in fake.calls if n == "cublasGemmStridedBatchedEx"]
    assert [g[-2] for g in gemms] == [68, 77, 68, 68]  # COMPUTE_32F, 32F_FAST_TF32
    assert gemms[1][6]._obj[0] == 2.0 and gemms[1][15]._obj[0] == 0.5  # alpha, beta
    assert isinstance(gemms[1][6]._obj[0], float)
    blas.forget_stream(10)
    blas.forget_stream(30)
    assert freed == [(0x9000 + 10, 10)]
    # A new stream with a forgotten one's number gets its own workspace, bound again.
    fake.calls.clear()
    blas.gemm(0, 30, True, a, b, c, 1, 0, "highest")
    blas.gemm(0, 30, True, a, b, c, 1, 0, "highest")
    names = [n for n, _ in fake.calls]
    assert names.count("cublasSetStream_v2") == 1 and names.count("cublasSetWorkspace_v2") == 1


def test_blas_binds_and_calls_as_one_step_across_threads(fake: FakeLib) -> None:
    """A handle is shared by every thread, and ctypes lets go of the GIL in each call:
    another thread's binding never lands between a thread's binding and its GEMM."""
    import sys
    import threading

    bound: list[int] = []
    wrong: list[tuple[int, int]] = []

    def set_stream(handle: int, stream: int) -> int:
        bound.append(stream)
        return 0

    def gemm(*args: Any) -> int:
        stream = args[7] - 0x100  # (cuBLAS's A is our b: its pointer names the stream)
        if bound[-1] != stream:
            wrong.append((bound[-1], stream))
        return 0

    fake.cublasSetStream_v2 = set_stream  # type: ignore[attr-defined]
    fake.cublasGemmStridedBatchedEx = gemm  # type: ignore[attr-defined]
    blas = cublas.Blas(lambda n, s: 0x9000 + s, lambda p, s: None, lambda s: False)
    a = View(0, (1, 2, 2), (4, 2, 1))
    start = threading.Barrier(4)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # (switch threads as often as possible)

    def worker(stream: int) -> None:
        b = View(0x100 + stream, (1, 2, 2), (4, 2, 1))
        start.wait()
        for _ in range(300):
            blas.gemm(0, stream, True, a, b, a, 1, 0, "highest")

    try:
        threads = [threading.Thread(target=worker, args=(s,)) for s in (1, 2, 3, 4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert wrong == []


def test_blas_status_becomes_library_error(fake: FakeLib) -> None:
    fake.status = 7
    blas = cublas.Blas(lambda n, s: 1, lambda p, s: None, lambda s: False)
    a = View(0, (1, 2, 2), (4, 2, 1))
    with pytest.raises(LibraryError, match="cublasGemmStridedBatchedEx: CUBLAS_STATUS_INVALID"):
        blas.gemm(0, 1, True, a, a, a, 1, 0, "highest")


def test_missing_library_raises_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> ctypes.CDLL:
        raise OSError("libcublas.so.13: cannot open shared object file")

    monkeypatch.setattr(cublas, "_open", missing)
    monkeypatch.setattr(cublas, "_lib", None)
    monkeypatch.setattr(cublas, "_load_error", None)
    with pytest.raises(LibraryUnavailableError, match="pip install nvidia-cublas") as info:
        cublas.load()
    assert isinstance(info.value, BackendUnavailableError)
    assert "cannot open shared object" in str(info.value)


def test_real_library_declares_its_prototypes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cublas, "_lib", None)
    monkeypatch.setattr(cublas, "_load_error", None)
    try:
        lib = cublas.load()
    except LibraryUnavailableError:
        pytest.skip("cuBLAS is not installed here (pip install nvidia-cublas)")
    assert lib.cublasGetStatusName(7) == b"CUBLAS_STATUS_INVALID_VALUE"
    assert lib.cublasGemmStridedBatchedEx.argtypes is not None
