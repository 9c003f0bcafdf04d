"""Contractions (cuasync.matmul, @, tensordot, dot_general) vs numpy, and their errors.

On the emulator the backend's gemm is numpy; on a GPU it is cuBLAS, so the same values
checks run against cuBLAS there. Tolerances are relative to ``|a| @ |b|`` (the size of
the terms summed), per dtype: see ``TOL``.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cuasync
from cuasync.errors import (
    AliasingError,
    ArgumentError,
    DTypeError,
    InvalidDeviceError,
    OpConsumedError,
    ShapeError,
)

#: Largest error allowed, relative to ``|a| @ |b|``, per dtype (and "tf32").
TOL = {
    "float16": 2e-3,
    "bfloat16": 1.6e-2,
    "float32": 1e-5,
    "tf32": 4e-3,
    "float64": 1e-12,
    "complex64": 1e-5,
    "complex128": 1e-12,
}
DTYPES = ["float16", "bfloat16", "float32", "float64", "complex64", "complex128"]


def np_dtype(name: str) -> Any:
    return ml_dtypes.bfloat16 if name == "bfloat16" else np.dtype(name)


def host(shape: tuple[int, ...], dtype: str = "float32", seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if dtype.startswith("complex"):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(np_dtype(dtype))


def dev(a: np.ndarray, device: int = 0) -> cuasync.Tensor:
    return cuasync.from_host(np.array(a, order="C"), device=device).sync()


def get(op: Any) -> np.ndarray:
    return np.asarray(op.to_host().sync())


def wide(x: np.ndarray) -> np.ndarray:
    return x.astype(np.complex128 if np.iscomplexobj(x) else np.float64)


def check(got: np.ndarray, want: np.ndarray, scale: np.ndarray, tol: float) -> None:
    """``|got - want| <= tol * scale`` elementwise (scale: ``|a| @ |b|``, or 1 where 0)."""
    assert got.shape == want.shape, (got.shape, want.shape)
    err = np.abs(wide(got) - want)
    bound = tol * np.maximum(scale, 1e-30)
    assert np.all(err <= bound), f"max relative error {np.max(err / np.maximum(scale, 1e-30))}"


def check_matmul(got: np.ndarray, a: np.ndarray, b: np.ndarray, tol: float) -> None:
    want = np.matmul(wide(a), wide(b))
    check(got, want, np.matmul(np.abs(wide(a)), np.abs(wide(b))), tol)


@pytest.fixture(params=["tiled kernel", "cuBLAS"])
def route(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Small float products take the tiled kernel; with ``"cuBLAS"``, none does (the same
    layouts then run through cuBLAS). Seen kinds are emptied: they hold their route."""
    from cuasync._ops import contract, tiled_gemm

    monkeypatch.setattr(contract, "_SEEN", {})
    if request.param == "cuBLAS":
        monkeypatch.setattr(tiled_gemm, "SMALL_MACS", 0)
    return str(request.param)


# -- values ------------------------------------------------------------------------------------
SHAPES = [
    ((4, 5), (5, 3)),
    ((1, 5), (5, 1)),
    ((7,), (7,)),  # 1-D @ 1-D: a 0-d result
    ((7,), (7, 3)),  # a row
    ((4, 7), (7,)),  # a column
    ((2, 3, 4, 5), (5, 6)),  # b broadcast over the batch
    ((3, 1, 4, 5), (2, 5, 6)),  # both broadcast
    ((6,), (2, 3, 6, 4)),
    ((2, 3, 4, 5), (5,)),
    ((33, 65), (65, 17)),
]  # fmt: skip


@pytest.mark.parametrize(("sa", "sb"), SHAPES, ids=[f"{a}@{b}" for a, b in SHAPES])
def test_matmul_numpy_rules(sa: tuple[int, ...], sb: tuple[int, ...], route: str) -> None:
    a, b = host(sa, seed=1), host(sb, seed=2)
    op = cuasync.matmul(dev(a), dev(b))
    assert op.shape == np.matmul(a, b).shape and op.dtype == np.float32
    check_matmul(get(op), a, b, TOL["float32"])


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_every_dtype(dtype: str, route: str) -> None:
    a, b = host((3, 40, 24), dtype, 1), host((24, 16), dtype, 2)
    got = get(cuasync.matmul(dev(a), dev(b)))
    assert got.dtype == np_dtype(dtype)
    check_matmul(got, a, b, TOL[dtype])


def _sliced(data: st.DataObject, shape: tuple[int, ...], seed: int) -> tuple[Any, np.ndarray]:
    """A tensor view of ``shape`` (maybe a step or an offset per axis) and its values."""
    steps = [data.draw(st.sampled_from([1, 1, 2])) for _ in shape]
    starts = [data.draw(st.integers(0, 1)) for _ in shape]
    base = host(tuple(d * s + o for d, s, o in zip(shape, steps, starts, strict=True)), seed=seed)
    index = tuple(slice(o, o + d * s, s) for d, s, o in zip(shape, steps, starts, strict=True))
    return dev(base)[index], base[index]


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_matmul_random_shapes_and_views(data: st.DataObject, route: str) -> None:
    m, k, n = (data.draw(st.integers(1, 6)) for _ in range(3))
    batch = data.draw(st.lists(st.integers(1, 3), max_size=2))
    ba = [d if data.draw(st.booleans()) else 1 for d in batch]
    bb = [d if data.draw(st.booleans()) else 1 for d in batch]
    sa = (*ba[data.draw(st.integers(0, len(ba))) :], m, k)
    sb = (*bb[data.draw(st.integers(0, len(bb))) :], k, n)
    if data.draw(st.booleans()):
        sa = sa[-1:]
    if data.draw(st.booleans()):
        sb = sb[-2:-1]
    x, a = _sliced(data, sa, 1)
    y, b = _sliced(data, sb, 2)
    check_matmul(get(x @ y), a, b, TOL["float32"])


def test_operator_on_tensors_and_ops() -> None:
    a, b, c = host((4, 6), seed=1), host((6, 5), seed=2), host((5, 3), seed=3)
    x, y, z = dev(a), dev(b), dev(c)
    check_matmul(get(x @ y), a, b, TOL["float32"])
    check_matmul(get((x @ y) @ z), a @ b, c, 1e-4)  # a TensorOp operand runs first
    check_matmul(get((x * 2.0) @ y), a * 2, b, TOL["float32"])  # a fused expression too
    check_matmul(get(x @ (y + 1.0)), a, b + 1, TOL["float32"])
    op = x @ y
    assert isinstance(op, cuasync.TensorOp) and op.shape == (4, 5)
    op.sync()
    with pytest.raises(TypeError):
        x @ 2
    with pytest.raises(TypeError):
        a @ x  # a numpy array: upload it first


def test_strided_and_transposed_views(route: str) -> None:
    a, b = host((8, 10), seed=1), host((12, 9), seed=2)
    x, y = dev(a), dev(b)
    # steps and offsets: copied or read through the leading dimension
    got = get(cuasync.matmul(x[1:7, ::2], y[2:7, 1:]))
    check_matmul(got, a[1:7, ::2], b[2:7, 1:], TOL["float32"])
    # a contraction over axis 0 reads a transposed (column-major) view of a
    got = get(cuasync.dot_general(x, dev(b[:8]), contracting=((0,), (0,))))
    check_matmul(got, a.T, b[:8], TOL["float32"])
    got = get(cuasync.dot_general(dev(b[:10]), x, contracting=((0,), (1,))))
    check_matmul(got, b[:10].T, a.T, TOL["float32"])
    # a repeated row (stride 0, as a broadcast view has) is copied first
    rows = cuasync.Tensor(x.allocation, (8, 10), x.dtype, (0, 1))
    got = get(cuasync.matmul(rows, dev(b[:10])))
    check_matmul(got, np.broadcast_to(a[0], (8, 10)), b[:10], TOL["float32"])


def test_tensordot_like_numpy() -> None:
    a, b = host((3, 4, 5), seed=1), host((4, 5, 6), seed=2)
    x, y = dev(a), dev(b)
    for axes in (2, ([1, 2], [0, 1]), ([2, 1], [1, 0]), (1, 0), 0):
        if axes == (1, 0):
            got, want = get(cuasync.tensordot(x, y, axes=(1, 0))), np.tensordot(a, b, (1, 0))
        else:
            got, want = get(cuasync.tensordot(x, y, axes=axes)), np.tensordot(a, b, axes)
        scale = np.tensordot(np.abs(wide(a)), np.abs(wide(b)), (1, 0) if axes == (1, 0) else axes)
        check(got, want, scale, TOL["float32"])


@pytest.mark.parametrize(
    ("spec", "contracting", "batch"),
    [
        ("bmk,bkn->bmn", ((2,), (1,)), ((0,), (0,))),
        ("bkm,bkn->bmn", ((1,), (1,)), ((0,), (0,))),
        ("mbk,nbk->bmn", ((2,), (2,)), ((1,), (1,))),
        ("abij,jbak->abik", ((3,), (0,)), ((0, 1), (2, 1))),
        ("ijkl,lkjm->im", ((1, 2, 3), (2, 1, 0)), ((), ())),
        ("ij,kl->ijkl", ((), ()), ((), ())),  # an outer product: k == 1
    ],
)
def test_dot_general_like_einsum(spec: str, contracting: Any, batch: Any) -> None:
    ins = spec.split("->")[0]
    sa, sb = ins.split(",")
    size = dict(zip("abijklmn", (2, 3, 4, 5, 3, 6, 4, 5), strict=True))
    a, b = host(tuple(size[c] for c in sa), seed=1), host(tuple(size[c] for c in sb), seed=2)
    got = get(cuasync.dot_general(dev(a), dev(b), contracting=contracting, batch=batch))
    want = np.einsum(spec, wide(a), wide(b))
    check(got, want, np.einsum(spec, np.abs(wide(a)), np.abs(wide(b))), TOL["float32"])


def test_out_and_accumulate(route: str) -> None:
    a, b, c = host((2, 4, 6), seed=1), host((2, 6, 5), seed=2), host((2, 4, 5), seed=3)
    x, y = dev(a), dev(b)
    out = dev(c)
    assert cuasync.matmul(x, y, out=out).sync() is out
    check_matmul(get(out), a, b, TOL["float32"])
    out = dev(c)
    cuasync.matmul(x, y, out=out, alpha=0.5, beta=2.0).sync()
    want = 0.5 * np.matmul(wide(a), wide(b)) + 2 * wide(c)
    check(get(out), want, 0.5 * np.abs(a) @ np.abs(b) + 2 * np.abs(c), TOL["float32"])
    # beta=0 overwrites: NaN in out does not propagate (as cuBLAS)
    out = dev(np.full((2, 4, 5), np.nan, np.float32))
    cuasync.matmul(x, y, out=out).sync()
    assert np.isfinite(get(out)).all()
    # a strided out view, with accumulation, through dot_general and tensordot too
    big = np.zeros((2, 4, 10), np.float32)
    big[:, :, ::2] = c
    buf = dev(big)
    cuasync.matmul(x, y, out=buf[:, :, ::2], beta=1.0).sync()
    check(get(buf)[:, :, ::2], np.matmul(wide(a), wide(b)) + c, np.abs(a) @ np.abs(b) + 1, 1e-5)
    assert (get(buf)[:, :, 1::2] == 0).all()
    t = dev(np.zeros((4, 2, 5), np.float32))  # axes (m, batch, n): out axes do not group
    view = cuasync.Tensor(t.allocation, (2, 4, 5), t.dtype, (5, 10, 1))
    cuasync.dot_general(x, y, contracting=((2,), (1,)), batch=((0,), (0,)), out=view).sync()
    check_matmul(get(t).transpose(1, 0, 2), a, b, TOL["float32"])


def test_scales_past_float32_become_inf_as_cublas_makes_them(route: str) -> None:
    # alpha and beta of a float32 product are converted as C converts them (cuBLAS's
    # float scalars): 1e39 is inf on either route, never a launch error
    a, b = np.abs(host((4, 6), seed=1)) + 1, np.abs(host((6, 5), seed=2)) + 1
    x, y = dev(a), dev(b)
    assert np.isposinf(get(cuasync.matmul(x, y, alpha=1e39))).all()
    out = dev(np.ones((4, 5), np.float32))
    cuasync.matmul(x, y, out=out, beta=1e39).sync()
    assert np.isposinf(get(out)).all()


def test_complex_scalars() -> None:
    a, b, c = host((3, 4), "complex64", 1), host((4, 2), "complex64", 2), host((3, 2), "complex64")
    out = dev(c)
    cuasync.matmul(dev(a), dev(b), out=out, alpha=1j, beta=2 - 1j).sync()
    want = 1j * np.matmul(wide(a), wide(b)) + (2 - 1j) * wide(c)
    check(get(out), want, np.abs(a) @ np.abs(b) + 3 * np.abs(c), 1e-5)


def test_empty_and_k_zero(route: str) -> None:
    got = get(cuasync.matmul(dev(np.ones((3, 0), np.float32)), dev(np.ones((0, 2), np.float32))))
    assert got.shape == (3, 2) and (got == 0).all()
    out = dev(np.full((3, 2), 4.0, np.float32))
    cuasync.matmul(
        dev(np.ones((3, 0), np.float32)), dev(np.ones((0, 2), np.float32)), out=out, beta=0.5
    ).sync()
    assert (get(out) == 2.0).all()
    assert get(cuasync.matmul(dev(np.ones((0, 4), np.float32)), dev(host((4, 2))))).shape == (0, 2)
    assert get(cuasync.matmul(dev(host((2, 0, 3, 4))), dev(host((4, 5))))).shape == (2, 0, 3, 5)


def test_full_float32_by_default_and_tf32_on_request() -> None:
    # (1 + 2**-14) has more significand bits than TF32's 10: full float32 keeps them.
    a = np.full((64, 256), 1 + 2**-14, np.float32)
    b = np.ones((256, 32), np.float32)
    x, y = dev(a), dev(b)
    assert (get(cuasync.matmul(x, y)) == np.float32(256 + 2**-6)).all()
    got = get(cuasync.matmul(x, y, precision="tf32"))
    check_matmul(got, a, b, TOL["tf32"])
    if cuasync.backend_name() == "emulator":  # the emulator rounds inputs as TF32 does
        assert (got == 256).all()


@pytest.mark.skipif(
    cuasync.device_count() < 2, reason="needs 2 devices (CUASYNC_EMU_DEVICES=2 on the emulator)"
)
def test_on_another_device_and_stream() -> None:
    device = 1
    a, b = host((5, 6), seed=1), host((6, 7), seed=2)
    stream = cuasync.Device(device).new_stream()
    op = cuasync.matmul(dev(a, device), dev(b, device))
    assert op.device is cuasync.Device(device)
    check_matmul(np.asarray(op.then(lambda t: t.to_host()).sync_on(stream)), a, b, 1e-5)


def test_graph_replay_writes_out() -> None:
    a, b = host((16, 32), seed=1), host((32, 8), seed=2)
    x, y = dev(a), dev(b)
    out = cuasync.zeros((16, 8)).sync()
    stream = cuasync.Device(0).new_stream()
    cuasync.matmul(x, y, out=out).sync_on(stream)  # the stream's first product: outside capture
    out2 = cuasync.zeros((16, 8)).sync()
    with cuasync.CudaGraph.scope(stream) as scope:
        scope.record(cuasync.matmul(x, y, out=out2, beta=1.0))
    graph = scope.graph
    assert graph is not None
    graph.launch().sync_on(stream)
    graph.launch().sync_on(stream)
    check(get(out2), 2 * np.matmul(wide(a), wide(b)), 2 * np.abs(a) @ np.abs(b), 1e-5)


# -- laziness -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("k", "command"),
    [(6, "launch_kernel"), (160**2, "gemm"), (300, "gemm")],
    ids=["tiled kernel", "cuBLAS", "long sums: cuBLAS"],
)
def test_building_enqueues_nothing(enqueued: list[str], k: int, command: str) -> None:
    # a small product is one launch of the tiled kernel, a larger one cuBLAS's one GEMM,
    # and so is a product of few outputs whose sums are longer than SMALL_K (a tiled
    # kernel's thread adds them in turn: one slow block, less accurate)
    x, y = dev(host((4, k))), dev(host((k, 160)))
    enqueued.clear()
    op = cuasync.matmul(x, y)
    op2 = cuasync.dot_general(x, y, contracting=((1,), (0,)))
    op3 = x @ y
    assert enqueued == []
    assert (op.shape, op2.shape, op3.shape) == ((4, 160), (4, 160), (4, 160))
    op.sync()
    assert [c for c in enqueued if c in ("gemm", "launch_kernel")] == [command]
    op2.sync()
    op3.sync()


@pytest.mark.anyio
async def test_awaited_in_a_loop(anyio_backend: Any) -> None:
    a, b = host((3, 4)), host((4, 2), seed=1)
    x = await cuasync.from_host(a)
    y = await cuasync.from_host(b)
    t = await (x @ y)
    check_matmul(await t.to_host(), a, b, 1e-5)


# -- errors ---------------------------------------------------------------------------------------
def test_bad_shapes_name_the_argument() -> None:
    x, y = dev(host((4, 6))), dev(host((5, 3)))
    with pytest.raises(ShapeError, match="a has shape .4, 6. and b .5, 3."):
        cuasync.matmul(x, y)
    with pytest.raises(ShapeError, match="batch axes"):
        cuasync.matmul(dev(host((2, 4, 6))), dev(host((3, 6, 2))))
    with pytest.raises(ShapeError, match="b is 0-d"):
        cuasync.matmul(x, dev(np.array(1, np.float32)))
    with pytest.raises(ShapeError, match="contracting axes have sizes"):
        cuasync.dot_general(x, y, contracting=((1,), (0,)))
    with pytest.raises(ShapeError, match=r"contracting\[1\]"):
        cuasync.dot_general(x, y, contracting=((1,), (2,)))
    with pytest.raises(ShapeError, match="batch axes have sizes"):
        cuasync.dot_general(x, dev(host((5, 6))), contracting=((1,), (1,)), batch=((0,), (0,)))
    with pytest.raises(ShapeError, match="both contracting and batch"):
        cuasync.dot_general(x, x, contracting=((0,), (0,)), batch=((0,), (0,)))
    with pytest.raises(ShapeError, match="names an axis twice"):
        cuasync.dot_general(x, x, contracting=((1, 1), (1, 1)))
    with pytest.raises(ArgumentError, match="contracting must be a pair"):
        cuasync.dot_general(x, y, contracting=(1, 0, 2))
    with pytest.raises(ShapeError, match="axes=3"):
        cuasync.tensordot(x, y, axes=3)
    with pytest.raises(ShapeError, match=r"axes axes have sizes"):
        cuasync.tensordot(x, y, axes=([1], [0]))


def test_bad_dtypes_and_arguments() -> None:
    x = dev(host((4, 6)))
    with pytest.raises(DTypeError, match="a has dtype bool"):
        cuasync.matmul(dev(np.ones((4, 6), np.bool_)), x.reshape((6, 4)))
    with pytest.raises(ArgumentError, match="b is a numpy array"):
        cuasync.matmul(x, np.ones((6, 2), np.float32))  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="b must be a cuasync.Tensor"):
        cuasync.matmul(x, 2.0)  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="beta=1.0 accumulates into out="):
        cuasync.matmul(x, x.reshape((6, 4)), beta=1.0)
    with pytest.raises(ArgumentError, match="precision must be one of"):
        cuasync.matmul(x, x.reshape((6, 4)), precision="fast")
    with pytest.raises(ArgumentError, match="precision='tf32' is for float32"):
        y = dev(host((4, 4), "float64"))
        cuasync.matmul(y, y, precision="tf32")
    with pytest.raises(DTypeError, match="alpha=1j is complex"):
        cuasync.matmul(x, x.reshape((6, 4)), alpha=1j)
    with pytest.raises(ArgumentError, match="alpha must be a number"):
        cuasync.matmul(x, x.reshape((6, 4)), alpha="2")  # type: ignore[arg-type]


@pytest.mark.skipif(
    cuasync.device_count() < 2, reason="needs 2 devices (CUASYNC_EMU_DEVICES=2 on the emulator)"
)
def test_operands_and_out_on_two_devices_are_refused() -> None:
    x, y = dev(host((4, 6))), dev(host((6, 5)))
    with pytest.raises(InvalidDeviceError, match="out is on device 1"):
        cuasync.matmul(x, y, out=cuasync.empty((4, 5), device=1).sync())
    with pytest.raises(InvalidDeviceError, match="a lives on device 0, b on device 1"):
        cuasync.matmul(x, dev(host((6, 5)), 1))


def test_out_checks() -> None:
    x, y = dev(host((4, 6))), dev(host((6, 5)))
    with pytest.raises(ShapeError, match=r"out has shape \(5, 4\), the result has shape \(4, 5\)"):
        cuasync.matmul(x, y, out=cuasync.empty((5, 4)).sync())
    with pytest.raises(DTypeError, match="out has dtype float64"):
        cuasync.matmul(x, y, out=cuasync.empty((4, 5), "float64").sync())
    with pytest.raises(ArgumentError, match="out must be a cuasync.Tensor"):
        cuasync.matmul(x, y, out=np.empty((4, 5), np.float32))  # type: ignore[arg-type]
    sq = dev(host((4, 4)))
    with pytest.raises(AliasingError, match="out overlaps a"):
        cuasync.matmul(sq, dev(host((4, 4))), out=sq)
    with pytest.raises(AliasingError, match="out overlaps b"):
        big = dev(host((8, 4)))
        cuasync.matmul(sq, big[:4], out=big[2:6])


def test_an_error_leaves_operand_ops_unconsumed() -> None:
    x = dev(host((4, 6)))
    op = x * 2.0
    with pytest.raises(ShapeError):
        cuasync.matmul(op, x)
    check_matmul(get(op @ x.reshape((6, 4))), host((4, 6)) * 2, host((4, 6)).reshape(6, 4), 1e-5)
    with pytest.raises(OpConsumedError):
        op @ x.reshape((6, 4))


def test_same_op_on_both_sides() -> None:
    a = host((5, 5))
    op = dev(a) + 0.0
    check_matmul(get(op @ op), a, a, 1e-5)


# -- seen products -----------------------------------------------------------------------------
@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> dict[Any, Any]:
    """matmul's seen kinds, emptied for the test (put back after)."""
    from cuasync._ops import contract

    monkeypatch.setattr(contract, "_SEEN", {})
    return contract._SEEN


def _is_seen(op: Any) -> bool:
    from cuasync._ops.contract import _SeenProduct

    return isinstance(op._node.value, _SeenProduct)


@pytest.mark.parametrize(("sa", "sb"), SHAPES, ids=[f"{a}@{b}" for a, b in SHAPES])
def test_a_seen_product_is_one_gemm_of_other_tensors_alike(
    sa: tuple[int, ...], sb: tuple[int, ...], seen: dict[Any, Any]
) -> None:
    # The first product of a kind runs the long way and records it; later ones of that
    # kind (dtypes, shapes, strides, scalars) are one GEMM of their own views: other
    # values, another offset in their allocations, the same operand twice.
    a, b = host(sa, seed=1), host(sb, seed=2)
    first = cuasync.matmul(dev(a), dev(b))
    assert not _is_seen(first)
    check_matmul(get(first), a, b, TOL["float32"])
    groups = (sa, sb) == ((3, 1, 4, 5), (2, 5, 6))  # (batch axes broadcast in turn: 2 GEMMs)
    assert len(seen) == (0 if groups else 1)
    for seed in (3, 4):
        a2, b2 = host(sa, seed=seed), host(sb, seed=seed + 10)
        pad = dev(np.concatenate([np.zeros(3, np.float32), a2.ravel()]))
        x = pad[3:].reshape(sa)  # (another offset: its rows not 16-byte aligned)
        op = cuasync.matmul(x, dev(b2))
        assert _is_seen(op) != groups and op.shape == first.shape and op.dtype == first.dtype
        check_matmul(get(op), a2, b2, TOL["float32"])
    y = dev(host((6, 6), seed=5))
    cuasync.matmul(y, y).sync()
    op = cuasync.matmul(y, y)
    assert _is_seen(op)
    square = host((6, 6), seed=5)
    check_matmul(get(op), square, square, TOL["float32"])


def test_products_that_are_more_than_one_gemm_are_not_recorded(seen: dict[Any, Any]) -> None:
    # A converted operand, a copied (unreadable) view, several batch groups, out=, an
    # integer product, k == 0 and an operand op each run the long way every time, and a
    # kind differing in alpha's type, or the precision, is another kind.
    a, b = host((4, 6), seed=1), host((6, 3), seed=2)
    x, y = dev(a), dev(b)
    wide_b = dev(b.astype(np.float64))
    unreadable = dev(host((8, 12), seed=3))[::2, ::2]  # (4, 6): no unit stride, copied
    batches = dev(host((2, 3, 4, 6), seed=4))  # (its batch axes merge into one)
    split = dev(host((2, 4, 4, 6), seed=5))[:, :3]  # (2, 3, 4, 6): two batch groups
    o = dev(np.zeros((4, 3), np.float32))
    cases = [
        lambda: cuasync.matmul(x, wide_b),
        lambda: cuasync.matmul(unreadable, y),
        lambda: cuasync.matmul(split, y),
        lambda: cuasync.matmul(x, y, out=o),
        lambda: cuasync.matmul(dev(np.ones((4, 6), np.int8)), dev(np.ones((6, 3), np.int8))),
        lambda: cuasync.matmul(dev(np.ones((4, 0), np.float32)), dev(np.ones((0, 3), np.float32))),
        lambda: cuasync.matmul(x + 0.0, y),
    ]
    for make in cases:
        for _ in range(2):
            make().sync()
        assert not seen, make
    cuasync.matmul(batches, y).sync()  # (one strided batch: recorded)
    assert len(seen) == 1
    cuasync.matmul(x, y).sync()
    for other in (
        cuasync.matmul(x, y, alpha=1),
        cuasync.matmul(x, y, alpha=np.float32(1)),
        cuasync.matmul(x, y, precision="tf32"),
    ):
        assert not _is_seen(other)
        other.sync()
    assert len(seen) == 5


def test_a_seen_product_takes_each_alpha_as_it_comes(seen: dict[Any, Any]) -> None:
    # alpha's value is not part of the kind (a schedule of values makes one entry, not
    # one each, nor a cache that starts over): each product is scaled by its own.
    a, b = host((4, 6), seed=1), host((6, 3), seed=2)
    x, y = dev(a), dev(b)
    cuasync.matmul(x, y, alpha=0.5).sync()
    for alpha in (2.0, -1.5, 0.0, 1e-3):
        op = cuasync.matmul(x, y, alpha=alpha)
        assert _is_seen(op)
        check_matmul(get(op), np.float32(alpha) * a, b, TOL["float32"])
    assert len(seen) == 1
    z = host((4, 6), "complex64", 3)
    w = host((6, 3), "complex64", 4)
    zc, wc = dev(z), dev(w)
    cuasync.matmul(zc, wc, alpha=1j).sync()
    op = cuasync.matmul(zc, wc, alpha=2 - 1j)
    assert _is_seen(op)
    check_matmul(get(op), (2 - 1j) * z, w, TOL["complex64"])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_small_seen_product_is_one_launch_of_the_tiled_kernel(
    dtype: str, seen: dict[Any, Any]
) -> None:
    # cuBLAS's host work would cost more than a small product: its seen kind is one launch
    # of the tiled kernel into the new result (what the native core submits as a raw
    # launch), bit for bit the long way's, the same operand on both sides too
    from cuasync._ops import contract, tiled_gemm

    a, b = host((3, 24, 20), dtype, 1), host((20, 16), dtype, 2)
    x, y = dev(a), dev(b)
    first = get(cuasync.matmul(x, y, alpha=2.0))
    check_matmul(first, 2 * a, b, TOL[dtype])
    (kind,) = seen.values()
    assert kind.tiled.kernel is tiled_gemm.kernel(dtype) and kind.tiled.grid == (1, 2, 3)
    op = cuasync.matmul(x, y, alpha=2.0)
    assert _is_seen(op)
    stream = cuasync.Device(0).new_stream()
    launch = contract._product_launch(op._node.value, stream)
    assert launch._kernel is kind.tiled.kernel
    np.testing.assert_array_equal(np.asarray(launch.sync_on(stream).to_host().sync()), first)
    np.testing.assert_array_equal(get(op), first)
    sq = host((20, 20), dtype, 3)
    z = dev(sq)
    want = get(z @ z)
    op = z @ z
    assert _is_seen(op)
    np.testing.assert_array_equal(get(op), want)
    check_matmul(want, sq, sq, TOL[dtype])


@pytest.mark.parametrize(
    ("sa", "sb"),
    [
        ((128, 128), (128, 128)),
        ((2, 60, 256), (256, 68)),
        ((256,), (256,)),
        ((1, 256), (256, 300)),
    ],
    ids=["128 cubed", "batched, k 256", "a dot of 256", "a row of 256"],
)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_tiled_kernel_at_its_bounds(
    sa: tuple[int, ...], sb: tuple[int, ...], dtype: str, seen: dict[Any, Any]
) -> None:
    # the largest products it takes (SMALL_MACS multiply-adds, sums of SMALL_K terms),
    # partial tiles at the edges, on a GPU as on the emulator; the seen product alike
    a, b = host(sa, dtype, 1), host(sb, dtype, 2)
    x, y = dev(a), dev(b)
    check_matmul(get(cuasync.matmul(x, y)), a, b, TOL[dtype])
    (kind,) = seen.values()
    assert kind.tiled is not None
    check_matmul(get(cuasync.matmul(x, y)), a, b, TOL[dtype])


# -- GPU only: cuBLAS against numpy -----------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["highest", "tf32"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_cublas_matches_numpy(dtype: str, precision: str) -> None:
    if precision == "tf32" and dtype not in ("float32", "complex64"):
        pytest.skip("tf32 is for float32 and complex64")
    a, b = host((3, 512, 384), dtype, 1), host((384, 256), dtype, 2)
    got = get(cuasync.matmul(dev(a), dev(b), precision=precision))
    check_matmul(got, a, b, TOL["tf32" if precision == "tf32" else dtype])


@pytest.mark.gpu
def test_gpu_cublas_streams_and_workspaces() -> None:
    from cuasync._backends import get_backend

    # (sums of 384 terms: cuBLAS's, past tiled_gemm.SMALL_K; 256 x 128 x 128 became a size
    # of the tiled kernel's, which needs no workspace)
    a, b = host((256, 384), seed=1), host((384, 64), seed=2)
    x, y = dev(a), dev(b)
    streams = [cuasync.Device(0).new_stream() for _ in range(3)]
    futures = [cuasync.matmul(x, y).submit_on(s) for s in streams]
    for f in futures:
        check_matmul(np.asarray(f.wait().to_host().sync()), a, b, TOL["float32"])
    blas = get_backend()._blas  # type: ignore[attr-defined]
    assert all(s.handle in blas._workspaces for s in streams)


# -- issue 34 ---------------------------------------------------------------------------------
def test_mixed_dtype_matmul_and_tensordot_promote() -> None:
    # The standard's type promotion; mixed operands raised DTypeError.
    a, b = host((4, 6), "float32", 1), host((6, 3), "float64", 2)
    x, y = dev(a), dev(b)
    for op, (lhs, rhs) in (
        (cuasync.matmul(x, y), (a, b)),
        (x @ y, (a, b)),
        (cuasync.tensordot(x, y, axes=1), (a, b)),
        (cuasync.matmul(y.T, x.T), (b.T, a.T)),
    ):
        assert op.dtype == np.float64
        check(get(op), wide(lhs) @ wide(rhs), np.abs(wide(lhs)) @ np.abs(wide(rhs)), 1e-12)
    h, c = host((4, 6), "bfloat16", 3), host((6, 3), "complex64", 4)
    got = get(cuasync.matmul(dev(h), dev(c)))
    assert got.dtype == np.complex64
    check(got, wide(h) @ wide(c), np.abs(wide(h)) @ np.abs(wide(c)), 1e-5)


def test_tensordot_contracting_an_empty_axis_with_another() -> None:
    # issue 34: a zero-size axis contracted together with another failed on a bare
    # AssertionError (gemm.group); the sum over nothing is 0.
    a, b = np.ones((2, 0, 3), np.float32), np.ones((2, 0, 4), np.float32)
    got = get(cuasync.tensordot(dev(a), dev(b), axes=([0, 1], [0, 1])))
    np.testing.assert_array_equal(got, np.tensordot(a, b, axes=([0, 1], [0, 1])))
    assert got.shape == (3, 4)
    got = get(cuasync.tensordot(dev(a), dev(b), axes=([1, 0], [1, 0])))
    np.testing.assert_array_equal(got, np.zeros((3, 4), np.float32))
