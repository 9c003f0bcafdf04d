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

from cuasync._backends import cublas, cublaslt
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
    """A fake libcublas, and no libcublasLt (products take cublasGemmStridedBatchedEx)."""
    lib = FakeLib()
    monkeypatch.setattr(cublas, "_lib", lib)
    monkeypatch.setattr(cublaslt, "_lib", None)
    monkeypatch.setattr(cublaslt, "_load_error", "not here")
    return lib


#: cublasLtMatmul's C type: cuasync calls it from C (the native LtMatmul), so the fake's
#: is a C function pointer calling back into Python.
_LT_MATMUL = ctypes.CFUNCTYPE(
    ctypes.c_int, *[ctypes.c_void_p] * 14, ctypes.c_size_t, ctypes.c_void_p
)


class FakeLt:
    """Records the cuBLASLt calls; descriptors and layouts are numbered objects whose
    attributes it keeps, so that a numpy model can run what cublasLtMatmul was given
    (its arguments as ints, the scales read as the descriptor's scale type says)."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.objects: dict[Any, dict[Any, Any]] = {}
        self.status = 0
        self.algorithms = 1  # what the heuristic finds
        self.matmuls: list[tuple[Any, ...]] = []
        self.cublasLtMatmul = _LT_MATMUL(self._matmul)

    def _matmul(self, *pointers: int | None) -> int:
        self.calls.append("cublasLtMatmul")
        args = [p or 0 for p in pointers]  # (a null void* comes as None)
        scale = ctypes.c_double if self.objects[args[1]]["scale"] == 1 else ctypes.c_float
        alpha, beta = (ctypes.cast(args[i], ctypes.POINTER(scale))[0] for i in (2, 7))
        self.matmuls.append((*args[:2], alpha, *args[3:7], beta, *args[8:]))
        return self.status

    def _new(self, out: Any, **fields: Any) -> int:
        handle = 0x100 + len(self.objects)
        self.objects[handle] = fields
        out._obj.value = handle
        return 0

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any) -> int:
            self.calls.append(name)
            if name == "cublasLtCreate":
                return self._new(args[0], kind="handle")
            if name == "cublasLtMatmulDescCreate":
                return self._new(args[0], kind="desc", compute=args[1], scale=args[2])
            if name == "cublasLtMatrixLayoutCreate":
                return self._new(
                    args[0], kind="layout", type=args[1], rows=args[2], cols=args[3], ld=args[4]
                )
            if name == "cublasLtMatmulPreferenceCreate":
                return self._new(args[0], kind="pref")
            if name.endswith("SetAttribute"):
                target = args[0].value if isinstance(args[0], ctypes.c_void_p) else args[0]
                self.objects[target][args[1]] = args[2]._obj.value
            if name == "cublasLtMatmulAlgoGetHeuristic":
                args[9]._obj.value = self.algorithms
            return 0

        return call


@pytest.fixture
def fake_lt(monkeypatch: pytest.MonkeyPatch, fake: FakeLib) -> FakeLt:
    lt = FakeLt()
    monkeypatch.setattr(cublaslt, "_lib", lt)
    monkeypatch.setattr(cublaslt, "_load_error", None)
    return lt


def lt_model(buf: np.ndarray, lt: FakeLt, call: tuple[Any, ...]) -> None:
    """What cublasLtMatmul computes (column-major, D = alpha op(A) op(B) + beta C, D = C
    here), read from the descriptor and layouts it was given."""
    desc = lt.objects[call[1]]
    alpha, beta = call[2], call[7]
    la, lb, lc = (lt.objects[call[k]] for k in (4, 6, 9))
    assert call[8] == call[10] and call[9] == call[11]  # in place: D is C

    def mats(ptr: int, layout: dict[Any, Any]) -> list[np.ndarray]:
        batch, stride = layout.get(5, 1), layout.get(6, 0)
        rows, cols, ld = layout["rows"], layout["cols"], layout["ld"]
        assert ld >= max(1, rows)
        out = []
        for i in range(batch):
            base = ptr // ITEM + i * stride
            out.append(base + np.arange(rows)[:, None] + np.arange(cols)[None, :] * ld)
        return out

    for ia, ib, ic in zip(mats(call[3], la), mats(call[5], lb), mats(call[8], lc), strict=True):
        a = buf[ia] if desc.get(3, 0) == 0 else buf[ia].T
        b = buf[ib] if desc.get(4, 0) == 0 else buf[ib].T
        buf[ic] = alpha * (a @ b) + (beta * buf[ic] if beta else 0)


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


def test_two_threads_making_a_streams_workspace_leak_neither(fake: FakeLib) -> None:
    """The allocation lets go of the GIL: another thread may make the same stream's
    workspace meanwhile (here: from inside the first allocation). One is the stream's,
    the other is freed; both threads use the one kept."""
    allocated: list[int] = []
    freed: list[int] = []
    blas: cublas.Blas

    def alloc(nbytes: int, stream: int) -> int:
        allocated.append(ptr := 0x9000 + len(allocated))
        if len(allocated) == 1:  # (another thread, in between)
            inner.append(blas.workspace(stream, True))
        return ptr

    inner: list[tuple[int, int]] = []
    blas = cublas.Blas(alloc, lambda p, s: freed.append(p), lambda s: False)
    outer = blas.workspace(10, True)
    assert outer == inner[0] == blas.workspace(10, True)
    assert len(allocated) == 2 and freed == [a for a in allocated if a != outer[0]]
    blas.forget_stream(10)
    assert sorted(freed) == sorted(allocated)  # nothing left allocated


def test_forgetting_a_stream_never_waits_for_the_binding_lock(fake: FakeLib) -> None:
    """A stream's finalizer forgets it, and a collection can run that on a thread inside
    a gemm (holding the binding lock): forgetting must not take that lock."""
    blas = cublas.Blas(lambda n, s: 0x9000 + s, lambda p, s: None, lambda s: False)
    a = View(0, (1, 2, 2), (4, 2, 1))
    blas.gemm(0, 10, True, a, a, a, 1, 0, "highest")
    with blas._bind_lock:  # (as inside a gemm)
        blas.forget_stream(10)
    fake.calls.clear()
    blas.gemm(0, 10, True, a, a, a, 1, 0, "highest")  # a new stream 10: bound again
    assert [n for n, _ in fake.calls].count("cublasSetStream_v2") == 1


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


@pytest.mark.parametrize(("m", "k", "n"), [(3, 4, 5), (1, 4, 5), (3, 4, 1)])
def test_lt_kinds_compute_the_row_major_products(
    m: int, k: int, n: int, fake_lt: FakeLt, fake: FakeLib
) -> None:
    """cuBLASLt's descriptors and layouts, run through a numpy model of cublasLtMatmul,
    give numpy's products for every layout the plan test covers, batched too."""
    rng = np.random.default_rng(0)
    blas = cublas.Blas(lambda n, s: 0x9000, lambda p, s: None, lambda s: False)
    for batch in (1, 2):
        for (sa, na), (sb, nb), (sc, nc) in itertools.product(
            layouts(m, k), layouts(k, n), layouts(m, n)
        ):
            buf = rng.standard_normal(4 * (na + nb + nc) * batch + 64)
            a = View(0, (batch, m, k), (na, *sa))
            b = View(ITEM * na * batch, (batch, k, n), (nb, *sb))
            c = View(ITEM * (na + nb) * batch, (batch, m, n), (nc, *sc))
            want = np.matmul(a.read(buf), b.read(buf)) * 2.0
            blas.gemm(0, 10, True, a, b, c, 2.0, 0.0, "highest")
            lt_model(buf, fake_lt, fake_lt.matmuls[-1])
            np.testing.assert_allclose(c.read(buf), want, rtol=1e-12, atol=1e-12)
    assert "cublasGemmStridedBatchedEx" not in [name for name, _ in fake.calls]


@pytest.mark.parametrize("c_order", ["row", "column"])
def test_views_seen_before_are_not_planned_again(
    c_order: str, fake_lt: FakeLt, fake: FakeLib, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Products of views of one geometry (dtype, shapes, strides, alignment) at other
    addresses are planned once: later ones pass their own pointers, in cuBLAS's order
    (b first for a row-major result), and compute numpy's products."""
    planned: list[Any] = []
    real = cublas.plan

    def counted(*views: Any) -> cublas.GemmArgs:
        planned.append(views)
        return real(*views)

    monkeypatch.setattr(cublas, "plan", counted)
    blas = cublas.Blas(lambda n, s: 0x9000, lambda p, s: None, lambda s: False)
    rng = np.random.default_rng(1)
    c_strides = (5, 1) if c_order == "row" else (1, 3)
    for shift in (0, 32, 96):  # (float64 elements: 256 bytes apart, the same alignment)
        buf = rng.standard_normal(512)
        a = View(ITEM * shift, (1, 3, 4), (12, 4, 1))
        b = View(ITEM * (shift + 16), (1, 4, 5), (20, 1, 4))
        c = View(ITEM * (shift + 40), (1, 3, 5), (15, *c_strides))
        want = np.matmul(a.read(buf), b.read(buf))
        blas.gemm(0, 10, True, a, b, c, 1.0, 0.0, "highest")
        lt_model(buf, fake_lt, fake_lt.matmuls[-1])
        np.testing.assert_allclose(c.read(buf), want, rtol=1e-12, atol=1e-12)
    assert len(planned) == 1 and len(fake_lt.matmuls) == 3


@pytest.mark.parametrize(
    ("sa", "sb"), [((1, 4, 4), (1, 4, 4)), ((1, 2, 3), (1, 3, 2))], ids=["square", "2x3 @ 3x2"]
)
def test_a_product_of_one_buffer_does_not_teach_the_wrong_operand_order(
    sa: tuple[int, ...], sb: tuple[int, ...], fake_lt: FakeLt, fake: FakeLib
) -> None:
    """Operands at one address first (``x @ x``, two views of one buffer), then others
    of the same geometry: each product is numpy's (the order cuBLAS takes them in is the
    plan's, never told from the pointers, which cannot tell it when they are equal)."""
    blas = cublas.Blas(lambda n, s: 0x9000, lambda p, s: None, lambda s: False)
    rng = np.random.default_rng(2)
    m, n = sa[1], sb[2]

    def product(pa: int, pb: int, pc: int) -> None:
        buf = rng.standard_normal(256)
        a = View(ITEM * pa, sa, (sa[1] * sa[2], sa[2], 1))
        b = View(ITEM * pb, sb, (sb[1] * sb[2], sb[2], 1))
        c = View(ITEM * pc, (1, m, n), (m * n, n, 1))  # (row-major: cuBLAS takes b first)
        want = np.matmul(a.read(buf), b.read(buf))
        blas.gemm(0, 10, True, a, b, c, 1.0, 0.0, "highest")
        lt_model(buf, fake_lt, fake_lt.matmuls[-1])
        np.testing.assert_allclose(c.read(buf), want, rtol=1e-12, atol=1e-12)

    product(0, 0, 64)  # (one buffer: a and b at one address)
    product(0, 32, 64)  # (the same geometry and alignments, two buffers)
    product(96, 128, 160)


def test_a_seen_kind_is_one_lt_call(fake_lt: FakeLt, fake: FakeLib) -> None:
    """The descriptor, layouts and algorithm are made once per kind; each product then
    makes one cublasLtMatmul call (on its own stream and workspace: no binding)."""
    blas = cublas.Blas(lambda n, s: 0x9000 + s, lambda p, s: None, lambda s: False)
    x = View(0, (1, 8, 8), (64, 8, 1), np.dtype(np.float32))
    for stream in (10, 10, 10):
        blas.gemm(0, stream, True, x, x, x, 1.0, 0.0, "highest")
    assert fake_lt.calls.count("cublasLtMatmulDescCreate") == 1
    assert fake_lt.calls.count("cublasLtMatrixLayoutCreate") == 3
    assert fake_lt.calls.count("cublasLtMatmulAlgoGetHeuristic") == 1
    assert fake_lt.calls.count("cublasLtMatmul") == 3
    assert fake_lt.calls.count("cublasLtCreate") == 1
    assert [n for n, _ in fake.calls if n != "cublasCreate_v2"] == []  # no binding, no GemmEx
    call = fake_lt.matmuls[-1]
    assert call[13:] == (0x9000 + 10, 32 << 20, 10)  # the stream's workspace, the stream
    shifted = View(4, (1, 8, 8), (64, 8, 1), np.dtype(np.float32))  # 4-byte aligned
    blas.gemm(0, 10, True, x, x, shifted, 1.0, 0.0, "highest")  # an algorithm for it
    assert fake_lt.calls.count("cublasLtMatmulAlgoGetHeuristic") == 2
    pref = [o for o in fake_lt.objects.values() if o["kind"] == "pref"][-1]
    assert (pref[1], pref[5], pref[6], pref[7], pref[8]) == (32 << 20, 256, 256, 4, 4)
    blas.gemm(0, 10, True, x, x, x, 1.0, 0.0, "tf32")  # another kind: another descriptor
    assert fake_lt.calls.count("cublasLtMatmulDescCreate") == 3
    desc = fake_lt.objects[fake_lt.matmuls[-1][1]]
    assert (desc["compute"], desc["scale"]) == (77, 0)  # CUBLAS_COMPUTE_32F_FAST_TF32


@pytest.mark.parametrize(
    ("dtype", "why"),
    [("complex64", "complex"), ("int8", "int8 in, int32 out"), ("float32", "no algorithm")],
)
def test_kinds_cublaslt_does_not_take_use_gemm_ex(
    dtype: str, why: str, fake_lt: FakeLt, fake: FakeLib
) -> None:
    blas = cublas.Blas(lambda n, s: 0x9000, lambda p, s: None, lambda s: False)
    dt = np.dtype(dtype)
    x = View(0, (1, 4, 4), (16, 4, 1), dt)
    out = View(0, (1, 4, 4), (16, 4, 1), np.dtype(np.int32) if dtype == "int8" else dt)
    if why == "no algorithm":
        fake_lt.algorithms = 0
    for _ in range(2):
        blas.gemm(0, 10, True, x, x, out, 1, 0, "highest")
    assert [n for n, _ in fake.calls].count("cublasGemmStridedBatchedEx") == 2
    assert fake_lt.matmuls == []
    if why == "no algorithm":  # asked once, and what it made destroyed
        assert fake_lt.calls.count("cublasLtMatmulAlgoGetHeuristic") == 1
        assert fake_lt.calls.count("cublasLtMatrixLayoutDestroy") == 3
        assert fake_lt.calls.count("cublasLtMatmulDescDestroy") == 1


def test_lt_status_becomes_library_error(fake_lt: FakeLt, fake: FakeLib) -> None:
    fake_lt.status = 7
    blas = cublas.Blas(lambda n, s: 1, lambda p, s: None, lambda s: False)
    a = View(0, (1, 2, 2), (4, 2, 1))
    with pytest.raises(LibraryError, match="cublasLtMatmul: CUBLAS_STATUS_INVALID"):
        blas.gemm(0, 1, True, a, a, a, 1, 0, "highest")


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


def test_lt_matmul_passes_its_fields_and_the_calls_arguments() -> None:
    """The native call of one kind: its own fields (descriptor, layouts, algorithm) and
    each call's handle, scales (float or double, as the kind says), pointers, workspace
    and stream reach cublasLtMatmul, C is D, and its status comes back."""
    from cuasync._native import NATIVE

    got: list[tuple[Any, ...]] = []
    algo = bytes(range(64))

    def entry(*pointers: int | None) -> int:
        p = [x or 0 for x in pointers]
        scale = ctypes.c_double if p[1] == 0xD0 else ctypes.c_float
        alpha, beta = (ctypes.cast(p[i], ctypes.POINTER(scale))[0] for i in (2, 7))
        seen_algo = bytes(ctypes.cast(p[12], ctypes.POINTER(ctypes.c_ubyte * 64))[0])
        got.append((p[0], p[1], alpha, *p[3:7], beta, *p[8:12], seen_algo == algo, *p[13:]))
        return 7 if alpha == 3.0 else 0

    fn = _LT_MATMUL(entry)
    address = ctypes.cast(fn, ctypes.c_void_p).value
    single = NATIVE.LtMatmul(address, 0xF0, 0xA, 0xB, 0xC, algo, False)
    double = NATIVE.LtMatmul(address, 0xD0, 0xA, 0xB, 0xC, algo, True)
    assert single(0x1, 2.5, 0.0, 0x100, 0x200, 0x300, 0x900, 1 << 20, 0x77) == 0
    assert double(0x1, 1 / 3, 1.0, 0x100, 0x200, 0x300, 0x900, 1 << 20, 0x77) == 0
    assert single(0x1, 3.0, 0.0, 0x100, 0x200, 0x300, 0, 0, 0) == 7
    tail = (0x300, 0xC, 0x300, 0xC, True, 0x900, 1 << 20, 0x77)
    assert got[0] == (0x1, 0xF0, 2.5, 0x100, 0xA, 0x200, 0xB, 0.0, *tail)
    assert got[1] == (0x1, 0xD0, 1 / 3, 0x100, 0xA, 0x200, 0xB, 1.0, *tail)
    with pytest.raises(TypeError, match="9 arguments"):
        single(0x1, 1.0, 0.0)
    with pytest.raises(ValueError, match="64 bytes"):
        NATIVE.LtMatmul(address, 0xF0, 0xA, 0xB, 0xC, algo[:8], False)
    with pytest.raises(ValueError, match="not 0"):
        NATIVE.LtMatmul(0, 0xF0, 0xA, 0xB, 0xC, algo, False)
    with pytest.raises(TypeError):
        single(0x1, "1.0", 0.0, 0x100, 0x200, 0x300, 0x900, 1 << 20, 0x77)
    assert len(got) == 3
