"""FP8 (float8_e4m3fn, float8_e5m2): storage, transfers, creation, conversion, copies and
views on both backends; arithmetic and reductions refuse them with a DTypeError.

Conversions must give ml_dtypes' (0.7) bits: round to nearest even, once (float64 and wide
integers are not rounded to float32 first),
float8_e4m3fn making an overflow or an infinity NaN (it does not saturate), float8_e5m2
rounding to infinity. (tests/kernels/test_kernels_on_host.py runs the CUDA conversions themselves
against ml_dtypes for every float32 around every rounding decision.)
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from helpers import ON_EMULATOR

import cuasync
from cuasync._dtypes import DTYPES, STORAGE_ONLY, SUPPORTED, as_dtype
from cuasync.errors import ArgumentError, DTypeError, LaunchError

ml_dtypes = pytest.importorskip("ml_dtypes")

FP8 = ["float8_e4m3fn", "float8_e5m2"]
pytestmark = pytest.mark.anyio


def every_value(name: str) -> np.ndarray:
    """All 256 bit patterns of an FP8 dtype."""
    return np.arange(256, dtype=np.uint8).view(SUPPORTED[name])


def same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype)
    np.testing.assert_array_equal(
        np.ascontiguousarray(got).view(np.uint8), np.ascontiguousarray(want).view(np.uint8)
    )


def test_the_dtype_table_names_them_after_the_others() -> None:
    assert [DTYPES[n].code for n in FP8] == [15, 16]
    assert max(d.code for n, d in DTYPES.items() if n not in FP8) == 14
    assert tuple(FP8) == STORAGE_ONLY
    for name in FP8:
        dt = SUPPORTED[name]
        assert dt == np.dtype(getattr(ml_dtypes, name)) and dt.itemsize == 1
        assert as_dtype(name) is dt and as_dtype(getattr(ml_dtypes, name)) == dt
        assert DTYPES[name].storage == "unsigned char"
    assert DTYPES["float8_e4m3fn"].ctypes == ("__nv_fp8_e4m3",)
    assert DTYPES["float8_e5m2"].ctypes == ("__nv_fp8_e5m2",)


@pytest.mark.parametrize("name", FP8)
async def test_every_bit_pattern_survives_upload_views_copies_and_download(
    name: str, anyio_backend: str
) -> None:
    a = every_value(name).reshape(16, 16)
    t = await cuasync.from_host(a)
    assert t.dtype == SUPPORTED[name] and t.itemsize == 1
    same_bits(await t.to_host(), a)
    same_bits(await t.dup().to_host(), a)  # a copy moves bits
    same_bits(await t.T.to_host(), a.T)  # a strided view, gathered
    same_bits(await t[::-1, ::3].dup().to_host(), a[::-1, ::3])
    same_bits(await cuasync.flip(t, 1).to_host(), a[:, ::-1])
    same_bits(await t.reshape((4, 64)).to_host(), a.reshape(4, 64))
    same_bits(await t.reinterpret("uint8").to_host(), a.view(np.uint8))
    same_bits(await cuasync.concatenate([t, t[:2]]).to_host(), np.concatenate([a, a[:2]]))
    same_bits(await cuasync.stack([t[0], t[1]]).to_host(), np.stack([a[0], a[1]]))
    same_bits(await cuasync.triu(t).to_host(), np.triu(a))
    idx = await cuasync.from_host(np.array([3, -1, 0], np.int64))
    same_bits(await cuasync.take(t, idx, axis=0).to_host(), a[[3, -1, 0]])
    dst = await cuasync.empty((16, 16), name)
    await cuasync.memcpy(dst, t)
    same_bits(await dst.to_host(), a)


@pytest.mark.parametrize("name", FP8)
async def test_zeros_ones_full_and_fill(name: str, anyio_backend: str) -> None:
    dt = SUPPORTED[name]
    same_bits(await cuasync.zeros((2, 3), name).to_host(), np.zeros((2, 3), dt))
    same_bits(await cuasync.ones((5,), name).to_host(), np.ones(5, dt))
    for value in (-2.5, 448.0, 0.001953125, math.nan, -0.0, 3):
        same_bits(await cuasync.full((2, 2), value, name).to_host(), np.full((2, 2), value, dt))
    t = await cuasync.zeros((4, 6), name)
    await cuasync.fill(t[:, ::2], 1.5)  # a strided view
    want = np.zeros((4, 6), dt)
    want[:, ::2] = 1.5
    same_bits(await t.to_host(), want)
    same_bits(await cuasync.eye(3, dtype=name).to_host(), np.eye(3, dtype=dt))
    same_bits(await cuasync.ones_like(t).to_host(), np.ones((4, 6), dt))


def test_values_fp8_cannot_hold_are_refused_when_built() -> None:
    with pytest.raises(ArgumentError, match="overflows float8_e4m3fn"):
        cuasync.full(2, 1000.0, "float8_e4m3fn")  # ml_dtypes would store NaN
    with pytest.raises(ArgumentError, match="overflows float8_e4m3fn"):
        cuasync.full(2, 465, "float8_e4m3fn")
    with pytest.raises(ArgumentError, match="no infinity"):
        cuasync.full(2, -math.inf, "float8_e4m3fn")
    with pytest.raises(ArgumentError, match="overflows float8_e5m2"):
        cuasync.full(2, 1e5, "float8_e5m2")
    # representable: the tie at 464 rounds to 448; e5m2 has infinities
    same_bits(
        cuasync.full(1, 464, "float8_e4m3fn").sync().to_host().sync(),
        np.full(1, 448.0, SUPPORTED["float8_e4m3fn"]),
    )
    assert np.isinf(cuasync.full(1, math.inf, "float8_e5m2").sync().to_host().sync()).all()


@pytest.mark.parametrize("name", FP8)
async def test_astype_to_every_dtype_matches_ml_dtypes(name: str, anyio_backend: str) -> None:
    a = every_value(name)
    t = await cuasync.from_host(a)
    as_float = a.astype(np.float64)
    for dst in SUPPORTED:
        dt = SUPPORTED[dst]
        with np.errstate(all="ignore"):
            want = a.astype(dt)
        got = await t.astype(dst).to_host()
        assert got.dtype == dt
        if dt.kind in "iu":  # NaN, inf and out-of-range: undefined, as numpy's float casts
            info = np.iinfo(dt)
            keep = np.isfinite(as_float) & (as_float >= info.min) & (as_float < info.max + 1.0)
            got, want = got[keep], want[keep]
        if dt.kind in "fc" and dst not in FP8:  # NaN payloads may differ across float casts
            np.testing.assert_array_equal(got, want)
        else:
            same_bits(got, want)


EDGES = [
    0.0, -0.0, 1.0, -1.5, 448.0, 449.0, 464.0, 464.5, 465.0, 480.0, 57344.0, 61439.0, 61440.0,
    1e9, math.inf, -math.inf, math.nan, 2.0**-9, 2.0**-10, 3 * 2.0**-10, 2.0**-16, 2.0**-17,
    3 * 2.0**-17, 0.1, -0.3, 7.5, 9.0, 1e-30, 1 + 2.0**-4, 1 + 3 * 2.0**-4, 1 + 2.0**-3,
]  # fmt: skip


@pytest.mark.parametrize("name", FP8)
async def test_every_dtype_converts_to_fp8_like_ml_dtypes(name: str, anyio_backend: str) -> None:
    dt8 = SUPPORTED[name]
    for src in SUPPORTED:
        dt = SUPPORTED[src]
        if dt.kind in "iu":
            info = np.iinfo(dt)
            a = np.array(
                [
                    v
                    for v in (0, 1, 7, -9, 100, 127, 448, 465, -600, 61440, 70000, info.max)
                    if info.min <= v <= info.max
                ],
                dt,
            )
        elif dt.kind == "b":
            a = np.array([True, False])
        elif dt.kind == "c":
            a = (np.array(EDGES) - 1j).astype(dt)
        else:
            with np.errstate(all="ignore"):
                a = np.array(EDGES, np.float64).astype(dt)
        with np.errstate(all="ignore"):
            want = a.astype(dt8)
        same_bits(await (await cuasync.from_host(a)).astype(name).to_host(), want)


def test_e4m3fn_does_not_saturate_and_e5m2_overflows_to_inf() -> None:
    x = cuasync.from_host(
        np.array([448.0, 464.0, 465.0, 1e6, -math.inf, math.nan], np.float32)
    ).sync()
    e4 = x.astype("float8_e4m3fn").sync().to_host().sync()
    assert list(e4.view(np.uint8)) == [0x7E, 0x7E, 0x7F, 0x7F, 0xFF, 0x7F]  # 448, 448, NaN...
    e5 = x.astype("float8_e5m2").sync().to_host().sync()
    assert list(e5.view(np.uint8)) == [0x5F, 0x5F, 0x5F, 0x7C, 0xFC, 0x7E]
    d = cuasync.from_host(np.array([1 + 2.0**-4 + 2.0**-40], np.float64)).sync()
    # rounded once, as ml_dtypes 0.7: just past the tie between 1 and 1.125, so up (through
    # float32 it would land on the tie, 1 + 2**-4, and round to even)
    assert d.astype("float8_e4m3fn").sync().to_host().sync()[0] == 1.125


@pytest.mark.parametrize("name", ["bfloat16", *FP8])
@pytest.mark.parametrize("src", ["float64", "int64", "uint64", "int32"])
def test_wide_sources_round_once_to_the_nearest_value(name: str, src: str) -> None:
    """The exact nearest value (ties to even), found here with fractions: whichever
    ml_dtypes is installed, on both backends."""
    dt, wide = SUPPORTED[name], np.dtype(src)
    bits = np.arange(256 if dt.itemsize == 1 else 65536, dtype=f"u{dt.itemsize}")
    with np.errstate(invalid="ignore"):  # the NaN patterns
        grid = bits.view(dt).astype(np.float64)
    order = np.argsort(grid, kind="stable")
    finite = order[np.isfinite(grid[order])]
    finite = finite[np.r_[True, np.diff(grid[finite]) != 0]]  # +0 only
    values, codes = grid[finite], bits[finite]
    rng = np.random.default_rng(7)
    if wide.kind == "f":
        mids = (values[1:] + values[:-1]) / 2
        if mids.size > 2000:  # bfloat16: a sample of its ties
            mids = rng.choice(mids, 2000, replace=False)
        xs = np.concatenate([mids * (1 + 2.0**-40), mids * (1 - 2.0**-40), mids])
    else:
        lo, hi = (0, 2**63) if wide.kind == "u" else (-(2**62), 2**62)
        hi = min(hi, np.iinfo(wide).max)
        lo = max(lo, np.iinfo(wide).min)
        ties = [(int(a) + int(b)) // 2 for a, b in itertools.pairwise(values) if a == int(a)]
        near = [m + d for m in ties for d in (-1, 0, 1) if lo <= m + d <= hi]
        xs = np.array(near + [int(v) for v in rng.integers(lo, hi, 300, dtype=np.int64)])
    xs = xs.astype(wide)
    got = cuasync.from_host(xs).sync().astype(name).sync().to_host().sync()
    want = []
    for x in xs.tolist():
        i = int(np.searchsorted(values, float(x)))  # float(x): only picks the bracket
        cands = [j for j in (i - 1, i, i + 1) if 0 <= j < len(values)]
        best = min(
            cands, key=lambda j: (abs(Fraction(x) - Fraction(float(values[j]))), int(codes[j]) & 1)
        )
        code = int(codes[best])
        if values[best] == 0 and x < 0:
            code |= 1 << (8 * dt.itemsize - 1)  # -0.0
        too_far = abs(Fraction(x)) >= _overflow_threshold(name)
        want.append(-1 if too_far else code)
    got_bits = got.view(f"u{dt.itemsize}").astype(np.int64)
    keep = np.array(want) >= 0
    np.testing.assert_array_equal(got_bits[keep], np.array(want)[keep])


def _overflow_threshold(name: str) -> Fraction:
    """The tie between the largest value and the first one past it (NaN or infinity):
    magnitudes from here on are left out of the comparison."""
    largest = {"bfloat16": (2 - 2**-7) * 2**127, "float8_e4m3fn": 448, "float8_e5m2": 57344}
    ulp = {"bfloat16": 2.0**120, "float8_e4m3fn": 32, "float8_e5m2": 8192}
    return Fraction(largest[name]) + Fraction(ulp[name]) / 2


@pytest.mark.parametrize("name", FP8)
def test_arithmetic_and_reductions_refuse_fp8_and_say_to_convert(name: str) -> None:
    t = cuasync.zeros((4, 4), name).sync()
    f = cuasync.zeros((4, 4)).sync()
    for build in (
        lambda: t + 1.0,
        lambda: f * t,
        lambda: cuasync.exp(t),
        lambda: cuasync.where(f, t, f),
        lambda: cuasync.sum(t),
        lambda: cuasync.max(t, axis=0),
        lambda: cuasync.argmax(t),
        lambda: cuasync.mean(t),
        lambda: cuasync.vdot(t, t),
        lambda: cuasync.linalg.norm(t),
    ):
        with pytest.raises(DTypeError, match=rf"{name}, a storage-only dtype.*astype\('float32'\)"):
            build()
    with pytest.raises(DTypeError, match="convert it first"):
        cuasync.matmul(t, t)
    with pytest.raises(DTypeError, match=r"astype\('float8"):
        cuasync.rand((2,), dtype=name)
    with pytest.raises(DTypeError, match=r"astype\('float8"):
        cuasync.randn((2,), dtype=name)
    with pytest.raises(DTypeError, match=r"storage-only"):
        cuasync.sum(f, dtype=name)
    # the documented way: compute in float32, store FP8
    got = ((t.astype("float32") + 1.5).astype(name)).sync().to_host().sync()
    same_bits(got, np.full((4, 4), 1.5, SUPPORTED[name]))


FP8_KERNEL = r"""
// by layout, as cuda_fp8.h defines them (no CUDA headers on NVRTC's search path here)
struct __nv_fp8_e4m3 { unsigned char __x; };
struct __nv_fp8_e5m2 { unsigned char __x; };
extern "C" __global__ void scale(__nv_fp8_e4m3* out, const __nv_fp8_e5m2* x, __nv_fp8_e4m3 s) {
    out[threadIdx.x].__x = (unsigned char)(x[threadIdx.x].__x ^ s.__x);
}
"""


def test_kernel_signatures_name_the_fp8_types() -> None:
    from cuasync._backends._params import ParamBlock

    seen: list[Any] = []

    def twin(out: np.ndarray, x: np.ndarray, s: Any) -> None:
        seen.append((out.dtype, x.dtype, s))
        out[...] = (x.view(np.uint8) ^ np.asarray(s).view(np.uint8)).view(out.dtype)

    k = cuasync.Kernel(FP8_KERNEL, "scale", emulate=twin)
    assert [p.dtype for p in k.params] == [
        SUPPORTED[n] for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fn")
    ]
    out = cuasync.zeros(4, "float8_e4m3fn").sync()
    x = cuasync.full(4, 2.0, "float8_e5m2").sync()
    with pytest.raises(LaunchError, match="float8_e5m2"):
        k[1, 4](out, cuasync.zeros(4).sync(), 1.0)  # a float32 tensor for an e5m2 pointer
    with pytest.raises(LaunchError, match="no infinity"):
        k[1, 4](out, x, math.inf)
    with pytest.raises(LaunchError, match="does not fit in float8_e4m3fn"):
        k[1, 4](out, x, 500.0)
    k[1, 4](out, x, 1.0).sync()
    want = (np.full(4, 2.0, SUPPORTED["float8_e5m2"]).view(np.uint8) ^ 0x38).view(
        SUPPORTED["float8_e4m3fn"]
    )
    if ON_EMULATOR:
        assert seen[-1][:2] == (SUPPORTED["float8_e4m3fn"], SUPPORTED["float8_e5m2"])
    same_bits(out.to_host().sync(), want)
    # on a GPU the scalar travels as its bits, ml_dtypes' rounding: 460 -> 448 (0x7e)
    layout = ParamBlock(k.params)
    layout.pack([out.ptr, x.ptr, k._convert((out, x, 460.0))[0][2]])
    raw = bytes(layout.buffer)
    slot = int.from_bytes(raw[16:24], "little") - layout.address
    assert raw[slot] == 0x7E


def test_dlpack_codes_and_cai_refusal() -> None:
    from cuasync._interop.dlpack import _dtype_code

    for name, code in (("float8_e4m3fn", 10), ("float8_e5m2", 12)):
        t = cuasync.zeros(2, name).sync()
        assert _dtype_code(t) == (code, 8)  # DLPack 1.1's kDLFloat8_e4m3fn, kDLFloat8_e5m2
        with pytest.raises(DTypeError, match=r"reinterpret\('uint8'\)"):
            _ = t.__cuda_array_interface__
