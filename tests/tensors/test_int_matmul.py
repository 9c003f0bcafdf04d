"""Integer matrix products (issue 33 item 2): numpy's result dtype and wraparound.

``int8 @ int8`` is int8 modulo 2**8, as numpy's ``matmul``: cuBLAS's int8 GEMM (int32
accumulation, then cast) where it applies (the emulator's twin: numpy), a tiled kernel
(``kernels/tiled_gemm.cu``) for every other integer dtype and layout.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cuasync
from cuasync._backends import get_backend
from cuasync._launch.nvrtc import nvrtc_problem
from cuasync._ops import tiled_gemm
from cuasync.errors import DTypeError, LibraryError

INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


def host(shape: tuple[int, ...], dtype: str, seed: int = 0, lo: int = -128) -> np.ndarray:
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, lo), min(info.max, 127), shape, endpoint=True).astype(dtype)


def dev(a: np.ndarray) -> cuasync.Tensor:
    return cuasync.from_host(np.ascontiguousarray(a)).sync()


def run(op: cuasync.TensorOp) -> np.ndarray:
    return op.sync().to_host().sync()


def exact(got: np.ndarray, want: np.ndarray) -> None:
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", INTS)
def test_integer_matmul_is_numpys_and_wraps(dtype: str) -> None:
    a, b = host((2, 5, 40), dtype, 1), host((40, 3), dtype, 2)
    with np.errstate(all="ignore"):
        want = np.matmul(a, b)  # int8: sums of 40 products wrap modulo 2**8
    exact(run(cuasync.matmul(dev(a), dev(b))), want)
    exact(run(dev(a) @ dev(b)), want)


def test_int8_takes_cublas_where_it_applies_and_the_kernel_elsewhere(monkeypatch) -> None:
    backend = get_backend()
    calls: list[str] = []
    real_gemm, real_launch = backend.gemm, tiled_gemm.launch

    def gemm(*a: Any) -> Any:
        calls.append("blas")
        return real_gemm(*a)

    def launch(*a: Any) -> Any:
        calls.append("kernel")
        return real_launch(*a)

    monkeypatch.setattr(backend, "gemm", gemm)
    monkeypatch.setattr(tiled_gemm, "launch", launch)
    a, b = host((8, 64), "int8", 3), host((64, 12), "int8", 4)
    exact(run(dev(a) @ dev(b)), a @ b)  # leading dimensions 64 and 12: multiples of 4
    assert calls == ["blas"]
    calls.clear()
    a3, b3 = host((8, 3), "int8", 5), host((3, 6), "int8", 6)
    exact(run(dev(a3) @ dev(b3)), a3 @ b3)  # lda 3: not a multiple of 4
    assert calls == ["kernel"]
    calls.clear()
    i16 = host((8, 64), "int16", 7)
    exact(run(dev(i16) @ dev(i16.T)), i16 @ i16.T)
    assert calls == ["kernel"]


def test_int8_falls_back_when_cublas_says_not_supported(monkeypatch) -> None:
    def refuse(*args: Any) -> None:
        raise LibraryError(15, "CUBLAS_STATUS_NOT_SUPPORTED", "cublasGemmStridedBatchedEx")

    monkeypatch.setattr(get_backend(), "gemm", refuse)
    a, b = host((4, 16), "int8", 8), host((16, 8), "int8", 9)
    exact(run(dev(a) @ dev(b)), a @ b)


def test_integer_alpha_beta_and_out() -> None:
    a, b = host((4, 6), "int32", 10), host((6, 5), "int32", 11)
    c = host((4, 5), "int32", 12)
    out = dev(c)
    cuasync.matmul(dev(a), dev(b), alpha=3, beta=-2, out=out).sync()
    exact(out.to_host().sync(), 3 * (a @ b) - 2 * c)
    big = dev(np.zeros((4, 10), "int32"))
    cuasync.matmul(dev(a), dev(b), out=big[:, ::2]).sync()  # a strided out= view
    exact(big.to_host().sync()[:, ::2], a @ b)
    with pytest.raises(DTypeError, match=r"alpha=0.5 is not an integer"):
        cuasync.matmul(dev(a), dev(b), alpha=0.5)
    with pytest.raises(DTypeError, match="a has dtype bool"):
        cuasync.matmul(dev(np.ones((2, 2), bool)), dev(np.ones((2, 2), bool)))


def test_mixed_integer_and_float_operands_promote_as_numpy() -> None:
    a, b = host((3, 4), "int8", 13), host((4, 2), "uint8", 14, lo=0)
    exact(run(cuasync.matmul(dev(a), dev(b))), a @ b)  # int16
    f = np.ones((4, 2), "float32")
    got = run(cuasync.matmul(dev(a.astype("int32")), dev(f)))
    np.testing.assert_allclose(got, a.astype("int32") @ f)
    assert got.dtype == (a.astype("int32") @ f).dtype  # float64


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), dtype=st.sampled_from(["int8", "int32", "uint16", "int64"]))
def test_property_integer_matmul_vs_numpy(data: Any, dtype: str) -> None:
    m, k, n = (data.draw(st.integers(0, 20)) for _ in range(3))
    batch = tuple(data.draw(st.lists(st.integers(0, 3), max_size=2)))
    a = host((*batch, m, 2 * k), dtype, 15)[..., ::2]  # a strided view
    b = host((k, n), dtype, 16)
    x = dev(host((*batch, m, 2 * k), dtype, 15))[..., ::2]
    transposed = data.draw(st.booleans())
    y = dev(np.ascontiguousarray(b.T)).T if transposed else dev(b)
    with np.errstate(all="ignore"):
        want = np.matmul(a, b)
    exact(run(cuasync.matmul(x, y)), want)


@pytest.mark.skipif(nvrtc_problem() is not None, reason="needs NVRTC")
@pytest.mark.parametrize("dtype", [*INTS, "float32", "float64"])
def test_tiled_gemm_kernel_compiles(dtype: str) -> None:
    image, _ = tiled_gemm.kernel(dtype).compile_image("sm_90")
    assert image[:4] == b"\x7fELF"
