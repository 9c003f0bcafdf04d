"""The built-in kernels' CUDA C++ itself, compiled for the host and run against numpy.

On the emulator the numpy twins run, and NVRTC only checks that the CUDA source compiles;
this test runs the source: ``cuasync/kernels/*.cu`` compiled with the host's C++
compiler, with a few lines standing in for the CUDA built-ins (``__float_as_int``,
``__dmul_rn``, ``float2``, a grid of one thread, so each grid-stride loop runs serially).
The conversions (``ca_load``/``ca_store``: float16, bfloat16 and FP8 bit patterns, numpy's
casting rules) and ``ca_arange``'s arithmetic must give numpy's and ml_dtypes' bits. What
only a GPU can show (NaN payloads through the device's float conversions, out-of-range
float-to-integer conversions, which are undefined anyway) is left out.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cuasync._dtypes import DTYPES, SUPPORTED
from cuasync._launch import builtin as _builtin

CXX = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
pytestmark = [
    pytest.mark.skipif(CXX is None, reason="needs a C++ compiler (g++ or clang++)"),
    pytest.mark.path_independent,  # (kernel sources run on the host: no op path)
]

#: The CUDA built-ins the kernels use, for the host (exact IEEE arithmetic, no FMA).
SHIMS = r"""
#include <cmath>
#include <cstring>
using std::cos; using std::fabs; using std::floor; using std::fmod; using std::log;
using std::rint; using std::sin; using std::sqrt; using std::copysign;
using std::isfinite; using std::isinf; using std::isnan;
using std::atan; using std::atan2; using std::asinh; using std::cosh; using std::exp;
using std::expm1; using std::fmax; using std::hypot; using std::log1p; using std::sinh;
using std::tan; using std::tanh; using std::trunc;
#define __device__
#define __global__
#define __forceinline__ inline
#define __shared__ static
static inline void __syncthreads() {}
struct float2 { float x, y; };
struct double2 { double x, y; };
static inline float2 make_float2(float x, float y) { return {x, y}; }
static inline double2 make_double2(double x, double y) { return {x, y}; }
// (the float4 reductions: run one block at a time, so a fence orders nothing more)
#define __launch_bounds__(...)
struct alignas(16) float4 { float x, y, z, w; };
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
static inline void __threadfence() {}
template <typename T>
static inline T __ldcg(const T* p) { return *p; }
static inline unsigned atomicAdd(unsigned* p, unsigned v) {  // (thread 0 of a block)
    unsigned old = *p;
    *p = old + v;
    return old;
}
static inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline long long __double_as_longlong(double d) {
    long long i; std::memcpy(&i, &d, 8); return i;
}
static inline double __longlong_as_double(long long i) {
    double d; std::memcpy(&d, &i, 8); return d;
}
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
// to float toward zero: the nearest float, one step back where it is the larger
// (long double holds every 64-bit integer exactly on x86-64)
static inline float __double2float_rz(double d) {
    float f = (float)d;
    return std::fabs((double)f) > std::fabs(d) ? std::nextafter(f, 0.0f) : f;
}
static inline float __ll2float_rz(long long i) {
    float f = (float)i;
    return std::fabs((long double)f) > std::fabs((long double)i) ? std::nextafter(f, 0.0f) : f;
}
static inline float __ull2float_rz(unsigned long long u) {
    float f = (float)u;
    return (long double)f > (long double)u ? std::nextafter(f, 0.0f) : f;
}
template <typename T>
static inline T __shfl_down_sync(unsigned, T v, int) { return v; }  // one thread: unused
static inline unsigned __umulhi(unsigned a, unsigned b) {
    return (unsigned)(((unsigned long long)a * b) >> 32);
}
struct ca_dim3 { unsigned x, y, z; };
static ca_dim3 blockIdx = {0, 0, 0};  // y: a reduction's split, set by the caller
static const ca_dim3 threadIdx = {0, 0, 0};
static const ca_dim3 blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
"""


def _wrappers() -> str:
    lines = []
    for name in SUPPORTED:
        d = DTYPES[name]
        s, k = d.storage, d.code
        lines.append(
            f'extern "C" void convert_{k}(void* out, const void* src, int code, long long n) '
            f"{{ ca_convert<{s}, {k}>(({s}*)out, src, code, n, 1, 1, n, 0, 0, 0, 1); }}"
        )
        lines.append(
            f'extern "C" void arange_{k}(void* out, long long n, long long i0, long long i1, '
            f"double f0, double f1) {{ ca_arange<{s}, {k}>(({s}*)out, n, i0, i1, f0, f1, 0); }}"
        )
    return "\n".join(lines)


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder: Path = tmp_path_factory.mktemp("host_kernels")
    return _compiled(folder, "kernels", "\n".join([SHIMS, _builtin.source(), _wrappers()]))


def _compiled(folder: Path, name: str, source: str, opt: str = "-O1") -> Any:
    """``source`` (C++ with the shims) built into ``folder/name.so`` and loaded.

    A library is built once per test run: the run's kernel cache (conftest: shared by the
    xdist workers, and by CI's second pass) keeps it under the hash of its source and
    flags, so the workers that split a module's tests do not each run the compiler."""
    flags = ["-std=c++17", opt, "-shared", "-fPIC", "-ffp-contract=off", "-w"]
    key = hashlib.sha256("\0".join([str(CXX), *flags, source]).encode()).hexdigest()[:24]
    cache = Path(os.environ["CUASYNC_TEST_RUN_KERNEL_CACHE"]) / "host-kernels"
    library = cache / f"{name}-{key}.so"
    if not library.exists():
        path = folder / f"{name}.cpp"
        path.write_text(source, encoding="utf-8")
        built = folder / f"{name}.so"
        done = subprocess.run(
            [str(CXX), *flags, str(path), "-o", str(built)], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-4000:]
        cache.mkdir(parents=True, exist_ok=True)
        partial = cache / f"{library.name}.{os.getpid()}"
        shutil.copyfile(built, partial)
        os.replace(partial, library)  # (atomic: another worker reads a whole library)
    return ctypes.CDLL(str(library))


def _convert(lib: Any, values: np.ndarray, dst: str) -> np.ndarray:
    src = np.ascontiguousarray(values)
    out = np.zeros(src.shape, SUPPORTED[dst])
    fn = getattr(lib, f"convert_{DTYPES[dst].code}")
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong]
    fn(out.ctypes.data, src.ctypes.data, DTYPES[src.dtype.name].code, src.size)
    return out


def _float_sources() -> np.ndarray:
    """float64 values around every rounding decision of float16, bfloat16 and FP8."""
    with np.errstate(all="ignore"):  # NaN bit patterns among them
        return _float_sources_quietly()


def _float_sources_quietly() -> np.ndarray:
    rng = np.random.default_rng(0)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0, 0.5, 1e-300, 1e300]
    specials = np.array(special, np.float64)
    f32_bits = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    randoms = f32_bits.view(np.float32).astype(np.float64)
    # every FP8, bfloat16 and float16 value, the midpoints between neighbours and one
    # float32 ulp either side of each midpoint (ties to even, and just off them)
    grids: list[np.ndarray] = []
    for name in ("float8_e4m3fn", "float8_e5m2"):
        grids.append(np.arange(256, dtype=np.uint8).view(SUPPORTED[name]).astype(np.float64))
    grids.append(np.arange(2**16, dtype=np.uint16).view(SUPPORTED["bfloat16"]).astype(np.float64))
    grids.append(np.arange(2**16, dtype=np.uint16).view(np.float16).astype(np.float64))
    near: list[np.ndarray] = []
    for g in grids:
        g = np.unique(g[np.isfinite(g)])
        mid = ((g[1:] + g[:-1]) / 2).astype(np.float32)
        near += [
            g,
            mid,
            np.nextafter(mid, np.float32(np.inf)),
            np.nextafter(mid, np.float32(-np.inf)),
        ]
    # float64 values just off a tie that float32 would round onto it: rounded once, they
    # leave it (as ml_dtypes 0.7 does; through float32 they would round to even)
    mids = np.concatenate(near[1::4]).astype(np.float64)
    twice = np.concatenate([mids * (1 + 2.0**-40), mids * (1 - 2.0**-40)])
    return np.concatenate([specials, randoms, *near, twice, -twice])


def _same_bits(got: np.ndarray, want: np.ndarray, label: str) -> None:
    if got.dtype.kind == "c":  # each part on its own
        _same_bits(got.real.copy(), want.real.copy(), label + " (real)")
        _same_bits(got.imag.copy(), want.imag.copy(), label + " (imag)")
        return
    bits = f"u{got.itemsize}"
    bad = got.view(bits) != want.view(bits)
    if got.dtype.kind == "f":  # NaN payloads: only the FP8 destinations' are checked
        bad &= ~(np.isnan(got) & np.isnan(want))
    assert not bad.any(), (
        f"{label}: {bad.sum()} values differ, e.g. {got[bad][:5]!r} vs {want[bad][:5]!r}"
    )


@pytest.mark.parametrize("dst", ["float8_e4m3fn", "float8_e5m2", "bfloat16", "float16"])
@pytest.mark.parametrize("src", ["float64", "float32", "float16", "bfloat16"])
def test_floats_to_narrow_floats_round_like_ml_dtypes(lib: Any, src: str, dst: str) -> None:
    with np.errstate(all="ignore"):
        values = _float_sources().astype(SUPPORTED[src])
        want = values.astype(SUPPORTED[dst])
    _same_bits(_convert(lib, values, dst), want, f"{src} -> {dst}")


@pytest.mark.parametrize("src", ["float8_e4m3fn", "float8_e5m2"])
def test_every_fp8_value_to_every_dtype(lib: Any, src: str) -> None:
    values = np.arange(256, dtype=np.uint8).view(SUPPORTED[src])
    finite = np.isfinite(values.astype(np.float32))
    for dst in SUPPORTED:
        with np.errstate(all="ignore"):
            want = values.astype(SUPPORTED[dst])
        got = _convert(lib, values, dst)
        if SUPPORTED[dst].kind in "iu":  # NaN, inf or out of range: undefined, as in numpy
            as_float = values.astype(np.float64)
            info = np.iinfo(SUPPORTED[dst])
            keep = finite & (as_float >= info.min) & (as_float < info.max + 1.0)
            got, want = got[keep], want[keep]
        _same_bits(got, want, f"{src} -> {dst}")


@pytest.mark.parametrize("dst", ["float8_e4m3fn", "float8_e5m2"])
def test_every_dtype_to_fp8(lib: Any, dst: str) -> None:
    rng = np.random.default_rng(1)
    for src in SUPPORTED:
        dt = SUPPORTED[src]
        if dt.kind in "iu":
            info = np.iinfo(dt)
            values = np.concatenate(
                [np.arange(max(info.min, -600), min(info.max, 70000) + 1, dtype=dt),
                 np.array([info.min, info.max], dt)]
            )  # fmt: skip
        elif dt.kind == "b":
            values = np.array([False, True])
        elif dt.kind == "c":
            parts = _float_sources()[:5000]
            with np.errstate(all="ignore"):
                values = (parts + 1j * rng.standard_normal(parts.size)).astype(dt)
        else:
            with np.errstate(all="ignore"):
                values = _float_sources()[:50000].astype(dt)
        with np.errstate(all="ignore"):
            want = values.astype(SUPPORTED[dst])
        _same_bits(_convert(lib, values, dst), want, f"{src} -> {dst}")


ARANGES = [
    (0, 10, 1),
    (10, 0, -3),
    (0.3, 1000.0, 0.7),
    (0.1, 2.0, 0.3),
    (-5.5, 5.5, 0.25),
    (1.0, 0.0, -0.125),
    (0, 40000, 7),
    (2**62, 2**62 + 5, 1),
]


@pytest.mark.parametrize("args", ARANGES, ids=str)
def test_arange_kernel_matches_numpy(lib: Any, args: tuple[Any, Any, Any]) -> None:
    from cuasync._ops.creation import _arange_ends, _arange_length
    from cuasync.errors import ArgumentError

    start, stop, step = args
    n = _arange_length(start, stop, step)
    for name, dt in SUPPORTED.items():
        if name == "bool" and n > 2:  # refused by arange (numpy raises too)
            continue
        try:
            i0, i1, f0, f1 = _arange_ends(start, step, n, dt)
        except ArgumentError:  # a value the dtype cannot hold: refused before the kernel
            continue
        out = np.zeros(n, dt)
        fn = getattr(lib, f"arange_{DTYPES[name].code}")
        fn.argtypes = [ctypes.c_void_p, *[ctypes.c_longlong] * 3, ctypes.c_double, ctypes.c_double]
        fn(out.ctypes.data, n, i0, i1, f0, f1)
        with np.errstate(all="ignore"):
            want = np.arange(start, stop, step, dtype=dt)
        _same_bits(out, want, f"arange{args} as {name}")


# -- reductions ----------------------------------------------------------------------------
# The generated reduction kernels, one thread per row (mode 1): the same identities,
# combines, element loads and final stores as on a GPU, without the warp shuffles. A row
# split in two (blockIdx.y) runs phase 0 per split, then phase 1 over the partials.
REDUCE_DTYPES = ["bfloat16", "float16", "float32", "complex64", "complex128", "int8"]
REDUCE_OPS = ["sum", "prod", "max", "min", "mean", "argmax", "argmin", "norm"]


def _reduce_cases() -> list[tuple[Any, Any]]:
    from cuasync._ops import reduce_codegen as rc
    from cuasync._ops.reductions import _result_dtypes

    cases: list[tuple[Any, Any]] = []
    for dtype in REDUCE_DTYPES:
        for op in REDUCE_OPS:
            res, acc = _result_dtypes(op, SUPPORTED[dtype], None, op)
            cases.append((("x", 0, dtype), rc.ReduceSpec(op, acc, res)))
    for a, b, acc, out in (
        ("complex64", "complex64", "complex64", "complex64"),
        ("complex128", "float32", "complex128", "complex128"),
        ("bfloat16", "bfloat16", "float32", "bfloat16"),
    ):
        vdot = ("op", "vdot", (acc, acc), acc, ("x", 0, a), ("x", 1, b))
        cases.append((vdot, rc.ReduceSpec("sum", acc, out)))
    return cases


@pytest.fixture(scope="module")
def reductions(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from cuasync._ops import reduce_codegen as rc
    from cuasync._ops.codegen import ctype

    parts = [SHIMS, rc.prelude()]
    for i, (plan, spec) in enumerate(_reduce_cases()):
        parts.append(f"namespace n{i} {{\n{rc.body(plan, spec, 1, 1)}\n}}")
        xs = [plan] if plan[0] == "x" else list(plan[4:])
        arg = spec.op in ("argmax", "argmin")
        x_params = ", ".join(f"const void* x{k}" for k in range(len(xs)))
        x_args = ", ".join(f"(const {DTYPES[x[2]].storage}*)x{k}" for k, x in enumerate(xs))
        strides = ", ".join("K, 1" for _ in xs)
        parts.append(
            f'extern "C" void r{i}(void* out, void* wsv, void* wsi, {x_params}, long long M, '
            "long long K, long long splits, long long chunk, int phase, int split) {\n"
            "    blockIdx.y = split;\n"
            f"    n{i}::ca_reduce(({DTYPES[spec.out].storage}*)out, ({ctype(spec.acc)}*)wsv, "
            f"{'(long long*)wsi, ' if arg else ''}{x_args}, M, K, splits, chunk, phase, 1, "
            f"M, K, 1, {strides}, 0);\n}}"  # 0: no cancel word
        )
    return _compiled(tmp_path_factory.mktemp("host_reductions"), "reductions", "\n".join(parts))


def _host_values(dtype: str, shape: tuple[int, int], op: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = SUPPORTED[dtype]
    if dt.kind in "iu":
        return rng.integers(-9, 9, shape).astype(dt)
    if op == "prod":
        v = rng.uniform(0.9, 1.1, shape) * (
            np.exp(0.1j * rng.standard_normal(shape)) if dt.kind == "c" else 1
        )
    else:
        v = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if dt.kind == "c" else 0)
    v = np.asarray(v).astype(dt)
    if op in ("max", "min", "argmax", "argmin"):  # ties and NaNs, as numpy orders them
        v[:, 3] = v[:, 5]
        if dt.kind == "c":
            v[0, 2] = complex(1.0, np.nan)
            v[1, 4] = complex(np.nan, 0.0)
            v[2, 1:3] = v[2, 0].real + 1j * np.array([v[2, 0].imag + 1, v[2, 0].imag - 1])
        elif dt.kind == "f" or dt == SUPPORTED["bfloat16"]:
            v[0, 2] = np.nan
    return v


@pytest.mark.parametrize("splits", [1, 3])
def test_reduction_kernels_match_numpy(reductions: Any, splits: int) -> None:
    for i, (plan, spec) in enumerate(_reduce_cases()):
        xs = [plan] if plan[0] == "x" else list(plan[4:])
        m, k = 4, 23
        values = [_host_values(x[2], (m, k), spec.op, 10 * i + j) for j, x in enumerate(xs)]
        acc, out_dt = SUPPORTED[spec.acc], SUPPORTED[spec.out]
        out = np.zeros(m, out_dt)
        wsv, wsi = np.zeros(m * splits, acc), np.zeros(m * splits, np.int64)
        chunk = -(-k // splits)
        fn = getattr(reductions, f"r{i}")
        fn.argtypes = (
            [ctypes.c_void_p] * (3 + len(xs)) + [ctypes.c_longlong] * 4 + [ctypes.c_int] * 2
        )
        pointers = [
            out.ctypes.data,
            wsv.ctypes.data,
            wsi.ctypes.data,
            *(v.ctypes.data for v in values),
        ]
        for split in range(splits):
            fn(*pointers, m, k, splits, chunk, 0, split)
        if splits > 1:
            fn(*pointers, m, k, splits, chunk, 1, 0)
        label = f"{spec} of {plan}"
        a = values[0]
        with np.errstate(all="ignore"):
            if plan[0] == "op":  # vdot
                x, y = (
                    v.astype(np.complex128 if spec.acc.startswith("complex") else np.float64)
                    for v in values
                )
                want = np.sum(np.conj(x) * y, axis=1).astype(out_dt)
                budget = np.sum(np.abs(x) * np.abs(y), axis=1)
            elif spec.op in ("argmax", "argmin"):
                np.testing.assert_array_equal(out, getattr(np, spec.op)(a, axis=1), label)
                continue
            elif spec.op in ("max", "min"):
                want = getattr(np, spec.op)(a, axis=1)
                nan = np.isnan(want.astype(np.complex128))
                assert (np.isnan(out.astype(np.complex128)) == nan).all(), label
                np.testing.assert_array_equal(out[~nan], want[~nan], label)
                continue
            else:
                wide = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
                fn_np = {"norm": lambda w, axis: np.sqrt(np.sum(np.abs(w) ** 2, axis=axis))}.get(
                    spec.op
                ) or getattr(np, spec.op)
                want = np.asarray(fn_np(wide, axis=1)).astype(out_dt)
                budget = np.sum(np.abs(wide), axis=1)
                if spec.op == "prod":
                    budget = np.abs(np.prod(wide, axis=1)) * k
        assert out.dtype == want.dtype, label
        tol = {"float16": 2e-3, "bfloat16": 2.0**-7, "float32": 1e-5, "complex64": 1e-5}.get(
            out_dt.name, 1e-12
        )
        err = np.abs(out.astype(np.complex128) - want.astype(np.complex128))
        assert (err <= tol * (budget + 1)).all(), (label, out, want)


# -- generated elementwise expressions -------------------------------------------------------
def test_generated_sign_gives_positive_zero_for_either_zero(tmp_path: Path) -> None:
    # issue 34: the array API's sign(±0) is +0, NaN stays NaN. The emulator's twin is
    # numpy's sign; this runs the C++ the GPU runs.
    from cuasync._ops.codegen import _unary, ctype

    lines = [SHIMS]
    for dt in ("float32", "float64"):
        c = ctype(dt)
        lines.append(f'extern "C" {c} sign_{dt}({c} a) {{ return {_unary("sign", "a", dt)}; }}')
    lib = _compiled(tmp_path, "sign", "\n".join(lines))
    for dt, ct in (("float32", ctypes.c_float), ("float64", ctypes.c_double)):
        fn = getattr(lib, f"sign_{dt}")
        fn.argtypes, fn.restype = [ct], ct
        values = np.array([-0.0, 0.0, np.nan, -2.5, 3.0, -np.inf, np.inf], dt)
        got = np.array([fn(float(v)) for v in values], dt)
        want = np.array([0.0, 0.0, np.nan, -1.0, 1.0, -1.0, 1.0], dt)
        _same_bits(got, want, f"sign {dt}")


#: The complex functions of the generated kernels (codegen's ``_ZUNARY`` and the binary
#: ones), with numpy's; ``rsqrt`` is ``reciprocal(sqrt(x))``, as the emulator's twin.
COMPLEX_UNARY = {
    **{n: getattr(np, n) for n in ("negative", "conj", "exp", "log", "sqrt", "square")},
    **{n: getattr(np, n) for n in ("isfinite", "isinf", "isnan", "log2", "log10", "sign")},
    **{n: getattr(np, n) for n in ("cosh", "sinh", "tanh", "sin", "cos", "tan", "expm1")},
    **{n: getattr(np, n) for n in ("reciprocal", "log1p", "logical_not")},
    **{n: getattr(np, "arc" + n[1:]) for n in ("acos", "acosh", "asin", "asinh", "atan")},
    "atanh": np.arctanh,
    "abs": np.abs,
    "angle": np.angle,
    "round": np.rint,
    "rsqrt": lambda x: np.reciprocal(np.sqrt(x)),
}
COMPLEX_BINARY = {
    **{n: getattr(np, n) for n in ("add", "subtract", "multiply", "divide", "power")},
    **{n: getattr(np, n) for n in ("equal", "not_equal", "logical_and", "logical_or")},
    "logical_xor": np.logical_xor,
}


def _complex_values(dtype: str) -> np.ndarray:
    """Every pair of special and ordinary parts (zeros of both signs, ±1, infinities,
    NaN, huge and tiny), then random values."""
    parts = [-np.inf, -40.0, -3.0, -1.5, -1.0, -0.5, -1e-30, -0.0, 0.0, 1e-30, 0.5, 1.0]
    parts += [1.5, 3.0, 40.0, 1e30, np.inf, np.nan]
    re, im = np.meshgrid(parts, parts)
    rng = np.random.default_rng(5)
    z = np.empty(re.size + 400, dtype)
    z.real = np.concatenate([re.ravel(), rng.standard_normal(400) * 3])
    z.imag = np.concatenate([im.ravel(), rng.standard_normal(400) * 3])
    return z


def _complex_close(
    got: np.ndarray, want: np.ndarray, rtol: Any, label: str, *inputs: np.ndarray
) -> None:
    """Each part NaN, infinite (with its sign) or a zero's sign where numpy's is; the
    finite values within ``rtol`` of numpy's magnitude (the host's libm and numpy's loops
    may differ in the last bits)."""
    if want.dtype.kind == "b":
        np.testing.assert_array_equal(got, want, err_msg=label)
        return
    if want.dtype.kind == "c" and label.split()[0] in ("square", "multiply", "power"):
        # a product of parts past the dtype's range: numpy's SIMD loops contract it into
        # an FMA where the host has one (-inf where the kernel's rounded steps make NaN)
        big = np.finfo(want.dtype).max ** 0.5
        over = [(np.abs(x.real) > big) | (np.abs(x.imag) > big) for x in inputs]
        keep = ~np.logical_or.reduce(over)
        got, want, inputs = got[keep], want[keep], tuple(x[keep] for x in inputs)
        rtol = rtol[keep] if np.ndim(rtol) else rtol
    g, w = got.astype(np.complex128), want.astype(np.complex128)
    scale = np.abs(w)
    bad = np.zeros(g.shape, bool)
    for part in (np.real, np.imag) if want.dtype.kind == "c" else (np.real,):
        gp, wp = part(g), part(w)
        bad |= np.isnan(gp) != np.isnan(wp)
        inf = np.isinf(wp) | np.isinf(gp)
        bad |= inf & (gp != wp) & ~np.isnan(wp)
        finite = np.isfinite(gp) & np.isfinite(wp)
        bad |= finite & (np.abs(gp - wp) > rtol * np.where(np.isfinite(scale), scale, 0) + 1e-300)
        # (a zero's sign: not where the tolerance is past 1, an angle b arg(a) of a power
        # with a huge b, where an ulp of arg(a) is any angle)
        signed = np.asarray(rtol) < 1
        bad |= finite & (wp == 0) & (gp == 0) & (np.signbit(gp) != np.signbit(wp)) & signed
    where = [x[bad][:6] for x in inputs]
    assert not bad.any(), f"{label}{where}: {bad.sum()} differ: {got[bad][:6]} vs {want[bad][:6]}"


def _run_complex_kernel(folder: Path, plan: Any, out: str, arrays: list[np.ndarray]) -> Any:
    """The generated strided kernel of ``plan`` (one dimension) run on the host."""
    from cuasync._ops import codegen

    n = arrays[0].size
    so = DTYPES[out].storage
    ins = [DTYPES[a.dtype.name].storage for a in arrays]
    params = ", ".join(f"const void* x{k}" for k in range(len(arrays)))
    args = ", ".join(f"(const {s}*)x{k}" for k, s in enumerate(ins))
    strides = ", ".join(["1"] * (len(arrays) + 1))
    lib = _compiled(
        folder,
        f"z_{plan[1]}_{plan[2][0]}",  # (a path loads once: one per function and dtype)
        SHIMS
        + codegen.source(plan, out, 1)
        + f'\nextern "C" void run(void* o, {params}, long long n) '
        f"{{ ca_elementwise(({so}*)o, {args}, n, n, {strides}, 0); }}\n",  # 0: no cancel word
    )
    lib.run.argtypes = [ctypes.c_void_p] * (len(arrays) + 1) + [ctypes.c_longlong]
    result = np.zeros(n, SUPPORTED[out])
    lib.run(result.ctypes.data, *(a.ctypes.data for a in arrays), n)
    return result


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_generated_complex_kernels_match_numpy(tmp_path: Path, dtype: str) -> None:
    # issue 34: the C++ of every complex function the GPU runs (kernels/elementwise.cuh,
    # numpy's formulas and branch cuts), run on the host over every pair of special parts:
    # the emulator's twins are numpy itself, so only this shows the kernels' values.
    from cuasync._ops.expr import UFUNCS

    z = _complex_values(dtype)
    rtol = {"complex64": 4e-6, "complex128": 1e-13}[dtype]
    for name, fn in sorted(COMPLEX_UNARY.items()):
        with np.errstate(all="ignore"):
            want = np.asarray(fn(z))
        out = "bool" if want.dtype.kind == "b" else want.dtype.name
        plan: Any = ("op", name, (dtype,), out, ("x", 0, dtype))
        got = _run_complex_kernel(tmp_path, plan, out, [z])
        _complex_close(got, want, rtol, f"{name} {dtype}", z)
    rng = np.random.default_rng(6)
    exponents = np.array([0, 1, 2, 3, 4, -1, -2, -3, 7, -9, 99, 0.5, 2.5, -0.0, 1j, 1 + 1j])
    b = np.concatenate([exponents, z[rng.permutation(z.size)][: z.size - exponents.size]])
    b = b.astype(dtype)
    for name, fn in sorted(COMPLEX_BINARY.items()):
        for x1, x2 in ((z, b), (b, z)):
            with np.errstate(all="ignore"):
                want = np.asarray(fn(x1, x2))
            out = "bool" if want.dtype.kind == "b" else want.dtype.name
            assert UFUNCS[name].resolve_dtypes((x1.dtype, x2.dtype, None))[0] == x1.dtype
            plan = ("op", name, (dtype, dtype), out, ("x", 0, dtype), ("x", 1, dtype))
            got = _run_complex_kernel(tmp_path, plan, out, [x1, x2])
            tol: Any = rtol
            if name == "power":  # exp(b log a): log's error grows by |b log a|
                with np.errstate(all="ignore"):
                    tol = rtol * (1 + np.abs(x2 * np.log(np.abs(x1))).astype("float64"))
                tol = np.where(np.isfinite(tol), tol, rtol)
            _complex_close(got, want, tol, f"{name} {dtype}", x1, x2)


def test_bfloat16_rounding_in_place_matches_the_conversions(tmp_path: Path) -> None:
    # The bfloat16 elementwise kernels round in float (ca_br) and store the exact result's
    # bits (ca_bf16_exact) instead of converting down and up and down again: for every
    # float bit pattern, the same bits as ca_bf16_to_float(ca_bf16_from_float(x)), and
    # the stored bits those of ca_bf16_from_float(x) (NaN quiet, its sign kept).
    from cuasync._ops.codegen import _prelude

    lib = _compiled(
        tmp_path,
        "bf16_round",
        SHIMS
        + _prelude()
        + r"""
extern "C" long long bf16_mismatches() {
    long long bad = 0;
    unsigned u = 0;
    do {
        float x = __int_as_float((int)u);
        unsigned short want = ca_bf16_from_float(x);
        float r = ca_br(x);
        bad += __float_as_int(r) != __float_as_int(ca_bf16_to_float(want));
        bad += ca_bf16_exact(r) != want;
        bad += ca_bf16_exact(ca_bf16_to_float(want)) != want;  // a loaded value, stored
    } while (++u != 0);
    for (unsigned b = 0; b < 65536; b++) {  // every loaded bfloat16, NaN payloads too
        float x = ca_bf16_to_float((unsigned short)b);
        bad += ca_bf16_exact(x) != ca_bf16_from_float(x);
    }
    return bad;
}
""",
        opt="-O2",  # (every float bit pattern: 2**32 iterations)
    )
    lib.bf16_mismatches.restype = ctypes.c_longlong
    assert lib.bf16_mismatches() == 0


def _elementwise_plan(dtype: str) -> Any:
    return ("op", "add", (dtype, dtype), dtype, ("x", 0, dtype), ("x", 1, dtype))


@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float16", "complex128", "int8"])
def test_contiguous_elementwise_kernel_covers_every_element(tmp_path: Path, dtype: str) -> None:
    # The generated contiguous kernel, vector accesses (vec=1: 16 bytes of the widest
    # operand, VECTORS of them a thread, then the last < width elements) and one element
    # an access (vec=0), run by one host thread: lengths around the vector width and a
    # thread's share reach each element once and no further.
    from cuasync._ops import codegen

    plan = _elementwise_plan(dtype)
    width = codegen.vector_width(plan, dtype)
    assert width * SUPPORTED[dtype].itemsize == codegen.VECTOR_BYTES
    kernel = codegen.source(plan, dtype, 0)
    s = DTYPES[dtype].storage
    lib = _compiled(
        tmp_path,
        f"contiguous_{dtype}",
        SHIMS
        + kernel
        + f'\nextern "C" void run(void* o, const void* a, const void* b, long long n, int vec) '
        f"{{ ca_elementwise(({s}*)o, (const {s}*)a, (const {s}*)b, n, vec, 0); }}\n",
    )
    lib.run.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_longlong, ctypes.c_int]
    # the same kernel run by a grid of 3 blocks of 32 host threads: each thread's vectors
    # a block apart, the grid's stride, its last vectors and the tail reach every element
    grid = _compiled(
        tmp_path,
        f"contiguous_grid_{dtype}",
        BLOCK_SHIMS
        + kernel
        + f'\nextern "C" void run(void* o, const void* a, const void* b, long long n, int vec) '
        f"{{ ca_run_grid(3, 1, 32, [=] {{ ca_elementwise(({s}*)o, (const {s}*)a, "
        f"(const {s}*)b, n, vec, 0); }}); }}\n",
    )
    grid.run.argtypes = lib.run.argtypes
    per_thread = width * codegen.VECTORS
    rng = np.random.default_rng(7)
    dt = SUPPORTED[dtype]
    lengths = {0, 1, width - 1, width, width + 1, per_thread - 1, per_thread + 1, 1000}
    lengths |= {per_thread * 96 + d for d in (-width - 1, -1, 0, 1, width * 33 + 1)}
    for n in sorted(lengths):
        parts = rng.standard_normal((2, 2, n)) * 8
        a, b = (p[0] + 1j * p[1] if dt.kind == "c" else p[0] for p in parts)
        a, b = a.astype(dt), b.astype(dt)
        with np.errstate(all="ignore"):
            want = a + b  # numpy's (ml_dtypes': bfloat16 computed in float32, rounded once)
        for vec, runner in ((1, lib), (0, lib), (1, grid), (0, grid)):
            out = np.zeros(n + 1, dt)
            guard = out.view(np.uint8)[n * dt.itemsize :]
            guard[...] = 0x5A
            runner.run(out.ctypes.data, a.ctypes.data, b.ctypes.data, n, vec)
            label = f"{dtype} add of {n}, vec={vec}, {'3 x 32' if runner is grid else 1} threads"
            _same_bits(out[:n], want, label)
            assert (guard == 0x5A).all(), f"{label}: wrote past the end"


# -- reductions run by a block of threads -----------------------------------------------------
# The shims above run one thread; these run each block of a grid as blockDim.x threads
# (fibers of one host thread: a barrier for __syncthreads, warp shuffles through a slot
# per thread), so the block-level combines of the column layout (mode 1: 32 rows by 8
# groups of threads) and of rows read in vectors (mode 2) run as on a GPU, one block at
# a time.
BLOCK_SHIMS = (
    SHIMS.replace("static inline void __syncthreads() {}\n", "")
    .replace(
        "template <typename T>\n"
        "static inline T __shfl_down_sync(unsigned, T v, int) { return v; }"
        "  // one thread: unused\n",
        "",
    )
    .replace(
        "static ca_dim3 blockIdx = {0, 0, 0};  // y: a reduction's split, set by the caller\n"
        "static const ca_dim3 threadIdx = {0, 0, 0};\n"
        "static const ca_dim3 blockDim = {1, 1, 1}, gridDim = {1, 1, 1};\n",
        "",
    )
    + r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>
#include <ucontext.h>
static ca_dim3 blockIdx, blockDim, gridDim;
static ca_dim3 threadIdx;  // the running thread's (set as each fiber is switched in)
// A block's threads run as fibers of one host thread (ucontext), switched only at their
// barriers: host threads woken through a futex at every barrier of every block spent
// most of these tests' time, two-thirds of it in the kernel. The last of n to arrive
// releases the others and runs on; the rest wait, each until the generation it saw moves.
struct ca_barrier {
    int waiting = 0, gen = 0, n = 0;
    void wait();
};
struct ca_fiber {
    ucontext_t ctx;
    std::vector<char> stack;
    const ca_barrier* on = nullptr;  // the barrier it waits at (none: runnable)
    int gen = 0;                     // ...for as long as its generation is this
    bool done = false;
};
static ucontext_t ca_scheduler;
static std::vector<ca_fiber> ca_fibers;
static unsigned ca_current;
static const std::function<void()>* ca_body;
void ca_barrier::wait() {
    if (++waiting == n) {
        waiting = 0;
        gen++;
        return;
    }
    ca_fiber& f = ca_fibers[ca_current];
    f.on = this;
    f.gen = gen;
    swapcontext(&f.ctx, &ca_scheduler);
}
static void ca_fiber_main() {
    (*ca_body)();
    ca_fibers[ca_current].done = true;  // (then back to the scheduler: uc_link)
}
static ca_barrier block_barrier, warp_barrier[32];
static void __syncthreads() { block_barrier.wait(); }
static long long shfl_slot[1024];
template <typename T>
static T __shfl_down_sync(unsigned, T v, int d) {
    int t = (int)threadIdx.x, lane = t & 31;
    long long bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    shfl_slot[t] = bits;
    warp_barrier[t >> 5].wait();
    long long got = lane + d < 32 ? shfl_slot[t + d] : bits;
    warp_barrier[t >> 5].wait();
    T r;
    std::memcpy(&r, &got, sizeof(T));
    return r;
}
// One block: its bx fibers run in turn, each until it waits at a barrier or ends. A
// block whose every unfinished thread waits at a barrier nobody else reaches would hang
// on a GPU: it aborts here.
static void ca_run_block(unsigned bx) {
    for (unsigned t = 0; t < bx; t++) {
        ca_fiber& f = ca_fibers[t];
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack.data();
        f.ctx.uc_stack.ss_size = f.stack.size();
        f.ctx.uc_link = &ca_scheduler;
        makecontext(&f.ctx, ca_fiber_main, 0);
        f.on = nullptr;
        f.done = false;
    }
    for (unsigned left = bx; left;) {
        bool ran = false;
        for (unsigned t = 0; t < bx; t++) {
            ca_fiber& f = ca_fibers[t];
            if (f.done || (f.on != nullptr && f.on->gen == f.gen))
                continue;
            f.on = nullptr;
            ca_current = t;
            threadIdx = {t, 0, 0};
            swapcontext(&ca_scheduler, &f.ctx);
            ran = true;
            left -= f.done ? 1 : 0;
        }
        if (!ran) {
            std::fprintf(stderr, "ca_run_block: every thread left waits at a barrier\n");
            std::abort();
        }
    }
}
static void ca_run_grid(unsigned gx, unsigned gy, unsigned bx, const std::function<void()>& fn) {
    gridDim = {gx, gy, 1};
    blockDim = {bx, 1, 1};
    block_barrier = ca_barrier{};
    block_barrier.n = (int)bx;
    for (auto& w : warp_barrier) {
        w = ca_barrier{};
        w.n = 32;
    }
    ca_fibers.resize(bx);
    for (auto& f : ca_fibers)
        if (f.stack.empty())
            f.stack.resize(1 << 17);
    ca_body = &fn;
    for (unsigned y = 0; y < gy; y++)
        for (unsigned x = 0; x < gx; x++) {
            blockIdx = {x, y, 0};
            ca_run_block(bx);
        }
}
"""
)

BLOCK_REDUCE_CASES = [
    ("float32", "sum", "float32", "float32"),
    ("float32", "max", "float32", "float32"),
    ("float32", "min", "float32", "float32"),
    ("float32", "argmax", "float32", "int64"),
    ("bfloat16", "sum", "float32", "bfloat16"),
    ("complex64", "argmin", "complex64", "int64"),
]


@pytest.fixture(scope="module")
def block_reductions(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from cuasync._ops import reduce_codegen as rc
    from cuasync._ops.codegen import ctype

    parts = [BLOCK_SHIMS, rc.prelude()]
    for i, (dtype, op, acc, out) in enumerate(BLOCK_REDUCE_CASES):
        spec = rc.ReduceSpec(op, acc, out)
        parts.append(f"namespace n{i} {{\n{rc.body(('x', 0, dtype), spec, 1, 1)}\n}}")
        parts.append(f"namespace v{i} {{\n{rc.body(('x', 0, dtype), spec, 0, 1)}\n}}")
        arg = op in ("argmax", "argmin")
        parts.append(  # a whole array (no kept dimension: mode 2's kernel)
            f'extern "C" void s{i}(void* out, void* wsv, void* wsi, const void* x0, '
            "long long M, long long K, long long splits, long long chunk, int phase, int mode, "
            "long long xa, long long xb, unsigned gx, unsigned gy, unsigned bx) {\n"
            "    ca_run_grid(gx, gy, bx, [=] {\n"
            f"        v{i}::ca_reduce(({DTYPES[out].storage}*)out, ({ctype(acc)}*)wsv, "
            f"{'(long long*)wsi, ' if arg else ''}(const {DTYPES[dtype].storage}*)x0, "
            "M, K, splits, chunk, phase, mode, K, xb, 0);\n    });\n}"
        )
        parts.append(
            f'extern "C" void r{i}(void* out, void* wsv, void* wsi, const void* x0, '
            "long long M, long long K, long long splits, long long chunk, int phase, int mode, "
            "long long xa, long long xb, unsigned gx, unsigned gy, unsigned bx) {\n"
            "    ca_run_grid(gx, gy, bx, [=] {\n"
            f"        n{i}::ca_reduce(({DTYPES[out].storage}*)out, ({ctype(acc)}*)wsv, "
            f"{'(long long*)wsi, ' if arg else ''}(const {DTYPES[dtype].storage}*)x0, "
            "M, K, splits, chunk, phase, mode, M, K, 1, xa, xb, 0);\n    });\n}"
        )
    return _compiled(tmp_path_factory.mktemp("block_reductions"), "blocks", "\n".join(parts))


def _block_reduce(
    lib: Any, i: int, values: np.ndarray, mode: int, splits: int, block: int
) -> np.ndarray:
    """``values`` (M, K) reduced along K by case ``i``'s kernel in ``mode``: for mode 1
    laid out (K, M) (the kept axis contiguous), else rows of K padded to a multiple of 4
    elements (a vector of float32); ``splits`` partials a row, then phase 1."""
    _, _, acc, out = BLOCK_REDUCE_CASES[i]
    m, k = values.shape
    if mode == 1:
        x = np.ascontiguousarray(values.T)
        xa, xb, chunk = 1, m, -(-k // splits)
        grid = (1, splits)  # one block column: the rows loop over two tiles of 32
    else:
        pad = -(-k // 4) * 4
        x = np.zeros((m, pad), values.dtype)
        x[:, :k] = values
        xa, xb = pad, 1
        chunk = -(-k // splits)
        chunk = -(-chunk // 4) * 4 if mode == 2 else chunk
        grid = (m * splits, 1)
    assert -(-k // chunk) == splits
    result = np.zeros(m, SUPPORTED[out])
    wsv, wsi = np.zeros(m * splits, SUPPORTED[acc]), np.zeros(m * splits, np.int64)
    fn = getattr(lib, f"{'s' if mode == 2 else 'r'}{i}")
    fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_longlong] * 4 + [ctypes.c_int] * 2
    fn.argtypes += [ctypes.c_longlong] * 2 + [ctypes.c_uint] * 3
    pointers = (result.ctypes.data, wsv.ctypes.data, wsi.ctypes.data, x.ctypes.data)
    fn(*pointers, m, k, splits, chunk, 0, mode, xa, xb, *grid, block)
    if splits > 1:
        fn(*pointers, m, k, splits, chunk, 1, mode, xa, xb, grid[0] if mode == 1 else m, 1, block)
    return result


@pytest.mark.parametrize(
    ("mode", "shape", "splits", "block"),
    [
        (1, (40, 37), 3, 256),
        (1, (33, 9), 1, 256),
        (2, (1, 20003), 2, 256),
        (2, (1, 7), 1, 256),
        (0, (3, 2003), 2, 256),
        (0, (3, 300), 300, 32),  # phase 1: 8 partials a thread in flight, then the rest
        (2, (1, 1200), 300, 32),
    ],
)
def test_reduction_blocks_match_numpy(
    block_reductions: Any, mode: int, shape: Any, splits: int, block: int
) -> None:
    # The column layout's 32 x 8 threads (rows past M masked, groups past a split's end
    # empty, partials combined by groups in phase 1), and rows read in float32 vectors
    # (4 a load, 4 loads in flight, the elements past the last vector one a thread):
    # numpy's sums, NaN-propagating max/min, and first-index argmax/argmin.
    for i, (dtype, op, _acc, _out) in enumerate(BLOCK_REDUCE_CASES):
        if mode == 2 and SUPPORTED[dtype].kind != "f":
            continue  # (the padding above is for 4-element vectors; one row: no complex)
        values = _host_values(dtype, shape, op, 3 + i)
        got = _block_reduce(block_reductions, i, values, mode, splits, block)
        label = f"{op} of {dtype} {shape}, mode {mode}, {splits} splits"
        if op in ("argmax", "argmin"):
            np.testing.assert_array_equal(got, getattr(np, op)(values, axis=1), label)
        elif op in ("max", "min"):
            want = getattr(np, op)(values, axis=1)
            assert (np.isnan(got) == np.isnan(want)).all(), label
            np.testing.assert_array_equal(got[~np.isnan(want)], want[~np.isnan(want)], label)
        else:
            wide = values.astype(np.float64)
            want = wide.sum(axis=1)
            tol = 2.0**-7 if dtype == "bfloat16" else 1e-5
            err = np.abs(got.astype(np.float64) - want)
            assert (err <= tol * (np.abs(wide).sum(axis=1) + 1)).all(), (label, got, want)


# -- float32 reductions read in float4 (ca_cols4, ca_whole4), run by blocks of threads -------
FLOAT4_OPS = ("sum", "mean", "prod", "max", "min")


@pytest.fixture(scope="module")
def float4_reductions(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from cuasync._ops import reduce_codegen as rc

    parts = [BLOCK_SHIMS, rc.prelude()]
    for op in FLOAT4_OPS:
        parts.append(f"namespace o_{op} {{\n{rc.op4_struct(op)}\n}}")
        parts.append(
            f'extern "C" void cols_{op}(float* out, float* part, unsigned* count, '
            "const float* x, long long R, long long N, long long ld, long long rows, "
            "int splits) {\n"
            "    unsigned gx = (unsigned)((N / 4 + 31) / 32);\n"
            "    ca_run_grid(gx, (unsigned)splits, 256, [=] {\n"
            f"        ca_cols4<o_{op}::ca_op4>(out, part, count, x, R, N, ld, rows, splits, 0);\n"
            "    });\n}"
        )
        parts.append(
            f'extern "C" void whole_{op}(float* out, float* part, unsigned* count, '
            "const float* x, long long n, unsigned blocks) {\n"
            "    ca_run_grid(blocks, 1, 256, [=] {\n"
            f"        ca_whole4<o_{op}::ca_op4, {rc.WHOLE_LOADS}>(out, part, count, x, n, 0);\n"
            "    });\n}"
        )
    return _compiled(tmp_path_factory.mktemp("float4_reductions"), "float4", "\n".join(parts))


def _first_wins(op: str, values: np.ndarray) -> np.ndarray:
    """max/min along axis 0 in row order, the first of equal values (a -0.0 before a
    0.0) and the first NaN (its bits) kept, a NaN beating any number: the generic
    kernel's combine, sequentially."""
    best = values[0].copy()
    for row in values[1:]:
        with np.errstate(invalid="ignore"):
            better = row > best if op == "max" else row < best
        take = (better | np.isnan(row)) & ~np.isnan(best)
        best[take] = row[take]
    return best


def _float4_values(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Values with zeros of both signs, NaNs of both signs and payloads, and infinities."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(shape).astype(np.float32)
    flat = v.reshape(-1)
    if flat.size >= 64:
        picks = rng.choice(flat.size, 12, replace=False)
        bits = np.array([0x7FC00001, 0xFFC00002, 0x7FC00003], np.uint32).view(np.float32)
        flat[picks[:3]] = bits
        flat[picks[3:6]] = -0.0
        flat[picks[6:9]] = 0.0
        flat[picks[9]], flat[picks[10]] = np.inf, -np.inf
    return v


def _check_float4(op: str, got: np.ndarray, values: np.ndarray, label: str) -> None:
    if op in ("max", "min"):
        want = _first_wins(op, values)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), label)
        return
    with np.errstate(all="ignore"):
        wide = values.astype(np.float64)
        want = {"sum": wide.sum(0), "mean": wide.sum(0) / len(values), "prod": wide.prod(0)}[op]
        scale = np.abs(wide).sum(0) / (max(len(values), 1) if op == "mean" else 1)
        if op == "prod":
            scale = np.abs(want)
        ok = np.isclose(got, want, rtol=1e-5, atol=0, equal_nan=True) | (
            np.abs(got - want) <= 1e-5 * (scale + 1)
        )
    assert ok.all(), (label, got, want)


@pytest.mark.parametrize(
    ("rows", "cols", "pad", "splits"),
    [
        (40, 132, 0, 3),  # 2 strips, the second 1 of 32 threads; 3 partials a column
        (33, 260, 4, 4),  # rows 264 floats apart (a view); splits of 9 rows, the last 6
        (1, 128, 0, 1),  # one row: stored by the block, no partials
        (0, 128, 0, 1),  # no rows: the identity (sum, prod), NaN (mean: 0 / 0)
        (200, 8, 0, 8),  # one strip, 2 of its 32 threads with columns
    ],
)
def test_first_axis_float4_kernel_matches_numpy(
    float4_reductions: Any, rows: int, cols: int, pad: int, splits: int
) -> None:
    # ca_cols4's warps each reduce a contiguous part of a split, in order, and the last
    # block of a strip combines the partials in split order: max/min keep the first NaN
    # (its payload) and the first of -0.0/0.0, exactly; sums within float32 rounding.
    # The strip counters are back to zero afterwards (the next launch may reuse them).
    for i, op in enumerate(FLOAT4_OPS):
        if rows == 0 and op in ("max", "min"):
            continue
        values = _float4_values((rows, cols), 40 + i)
        x = np.zeros((rows, cols + pad), np.float32)
        x[:, :cols] = values
        per = -(-rows // splits) if rows else 1
        assert rows == 0 or -(-rows // per) == splits
        strips = -(-cols // 128)
        out = np.full(cols, 7.0, np.float32)
        part = np.zeros(max(splits * cols, 1), np.float32)
        count = np.zeros(strips, np.uint32)
        fn = getattr(float4_reductions, f"cols_{op}")
        fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_longlong] * 4 + [ctypes.c_int]
        ptrs = (out.ctypes.data, part.ctypes.data, count.ctypes.data, x.ctypes.data)
        fn(*ptrs, rows, cols, cols + pad, per, splits)
        label = f"{op} over axis 0 of ({rows}, {cols}), rows {cols + pad} apart, {splits} splits"
        _check_float4(op, out, values, label)
        assert (count == 0).all(), label


@pytest.mark.parametrize(("n", "blocks"), [(4 * 256 * 8 * 3 + 7, 3), (5, 1), (70001, 16)])
def test_whole_array_float4_kernel_matches_numpy(
    float4_reductions: Any, n: int, blocks: int
) -> None:
    # ca_whole4: 8 float4 loads in flight a thread, the grid striding, the last < 4
    # elements by block 0, the last block to finish combining the block results (and
    # setting its counter back to zero). max/min: the value, a NaN anywhere wins.
    for i, op in enumerate(("max", "min")):
        values = _float4_values((n,), 70 + i)
        for with_nan in (True, False):
            v = values.copy() if with_nan else values[~np.isnan(values)].copy()
            out = np.zeros(1, np.float32)
            part = np.zeros(blocks, np.float32)
            count = np.zeros(1, np.uint32)
            fn = getattr(float4_reductions, f"whole_{op}")
            fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_longlong, ctypes.c_uint]
            ptrs = (out.ctypes.data, part.ctypes.data, count.ctypes.data, v.ctypes.data)
            fn(*ptrs, v.size, blocks)
            want = getattr(np, op)(v)
            label = f"{op} of {v.size}, {blocks} blocks"
            assert np.isnan(out[0]) == np.isnan(want), label
            if not np.isnan(want):
                assert out[0] == want, label
            assert count[0] == 0, label
