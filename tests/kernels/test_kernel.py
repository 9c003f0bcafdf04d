"""User kernels: launches (emulate= twins on the emulator), argument checks, compilation,
CompileOptions, Module, and the opt-in disk cache of compiled kernels."""

from __future__ import annotations

import dataclasses
import math
import os
import pickle
import stat
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import numpy as np
import pytest
from helpers import NATIVE_ON, ON_EMULATOR, generic_path, run_script

import cuasync
from cuasync import _config, kernel_cache
from cuasync._backends import get_backend
from cuasync._dtypes import SUPPORTED
from cuasync._launch import kernel as _kernel
from cuasync._launch import nvrtc as _nvrtc
from cuasync._launch.kernel import _Launch, program_kernels
from cuasync._launcher import make_launcher
from cuasync._native import NATIVE, PROCESS
from cuasync._ops import sorting
from cuasync.errors import (
    AliasingError,
    ArgumentError,
    DeviceError,
    KernelCompileError,
    LaunchError,
)

pytestmark = pytest.mark.anyio


TWO_DEVICES = pytest.mark.skipif(
    cuasync.device_count() < 2, reason="needs 2 devices (CUASYNC_EMU_DEVICES=2 on the emulator)"
)


def nvrtc_available() -> bool:
    from cuasync._launch.nvrtc import nvrtc_problem

    return nvrtc_problem() is None


needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC cannot be loaded here")

SAXPY = r"""
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


def saxpy_twin(a: np.float32, x: np.ndarray, y: np.ndarray, n: np.int32) -> None:
    y[:n] = a * x[:n] + y[:n]


SCALE = r"""
template <typename T>
__global__ void scale(T* x, T factor, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= factor;
}
"""


def scale_twin(x: np.ndarray, factor: Any, n: Any) -> None:
    x[:n] *= factor


TILES = r"""
// one block per 16-element tile: adds the tile's index to each of its elements
extern "C" __global__ void add_tile_index(float* x) {
    x[blockIdx.x * 16 + threadIdx.x] += (float)blockIdx.x;
}
"""


def tiles_twin(x: np.ndarray) -> None:
    x += np.repeat(np.arange(x.size // 16, dtype=x.dtype), 16)


SPLIT = r"""
extern "C" __global__ void split(const float* x, float* neg, float* pos, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { neg[i] = x[i] < 0 ? x[i] : 0; pos[i] = x[i] > 0 ? x[i] : 0; }
}
"""


def split_twin(x: np.ndarray, neg: np.ndarray, pos: np.ndarray, n: Any) -> None:
    neg[:] = np.minimum(x, 0)
    pos[:] = np.maximum(x, 0)


PROBE = r"""
extern "C" __global__ void probe(const float* x, int n) { }
"""


def ramp(n: int, dtype: Any = np.float32) -> np.ndarray:
    return np.arange(n, dtype=dtype)


# -- launches --------------------------------------------------------------------------------
async def test_saxpy_launch_forms(anyio_backend) -> None:
    k = cuasync.Kernel(SAXPY, "saxpy", emulate=saxpy_twin)
    n = 1000
    x = await cuasync.from_host(ramp(n))
    y = await cuasync.ones(n)
    out = await k[(n + 255) // 256, 256](2.0, x, y, n)
    assert out is y  # the one non-const pointer is the output
    np.testing.assert_array_equal(await y.to_host(), 2 * ramp(n) + 1)
    out = await k.launch(np.float32(-1.0), x, y, np.int64(n), grid=(4, 1, 1), block=(256,))
    np.testing.assert_array_equal(await out.to_host(), ramp(n) + 1)


def test_kernel_parses_the_signature() -> None:
    k = cuasync.Kernel(SAXPY, "saxpy", emulate=saxpy_twin)
    assert [p.name for p in k.params] == ["a", "x", "y", "n"]
    assert [p.is_output for p in k.params] == [False, False, True, False]
    assert "saxpy(float a, const float* x, float* y, int n)" in repr(k)


def test_every_spelling_of_an_integer_type_and_pointers_to_pointers_are_parsed() -> None:
    """C's integer spellings (``long long int``, ``long unsigned int``, ``signed``) are the
    types they name; a pointer to pointers takes a uint64 tensor of device addresses (not
    the pointee's data); a parameter without a name keeps its type."""
    src = (
        'extern "C" __global__ void g(const float* const* rows, long long int n, '
        "long unsigned int m, short int s, signed q, const float*, unsigned int, "
        "float tile[4][4]) {}"
    )
    k = cuasync.Kernel(src, "g", emulate=lambda *args: None)
    got = [(p.name, p.dtype.name if p.dtype is not None else None, p.pointer) for p in k.params]
    assert got == [
        ("rows", "uint64", True), ("n", "int64", False), ("m", "uint64", False),
        ("s", "int16", False), ("q", "int32", False), ("arg5", "float32", True),
        ("arg6", "uint32", False), ("tile", "float32", True),  # (an array decays once)
    ]  # fmt: skip
    assert "g(const float** rows, long long n, unsigned long m" in repr(k)
    addresses, data = cuasync.zeros((2,), "uint64").sync(), cuasync.zeros((2,)).sync()
    k[1, 32](addresses, 1, 2, 3, 4, data, 5, data).sync()  # the addresses: taken
    with pytest.raises(LaunchError, match=r"parameter 'rows'.*expects uint64 data"):
        k[1, 32](data, 1, 2, 3, 4, data, 5, data)  # float data where addresses go: refused


async def test_template_kernel_by_name_expression(anyio_backend) -> None:
    for name, dtype in (("scale<float>", np.float32), ("scale<double>", np.float64)):
        k = cuasync.Kernel(SCALE, name, emulate=scale_twin)
        assert k.params[0].dtype == np.dtype(dtype) and k.params[1].dtype == np.dtype(dtype)
        x = await cuasync.from_host(ramp(300, dtype))
        await k[3, 128](x, 3.0, 300)
        np.testing.assert_array_equal(await x.to_host(), 3 * ramp(300, dtype))
    k32 = cuasync.Kernel(SCALE, "scale<float>", emulate=scale_twin)
    x64 = await cuasync.from_host(ramp(4, np.float64))
    with pytest.raises(LaunchError, match=r"parameter 'x'.*expects float32 data.*float64"):
        k32[1, 32](x64, 2.0, 4)


async def test_partition_infers_the_grid(anyio_backend) -> None:
    k = cuasync.Kernel(TILES, "add_tile_index", emulate=tiles_twin)
    x = await cuasync.zeros((64,))
    part = x.partition((16,))
    out = await k.launch(part, block=16)
    assert isinstance(out, cuasync.Partition) and out.unpartition() is x
    expected = np.repeat(np.arange(4, dtype=np.float32), 16)
    np.testing.assert_array_equal(await x.to_host(), expected)
    await k.launch(part, grid=4, block=16)  # an explicit grid that matches is fine
    np.testing.assert_array_equal(await x.to_host(), 2 * expected)


async def test_several_outputs_give_a_tuple(anyio_backend) -> None:
    k = cuasync.Kernel(SPLIT, "split", emulate=split_twin)
    x = await cuasync.linspace(-2.0, 2.0, 9)
    neg, pos = await cuasync.zeros(9), await cuasync.zeros(9)
    out = await k[1, 32](x, neg, pos, 9)
    assert out == (neg, pos)
    a = np.linspace(-2.0, 2.0, 9, dtype=np.float32)
    np.testing.assert_array_equal(await neg.to_host(), np.minimum(a, 0))
    np.testing.assert_array_equal(await pos.to_host(), np.maximum(a, 0))


async def test_no_outputs_give_none(anyio_backend) -> None:
    seen: list[float] = []
    k = cuasync.Kernel(PROBE, "probe", emulate=lambda x, n: seen.append(float(x[:n].sum())))
    x = await cuasync.arange(5, dtype="float32")
    assert await k[1, 32](x, 5) is None
    if ON_EMULATOR:
        assert seen == [10.0]


STRIDED = r"""
extern "C" __global__ void twice_strided(float* x, long long stride, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i * stride] *= 2.0f;
}
"""


async def test_strided_views_are_the_arrays_a_launch_sees(anyio_backend) -> None:
    # A view travels as the address of its first element; the emulator hands the twin a
    # numpy view of the same elements of the emulated memory.
    seen: list[tuple[int, ...]] = []

    def twin(x: np.ndarray, stride: Any, n: Any) -> None:
        seen.append(x.strides)
        x *= 2

    k = cuasync.Kernel(STRIDED, "twice_strided", emulate=twin)
    x = await cuasync.from_host(ramp(12))
    expected = ramp(12)
    for view, elements in (
        (x[1::4], [1, 5, 9]),
        (x[2:11:3], [2, 5, 8]),
        (x.reshape((3, 4))[:, 3], [3, 7, 11]),
        (x[5:5], []),
    ):
        await k[1, 32](view, view.strides[0], view.shape[0])
        expected[elements] *= 2
        np.testing.assert_array_equal(await x.to_host(), expected)
    if ON_EMULATOR:
        assert seen == [(16,), (12,), (16,), (4,)]


async def test_kernel_output_chains_with_then(anyio_backend) -> None:
    k = cuasync.Kernel(SCALE, "scale<float>", emulate=scale_twin)
    host = (
        await cuasync.arange(8, dtype="float32")
        .then(lambda t: k[1, 32](t, 0.5, 8))
        .then(lambda t: t.to_host())
    )
    np.testing.assert_array_equal(host, ramp(8) / 2)


# -- bad launches ----------------------------------------------------------------------------
def _bad_launches() -> list[tuple[str, Callable[[], Any], str]]:
    saxpy = cuasync.Kernel(SAXPY, "saxpy", emulate=saxpy_twin)
    tiles = cuasync.Kernel(TILES, "add_tile_index", emulate=tiles_twin)
    odd = cuasync.Kernel(
        "struct P { int a; };\n__global__ void odd(P p, float* x) {}", "odd", emulate=print
    )
    x = cuasync.arange(8, dtype="float32").sync()
    y = cuasync.zeros(8).sync()
    x64 = cuasync.arange(8, dtype="float64").sync()
    xi = cuasync.arange(8, dtype="int32").sync()
    part = cuasync.zeros(64).sync().partition((16,))
    cases: list[tuple[str, Callable[[], Any], str]] = [
        ("too few", lambda: saxpy[1, 32](2.0, x, y), r"saxpy\(\) takes 4 argument\(s\).*got 3"),
        ("too many", lambda: saxpy[1, 32](2.0, x, y, 8, 9), r"takes 4 argument\(s\).*got 5"),
        ("scalar for pointer", lambda: saxpy[1, 32](2.0, 3.0, y, 8), r"parameter 'x'.*got float"),
        ("array for pointer", lambda: saxpy[1, 32](2.0, np.ones(8), y, 8), r"parameter 'x'"),
        ("pointer for scalar", lambda: saxpy[1, 32](x, x, y, 8), r"parameter 'a'.*scalar"),
        ("dtype", lambda: saxpy[1, 32](2.0, x64, y, 8), r"parameter 'x'.*float32.*float64"),
        ("int dtype", lambda: saxpy[1, 32](2.0, x, xi, 8), r"parameter 'y'.*float32.*int32"),
        ("float for int", lambda: saxpy[1, 32](2.0, x, y, 8.0), r"parameter 'n'.*int32 scalar"),
        ("int range", lambda: saxpy[1, 32](2.0, x, y, 2**40), r"parameter 'n'.*does not fit"),
        ("str scalar", lambda: saxpy[1, 32]("2", x, y, 8), r"parameter 'a'.*float32 scalar"),
        ("bool scalar", lambda: saxpy[1, 32](True, x, y, 8), r"parameter 'a'"),
        ("unknown C type", lambda: odd[1, 1](1, y), r"parameter 'p'.*C type 'P'"),
        ("grid mismatch", lambda: tiles.launch(part, grid=3, block=16), r"does not match.*'x'"),
        ("no grid", lambda: saxpy.launch(2.0, x, y, 8, block=32), r"pass grid="),
        ("zero grid", lambda: saxpy.launch(2.0, x, y, 8, grid=0), r"grid must be"),
        ("4-d grid", lambda: saxpy.launch(2.0, x, y, 8, grid=(1, 1, 1, 1)), r"grid must be"),
        ("big block", lambda: saxpy[1, (64, 32)](2.0, x, y, 8), r"more than 1024 threads"),
        ("shared mem", lambda: saxpy[1, 32, -1](2.0, x, y, 8), r"shared_mem must be"),
        ("config", lambda: saxpy[1](2.0, x, y, 8), r"kernel\[grid, block\]"),
        ("float grid", lambda: saxpy[1.0, 32](2.0, x, y, 8), r"grid must be.*got float 1\.0"),
        ("bool block", lambda: saxpy[1, True](2.0, x, y, 8), r"block must be.*got bool"),
        ("str grid", lambda: saxpy["4", 32](2.0, x, y, 8), r"grid must be.*got str"),
        ("float in tuple", lambda: saxpy[(1, 2.0), 32](2.0, x, y, 8), r"got float 2\.0 for y"),
        ("grid y limit", lambda: saxpy[(1, 65536), 32](2.0, x, y, 8), r"limit of 65535"),
        ("block z limit", lambda: saxpy[1, (1, 1, 65)](2.0, x, y, 8), r"limit of 64 for block z"),
        ("float32 overflow", lambda: saxpy[1, 32](1e300, x, y, 8), r"'a'.*does not fit in float32"),
        ("float shared mem", lambda: saxpy[1, 32, 0.0](2.0, x, y, 8), r"shared_mem must be"),
    ]
    return cases


@TWO_DEVICES
def test_a_launch_over_two_devices_raises_launch_error_and_enqueues_nothing(enqueued) -> None:
    saxpy = cuasync.Kernel(SAXPY, "saxpy", emulate=saxpy_twin)
    x1 = cuasync.arange(8, dtype="float32", device=1).sync()
    y = cuasync.zeros(8).sync()
    before = len(enqueued)
    with pytest.raises(LaunchError, match=r"different devices \(x on device 1, y on device 0\)"):
        saxpy[1, 32](2.0, x1, y, 8)
    assert enqueued[before:] == []


def test_bad_launches_raise_launch_error_and_enqueue_nothing(enqueued) -> None:
    cases = _bad_launches()
    before = len(enqueued)
    for label, launch, match in cases:
        with pytest.raises(LaunchError, match=match):
            launch()
        assert enqueued[before:] == [], label


def test_launch_config_takes_numpy_integers() -> None:
    k = cuasync.Kernel(SAXPY, "saxpy", emulate=saxpy_twin)
    x, y = cuasync.from_host(ramp(300)).sync(), cuasync.zeros(300).sync()
    k[np.int64(2), np.int32(256)](1.0, x, y, 300).sync()
    k[(np.uint8(2),), [np.int16(256)], np.int64(0)](1.0, x, y, 300).sync()
    k.launch(
        1.0, x, y, 300, grid=np.int64(2), block=(np.uint32(256), 1), shared_mem=np.int8(0)
    ).sync()  # (the forgotten-op warning found this launch never ran)
    k.launch(1.0, x, y, 300, grid=np.int64(2), block=np.int64(256)).sync()
    np.testing.assert_array_equal(y.to_host().sync(), 4 * ramp(300))


def test_a_config_equal_to_a_cached_one_is_still_checked() -> None:
    # (1.0, 256) == (1, 256) and hashes the same: it must not get the cached int launcher
    k = cuasync.Kernel(SAXPY, "saxpy", emulate=saxpy_twin)
    bad: list[tuple[Any, ...]] = [
        (1.0, 256),
        (True, 256),
        (1, 256.0),
        (1, True),
        ((1.0,), 256),
        ((1, 1.0), 256),
        (1, 256, 0.0),
        (1, 256, False),
    ]
    for config in bad:
        twin = tuple(tuple(int(d) for d in m) if isinstance(m, tuple) else int(m) for m in config)
        assert k[twin] is k[twin]  # cached
        with pytest.raises(LaunchError, match="must be"):
            k[config]


def test_the_launcher_cache_stays_bounded() -> None:
    k = cuasync.Kernel(SAXPY, "saxpy", emulate=saxpy_twin)
    for blocks in range(1, 1000):  # a grid computed from each request's size
        k[blocks, 128]
    assert 0 < len(k._launchers) <= 256


MIXED = r"""
struct __half { unsigned short bits; };  // by layout: no CUDA headers on NVRTC's path
extern "C" __global__ void mixed(float* out, const float* x, int n, float a, double b,
                                 unsigned char c, __half h) {}
"""


def mixed_twin(*args: Any) -> None:
    """The numpy twin of ``mixed``, which does nothing (module-level: kernels pickle)."""


def _launch_outcome(launch: Callable[[], Any]) -> Any:
    """What building a launch gave: the op's checked arguments, or the error raised."""
    try:
        op = launch()
    except Exception as exc:
        return type(exc), str(exc)
    op._consumed = True  # built only to compare: never executed
    tensors = [(id(t), p.name) for t, p in zip(op._tensors, op._params, strict=True)]
    out = op._output
    outputs = [id(o) for o in (out if isinstance(out, tuple) else (out,))]
    return op._args, tensors, outputs, op._device, op._grid, op._block, op._shared_mem


def test_the_launch_fast_path_agrees_with_the_full_checks() -> None:
    # Tensors of the exact dtype and plain ints and floats in range skip most checks;
    # every other argument leaves that path for the full checks. All must build the
    # same launch, or raise the same error: the plan's loop, the full checks and
    # kernel[config]'s launcher (the native module's where it is built and on).
    k = cuasync.Kernel(MIXED, "mixed", emulate=mixed_twin)
    out, x = cuasync.zeros(8).sync(), cuasync.zeros(8).sync()
    ints, view = cuasync.zeros(8, "int32").sync(), out[2:6]
    f32 = float(np.finfo(np.float32).max)
    good = [out, x, 8, 1.5, 2.5, 255, 1.0]
    cases = {
        "common": good,
        "bounds": [out, x, -(2**31), -f32, -1e308, 0, -65504.0],
        "upper bounds": [out, x, 2**31 - 1, f32, 1e308, 255, 65504.0],
        "int too big": [out, x, 2**31, 1.5, 2.5, 1, 1.0],
        "byte below zero": [out, x, 8, 1.5, 2.5, -1, 1.0],
        "float rounding down to the max": [out, x, 8, math.nextafter(f32, math.inf), 2.5, 1, 1.0],
        "float overflowing": [out, x, 8, 1e39, 2.5, 1, 1.0],
        "half overflowing": [out, x, 8, 1.5, 2.5, 1, 1e5],
        "nan and inf": [out, x, 8, math.nan, math.inf, 1, -math.inf],
        "int for a float": [out, x, 8, 3, 2.5, 1, 1.0],
        "float for an int": [out, x, 8.0, 1.5, 2.5, 1, 1.0],
        "bool for an int": [out, x, True, 1.5, 2.5, 1, 1.0],
        "numpy scalars": [out, x, np.int32(8), np.float32(1.5), np.float64(2.5), np.uint8(1), 1.0],
        "wrong dtype": [ints, x, 8, 1.5, 2.5, 1, 1.0],
        "a view": [view, x, 4, 1.5, 2.5, 1, 1.0],
        "aliasing": [out[0:6], out[2:8], 6, 1.5, 2.5, 1, 1.0],
        "in place": [out, out, 8, 1.5, 2.5, 1, 1.0],
        "a pointer": [out, x.device_pointer, 8, 1.5, 2.5, 1, 1.0],
        "not a tensor": [out, np.zeros(8, np.float32), 8, 1.5, 2.5, 1, 1.0],
        "a string": [out, x, "8", 1.5, 2.5, 1, 1.0],
    }
    for name, args in cases.items():
        for config in ((2, 32), ((2, 1, 1), (32, 1, 1), 64)):
            spec = k._spec(*config) if len(config) == 3 else k._spec(*config, 0)
            fast = _launch_outcome(lambda: k._launch(tuple(args), *spec))  # noqa: B023
            full = _launch_outcome(lambda: k._launch_checked(tuple(args), *spec))  # noqa: B023
            # kernel[config] is a launcher written for the kernel's signature (the native
            # module's; else one calling k._launch): the same
            launcher = _launch_outcome(lambda: k[config](*args))  # noqa: B023
            assert fast == full == launcher, name
    # ... and the common arguments do take the fast path, the others the full checks.
    fast = {"common", "bounds", "upper bounds", "a view", "aliasing", "in place"}
    checked: list[str] = []
    full = k._launch_checked

    def spy(*args: Any) -> Any:
        checked.append(name)
        return full(*args)

    k._launch_checked = spy  # type: ignore[method-assign,assignment]
    for name, args in cases.items():
        outcome = _launch_outcome(lambda: k._launch(tuple(args), *k._spec(2, 32, 0)))  # noqa: B023
        assert (name in checked) == (name not in fast), name
        if name in ("common", "bounds", "upper bounds", "in place"):
            assert isinstance(outcome[0], tuple), (name, outcome)  # built: not an error class


def test_kernel_config_is_the_native_launcher_where_the_module_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    k = cuasync.Kernel(MIXED, "mixed", emulate=mixed_twin)
    launcher = k[2, 32]
    native = getattr(NATIVE, "Launcher", None)
    spec = k._spec(2, 32, 0)
    if native is None or not NATIVE_ON:  # the generic path: the kernel's own checks
        assert make_launcher(k, _Launch, *spec) is None and type(launcher) is not native
        return
    assert type(launcher) is native
    assert launcher.__name__ == "mixed[(2, 1, 1), (32, 1, 1), 0]"
    with pytest.raises(TypeError, match="no keyword arguments"):
        launcher(out=None)
    out, x = cuasync.zeros(8).sync(), cuasync.zeros(8).sync()
    op = launcher(out, x, 8, 1.5, 2.5, 1, 1.0)
    assert type(op) is _Launch and not op._consumed and op._output is out
    assert op.sync() is out  # it runs as any launch
    generic_path(monkeypatch, k)  # as CUASYNC_NATIVE=off: no native launcher is made
    assert make_launcher(k, _Launch, *spec) is None and type(k[2, 32]) is not native


def test_the_launch_plan_follows_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    k = cuasync.Kernel(MIXED, "mixed", emulate=mixed_twin)
    out, x = cuasync.zeros(8).sync(), cuasync.zeros(8).sync()
    args = (out, x, 8, 1.5, 2.5, 1, 1.0)
    op = k[2, 32](*args)
    op._consumed = True
    plan = k._plan
    op = k[2, 32](*args)
    op._consumed = True
    assert k._plan is plan  # made once, not per launch
    # An unpickled kernel (a Ray or multiprocessing worker's) makes its own plan, with
    # this process's dtype objects: its tensors still take the fast path.
    copy = pickle.loads(pickle.dumps(k))
    assert copy._plan is None
    with monkeypatch.context() as patched:  # (the native launcher's path, and the kernel's)
        patched.setattr(PROCESS, "kernel_launch_checked", lambda *a: pytest.fail("full checks"))
        patched.setattr(copy, "_launch_checked", lambda *a: pytest.fail("took the full checks"))
        op = copy[2, 32](*args)
        op._consumed = True
    # Parameters replaced: the plan is made again for them.
    k.params = _kernel.parse_params(MIXED.replace("const float* x", "const double* x"), "mixed")
    with pytest.raises(LaunchError, match="double"):
        k[2, 32](*args)
    none = cuasync.Kernel('extern "C" __global__ void none() {}', "none", emulate=lambda: None)
    none[1, 1]().sync()
    plan = none._plan
    none[1, 1]().sync()
    assert none._plan is plan  # no parameters: an empty plan, made once too


SCALARS = r"""
extern "C" __global__ void scalars(float f, double d, float* out) {
    out[0] = f;
    out[1] = (float)d;
}
"""


def scalars_twin(f: np.float32, d: np.float64, out: np.ndarray) -> None:
    with np.errstate(over="ignore"):  # (float)d overflows to inf, as on the GPU
        out[0], out[1] = f, d


F32_MAX = float(np.finfo(np.float32).max)
F32_MAX_MIDPOINT = math.ldexp(2 - 2.0**-24, 127)


def test_float_parameters_refuse_overflow_but_keep_inf_nan_and_round_like_c() -> None:
    k = cuasync.Kernel(SCALARS, "scalars", emulate=scalars_twin)
    out = cuasync.zeros(2).sync()
    refused: list[tuple[Any, Any, str]] = [
        (1e300, 0.0, "f"),
        (-1e39, 0.0, "f"),
        (10**39, 0.0, "f"),
        (np.float64(1e300), 0.0, "f"),
        (F32_MAX_MIDPOINT, 0.0, "f"),  # halfway to the next power of two: rounds to inf
        (0.0, 10**400, "d"),
        (0.0, -(10**400), "d"),
    ]
    for f, d, param in refused:
        with pytest.raises(LaunchError, match=rf"'{param}'.*does not fit in float(32|64)"):
            k[1, 1](f, d, out)
    kept: list[tuple[Any, Any, list[Any]]] = [
        (math.inf, math.nan, [math.inf, math.nan]),
        (-math.inf, -math.inf, [-math.inf, -math.inf]),
        (np.float32(np.inf), np.float64(-np.inf), [math.inf, -math.inf]),
        (F32_MAX, 1e300, [F32_MAX, math.inf]),  # the kernel's own cast may overflow
        (math.nextafter(F32_MAX_MIDPOINT, 0), 0.0, [F32_MAX, 0.0]),  # rounds down to the max
        (2**100, 10**300, [2.0**100, math.inf]),
        (0.1, np.int64(7), [np.float32(0.1), 7.0]),
    ]
    for f, d, expected in kept:
        k[1, 1](f, d, out).sync()
        np.testing.assert_array_equal(out.to_host().sync(), np.array(expected, np.float32))


OTHER_SCALARS = r"""
struct __half { unsigned short bits; };  // by layout: no CUDA headers on NVRTC's path
extern "C" __global__ void others(__half h, float2 c, double2 z, bool b, unsigned char u) {}
"""


def test_other_scalars_are_never_clamped_or_wrapped() -> None:
    k = cuasync.Kernel(OTHER_SCALARS, "others", emulate=lambda *a: None)
    refused: list[tuple[tuple[Any, ...], str]] = [
        ((65520.0, 0j, 0j, True, 0), r"'h'.*65520\.0 does not fit in float16"),
        ((-1e5, 0j, 0j, True, 0), r"'h'.*does not fit in float16"),
        ((0.0, complex(1e300, 0), 0j, True, 0), r"'c'.*does not fit in float32"),
        ((0.0, complex(0, -1e39), 0j, True, 0), r"'c'.*does not fit in float32"),
        ((0.0, 10**40, 0j, True, 0), r"'c'.*does not fit in float32"),
        ((0.0, 0j, 10**400, True, 0), r"'z'.*does not fit in float64"),
        ((0.0, 0j, 0j, 1, 0), r"'b'.*expects a bool scalar, got int"),
        ((0.0, 0j, 0j, True, 256), r"'u'.*256 does not fit in uint8 \(0..255\)"),
        ((0.0, 0j, 0j, True, -1), r"'u'.*-1 does not fit in uint8"),
        ((0.0, 0j, 0j, True, np.uint64(2**63)), r"'u'.*does not fit in uint8"),
        ((0.0, 0j, 0j, True, 1.0), r"'u'.*expects a uint8 scalar, got float"),
    ]
    for args, match in refused:
        with pytest.raises(LaunchError, match=match):
            k[1, 1](*args)
    # in range: accepted and run
    cuasync.zip(
        k[1, 1](65519.0, complex(math.inf, -1e38), complex(1e300, math.nan), np.bool_(False), 255),
        k[1, 1](np.float16(-65504), np.complex64(1j), np.complex128(2), False, np.uint8(7)),
        k[1, 1](math.nan, 3, 1.5, True, np.int64(0)),
    ).sync()


def test_bfloat16_bits_round_to_nearest_even_like_ml_dtypes() -> None:
    from cuasync._launch.kernel import bfloat16_bits

    assert bfloat16_bits(1.0) == 0x3F80 and bfloat16_bits(-2.0) == 0xC000
    assert bfloat16_bits(1 + 2**-8) == 0x3F80  # a tie: to even
    assert bfloat16_bits(1 + 3 * 2**-8) == 0x3F82  # a tie: to even (up)
    # just past the tie: rounded once, up, as ml_dtypes 0.7 (through float32 it is the tie)
    assert bfloat16_bits(1 + 2**-8 + 2**-30) == 0x3F81
    assert bfloat16_bits(math.inf) == 0x7F80 and bfloat16_bits(math.nan) == 0x7FC0
    assert bfloat16_bits(F32_MAX) == 0x7F80  # past the largest bfloat16: inf
    assert bfloat16_bits(-1e300) == 0xFF80


BF16 = r"""
// bfloat16 by layout (no CUDA headers on NVRTC's search path): the high half of a float.
struct __nv_bfloat16 { unsigned short bits; };
extern "C" __global__ void bf16(__nv_bfloat16 x, float* out) {
    out[0] = __uint_as_float(((unsigned int)x.bits) << 16);
}
"""


def test_bfloat16_parameters_take_floats_and_refuse_overflow() -> None:
    pytest.importorskip("ml_dtypes")
    from cuasync._backends._params import ParamBlock

    seen: list[Any] = []
    k = cuasync.Kernel(BF16, "bf16", emulate=lambda x, out: seen.append(x))
    out = cuasync.zeros(1).sync()
    with pytest.raises(LaunchError, match=r"'x'.*does not fit in bfloat16"):
        k[1, 1](1e39, out)
    with pytest.raises(LaunchError, match=r"'x'.*does not fit in bfloat16"):
        k[1, 1](math.ldexp(2 - 2.0**-8, 127), out)  # halfway past the largest: to inf
    for value in (1.5, -3, np.float32(0.1), math.inf):
        op = k[1, 1](value, out)
        # on a GPU the value travels as its bits: the same ones ml_dtypes makes
        layout = ParamBlock(k.params)
        layout.pack([k._convert((value, out))[0][0], out.ptr])
        raw = bytes(layout.buffer)
        slot = int.from_bytes(raw[:8], "little") - layout.address  # where x's pointer points
        bits = int.from_bytes(raw[slot : slot + 2], "little")
        expected = np.asarray(SUPPORTED["bfloat16"].type(float(value)))
        assert bits == int(expected.view(np.uint16))
        op.sync()
        if ON_EMULATOR:
            assert seen.pop() == expected
        else:  # the kernel widens the bits it got to a float
            assert out.to_host().sync()[0] == np.float32(expected)


def test_launch_error_is_an_argument_error() -> None:
    assert issubclass(LaunchError, ArgumentError) and issubclass(LaunchError, ValueError)


@pytest.mark.emulator_only(
    reason="the emulator runs a kernel's emulate= twin; a GPU runs the kernel"
)
def test_kernel_without_emulate_says_to_pass_one(enqueued) -> None:
    k = cuasync.Kernel(SAXPY, "saxpy")
    x, y = cuasync.arange(4, dtype="float32").sync(), cuasync.zeros(4).sync()
    before = len(enqueued)
    with pytest.raises(LaunchError, match=r"no emulate= function.*pass emulate="):
        k[1, 32](2.0, x, y, 4)
    assert enqueued[before:] == []


def test_kernel_constructor_checks() -> None:
    with pytest.raises(KernelCompileError, match="no __global__ function named 'saxpi'"):
        cuasync.Kernel(SAXPY, "saxpi")
    with pytest.raises(ArgumentError, match="source"):
        cuasync.Kernel("  ", "saxpy")
    with pytest.raises(ArgumentError, match="emulate must be callable"):
        cuasync.Kernel(SAXPY, "saxpy", emulate=3)  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match=r"options must be a cuasync\.CompileOptions"):
        cuasync.Kernel(SAXPY, "saxpy", options={"opt_level": 2})  # type: ignore[arg-type]


# -- compilation ---------------------------------------------------------------------------
@needs_nvrtc
def test_compile_error_carries_the_nvrtc_log() -> None:
    k = cuasync.Kernel("__global__ void broken(float* x) { x[0] = undefined_thing; }", "broken")
    with pytest.raises(KernelCompileError) as info:
        k.compile_image("sm_80")
    assert "undefined_thing" in info.value.log and "error" in info.value.log
    assert info.value.log in str(info.value) and "'broken'" in str(info.value)


@needs_nvrtc
def test_compile_image_gives_a_cubin_and_the_lowered_name() -> None:
    image, lowered = cuasync.Kernel(SCALE, "scale<float>").compile_image("sm_90")
    assert image[:4] == b"\x7fELF" and lowered.startswith("_Z") and "scale" in lowered
    image, lowered = cuasync.Kernel(SAXPY, "saxpy").compile_image("sm_80")
    assert lowered == "saxpy"


# -- the emulator compiles the source too (CUASYNC_EMU_COMPILE) ------------------------------
BROKEN = r"""
extern "C" __global__ void broken_but_emulated(float* x) { x[0] = undefined_thing; }
"""


def _emu_compile(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    monkeypatch.setattr(_config, "CONFIG", dataclasses.replace(_config.config(), emu_compile=mode))


def _count_compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    compiled: list[str] = []
    real = _kernel.compile_cubin

    def counting(source: str, name: str, arch: str, flags: list[str]) -> Any:
        compiled.append(f"{name} {arch}")
        return real(source, name, arch, flags)

    monkeypatch.setattr(_kernel, "compile_cubin", counting)
    return compiled


@needs_nvrtc
def test_broken_device_code_fails_its_launch_on_every_backend() -> None:
    ran: list[Any] = []
    k = cuasync.Kernel(BROKEN, "broken_but_emulated", emulate=ran.append)
    x = cuasync.zeros(4).sync()
    with pytest.raises(KernelCompileError) as info:
        k[1, 1](x).sync()
    assert "undefined_thing" in info.value.log and "broken_but_emulated" in str(info.value)
    with pytest.raises(KernelCompileError, match="undefined_thing"):
        k.compile()
    assert ran == []


@needs_nvrtc
def test_compile_error_comes_before_anything_is_enqueued(enqueued) -> None:
    k = cuasync.Kernel(BROKEN, "broken_but_emulated", emulate=print)
    x = cuasync.zeros(4).sync()
    before = len(enqueued)
    with pytest.raises(KernelCompileError):
        k[1, 1](x).sync()
    assert enqueued[before:] == []


@needs_nvrtc
def test_each_source_compiles_once_per_process(monkeypatch) -> None:
    # (a source of this process alone: the disk cache of an earlier process, another
    # mode of gpu-check's, never has it)
    source = SCALE + f"// compiled once by test_each_source_compiles_once_per_process {uuid4()}\n"
    arch = get_backend().arch(0)  # sm_90 on the emulator (compute capability 9.0)
    x = cuasync.arange(8, dtype="float32").sync()
    tensors = [x, x]
    if cuasync.device_count() >= 2 and get_backend().arch(1) == arch:
        tensors.insert(1, cuasync.arange(8, dtype="float32", device=1).sync())
    compiled = _count_compiles(monkeypatch)
    for tensor in tensors:  # other Kernel objects and devices reuse the image
        k = cuasync.Kernel(source, "scale<float>", emulate=scale_twin)
        k[1, 32](tensor, 2.0, 8).sync()
        k[1, 32](tensor, 2.0, 8).sync()
    assert compiled == [f"scale<float> {arch}"]
    # the call the backend made is shared: the emulator checks the source
    # (check_compiles, a faster compile than a GPU's image), a GPU loads compile_image's
    (k.check_compiles if ON_EMULATOR else k.compile_image)(arch)
    assert len(compiled) == 1, "a later call shares the launches' compile"
    tuned = cuasync.Kernel(
        source,
        "scale<float>",
        emulate=scale_twin,
        options=cuasync.CompileOptions(max_registers=32),
    )
    tuned[1, 32](x, 2.0, 8).sync()
    assert len(compiled) == 2, "other options are another compile"
    np.testing.assert_array_equal(x.to_host().sync(), ramp(8) * 2**5)  # 2 kernels x 2, then tuned


@pytest.mark.emulator_only(reason="the emulator's compile check of each kernel it runs")
@needs_nvrtc
def test_the_emulators_check_is_a_fast_compile_that_still_finds_assembler_errors() -> None:
    bad_asm = (
        'extern "C" __global__ void bogus(float* x) {\n'
        '    asm volatile("ld.global.bogus.f32 %0, [%1];" : "=f"(x[0]) : "l"(x));\n}\n'
    )
    k = cuasync.Kernel(bad_asm, "bogus", emulate=lambda x: None)
    with pytest.raises(KernelCompileError, match="bogus"):  # ptxas's error, not the front end's
        k[1, 1](cuasync.zeros(4).sync()).sync()
    debug = cuasync.Kernel(SCALE, "scale<float>", options=cuasync.CompileOptions(debug=True))
    assert _kernel._check_flags(debug.options) is None, "debug builds are checked as built"
    fast = _kernel._check_flags(cuasync.CompileOptions())
    if _nvrtc.nvrtc_version() >= (12, 8):
        assert fast is not None and fast[0] == "--Ofast-compile=max"


@pytest.mark.emulator_only(reason="CUASYNC_EMU_COMPILE is the emulator's own setting")
def test_emu_compile_off_runs_only_the_twin(monkeypatch) -> None:
    _emu_compile(monkeypatch, "off")
    compiled = _count_compiles(monkeypatch)
    k = cuasync.Kernel(BROKEN, "broken_but_emulated", emulate=lambda x: x.fill(5))
    x = cuasync.zeros(4).sync()
    k[1, 1](x).sync()
    k.compile()
    assert x.to_host().sync().tolist() == [5.0] * 4 and compiled == []


@pytest.mark.emulator_only(reason="CUASYNC_EMU_COMPILE is the emulator's own setting")
def test_emu_compile_without_nvrtc(monkeypatch) -> None:
    monkeypatch.setattr(_nvrtc, "nvrtc_problem", lambda: "libnvrtc.so.13: cannot open it")
    x = cuasync.arange(8, dtype="float32").sync()
    _emu_compile(monkeypatch, "on")
    k = cuasync.Kernel(SCALE, "scale<float>", emulate=scale_twin)
    with pytest.raises(
        KernelCompileError,
        match=r"CUASYNC_EMU_COMPILE=on.*libnvrtc\.so\.13: cannot open it.*"
        r"pip install nvidia-cuda-nvrtc.*CUASYNC_EMU_COMPILE=auto",
    ):
        k[1, 32](x, 2.0, 8).sync()
    _emu_compile(monkeypatch, "auto")  # auto: without NVRTC only the twin runs
    k[1, 32](x, 2.0, 8).sync()
    np.testing.assert_array_equal(x.to_host().sync(), ramp(8) * 2)


def test_emu_compile_is_read_from_the_environment(monkeypatch) -> None:
    monkeypatch.delenv("CUASYNC_EMU_COMPILE", raising=False)
    assert _config._read().emu_compile == "auto"
    for raw, mode in (("on", "on"), ("OFF", "off"), (" auto ", "auto")):
        monkeypatch.setenv("CUASYNC_EMU_COMPILE", raw)
        assert _config._read().emu_compile == mode
    monkeypatch.setenv("CUASYNC_EMU_COMPILE", "yes")
    with pytest.raises(ArgumentError, match="CUASYNC_EMU_COMPILE must be one of auto, on, off"):
        _config._read()


def test_compile_options_normalize_and_validate() -> None:
    a = cuasync.CompileOptions(defines={"B": 2, "A": "x"})
    b = cuasync.CompileOptions(defines={"A": "x", "B": "2"})
    assert a == b and hash(a) == hash(b)
    assert a.flags() == ["--ptxas-options=-O3", "-DA=x", "-DB=2"]
    flags = cuasync.CompileOptions(opt_level=1, line_info=True, max_registers=32).flags()
    assert "--ptxas-options=-O1" in flags and "--generate-line-info" in flags
    assert "--maxrregcount=32" in flags
    with pytest.raises(ArgumentError, match="opt_level"):
        cuasync.CompileOptions(opt_level=7)
    assert cuasync.CompileOptions(opt_level=np.int64(2), max_registers=np.uint8(64)).flags()[
        :2
    ] == [
        "--ptxas-options=-O2",
        "--maxrregcount=64",
    ]
    assert cuasync.CompileOptions(defines=(("N", 4),)).flags()[1] == "-DN=4"
    bad: list[tuple[dict[str, Any], str]] = [
        ({"opt_level": True}, "opt_level"),  # would have been "-OTrue"
        ({"max_registers": -3}, "max_registers"),
        ({"max_registers": "64"}, "max_registers"),
        ({"extra": "-G"}, r'pass \("-G",\)'),  # would have been "-", "G"
        ({"extra": ("-G", 3)}, "extra"),
        ({"defines": ("N",)}, "defines"),
        ({"defines": "N=4"}, "defines"),
    ]
    for kwargs, match in bad:
        with pytest.raises(ArgumentError, match=match):
            cuasync.CompileOptions(**kwargs)


def test_device_pointers_must_be_64_bit_addresses() -> None:
    k = cuasync.Kernel(SAXPY, "saxpy", emulate=saxpy_twin)
    y = cuasync.zeros(4).sync()
    for address in (-1, 1 << 64):
        with pytest.raises(LaunchError, match=r"parameter 'x'.*not a 64-bit device address"):
            k[1, 32](1.0, cuasync.lowlevel.DevicePointer(address), y, 4)


def test_compile_options_are_part_of_the_cache_key() -> None:
    plain = cuasync.Kernel(SAXPY, "saxpy")
    tuned = cuasync.Kernel(SAXPY, "saxpy", options=cuasync.CompileOptions(max_registers=32))
    same = cuasync.Kernel(SAXPY, "saxpy", options=cuasync.CompileOptions())
    assert plain._key("sm_90") != tuned._key("sm_90")
    assert plain._key("sm_90") == same._key("sm_90")
    assert plain._key("sm_80") != plain._key("sm_90")


DEFINED = r"""
extern "C" __global__ void k(int* out) { out[0] = VALUE; }
"""


@needs_nvrtc
def test_compile_options_change_the_compiled_code() -> None:
    def image(value: int) -> bytes:
        options = cuasync.CompileOptions(defines={"VALUE": value})
        return cuasync.Kernel(DEFINED, "k", options=options).compile_image("sm_90")[0]

    assert image(1234567) != image(7654321)
    assert image(1234567) == image(1234567)


# -- Module ---------------------------------------------------------------------------------
@pytest.mark.emulator_only(reason="the emulator's refusal of cubin and PTX images")
def test_module_raises_a_clear_error_on_the_emulator() -> None:
    with pytest.raises(DeviceError, match="emulator cannot run cubin or PTX images"):
        cuasync.Module(b"\x7fELF not really a cubin")


def test_module_checks_its_image() -> None:
    with pytest.raises(ArgumentError, match="image must be"):
        cuasync.Module(b"")


@pytest.mark.gpu
@needs_nvrtc
async def test_module_raw_launch_on_a_gpu(anyio_backend) -> None:
    dev = cuasync.Device(0)
    major, minor = dev.compute_capability
    image, lowered = cuasync.Kernel(SAXPY, "saxpy").compile_image(f"sm_{major}{minor}")
    mod = cuasync.Module(image)
    k = mod.kernel(lowered, "float a, const float* x, float* y, int n")
    x, y = await cuasync.arange(64, dtype="float32"), await cuasync.ones(64)
    await k[1, 64](2.0, x, y, 64)
    np.testing.assert_array_equal(await y.to_host(), 2 * ramp(64) + 1)


# -- the disk cache --------------------------------------------------------------------------
@pytest.fixture
def restore_cache() -> Iterator[None]:
    """The suite's cache (conftest: a temporary directory) in use again after the test."""
    before = kernel_cache.stats().path
    try:
        yield
    finally:
        if before is None:
            kernel_cache.disable()
        else:
            kernel_cache.enable(before)


@pytest.fixture
def cache(tmp_path: Path, restore_cache: None) -> Path:
    return kernel_cache.enable(tmp_path / "kernels")


def test_the_suite_keeps_its_kernel_cache_out_of_the_home_directory() -> None:
    path = kernel_cache.stats().path
    assert os.environ["CUASYNC_KERNEL_CACHE"] != "off"
    assert path == Path(os.environ["CUASYNC_KERNEL_CACHE"])
    assert not path.is_relative_to(Path.home() / ".cache")


def test_cache_is_on_by_default_in_a_private_directory(tmp_path: Path) -> None:
    code = """
        import os, stat
        from cuasync import kernel_cache
        s = kernel_cache.stats()
        print(s.path, oct(stat.S_IMODE(os.stat(s.path).st_mode)), kernel_cache.enabled())
    """
    env: dict[str, Any] = {"XDG_CACHE_HOME": str(tmp_path), "CUASYNC_KERNEL_CACHE": ""}
    path, mode, on = run_script(code, **env).stdout.split()
    assert (path, mode, on) == (str(tmp_path / "cuasync" / "kernels"), "0o700", "True")
    off = run_script(
        "from cuasync import kernel_cache as c\n"
        "print(c.enabled(), c.key_for('s', 'k', [], 'sm_90', (13, 0)), c.stats().path)",
        **{**env, "CUASYNC_KERNEL_CACHE": "off"},
    )
    assert off.stdout.split() == ["False", "None", "None"]
    elsewhere = tmp_path / "mine"
    moved = run_script(
        "from cuasync import kernel_cache as c\nprint(c.stats().path)",
        **{**env, "CUASYNC_KERNEL_CACHE": str(elsewhere)},
    )
    assert moved.stdout.strip() == str(elsewhere) and elsewhere.is_dir()


def test_cache_key_covers_everything_that_decides_the_cubin(cache: Path) -> None:
    base = ("src", "k<float>", ["-DA=1"], "sm_90", (13, 0))
    key = kernel_cache.key_for(*base)
    assert key is not None and len(key) == 64
    assert kernel_cache.key_for(*base) == key
    variants = [
        ("src2", "k<float>", ["-DA=1"], "sm_90", (13, 0)),
        ("src", "k<double>", ["-DA=1"], "sm_90", (13, 0)),
        ("src", "k<float>", ["-DA=2"], "sm_90", (13, 0)),
        ("src", "k<float>", ["-DA=1", "-G"], "sm_90", (13, 0)),
        ("src", "k<float>", ["-DA=1"], "sm_80", (13, 0)),
        ("src", "k<float>", ["-DA=1"], "sm_90", (13, 1)),
    ]
    keys = {kernel_cache.key_for(*v) for v in variants}
    assert len(keys) == len(variants) and key not in keys
    flags_a = cuasync.CompileOptions(max_registers=32).flags()
    flags_b = cuasync.CompileOptions().flags()
    assert kernel_cache.key_for("s", "k", flags_a, "sm_90", (13, 0)) != kernel_cache.key_for(
        "s", "k", flags_b, "sm_90", (13, 0)
    )


def test_cache_key_covers_the_headers_the_source_includes(cache: Path, tmp_path: Path) -> None:
    """A header included from a directory the flags name (and what it includes, and a
    pre-included file) is part of the key: changed, the next compile misses, never
    loading an image built from its old text; a CUDA header it does not find is not."""
    inc = tmp_path / "inc"
    (inc / "sub").mkdir(parents=True)
    (inc / "myconst.h").write_text('#include "sub/more.h"\n#define MYVAL 1\n')
    (inc / "sub" / "more.h").write_text("#define MORE 1\n")
    (tmp_path / "pre.h").write_text("#define PRE 1\n")
    src = '#include "myconst.h"\n#include <cuda_fp16.h>\n__global__ void f(int* y) {}'
    flags = [f"-I{inc}", f"--pre-include={tmp_path / 'pre.h'}"]

    def key() -> str | None:
        return kernel_cache.key_for(src, "f", flags, "sm_90", (13, 0))

    first = key()
    assert key() == first  # (read again, unchanged: the same key)
    seen = {first}
    for path, text in (
        (inc / "myconst.h", '#include "sub/more.h"\n#define MYVAL 2\n'),
        (inc / "sub" / "more.h", "#define MORE 2\n"),  # (included by the included header)
        (tmp_path / "pre.h", "#define PRE 2\n"),
    ):
        path.write_text(text)
        seen.add(key())
    assert len(seen) == 4
    # without include directories nothing is read: the key of the text alone
    assert kernel_cache.key_for(src, "f", [], "sm_90", (13, 0)) not in seen
    # two headers including each other through ../ are read once each (no endless path)
    (inc / "sub" / "a.h").write_text('#pragma once\n#include "../sub/b.h"\n')
    (inc / "sub" / "b.h").write_text('#pragma once\n#include "../sub/a.h"\n')
    looped = kernel_cache.key_for('#include "sub/a.h"\n', "f", flags, "sm_90", (13, 0))
    assert looped is not None and looped not in seen


def test_cache_store_lookup_stats_and_clear(cache: Path) -> None:
    key = kernel_cache.key_for("src", "k", [], "sm_90", (13, 0))
    assert key is not None
    assert kernel_cache.lookup(key) is None
    kernel_cache.store(key, b"\x7fELF-image", "_Z1kv")
    assert kernel_cache.lookup(key) == (b"\x7fELF-image", "_Z1kv")
    stats = kernel_cache.stats()
    assert (stats.hits, stats.misses, stats.entries, stats.path) == (1, 1, 1, cache)
    assert [p.name for p in cache.iterdir()] == [f"{key}.cubin"]  # no temporary files left
    # a damaged entry (its length intact) and a truncated one are misses, never errors
    entry = cache / f"{key}.cubin"
    intact = entry.read_bytes()
    entry.write_bytes(intact[:-4] + b"\xde\xad\xbe\xef")
    assert kernel_cache.lookup(key) is None
    entry.write_bytes(intact[:-3])
    assert kernel_cache.lookup(key) is None
    (cache / ".tmp-k2bcd0y1").write_bytes(b"CUASYNC-CUBIN-2\n")  # (a writer that crashed)
    assert kernel_cache.clear() == 1 and kernel_cache.stats().entries == 0
    assert list(cache.iterdir()) == []
    # the directory deleted: clear() finds nothing, and the next entry makes it again
    cache.rmdir()
    assert kernel_cache.clear() == 0
    kernel_cache.store(key, b"\x7fELF-image", "_Z1kv")
    assert kernel_cache.lookup(key) == (b"\x7fELF-image", "_Z1kv")
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    with pytest.raises(ArgumentError, match="key must be"):
        kernel_cache.lookup("../../etc/passwd")
    with pytest.raises(ArgumentError, match="image must be"):
        kernel_cache.store(key, b"", "k")


def test_cache_enable_checks_its_path(tmp_path: Path) -> None:
    before = kernel_cache.stats().path
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.raises(ArgumentError, match="cannot be used as a kernel cache"):
        kernel_cache.enable(not_a_dir)
    with pytest.raises(ArgumentError, match="path must be"):
        kernel_cache.enable(3)  # type: ignore[arg-type]
    assert kernel_cache.stats().path == before  # unchanged


def test_cache_default_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, restore_cache: None
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert kernel_cache.default_path() == tmp_path / "cuasync" / "kernels"
    assert kernel_cache.enable() == tmp_path / "cuasync" / "kernels"


@needs_nvrtc
def test_cache_round_trips_a_real_compilation(cache: Path, monkeypatch) -> None:
    monkeypatch.setattr(_kernel, "_images", {})  # forget this process's compiles
    k = cuasync.Kernel(SCALE, "scale<double>")
    first = k.compile_image("sm_90")
    assert kernel_cache.stats().misses == 1
    monkeypatch.setattr(_kernel, "_images", {})  # as a new process would
    compiled = _count_compiles(monkeypatch)
    assert k.compile_image("sm_90") == first and compiled == []
    assert kernel_cache.stats().hits == 1 and kernel_cache.stats().entries == 1


TWO = r"""
extern "C" __global__ void first_of_two(float* x) { x[0] = 1.0f; }
template <typename T> __global__ void second_of_two(T* x) { x[0] = T(2); }
"""


@needs_nvrtc
def test_program_kernels_compile_once_for_all_of_them(cache: Path, monkeypatch) -> None:
    """A family's kernels made by ``program_kernels`` are one NVRTC program: the first
    use of any compiles it once, each kernel keeping its own lowered name; a new process
    reads the one cache entry; the emulator's check compiles the program once too."""
    monkeypatch.setattr(_kernel, "_images", {})
    compiled = _count_compiles(monkeypatch)
    first, second = program_kernels(
        TWO, {"first_of_two": None, "second_of_two<float>": None}
    ).values()
    image, lowered = second.compile_image("sm_90")
    assert lowered.startswith("_Z") and "second_of_two" in lowered
    assert first.compile_image("sm_90") == (image, "first_of_two")
    assert len(compiled) == 1
    monkeypatch.setattr(_kernel, "_images", {})  # as a new process would
    assert first.compile_image("sm_90") == (image, "first_of_two")
    assert second.compile_image("sm_90") == (image, lowered)
    assert len(compiled) == 1 and kernel_cache.stats().entries == 1
    first.check_compiles("sm_90")
    second.check_compiles("sm_90")
    assert len(compiled) == 2
    # specialized, they stay one program (under their own key)
    assert first.specialize(N=1).compile_image("sm_90")[1] == "first_of_two"
    assert second.specialize(N=1).compile_image("sm_90")[1] == lowered
    assert len(compiled) == 3


@needs_nvrtc
def test_a_sorts_four_kernels_compile_once(cache: Path, monkeypatch) -> None:
    monkeypatch.setattr(_kernel, "_images", {})
    compiled = _count_compiles(monkeypatch)
    for kernel in sorting.sort_kernels("int16", 1, True):
        kernel.compile_image("sm_90")
    assert len(compiled) == 1


# -- the disk cache's trust model: only this user's private entries are loaded --------------
OTHER_UID = 65534  # "nobody"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _give_away(path: Path) -> None:
    try:
        os.chown(path, OTHER_UID, -1)
    except (PermissionError, AttributeError):
        pytest.skip("chown to another uid needs root (the refusal is tested in CI as root)")


def _stored(cache: Path) -> tuple[str, Path]:
    key = kernel_cache.key_for("src", "k", [], "sm_90", (13, 0))
    assert key is not None
    kernel_cache.store(key, b"\x7fELF-image", "_Z1kv")
    assert kernel_cache.lookup(key) == (b"\x7fELF-image", "_Z1kv")
    return key, cache / f"{key}.cubin"


def _refused(key: str, match: str) -> None:
    """The lookup misses, warning once for the directory."""
    misses = kernel_cache.stats().misses
    with pytest.warns(RuntimeWarning, match=match):
        assert kernel_cache.lookup(key) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kernel_cache.lookup(key) is None  # refused again, without a second warning
    assert kernel_cache.stats().misses == misses + 2


def test_cache_directory_is_created_private(tmp_path: Path, restore_cache: None) -> None:
    old = os.umask(0o022)
    try:
        path = kernel_cache.enable(tmp_path / "cache" / "kernels")
    finally:
        os.umask(old)
    assert _mode(path) == 0o700


def test_cache_entries_are_private_and_replaced_atomically(cache: Path) -> None:
    key, entry = _stored(cache)
    assert _mode(entry) == 0o600
    inode = entry.stat().st_ino
    kernel_cache.store(key, b"\x7fELF-newer", "_Z1kv")  # a new file renamed over the old one
    assert entry.stat().st_ino != inode and _mode(entry) == 0o600
    assert kernel_cache.lookup(key) == (b"\x7fELF-newer", "_Z1kv")
    assert [p.name for p in cache.iterdir()] == [entry.name]


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o1777], ids=["g+w", "o+w", "sticky-tmp"])
def test_cache_refuses_a_directory_others_can_write(cache: Path, mode: int) -> None:
    key, _ = _stored(cache)
    cache.chmod(mode)
    _refused(key, r"can be written by other users.*chmod 700")
    kernel_cache.store(key, b"\x7fELF-other", "_Z1kv")  # not written there either
    cache.chmod(0o700)
    assert kernel_cache.lookup(key) == (b"\x7fELF-image", "_Z1kv")


def test_cache_refuses_a_directory_owned_by_another_user(cache: Path) -> None:
    key, _ = _stored(cache)
    _give_away(cache)
    _refused(key, rf"directory is owned by uid {OTHER_UID}, not by this process's user")


def test_cache_refuses_an_entry_owned_by_another_user(cache: Path) -> None:
    key, entry = _stored(cache)
    _give_away(entry)
    _refused(key, rf"entry {key}\.cubin is owned by uid {OTHER_UID}.*kernel_cache\.clear\(\)")


def test_cache_refuses_an_entry_others_can_write(cache: Path) -> None:
    key, entry = _stored(cache)
    entry.chmod(0o666)
    _refused(key, rf"entry {key}\.cubin can be written by other users")


def test_enabling_a_directory_others_can_write_warns_at_once(
    tmp_path: Path, restore_cache: None
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.warns(RuntimeWarning, match=r"not loading kernels from .*shared"):
        kernel_cache.enable(shared)


@needs_nvrtc
def test_kernels_never_load_another_users_entry(cache: Path, monkeypatch) -> None:
    monkeypatch.setattr(_kernel, "_images", {})
    k = cuasync.Kernel(SCALE, "scale<float>")
    key = kernel_cache.key_for(k.source, k.name, k.options.flags(), "sm_90")
    assert key is not None
    kernel_cache.store(key, b"\x7fELF planted by another user", "_Z5scaleIfEvPT_S0_i")
    _give_away(cache / f"{key}.cubin")
    with pytest.warns(RuntimeWarning, match="owned by uid"):
        image, _ = k.compile_image("sm_90")
    assert image[:4] == b"\x7fELF" and b"planted" not in image


def test_tensor_device_pointer_is_typed_and_keeps_the_tensor() -> None:
    x = cuasync.from_host(np.arange(4, dtype=np.float32)).sync()
    p = x.device_pointer()
    assert isinstance(p, cuasync.lowlevel.DevicePointer)
    assert int(p) == x.ptr and p.dtype == np.float32 and p.tensor is x
    assert repr(p) == f"DevicePointer({x.ptr:#x}, float32)"
    assert x[1:].device_pointer() == x.ptr + 4
    raw = cuasync.lowlevel.DevicePointer(x.ptr)
    assert raw.dtype is None and raw.tensor is None and repr(raw) == f"DevicePointer({x.ptr:#x})"


def test_a_launch_checks_a_device_pointers_dtype_and_declares_its_tensor() -> None:
    got: list[int] = []

    def twin(a: Any, x: Any, y: Any, n: Any) -> None:
        got.append(x)

    k = cuasync.Kernel(SAXPY, "saxpy", emulate=twin)
    x = cuasync.from_host(np.arange(4, dtype=np.float32)).sync()
    y = cuasync.zeros(4).sync()
    wrong = cuasync.zeros(4, "float64").sync()
    with pytest.raises(LaunchError, match=r"parameter 'x'.*float32 data, got a pointer to float64"):
        k[1, 32](1.0, wrong.device_pointer(), y, 4)
    _, tensors, outputs, _ = k._convert((1.0, x.device_pointer(), y, 4))
    assert [(t, p.name) for t, p in tensors] == [(x, "x"), (y, "y")]
    assert outputs == [y]  # a pointer is never the launch's output
    assert k[1, 32](1.0, x.device_pointer(), y, 4).sync() is y
    if cuasync.backend_name() == "emulator":
        assert got == [x.ptr]  # the twin gets the address as a plain int


def test_with_options_and_specialize_share_the_signature_under_their_own_keys() -> None:
    k = cuasync.Kernel(SAXPY, "saxpy", emulate=saxpy_twin)
    tuned = k.with_options(cuasync.CompileOptions(max_registers=32))
    spec = k.specialize(TILE=64, N=4)
    again = spec.specialize(N=8)
    for other in (tuned, spec, again):
        assert isinstance(other, cuasync.Kernel) and other is not k
        assert other.params is k.params and other.emulate is k.emulate
        assert other._key("sm_90") != k._key("sm_90")
    assert k.options == cuasync.CompileOptions()  # the original is unchanged
    assert spec.options.defines == (("N", "4"), ("TILE", "64"))
    assert again.options.defines == (("N", "8"), ("TILE", "64"))
    assert spec._key("sm_90") == k.specialize(N=4, TILE=64)._key("sm_90")
    assert tuned._key("sm_90") != spec._key("sm_90")
    with pytest.raises(ArgumentError, match="CompileOptions"):
        k.with_options({"opt_level": 2})  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="at least one"):
        k.specialize()


async def test_a_specialized_kernel_launches(anyio_backend) -> None:
    k = cuasync.Kernel(SAXPY, "saxpy", emulate=saxpy_twin).specialize(UNUSED=1)
    x = await cuasync.from_host(np.arange(4, dtype=np.float32))
    y = await cuasync.zeros(4)
    out = await k[1, 32](2.0, x, y, 4)
    np.testing.assert_array_equal(await out.to_host(), np.arange(4) * 2.0)


@needs_nvrtc
def test_specialize_changes_the_compiled_code() -> None:
    k = cuasync.Kernel(DEFINED, "k", options=cuasync.CompileOptions(defines={"VALUE": 1}))
    assert k.specialize(VALUE=2).compile_image("sm_90")[0] != k.compile_image("sm_90")[0]


def test_a_written_tensor_partly_overlapping_another_argument_is_refused() -> None:
    k = cuasync.Kernel(SAXPY, "saxpy", emulate=saxpy_twin)
    x = cuasync.from_host(np.arange(8, dtype=np.float32)).sync()
    with pytest.raises(AliasingError, match=r"parameter 'y' writes memory that parameter 'x'"):
        k[1, 32](1.0, x[:4], x[2:6], 4)
    with pytest.raises(AliasingError):
        k[1, 32](1.0, x[2:6], x.device_pointer().tensor[:4], 4)  # type: ignore[index]
    assert isinstance(AliasingError("x"), cuasync.errors.ArgumentError)
    # allowed: the very same view (in place) and disjoint views
    k[1, 32](1.0, x[:4], x[:4], 4).sync()
    k[1, 32](1.0, x[:4], x[4:], 4).sync()
    h = np.arange(8, dtype=np.float32)
    h[:4] += h[:4]
    h[4:] += h[:4]
    np.testing.assert_array_equal(x.to_host().sync(), h)


def test_the_launcher_asks_for_the_aliasing_check_only_where_tensors_share_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Views of different allocations never overlap (the check's first rule): the native
    # launcher checks nothing for them, and asks Python for views of one allocation.
    from cuasync._native import PROCESS

    asked: list[int] = []
    check = PROCESS.kernel_check_aliasing
    assert check is not None

    def spy(kernel: Any, pairs: list[Any]) -> None:
        asked.append(len(pairs))
        check(kernel, pairs)

    monkeypatch.setattr(PROCESS, "kernel_check_aliasing", spy)
    k = cuasync.Kernel(SAXPY, "saxpy", emulate=saxpy_twin)
    x = cuasync.from_host(np.arange(8, dtype=np.float32)).sync()
    y = cuasync.from_host(np.ones(8, dtype=np.float32)).sync()
    k[1, 32](2.0, x, y, 8).sync()
    k[1, 32](1.0, x[:4], x[4:], 4).sync()
    with pytest.raises(AliasingError):
        k[1, 32](1.0, x[:4], x[2:6], 4)
    native = type(k[1, 32]).__name__ == "Launcher"  # (CUASYNC_NATIVE=off: Python checks all)
    assert asked == ([2, 2] if native else [])
    np.testing.assert_array_equal(y.to_host().sync(), 2 * np.arange(8) + 1)


AXPY_STRIDED = r"""
extern "C" __global__ void axpy_strided(float a, const float* x, float* y, int stride, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i * stride] += a * x[i * stride];
}
"""


def axpy_strided_twin(a: Any, x: np.ndarray, y: np.ndarray, stride: Any, n: Any) -> None:
    y[:n] += a * x[:n]  # the twin sees the views themselves, the kernel walks the stride


def test_interleaved_views_of_one_tensor_are_not_aliasing() -> None:
    # A view travels as the address of its first element, so the kernel takes the stride.
    k = cuasync.Kernel(AXPY_STRIDED, "axpy_strided", emulate=axpy_strided_twin)
    x = cuasync.from_host(np.arange(8, dtype=np.float32)).sync()
    k[1, 32](1.0, x[::2], x[1::2], 2, 4).sync()
    h = np.arange(8, dtype=np.float32)
    h[1::2] += h[::2]
    np.testing.assert_array_equal(x.to_host().sync(), h)


# -- lazy ops as arguments, and .to_host()/.reshape() of any op producing a tensor ----------
FILL_RAMP = r"""
extern "C" __global__ void fill_ramp(float* out, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + (float)i;
}
"""


def fill_ramp_twin(out: np.ndarray, x: np.ndarray, n: Any) -> None:
    out[:n] = x[:n] + np.arange(n, dtype=np.float32)


async def test_a_lazy_op_as_the_output_argument_is_the_launchs_result(anyio_backend) -> None:
    k = cuasync.Kernel(FILL_RAMP, "fill_ramp", emulate=fill_ramp_twin)
    n = 300
    x = await cuasync.full(n, 2.0, dtype="float32")
    for launcher in (k[2, 256], lambda *a: k.launch(*a, grid=2, block=256)):
        out = await launcher(cuasync.zeros(n), x, n)
        assert isinstance(out, cuasync.Tensor) and out.shape == (n,)
        np.testing.assert_array_equal(await out.to_host(), ramp(n) + 2)


async def test_a_lazy_op_as_an_input_argument_runs_first(anyio_backend) -> None:
    k = cuasync.Kernel(SAXPY, "saxpy", emulate=saxpy_twin)
    n = 300
    y = await cuasync.ones(n)
    # a fused expression and a then() chain, both producing the input tensor
    out = await k[2, 256](2.0, cuasync.full(n, 3.0, dtype="float32") * 2.0, y, n)
    assert out is y
    np.testing.assert_array_equal(await y.to_host(), np.full(n, 13.0, np.float32))
    chain = cuasync.zeros(n).then(lambda t: cuasync.fill(t, 1.0))
    await k[2, 256](1.0, chain, y, n)
    np.testing.assert_array_equal(await y.to_host(), np.full(n, 14.0, np.float32))


async def test_lazy_op_arguments_run_on_the_launchs_stream(anyio_backend) -> None:
    k = cuasync.Kernel(FILL_RAMP, "fill_ramp", emulate=fill_ramp_twin)
    stream = cuasync.Device(0).new_stream()
    n = 64
    await k[1, 64](cuasync.zeros(n), cuasync.full(n, 1.0, dtype="float32"), n)  # loads them
    with cuasync.testing.gate(stream) as g:
        op = k[1, 64](cuasync.zeros(n), cuasync.full(n, 1.0, dtype="float32"), n)
        fut = op.submit_on(stream)  # the ops and the launch wait behind the gate
        assert not fut.done()
        g.open()
        out = await fut
    assert fut.stream is stream
    np.testing.assert_array_equal(await out.to_host(), ramp(n) + 1)


def test_the_generic_launcher_takes_lazy_op_arguments_to_the_checked_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    k = cuasync.Kernel(FILL_RAMP, "fill_ramp", emulate=fill_ramp_twin)
    generic_path(monkeypatch, k)  # as CUASYNC_NATIVE=off: kernel[config] calls k._launch
    launcher = k[1, 64]
    assert type(launcher) is not getattr(NATIVE, "Launcher", None)
    x = cuasync.full(8, 1.0, dtype="float32").sync()
    np.testing.assert_array_equal(launcher(cuasync.zeros(8), x, 8).to_host().sync(), ramp(8) + 1)


def test_a_lazy_op_argument_is_consumed_by_the_launch() -> None:
    k = cuasync.Kernel(FILL_RAMP, "fill_ramp", emulate=fill_ramp_twin)
    x = cuasync.zeros(8).sync()
    z = cuasync.zeros(8)
    first = k[1, 8](z, x, 8)
    with pytest.raises(cuasync.errors.OpConsumedError):
        k[1, 8](z, x, 8)  # the same op again
    with pytest.raises(cuasync.errors.OpConsumedError):
        z.sync()
    twice = cuasync.zeros(8)
    with pytest.raises(cuasync.errors.OpConsumedError):
        k[1, 8](twice, twice, 8)  # one op for two parameters
    np.testing.assert_array_equal(first.to_host().sync(), ramp(8))


@TWO_DEVICES
def test_lazy_op_arguments_on_two_devices_are_refused_when_the_launch_is_built() -> None:
    k = cuasync.Kernel(FILL_RAMP, "fill_ramp", emulate=fill_ramp_twin)
    x = cuasync.zeros(8).sync()
    with cuasync.use_device(1):
        elsewhere = cuasync.zeros(8)
    with pytest.raises(LaunchError, match="different devices"):
        k[1, 8](elsewhere, x, 8)
    elsewhere.sync()


def test_lazy_op_arguments_are_checked_when_the_launch_is_built() -> None:
    k = cuasync.Kernel(FILL_RAMP, "fill_ramp", emulate=fill_ramp_twin)
    x = cuasync.zeros(8).sync()
    wrong = cuasync.zeros(8, dtype="float64")
    with pytest.raises(LaunchError, match="expects float32 data, got an op producing float64"):
        k[1, 8](wrong, x, 8)
    assert not wrong._consumed  # nothing taken from a launch that was refused
    wrong.sync()
    out, scalar = cuasync.zeros(8), cuasync.value(8)
    with pytest.raises(LaunchError, match="'n'"):
        k[1, 8](out, x, scalar)  # an op where a scalar goes
    out.sync(), scalar.sync()  # (neither taken)
    not_a_tensor = cuasync.value(3)
    op = k[1, 8](not_a_tensor, x, 8)
    with pytest.raises(LaunchError, match="op whose output is int"):
        op.sync()


async def test_to_host_and_reshape_of_a_launch_and_a_then_chain(anyio_backend) -> None:
    k = cuasync.Kernel(FILL_RAMP, "fill_ramp", emulate=fill_ramp_twin)
    x = await cuasync.zeros(12)
    y = await cuasync.zeros(12)
    np.testing.assert_array_equal(await k[1, 32](y, x, 12).to_host(), ramp(12))
    m = await k[1, 32](y, x, 12).reshape((3, -1))
    assert m.shape == (3, 4)
    np.testing.assert_array_equal(await m.to_host(), ramp(12).reshape(3, 4))
    chain = cuasync.zeros(12).then(lambda t: k[1, 32](t, x, 12))
    np.testing.assert_array_equal(await chain.reshape((2, 6)).to_host(), ramp(12).reshape(2, 6))
    with pytest.raises(cuasync.errors.ShapeError):
        await cuasync.zeros(12).then(lambda t: k[1, 32](t, x, 12)).reshape((5, -1))
    with pytest.raises(ArgumentError, match=r"to_host\(\) needs an op whose output is"):
        await cuasync.value(3).to_host()  # type: ignore[misc]
