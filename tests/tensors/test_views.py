"""Zero-copy structural views (transpose, permute_dims, broadcast_to, expand_dims, squeeze,
diagonal, reversed slices) vs numpy, and the errors of indexing that would copy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cuasync
from cuasync._dtypes import SUPPORTED
from cuasync.errors import (
    ArgumentError,
    IndexOutOfRangeError,
    ShapeError,
    UnsupportedIndexError,
)

HOST = np.arange(60, dtype=np.float32).reshape(3, 4, 5)


@pytest.fixture(scope="module")
def cube() -> cuasync.Tensor:
    return cuasync.from_host(HOST).sync()


def same(view: cuasync.Tensor, want: np.ndarray, base: cuasync.Tensor) -> None:
    assert view.shape == want.shape
    assert view.allocation is base.allocation  # zero-copy
    np.testing.assert_array_equal(view.to_host().sync(), want)
    np.testing.assert_array_equal(view.dup().sync().to_host().sync(), want)


def test_transpose_and_permute_dims(cube: cuasync.Tensor) -> None:
    same(cube.T, HOST.T, cube)
    same(cube.transpose(), HOST.transpose(), cube)
    same(cube.transpose(1, 0, 2), HOST.transpose(1, 0, 2), cube)
    same(cube.transpose((2, 0, 1)), HOST.transpose((2, 0, 1)), cube)
    same(cuasync.permute_dims(cube, (0, 2, 1)), np.permute_dims(HOST, (0, 2, 1)), cube)
    same(cube.transpose(-1, 0, 1), HOST.transpose(-1, 0, 1), cube)
    with pytest.raises(ArgumentError, match="not a permutation"):
        cube.transpose(0, 0, 1)
    with pytest.raises(ArgumentError, match="out of range"):
        cuasync.permute_dims(cube, (0, 1, 3))


def test_broadcast_expand_squeeze_diagonal(cube: cuasync.Tensor) -> None:
    row = cube[0, 0]
    same(cuasync.broadcast_to(row, (2, 3, 5)), np.broadcast_to(HOST[0, 0], (2, 3, 5)), cube)
    same(cuasync.expand_dims(cube, (0, -1)), np.expand_dims(HOST, (0, -1)), cube)
    one = cube[:1, :, None]
    same(cuasync.squeeze(one), np.squeeze(HOST[:1, :, None]), cube)
    same(cuasync.squeeze(one, axis=2), np.squeeze(HOST[:1, :, None], axis=2), cube)
    for offset in (-2, -1, 0, 1, 3, 7):
        same(cuasync.diagonal(cube[0], offset), np.diagonal(HOST[0], offset), cube)
    same(cuasync.diagonal(cube, 1, 2, 0), np.diagonal(HOST, 1, 2, 0), cube)
    with pytest.raises(ShapeError, match="cannot be broadcast"):
        cuasync.broadcast_to(row, (3, 4))
    with pytest.raises(ShapeError, match="not 1"):
        cuasync.squeeze(cube, axis=0)
    with pytest.raises(ArgumentError, match="same axis"):
        cuasync.diagonal(cube, 0, 1, -2)
    with pytest.raises(ArgumentError, match="x must be a cuasync.Tensor"):
        cuasync.expand_dims(np.ones(3), 0)  # type: ignore[arg-type]


def test_expand_dims_out_of_range_axis_raises_index_error(cube: cuasync.Tensor) -> None:
    # issue 34: the array API requires IndexError (numpy's AxisError is one); it was an
    # ArgumentError only. Still a ShapeError (ArgumentError), as every view's axis error.
    x0 = cube[0, 0, 0]
    for axis in (-2, 1, (0, 2)):
        with pytest.raises(IndexError, match=r"expand_dims: axis -?\d is out of range"):
            cuasync.expand_dims(x0, axis)
    with pytest.raises(IndexOutOfRangeError, match="axis 3"):
        cuasync.squeeze(cube, axis=3)
    with pytest.raises(ShapeError, match="out of range"):
        cuasync.flip(cube, -4)
    assert cuasync.expand_dims(x0, -1).shape == (1,)


def test_reversed_slices_and_newaxis(cube: cuasync.Tensor) -> None:
    for index in (
        (slice(None, None, -1),),
        (slice(None), slice(3, 0, -2)),
        (None, slice(None, None, -1), ..., slice(None, None, -3)),
        (1, slice(-1, None, -1), None),
        (slice(2, 2, -1),),
    ):
        same(cube[index], HOST[index], cube)
    x = cube[::-1, :, ::-2]
    got = cuasync.sum(x * 2.0, axis=1).sync().to_host().sync()
    np.testing.assert_allclose(got, (HOST[::-1, :, ::-2] * 2).sum(axis=1))
    dst = cuasync.zeros(x.shape).sync()
    cuasync.memcpy(dst, x).sync()
    np.testing.assert_array_equal(dst.to_host().sync(), HOST[::-1, :, ::-2])
    strided = cuasync.zeros((3, 4, 6)).sync()[:, :, ::2]  # a forward view: gathered, then copied
    cuasync.memcpy(strided, x[..., ::-1]).sync()
    np.testing.assert_array_equal(strided.to_host().sync(), HOST[::-1, :, ::-2][..., ::-1])
    cuasync.memcpy(x, dst).sync()  # a reversed destination too (dst holds x's values)
    np.testing.assert_array_equal(cube.to_host().sync(), HOST)


def test_copying_indices_assignment_and_numpy_conversion_raise(cube: cuasync.Tensor) -> None:
    with pytest.raises(TypeError, match=r"cuasync\.take"):
        cube[np.array([0, 1])]
    with pytest.raises(UnsupportedIndexError, match=r"cuasync\.where"):
        cube[np.ones((3, 4, 5), bool)]
    with pytest.raises(TypeError, match=r"cuasync\.fill.*cuasync\.memcpy"):
        cube[0] = 1.0
    with pytest.raises(TypeError, match=r"await t\.to_host\(\)"):
        np.asarray(cube)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_property_chains_of_views_match_numpy(data: Any) -> None:
    ndim = data.draw(st.integers(0, 4))
    shape = tuple(data.draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
    dtype = SUPPORTED[data.draw(st.sampled_from(sorted(SUPPORTED)))]  # FP8 and complex too
    a = (np.arange(int(np.prod(shape))) % 61).astype(dtype).reshape(shape)
    x = cuasync.from_host(a).sync()
    base = x
    for _ in range(3):
        kind = data.draw(st.sampled_from(["slice", "T", "perm", "expand", "squeeze", "bcast"]))
        if kind == "slice" and a.ndim:
            index = tuple(
                slice(
                    None,
                    None,
                    data.draw(st.sampled_from([1, 2, -1, -2])),
                )
                for _ in range(a.ndim)
            )
            a, x = a[index], x[index]
        elif kind == "T":
            a, x = a.T, x.T
        elif kind == "perm" and a.ndim:
            perm = tuple(data.draw(st.permutations(range(a.ndim))))
            a, x = a.transpose(perm), cuasync.permute_dims(x, perm)
        elif kind == "expand" and a.ndim < 5:
            axis = data.draw(st.integers(-a.ndim - 1, a.ndim))
            a, x = np.expand_dims(a, axis), cuasync.expand_dims(x, axis)
        elif kind == "squeeze":
            a, x = np.squeeze(a), cuasync.squeeze(x)
        elif kind == "bcast":
            new = (2, *a.shape)
            a, x = np.broadcast_to(a, new), cuasync.broadcast_to(x, new)
    assert x.shape == a.shape and x.allocation is base.allocation
    got = np.ascontiguousarray(x.to_host().sync())
    assert got.dtype == a.dtype
    np.testing.assert_array_equal(got.view(np.uint8), np.ascontiguousarray(a).view(np.uint8))


@pytest.mark.anyio
@pytest.mark.usefixtures("no_emu_compile")  # the reductions' sources: test_reductions.py
async def test_astype_item_like_and_repr(anyio_backend: str) -> None:
    x = await cuasync.from_host(np.arange(6.0).reshape(2, 3))
    assert repr(x.T) == "<cuasync.Tensor shape=(3, 2) dtype=float64 device=0 strides=(1, 3)>"
    h = x.astype("float16")
    assert isinstance(h, cuasync.TensorOp) and h.dtype == np.float16
    np.testing.assert_array_equal(await h.to_host(), np.arange(6.0).reshape(2, 3).astype("f2"))
    got = await (x[:, ::-1] * 2.0).astype("int32").to_host()
    np.testing.assert_array_equal(got, (np.arange(6.0).reshape(2, 3)[:, ::-1] * 2).astype("i4"))
    assert await x[1, 2].item() == 5.0
    total = await cuasync.sum(x).item()
    assert total == 15.0 and type(total) is float
    assert await cuasync.argmax(x).item() == 5
    with pytest.raises(ShapeError, match="exactly one element"):
        x.item()
    for fn, args, want in (
        (cuasync.zeros_like, (), np.zeros((2, 3))),
        (cuasync.ones_like, (), np.ones((2, 3))),
        (cuasync.full_like, (7,), np.full((2, 3), 7.0)),
    ):
        np.testing.assert_array_equal(await fn(x, *args).to_host(), want)
    op = x * 1.0
    f = await cuasync.full_like(op, 3, dtype="int8", shape=(4,))  # op's shape is known
    assert (f.shape, f.dtype) == ((4,), np.int8)
    await op
    e = cuasync.empty_like(x)
    assert (e.shape, e.dtype, e.device) == (x.shape, x.dtype, x.device)
    await e
    with pytest.raises(ArgumentError, match="x must be"):
        cuasync.zeros_like(np.zeros(3))  # type: ignore[arg-type]


@pytest.mark.skipif(cuasync.device_count() < 2, reason="needs two devices")
def test_reversed_views_copy_between_devices(cube: cuasync.Tensor) -> None:
    view = cube[::-1, :, ::-2]
    np.testing.assert_array_equal(view.to(1).sync().to_host().sync(), HOST[::-1, :, ::-2])
    dst = cuasync.zeros(view.shape, device=1).sync()
    cuasync.memcpy(dst, view).sync()
    np.testing.assert_array_equal(dst.to_host().sync(), HOST[::-1, :, ::-2])


# -- empty views (issue 35, item 3) ---------------------------------------------------------
EMPTY_U32 = np.zeros((7, 0, 3, 80), np.uint32)
EMPTY_F32 = np.zeros((5, 0, 6), np.float32)
EMPTY_VIEWS: dict[str, Any] = {  # a name: (host base, its view in cuasync, in numpy)
    "reversed-strided": (EMPTY_U32, lambda t: t[::-1, ::-1, :, ::2], None),
    "flip": (EMPTY_U32, lambda t: cuasync.flip(t[2:, :, 1:]), lambda a: np.flip(a[2:, :, 1:])),
    "diagonal": (
        EMPTY_U32,
        lambda t: cuasync.diagonal(t[..., ::-1], 1, 0, 2),
        lambda a: np.diagonal(a[..., ::-1], 1, 0, 2),
    ),
    "float-reversed": (EMPTY_F32, lambda t: t[::-1, :, ::-3], None),
    "float-flip-T": (EMPTY_F32, lambda t: t[::-1, ::-1, ::-1].T, None),
}


def _empty_view(name: str) -> tuple[cuasync.Tensor, np.ndarray]:
    host, make, make_host = EMPTY_VIEWS[name]
    return make(cuasync.from_host(host).sync()), (make_host or make)(host)


@pytest.mark.parametrize("name", EMPTY_VIEWS)
def test_empty_views_start_inside_their_allocation(name: str) -> None:
    """Moving an empty view along its axes (``t[::-1]`` with another axis 0) put its
    offset past the end of a 0-byte allocation: kernels and copies got a pointer that
    is not device memory, and the emulator faulted the device."""
    view, want = _empty_view(name)
    assert view.shape == want.shape and view.size == 0
    assert 0 <= view.offset * view.itemsize <= view.allocation.nbytes
    assert view.ptr == view.allocation.ptr


EMPTY_OPS: dict[str, Any] = {  # a name: (the op on a view, the same on numpy's view)
    "prod-axes-dtype": (
        lambda x: cuasync.prod(x, axis=(0, 1), dtype="int8"),
        lambda a: np.prod(a, axis=(0, 1), dtype="int8"),
    ),
    "sum-dtype": (
        lambda x: cuasync.sum(x, dtype="float64"),
        lambda a: np.sum(a, dtype="float64"),
    ),
    "sum-axis0-keepdims": (
        lambda x: cuasync.sum(x, axis=0, keepdims=True),
        lambda a: np.sum(a, axis=0, keepdims=True),
    ),
    "max-last-axis": (lambda x: cuasync.max(x, axis=-1), lambda a: np.max(a, axis=-1)),
    "add": (lambda x: x + 1, lambda a: a + a.dtype.type(1)),
    "multiply-self": (lambda x: x * x, lambda a: a * a),
    "where": (lambda x: cuasync.where(x > 0, x, x), lambda a: np.where(a > 0, a, a)),
    "convert": (lambda x: cuasync.convert(x, "float16"), lambda a: a.astype("float16")),
    "dup": (lambda x: x.dup(), np.copy),
    "to_host": (lambda x: x, lambda a: a),
    "fill": (lambda x: cuasync.fill(x, 3), lambda a: np.full_like(a, 3)),
    "memcpy-into-reversed": (
        lambda x: cuasync.memcpy(cuasync.empty(x.shape, x.dtype).sync()[::-1], x),
        lambda a: a,
    ),
    "concatenate": (lambda x: cuasync.concatenate([x, x]), lambda a: np.concatenate([a, a])),
    "stack": (lambda x: cuasync.stack([x, x], axis=1), lambda a: np.stack([a, a], axis=1)),
    "tril": (cuasync.tril, np.tril),
    "matmul-k0": (
        lambda x: cuasync.matmul(*(cuasync.convert(m, "float32") for m in _k0_pair(x))),
        lambda a: np.matmul(*(m.astype("float32") for m in _k0_pair(a))),
    ),
    "tensordot-every-axis": (
        lambda x: cuasync.tensordot(*[cuasync.convert(x, "float32")] * 2, axes=x.ndim),  # type: ignore[misc, arg-type]
        lambda a: np.tensordot(*[a.astype("float32")] * 2, axes=a.ndim),  # type: ignore[call-overload]
    ),
}


def _k0_pair(x: Any) -> tuple[Any, Any]:
    """A (3, 0) and a (0, 2) matrix of an empty view whose axis 1 is empty."""
    rest = (0,) * (x.ndim - 3)
    return x[(slice(0, 3), slice(None), 0, *rest)], x[(0, slice(None), slice(0, 2), *rest)]


@pytest.mark.usefixtures("no_emu_compile")
@pytest.mark.parametrize("op", EMPTY_OPS)
@pytest.mark.parametrize("name", ["reversed-strided", "float-flip-T"])
def test_ops_over_empty_reversed_views(name: str, op: str) -> None:
    """Every op takes an empty reversed or strided view (issue 35's repro first): none
    faults the device, and each gives numpy's result."""
    view, host = _empty_view(name)
    run, want = EMPTY_OPS[op]
    got = run(view)
    got = got.sync() if not isinstance(got, cuasync.Tensor) else got
    result = got.to_host().sync()
    expected = want(host)
    assert result.dtype == expected.dtype
    np.testing.assert_array_equal(result, expected)
    cuasync.from_host(np.ones(4)).sync()  # the device still works


# -- broadcast destinations (issue 35, item 8) ------------------------------------------------
def _operands() -> tuple[cuasync.Tensor, cuasync.Tensor]:
    rng = np.random.default_rng(8)
    a, b = (rng.uniform(0.5, 2.0, (3, 4)).astype(np.float32) for _ in range(2))
    return cuasync.from_host(a).sync(), cuasync.from_host(b).sync()


_UNARY = ["abs", "cos", "exp", "expm1", "log", "log1p", "negative", "rsqrt", "sign", "sin"]
_UNARY += ["sqrt", "tanh", "conj", "real", "imag", "angle"]
_BINARY = ["add", "divide", "maximum", "minimum", "multiply", "power", "remainder", "subtract"]
_BINARY += ["equal", "greater", "greater_equal", "less", "less_equal", "not_equal"]
_REDUCTIONS = ["argmax", "argmin", "max", "mean", "min", "prod", "sum"]
# the array API's (#34), with numpy's aliases
_UNARY += ["acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "sinh", "tan", "log2"]
_UNARY += ["log10", "ceil", "floor", "trunc", "round", "isfinite", "isinf", "isnan"]
_UNARY += ["signbit", "positive", "square", "reciprocal", "logical_not"]
_UNARY += ["arccos", "arccosh", "arcsin", "arcsinh", "arctan", "arctanh"]
_BINARY += ["atan2", "arctan2", "copysign", "hypot", "logaddexp", "nextafter", "floor_divide"]
_BINARY += ["logical_and", "logical_or", "logical_xor", "pow"]
#: Integer-only functions: on integer operands of their own (the float x, y not taken).
_INTEGER = ["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift"]
_INTEGER += ["bitwise_right_shift", "left_shift", "right_shift", "bitwise_invert", "invert"]


def _unary(fn: Any) -> Any:
    return lambda x, y, **kw: fn(x, **kw)


def _binary(fn: Any) -> Any:
    return lambda x, y, **kw: fn(x, y, **kw)


def _integer(fn: Any) -> Any:
    def make(x: Any, y: Any, **kw: Any) -> Any:
        i = cuasync.from_host(np.arange(12, dtype=np.int32).reshape(3, 4)).sync()
        return fn(i, **kw) if fn in (cuasync.invert, cuasync.bitwise_invert) else fn(i, 2, **kw)

    return make


def _reduction(fn: Any) -> Any:
    return lambda x, y, **kw: fn(x, axis=0, **kw)


def _ints(rows: list[list[int]]) -> cuasync.Tensor:
    return cuasync.from_host(np.array(rows, np.int64)).sync()


OUT_OPS: dict[str, Any] = {  # every op taking out=: (x, y, **out) -> the op
    **{n: _unary(getattr(cuasync, n)) for n in _UNARY},
    **{n: _binary(getattr(cuasync, n)) for n in _BINARY},
    **{n: _reduction(getattr(cuasync, n)) for n in _REDUCTIONS},
    **{n: _integer(getattr(cuasync, n)) for n in _INTEGER},
    "where": lambda x, y, **kw: cuasync.where((y > 1.0).sync(), x, y, **kw),
    "clip": lambda x, y, **kw: cuasync.clip(x, 0.75, 1.5, **kw),
    "matmul": lambda x, y, **kw: cuasync.matmul(x, y.T, **kw),
    "tensordot": lambda x, y, **kw: cuasync.tensordot(x, y, axes=([1], [1]), **kw),
    "dot_general": lambda x, y, **kw: cuasync.dot_general(x, y, contracting=((1,), (1,)), **kw),
    "gather": lambda x, y, **kw: cuasync.gather(x, _ints([[2, 0], [1, 3]]), axis=1, **kw),
    "take_along_axis": lambda x, y, **kw: cuasync.take_along_axis(
        x, _ints([[1], [0], [3]]), axis=1, **kw
    ),
    "scatter": lambda x, y, **kw: cuasync.scatter(
        x, _ints([[1], [0], [3]]), 1.0, axis=1, mode="add", **kw
    ),
    "dynamic_slice": lambda x, y, **kw: cuasync.dynamic_slice(x, (1, 1), (2, 3), **kw),
    "dynamic_update_slice": lambda x, y, **kw: cuasync.dynamic_update_slice(
        x, y[:1, :2], (1, 2), **kw
    ),
    "pad": lambda x, y, **kw: cuasync.pad(x, ((1, 0), (0, 2)), **kw),
}


def test_every_op_taking_out_is_in_the_broadcast_table() -> None:
    import inspect

    # (inspect.unwrap: the elementwise functions are native, declared by a def they wrap)
    takes_out = {
        name
        for name in cuasync.__all__
        if inspect.isfunction(inspect.unwrap(getattr(cuasync, name)))
        and "out" in inspect.signature(getattr(cuasync, name)).parameters
    }
    assert takes_out - {"download_into"} == set(OUT_OPS)  # download_into's out is host memory


def _broadcast_like(shape: tuple[int, ...], dtype: Any) -> cuasync.Tensor:
    """A broadcast view of ``shape``: one row of a tensor of its own, repeated."""
    row = cuasync.zeros((1, *shape[1:]), dtype).sync()
    return cuasync.broadcast_to(row, shape)


@pytest.mark.parametrize("op", OUT_OPS)
def test_a_broadcast_out_is_refused_by_every_op(op: str) -> None:
    """A broadcast ``out=`` was accepted by add, matmul, sum, ... and what landed
    differed between the GPU and the emulator; memcpy refused one. Every op refuses it
    (one check, ``check_writable``) when built, and a dense ``out=`` still works."""
    x, y = _operands()
    make = OUT_OPS[op]
    want = make(x, y).sync().to_host().sync()
    dense = cuasync.zeros(want.shape, want.dtype).sync()
    make(x, y, out=dense).sync()
    np.testing.assert_allclose(dense.to_host().sync(), want, rtol=1e-6)
    out = _broadcast_like(want.shape, want.dtype)
    with pytest.raises(ShapeError, match=r"out is a broadcast view .*stride 0 along axis 0"):
        make(x, y, out=out)
    pending = x * 1.0  # a TensorOp operand: refused before it is absorbed, still usable
    with pytest.raises(ShapeError, match="out is a broadcast view"):
        make(pending, y, out=out)
    np.testing.assert_array_equal(pending.sync().to_host().sync(), x.to_host().sync())


class _Interface:
    """An object exporting ``interface`` as its CUDA array interface."""

    def __init__(self, interface: dict[str, Any]) -> None:
        self.__cuda_array_interface__ = interface


@pytest.mark.parametrize("op", OUT_OPS)
def test_a_read_only_or_self_overlapping_out_is_refused_by_every_op(op: str) -> None:
    """An ``out=`` of read-only memory, or whose elements overlap one another without a
    zero stride (strides (1, 1), as torch's unfold makes), is refused when the op is
    built, as a broadcast one is (read-only memory was refused only when the op ran,
    its operand ops used up; the other was run, a race on a GPU)."""
    x, y = _operands()
    make = OUT_OPS[op]
    want = make(x, y).sync()
    base = cuasync.zeros((max(want.size, 1),), want.dtype).sync()
    exported = base.__cuda_array_interface__
    read_only = cuasync.asarray(
        _Interface(dict(exported, shape=want.shape, data=(exported["data"][0], True)))
    )
    pending = x * 1.0
    with pytest.raises(ArgumentError, match="out is read-only memory"):
        make(pending, y, out=read_only)
    if sum(d > 1 for d in want.shape) >= 2:
        steps = (want.dtype.itemsize,) * want.ndim  # (each axis steps one element)
        tangled = cuasync.asarray(_Interface(dict(exported, shape=want.shape, strides=steps)))
        with pytest.raises(ShapeError, match="overlap one another"):
            make(pending, y, out=tangled)
        with pytest.raises(ShapeError, match="overlap one another"):
            cuasync.fill(tangled, 1.0)
    np.testing.assert_array_equal(pending.sync().to_host().sync(), x.to_host().sync())


def test_fill_and_memcpy_refuse_a_broadcast_destination() -> None:
    x, _ = _operands()
    out = _broadcast_like((3, 4), np.float32)
    with pytest.raises(ShapeError, match="fill: tensor is a broadcast view"):
        cuasync.fill(out, 1.0)
    with pytest.raises(ShapeError, match="memcpy: dst is a broadcast view"):
        cuasync.memcpy(out, x)
    empty = cuasync.broadcast_to(cuasync.zeros((1, 0)).sync(), (3, 0))  # writes nothing
    cuasync.fill(empty, 1.0).sync()
    cuasync.memcpy(empty, x[:, :0]).sync()
    cuasync.add(x[:, :0], 1.0, out=empty).sync()


def test_views_of_an_op_view_its_output(cube: cuasync.Tensor, baseline: Any) -> None:
    """Each view function takes a TensorOp: a TensorOp whose output is that view of the op's
    output (an out= view's too), usable in bigger expressions; bad arguments raise when it
    is built, and leave the op unused."""
    host = HOST + 1
    cases = [
        (lambda v: cuasync.flip(v, 1), lambda a: np.flip(a, 1)),
        (lambda v: cuasync.permute_dims(v, (2, 0, 1)), lambda a: a.transpose(2, 0, 1)),
        (lambda v: cuasync.broadcast_to(v, (2, 3, 4, 5)), None),
        (lambda v: cuasync.expand_dims(v, (0, -1)), lambda a: np.expand_dims(a, (0, -1))),
        (lambda v: cuasync.squeeze(cuasync.expand_dims(v, 1)), lambda a: a),
        (lambda v: cuasync.diagonal(v, 1, 2, 1), lambda a: np.diagonal(a, 1, 2, 1)),
        (lambda v: cuasync.moveaxis(v, 0, -1), lambda a: np.moveaxis(a, 0, -1)),
        (lambda v: cuasync.matrix_transpose(v), lambda a: np.swapaxes(a, -1, -2)),
    ]
    for view, want in cases:
        wanted = np.broadcast_to(host, (2, 3, 4, 5)) if want is None else want(host)
        op = view(cube + 1.0)
        assert isinstance(op, cuasync.TensorOp) and op.shape == wanted.shape
        np.testing.assert_array_equal(op.sync().to_host().sync(), wanted)
    # of an op writing an out= view (transposed), and inside an expression
    out = cuasync.zeros((5, 4, 3)).sync().T
    flipped = cuasync.flip(cuasync.add(cube, 1.0, out=out), 0)
    np.testing.assert_array_equal(flipped.sync().to_host().sync(), np.flip(host, 0))
    doubled = cuasync.flip(cube + 1.0, 2) * 2.0
    np.testing.assert_array_equal(doubled.sync().to_host().sync(), np.flip(host, 2) * 2)
    op = cube + 1.0
    with pytest.raises(ShapeError, match="not 1"):
        cuasync.squeeze(op, axis=0)
    with pytest.raises(ArgumentError, match="not a permutation"):
        cuasync.permute_dims(op, (0, 0, 1))
    np.testing.assert_array_equal(op.sync().to_host().sync(), host)  # (still unused)
    with pytest.raises(cuasync.errors.OpConsumedError):
        cuasync.flip(op)
    pending = cube + 1.0
    with pytest.raises(ArgumentError, match=r"x must be a cuasync.Tensor \(await an op first\)"):
        cuasync.unstack(pending)  # type: ignore[arg-type]  # (its views are of one output)
    pending.sync()


def test_a_view_of_an_op_keeps_its_arguments_and_its_output_layout(
    cube: cuasync.Tensor, baseline: Any
) -> None:
    """A view of an op holds the arguments it was built with (a list changed afterwards
    changes nothing); what reads it sees the view's layout: an op writing into the
    tensor it views raises AliasingError, and reshape(copy=False) refuses to copy it."""
    host = HOST + 1
    axes = [2, 0, 1]
    permuted = cuasync.permute_dims(cube + 1.0, axes) * 1.0
    axes[:] = [1, 0, 2]
    np.testing.assert_array_equal(permuted.sync().to_host().sync(), host.transpose(2, 0, 1))
    reps = [2, 1, 1]
    tiled = cuasync.tile(cube + 1.0, reps)
    reps[0] = 1
    np.testing.assert_array_equal(tiled.sync().to_host().sync(), np.tile(host, (2, 1, 1)))
    shifts = np.array([1, 2])
    rolled = cuasync.roll(cube + 1.0, shifts, axis=(0, 1))
    shifts[:] = 0
    np.testing.assert_array_equal(rolled.sync().to_host().sync(), np.roll(host, (1, 2), (0, 1)))
    o = cuasync.zeros((8,)).sync()
    y = cuasync.from_host(np.arange(8, dtype=np.float32)).sync()
    reversed_o = cuasync.flip(cuasync.add(y, 0.0, out=o))
    with pytest.raises(cuasync.errors.AliasingError, match="overlaps"):
        cuasync.add(reversed_o, 1.0, out=o)  # (reversed reads of what it writes)
    np.testing.assert_array_equal(reversed_o.sync().to_host().sync(), np.arange(8)[::-1])
    flipped = cuasync.flip(cube + 1.0, 2)
    with pytest.raises(ShapeError, match="copy=False"):
        cuasync.reshape(flipped, (60,), copy=False)
    np.testing.assert_array_equal(
        cuasync.reshape(flipped, (60,)).sync().to_host().sync(), np.flip(host, 2).ravel()
    )
    out = cuasync.zeros((3, 4, 5)).sync()
    copied = cuasync.reshape(cuasync.add(cube, 1.0, out=out), (60,), copy=True).sync()
    assert copied.allocation is not out.allocation  # (copy=True: not a view of out)
    np.testing.assert_array_equal(copied.to_host().sync(), host.ravel())
    # a product writing out=, and einsum's transpose (a view of its output), alike
    m = cube[0]
    square = cuasync.zeros((4, 4)).sync()
    product = cuasync.flip(cuasync.matmul(m, m.mT, out=square))
    with pytest.raises(cuasync.errors.AliasingError, match="overlaps"):
        cuasync.add(product, 1.0, out=square)
    transposed = cuasync.einsum("ij->ji", m + 1.0)
    with pytest.raises(ShapeError, match="copy=False"):
        cuasync.reshape(transposed, (20,), copy=False)
    np.testing.assert_array_equal(transposed.sync().to_host().sync(), (HOST[0] + 1).T)
    np.testing.assert_array_equal(product.sync().to_host().sync(), np.flip(HOST[0] @ HOST[0].T))
    # a reshape of a tensor is a view op of it: what reads it sees that view, and a
    # product writing into what it reads is refused, an operand op or not
    flat = cuasync.from_host(np.arange(12, dtype=np.float32)).sync()
    viewed = cuasync.reshape(flat, (3, 4))
    with pytest.raises(cuasync.errors.AliasingError, match="overlaps"):
        cuasync.add(viewed, 1.0, out=flat.reshape((3, 4))[::-1])
    assert viewed.sync().allocation is flat.allocation  # (still usable: a view of flat)
    grid = flat.reshape((3, 4))[:, :3]
    scaled = grid * 1.0
    with pytest.raises(cuasync.errors.AliasingError, match="overlaps"):
        cuasync.matmul(scaled, cuasync.eye(3).sync(), out=cuasync.flip(grid, 0))
    scaled.sync()
