"""Random inputs, good and bad: every case matches numpy or raises a typed error.

Property tests (hypothesis) over tensor views (random shapes, dtypes, strided bases and
indices), reshape targets, creation shapes, launch configs and kernel scalar arguments.
Each case either gives what numpy gives (shape, strides and values, read back with
``to_host``) or raises a :class:`cuasync.errors.ArgumentError` subclass that is also an
``IndexError`` where numpy raises one; nothing crashes, hangs or silently clamps.

The examples are derandomized and nothing is stored between runs, so CI sees the same
cases every time; raise ``max_examples`` locally to explore further.
"""

from __future__ import annotations

import gc
import math
import weakref
from collections.abc import Iterator
from typing import Any, TypeGuard

import numpy as np
import pytest
from helpers import ON_EMULATOR
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import cuasync
from cuasync._dtypes import SUPPORTED
from cuasync.errors import (
    ArgumentError,
    LaunchError,
    OutOfMemoryError,
    ShapeError,
    TransferRejected,
)

CHECKS = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(autouse=True)
def _collect_garbage() -> Iterator[None]:
    """Free here what hypothesis' reference cycles keep alive (tensors among it).

    Otherwise a later test's garbage collection frees them, enqueuing work in the middle
    of a test that counts the commands it enqueues.
    """
    yield
    gc.collect()


DTYPES = sorted(SUPPORTED)  # bfloat16 too where ml_dtypes is installed

# -- strategies ------------------------------------------------------------------------------
small_ints = st.integers(-8, 8)
numpy_ints = st.sampled_from([np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint64])
sizes = st.one_of(small_ints, st.tuples(numpy_ints, st.integers(0, 8)).map(lambda p: p[0](p[1])))
JUNK = [1.0, -1.0, "a", True, np.bool_(False), {}, np.float32(2), 1j, object()]
ARRAYS = [[0], [0, 1], [True, False], np.array([0, 1]), np.array([True]), np.array(1)]

slices = st.builds(
    slice,
    st.one_of(st.none(), sizes, st.sampled_from([0.0, "1"])),
    st.one_of(st.none(), sizes),
    st.one_of(st.none(), st.integers(-2, 3), st.sampled_from([np.int32(2), 1.0, True])),
)
index_items = st.one_of(
    sizes,
    slices,
    st.just(Ellipsis),
    st.none(),
    st.sampled_from(JUNK),
    st.sampled_from(ARRAYS),
)
indices = st.one_of(index_items, st.lists(index_items, max_size=5).map(tuple))


@st.composite
def tensors(draw: st.DrawFn) -> tuple[np.ndarray, tuple[slice, ...]]:
    """A host array of random shape and dtype, and a valid strided slicing of it."""
    shape = tuple(draw(st.lists(st.integers(0, 5), max_size=4)))
    dtype = SUPPORTED[draw(st.sampled_from(DTYPES))]
    host = (np.arange(math.prod(shape)) % 97).astype(dtype).reshape(shape)
    base = []
    for dim in shape:
        start = draw(st.integers(0, dim))
        stop = draw(st.integers(start, dim))
        base.append(slice(start, stop, draw(st.integers(1, 3))))
    return host, tuple(base)


# -- the reference: what cuasync refuses on purpose --------------------------------------------
def is_size(value: Any) -> TypeGuard[int | np.integer[Any]]:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def refused_on_purpose(index: Any, shape: tuple[int, ...]) -> bool:
    """Whether basic zero-copy indexing documents a refusal of ``index`` (numpy may take it).

    Arrays, lists and other non-basic items; slice steps and bounds that are not ints
    (bounds past the axis are clipped, as numpy's; steps may be negative, not 0).
    """
    items = index if type(index) is tuple else (index,)
    basic = [i for i in items if i is not None and i is not Ellipsis]
    if any(type(i) is not slice and not is_size(i) for i in basic):
        return True
    axis = 0
    for item in items:
        if item is None:
            continue
        if item is Ellipsis:
            axis += len(shape) - len(basic)
            continue
        if type(item) is slice and axis < len(shape):
            step_ok = item.step is None or (is_size(item.step) and item.step != 0)
            bounds = [b for b in (item.start, item.stop) if b is not None]
            if not step_ok or not all(is_size(b) for b in bounds):
                return True
        axis += 1
    return False


def numpy_result(call: Any) -> tuple[Any, BaseException | None]:
    try:
        return call(), None
    except Exception as exc:
        return None, exc


def assert_same_view(view: cuasync.Tensor, expected: np.ndarray) -> None:
    assert view.shape == expected.shape
    assert view.dtype == expected.dtype
    if expected.size:  # numpy's strides of empty arrays and unit axes are arbitrary
        strides = [s * view.itemsize for s in view.strides]
        for ours, theirs, dim in zip(strides, expected.strides, expected.shape, strict=True):
            assert dim == 1 or ours == theirs, (view.strides, expected.strides)
    np.testing.assert_array_equal(view.to_host().sync(), expected)


# -- views ---------------------------------------------------------------------------------------
@CHECKS
@given(tensors(), indices)
def test_indexing_matches_numpy_or_raises_typed(
    case: tuple[np.ndarray, tuple[slice, ...]], index: Any
) -> None:
    host, base = case
    tensor = cuasync.from_host(host).sync()[base]
    host = host[base]
    expected, numpy_error = numpy_result(lambda: host[index])
    try:
        view = tensor[index]
    except ArgumentError as exc:
        event(f"refused: {type(exc).__name__}")
        on_purpose = refused_on_purpose(index, host.shape)
        assert numpy_error is not None or on_purpose, f"numpy takes {index!r}: {exc}"
        if isinstance(numpy_error, IndexError) and not on_purpose:
            assert isinstance(exc, IndexError), f"numpy raises IndexError for {index!r}: {exc!r}"
        return
    event("a view")
    assert numpy_error is None, f"cuasync took {index!r}, numpy raised {numpy_error!r}"
    assert not refused_on_purpose(index, host.shape)
    assert view.allocation is tensor.allocation
    assert_same_view(view, np.asarray(expected))


@CHECKS
@given(tensors())
def test_iteration_matches_numpy(case: tuple[np.ndarray, tuple[slice, ...]]) -> None:
    host, base = case
    tensor = cuasync.from_host(host).sync()[base]
    host = host[base]
    if host.ndim == 0:
        with pytest.raises(TypeError):
            iter(tensor)
        return
    rows = list(tensor)
    assert len(rows) == len(tensor) == len(host)
    for row, expected in zip(rows, host, strict=True):
        assert_same_view(row, expected)


reshape_targets = st.one_of(
    sizes,
    st.lists(st.one_of(sizes, st.just(-1), st.sampled_from(JUNK)), max_size=4).map(tuple),
    st.lists(st.one_of(st.integers(-1, 6), st.just(-1)), max_size=4),
    st.sampled_from([None, {}, "12", 12.0, np.array([2, -1])]),
)


@CHECKS
@given(tensors(), reshape_targets)
def test_reshape_matches_numpy_or_raises_shape_error(
    case: tuple[np.ndarray, tuple[slice, ...]], target: Any
) -> None:
    host, base = case
    tensor = cuasync.from_host(host).sync()[base]
    host = host[base]
    expected, numpy_error = numpy_result(lambda: host.reshape(target))
    # documented refusals: non-int dimensions, negative ones other than -1 (numpy takes any
    # negative as "infer"), and non-contiguous tensors (numpy would copy)
    dims = target.tolist() if isinstance(target, np.ndarray) else target
    dims = [dims] if is_size(dims) else dims
    documented = isinstance(dims, (tuple, list)) and all(is_size(d) and d >= -1 for d in dims)
    try:
        view = tensor.reshape(target)
    except ShapeError as exc:
        event("refused")
        assert numpy_error is not None or not documented or not tensor.is_contiguous, exc
        return
    event("a view")
    assert documented, f"cuasync took the reshape target {target!r}"
    assert numpy_error is None, f"cuasync took {target!r}, numpy raised {numpy_error!r}"
    assert view.allocation is tensor.allocation
    assert_same_view(view, expected)


shapes = st.one_of(
    st.integers(-2, 6),
    st.lists(st.one_of(st.integers(-2, 6), st.sampled_from(JUNK)), max_size=3).map(tuple),
    st.lists(st.integers(0, 6).map(np.int64), max_size=3),
    st.sampled_from([None, {}, {2: 3}, "3", 3.0, np.array([2, 3]), np.array([[2]])]),
)


@CHECKS
@given(shapes, st.sampled_from(["empty", "zeros", "ones", "full", "rand"]))
def test_creation_shapes_match_numpy_or_raise_shape_error(shape: Any, op: str) -> None:
    make = {
        "empty": lambda: cuasync.empty(shape),
        "zeros": lambda: cuasync.zeros(shape),
        "ones": lambda: cuasync.ones(shape),
        "full": lambda: cuasync.full(shape, 2.0),
        "rand": lambda: cuasync.rand(shape, seed=1),
    }[op]
    expected, numpy_error = numpy_result(lambda: np.zeros(shape, np.float32))
    try:
        tensor = make().sync()
    except ShapeError:
        event("refused")
        dims = shape.tolist() if isinstance(shape, np.ndarray) else shape
        well_typed = is_size(dims) or (
            isinstance(dims, (tuple, list)) and all(is_size(d) for d in dims)
        )
        assert numpy_error is not None or not well_typed
        return
    event("created")
    assert numpy_error is None, f"{op}({shape!r}) worked, numpy raised {numpy_error!r}"
    assert tensor.shape == expected.shape and tensor.is_contiguous


# -- launch configs --------------------------------------------------------------------------
SAXPY = r"""
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


def saxpy_twin(a: Any, x: np.ndarray, y: np.ndarray, n: Any) -> None:
    y[:n] += a * x[:n]


GRID_LIMITS = (2**31 - 1, 65535, 65535)
BLOCK_LIMITS = (1024, 1024, 64)


def valid_dims(value: Any, limits: tuple[int, ...]) -> tuple[int, ...] | None:
    dims = (value,) if is_size(value) else value
    if not isinstance(dims, (tuple, list)) or not 1 <= len(dims) <= 3:
        return None
    if not all(is_size(d) and 1 <= d <= limit for d, limit in zip(dims, limits, strict=False)):
        return None
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))


dims = st.one_of(
    st.integers(1, 64),
    st.integers(-1, 70000),
    st.sampled_from([2**31 - 1, 2**31, 1025]),
    st.tuples(numpy_ints, st.integers(0, 127)).map(lambda p: p[0](p[1])),
    st.sampled_from(JUNK),
)
configs = st.one_of(dims, st.lists(dims, max_size=4).map(tuple), st.lists(dims, max_size=4))


@CHECKS
@given(configs, configs, st.booleans())
def test_launch_configs_are_valid_or_refused(grid: Any, block: Any, warm: bool) -> None:
    k = cuasync.Kernel(SAXPY, "saxpy", emulate=saxpy_twin)
    if warm:  # an equal (==, hash-equal) config of exact ints may already be cached
        try:
            k[_int_twin(grid), _int_twin(block)]
        except (LaunchError, TypeError, ValueError, OverflowError):
            pass
    g, b = valid_dims(grid, GRID_LIMITS), valid_dims(block, BLOCK_LIMITS)
    fits = g is not None and b is not None and math.prod(b) <= 1024
    try:
        launcher = k[grid, block]
    except LaunchError:
        event("refused")
        assert not fits, (grid, block)
        return
    event("launched")
    assert fits, f"kernel[{grid!r}, {block!r}] was accepted"
    assert g is not None and b is not None
    if math.prod(g) * math.prod(b) <= 1 << 16:  # run the small ones (a GPU runs them all)
        x, y = cuasync.arange(4, dtype="float32").sync(), cuasync.zeros(4).sync()
        launcher(1.0, x, y, 4).sync()
        got = y.to_host().sync()
        if ON_EMULATOR:  # the twin ignores the launch shape
            np.testing.assert_array_equal(got, np.arange(4, dtype=np.float32))
        elif math.prod(g[1:]) * math.prod(b[1:]) == 1:  # one thread per element, in x only
            covered = min(4, g[0] * b[0])
            want = np.where(np.arange(4) < covered, np.arange(4), 0).astype(np.float32)
            np.testing.assert_array_equal(got, want)


def _int_twin(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return tuple(_int_twin(v) for v in value)
    return int(value.real) if isinstance(value, (int, float, complex, np.number)) else value


# -- kernel scalar arguments ------------------------------------------------------------------
SCALARS = r"""
// The half types by layout: NVRTC has no CUDA headers on its search path here.
struct __half { unsigned short bits; };
struct __nv_bfloat16 { unsigned short bits; };
extern "C" __global__ void scalars(float f, double d, int i, unsigned char u, __half h, bool b,
                                   float2 c, __nv_bfloat16 bf, float* out) {}
"""
PARAMS = ["float32", "float64", "int32", "uint8", "float16", "bool", "complex64", "bfloat16"]
DEFAULTS: list[Any] = [0.0, 0.0, 0, 0, 0.0, False, 0j, 0.0]
if "bfloat16" not in SUPPORTED:  # the parameter's C type is then unknown: leave it out
    SCALARS = SCALARS.replace("__nv_bfloat16 bf, ", "")
    PARAMS, DEFAULTS = PARAMS[:-1], DEFAULTS[:-1]


def expected_scalar(dtype: str, value: Any) -> Any:
    """The value the kernel must see, or None where the argument must be refused."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value) if dtype == "bool" else None
    if dtype == "bool" or not isinstance(value, (int, float, complex, np.number)):
        return None
    if dtype in ("int32", "uint8"):
        if not is_size(value):
            return None
        info = np.iinfo(dtype)
        return int(value) if info.min <= value <= info.max else None
    if isinstance(value, (complex, np.complexfloating)) and dtype != "complex64":
        return None
    part = "float32" if dtype == "complex64" else dtype
    parts: list[Any] = [value.real, value.imag] if dtype == "complex64" else [value]
    converted = []
    for p in parts:
        try:
            as_float = float(p)
        except OverflowError:
            return None
        with np.errstate(over="ignore"):
            if part == "bfloat16":  # rounded through float32, like ml_dtypes and CUDA
                stored = SUPPORTED["bfloat16"].type(np.float32(as_float))
            else:
                stored = np.dtype(part).type(as_float)
        if np.isinf(stored) and not np.isinf(p):
            return None  # a finite value that would silently become inf
        converted.append(stored)
    return complex(*converted) if dtype == "complex64" else converted[0]


scalars = st.one_of(
    st.integers(-(2**70), 2**70),
    st.integers(-(2**32), 2**32),
    st.integers(-300, 300),
    st.floats(width=64),
    st.floats(width=32).map(np.float32),
    st.floats(width=16).map(np.float16),
    st.floats(-1e6, 1e6),
    st.complex_numbers(max_magnitude=1e40),
    st.complex_numbers(),
    st.tuples(numpy_ints, st.integers(0, 127)).map(lambda p: p[0](p[1])),
    st.booleans(),
    st.sampled_from([np.bool_(True), "1", None, [1.0], np.uint64(2**64 - 1), 10**400]),
)


@CHECKS
@given(st.integers(0, len(PARAMS) - 1), scalars)
def test_kernel_scalars_are_exact_or_refused(slot: int, value: Any) -> None:
    seen: list[Any] = []
    k = cuasync.Kernel(SCALARS, "scalars", emulate=lambda *args: seen.append(args[slot]))
    args = [*DEFAULTS, cuasync.zeros(1).sync()]
    args[slot] = value
    expected = expected_scalar(PARAMS[slot], value)
    try:
        op = k[1, 1](*args)
    except LaunchError:
        event(f"{PARAMS[slot]} refused")
        assert expected is None, f"{PARAMS[slot]} parameter refused {value!r}"
        return
    event(f"{PARAMS[slot]} taken")
    assert expected is not None, f"{PARAMS[slot]} parameter took {value!r}"
    op.sync()
    if ON_EMULATOR:  # the numpy twin shows the value the kernel gets
        got, want = np.asarray(seen[0]), np.asarray(expected)
        if PARAMS[slot] == "bfloat16":  # numpy's NaN-aware comparison knows only its own floats
            got, want = got.astype(np.float64), want.astype(np.float64)
        np.testing.assert_array_equal(got, want)


# -- pinned buffers -----------------------------------------------------------------------------
@CHECKS
@given(
    st.one_of(
        st.integers(-3, 1 << 20),
        st.sampled_from([*JUNK, None, np.int64(64), np.uint8(3), 1 << 64, 1 << 70, -(1 << 70)]),
    )
)
def test_pinned_sizes_are_checked(nbytes: Any) -> None:
    try:
        buffer = cuasync.PinnedPool.default().acquire(nbytes)
    except ArgumentError:
        assert not is_size(nbytes) or nbytes < 0
        return
    except OutOfMemoryError:
        assert nbytes >= 1 << 64  # more than any machine has: never handed to the allocator
        return
    assert is_size(nbytes) and buffer.nbytes == nbytes
    buffer.release()


# -- refusals keep nothing alive --------------------------------------------------------------
def test_a_refused_transfer_keeps_nothing_alive() -> None:
    # A refusal must not sit in a reference cycle (the raising frame holding its own
    # exception): the buffer and tensor would then live until some later garbage
    # collection, and the tensor's free would land in the middle of unrelated work.
    tensor = cuasync.zeros(100).sync()
    buffer = cuasync.PinnedHostBuffer(8)
    tensor_ref, buffer_ref = weakref.ref(tensor), weakref.ref(buffer)
    gc.collect()
    gc.disable()
    try:
        for submit in (cuasync.upload_pending, lambda b, t: cuasync.download_pending(t, b)):
            try:
                submit(buffer, tensor)
            except TransferRejected as exc:
                assert exc.package == (buffer, tensor)
        del tensor, buffer
        assert tensor_ref() is None and buffer_ref() is None
    finally:
        gc.enable()
