"""The numpy twins of the built-in kernels: what the emulator runs for each of them.

Each twin computes what its CUDA kernel (``cuasync/kernels/*.cu``) computes, to the bit
where the kernel is exact, and writes it into the same output. :func:`philox4x32_10`,
:func:`uniform_twin` and :func:`normal_twin` are the random kernels' arithmetic on their
own, for tests that check the kernels against them.

>>> u = uniform_twin(4, 42, 0, "float32")    # the numbers of cuasync.rand((4,), seed=42)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._dtypes import DTYPES, dtype_info, dtype_name
from ..errors import ArgumentError

__all__ = [
    "arange_twin",
    "convert_twin",
    "fill_twin",
    "float32_odd",
    "host_cast",
    "linspace_twin",
    "normal_twin",
    "philox4x32_10",
    "rand_twin",
    "randn_twin",
    "uniform_twin",
]

_MASK32 = np.uint64(0xFFFFFFFF)
_PHILOX_M0 = np.uint64(0xD2511F53)
_PHILOX_M1 = np.uint64(0xCD9E8D57)
_PHILOX_W0 = np.uint64(0x9E3779B9)
_PHILOX_W1 = np.uint64(0xBB67AE85)


def philox4x32_10(counter: Any, key: Sequence[int]) -> np.ndarray:
    """Philox4x32-10 of ``counter`` (``(..., 4)`` uint32 words) under ``key`` (2 words).

    The numpy twin of the kernels' generator, vectorized over the leading axes; returns
    ``(..., 4)`` uint32.

    >>> [hex(w) for w in philox4x32_10(np.zeros(4, np.uint32), (0, 0))]  # Random123 KAT
    ['0x6627e8d5', '0xe169c58d', '0xbc57ac4c', '0x9b00dbd8']
    """
    words = np.asarray(counter, dtype=np.uint32)
    if words.shape[-1:] != (4,):
        raise ArgumentError(f"counter must have 4 words in its last axis, got {words.shape}")
    c0, c1, c2, c3 = (words[..., j].astype(np.uint64) for j in range(4))
    k0, k1 = (np.uint64(int(k) & 0xFFFFFFFF) for k in key)
    for round_ in range(10):
        if round_:
            k0 = (k0 + _PHILOX_W0) & _MASK32
            k1 = (k1 + _PHILOX_W1) & _MASK32
        p0 = c0 * _PHILOX_M0  # 32 x 32 -> 64 bits: exact in uint64
        p1 = c2 * _PHILOX_M1
        hi0, lo0 = p0 >> np.uint64(32), p0 & _MASK32
        hi1, lo1 = p1 >> np.uint64(32), p1 & _MASK32
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def _philox_stream(counters: int, k0: int, k1: int) -> np.ndarray:
    """Philox outputs of counters ``0 .. counters - 1`` as a ``(counters, 4)`` array."""
    c = np.arange(counters, dtype=np.uint64)
    words = np.zeros((counters, 4), np.uint32)
    words[:, 0] = (c & _MASK32).astype(np.uint32)
    words[:, 1] = (c >> np.uint64(32)).astype(np.uint32)
    return philox4x32_10(words, (k0, k1))


def _join(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return (hi.astype(np.uint64) << np.uint64(32)) | lo.astype(np.uint64)


def uniform_twin(n: int, k0: int, k1: int, dtype_name_: str) -> np.ndarray:
    """The float64 values (exact in the dtype) ``ca_rand`` produces."""
    if dtype_name_ == "float64":
        r = _philox_stream((n + 1) // 2, k0, k1).reshape(-1, 2)
        return (_join(r[:, 0], r[:, 1]) >> np.uint64(11)).astype(np.float64)[:n] * 2.0**-53
    p = DTYPES[dtype_name_].significand
    x = _philox_stream((n + 3) // 4, k0, k1).reshape(-1)[:n]
    return (x >> np.uint32(32 - p)).astype(np.float64) * 2.0**-p


def normal_twin(n: int, k0: int, k1: int, mean: float, std: float) -> np.ndarray:
    """The float64 values ``ca_randn`` rounds to the dtype."""
    r = _philox_stream((n + 1) // 2, k0, k1)
    u1 = ((_join(r[:, 0], r[:, 1]) >> np.uint64(11)) + np.uint64(1)).astype(np.float64)
    u1 *= 2.0**-53
    u2 = (_join(r[:, 2], r[:, 3]) >> np.uint64(11)).astype(np.float64) * 2.0**-53
    radius = np.sqrt(-2.0 * np.log(u1))
    theta = 6.283185307179586 * u2
    z = np.stack([radius * np.cos(theta), radius * np.sin(theta)], axis=-1).reshape(-1)[:n]
    return mean + std * z


def host_cast(values: np.ndarray, dt: np.dtype[Any]) -> np.ndarray:
    """``values.astype(dt)`` with numpy's rules, without warnings (worker threads): the
    host's conversions (the emulator's kernels, scalars given to ``full`` and kernels).

    bfloat16 and FP8 results are rounded once from the value itself, as ml_dtypes 0.7
    does and the kernels do, whichever ml_dtypes is installed (older ones went through
    float32 and could round twice).
    """
    kind = dtype_info(dt).kind
    with np.errstate(all="ignore"):
        if values.dtype.kind == "c" and kind != "c":
            if kind == "b":
                return values != 0
            values = values.real
        if dtype_name(dt) in _NARROW and _wider_than_float32(values.dtype):
            values = float32_odd(values)
        return values.astype(dt)


#: Destinations with 8 significant bits or fewer: reached through :func:`float32_odd`.
_NARROW = frozenset({"bfloat16", "float8_e4m3fn", "float8_e5m2"})


def _wider_than_float32(src: np.dtype[Any]) -> bool:
    """Whether converting ``src`` to float32 can round (float64, 32- and 64-bit integers)."""
    return (src.kind == "f" and src.itemsize > 4) or (src.kind in "iu" and src.itemsize >= 4)


def float32_odd(values: np.ndarray) -> np.ndarray:
    """``values`` (real floats or integers) as float32 rounded to odd: the float32 on the
    side of zero, with its last bit set where that is inexact.

    Rounding the result to nearest even at 22 significant bits or fewer gives the nearest
    even rounding of the value itself (what the kernels' ``ca_to_f32_odd`` does), so no
    value is rounded twice on its way to bfloat16 or FP8.

    >>> float32_odd(np.array([1 + 2.0**-4 + 2.0**-40])).view(np.uint32) & 1
    array([1], dtype=uint32)
    """
    values = np.asarray(values)
    if values.dtype.kind in "iu":
        big = np.abs(values.astype(np.float64)) > 2.0**53
        if big.any():  # beyond float64's integers: exactly, one by one (rare)
            out = float32_odd(np.where(big, 0, values).astype(np.float64))
            out[big] = [_int_float32_odd(int(v)) for v in values[big]]
            return out
        values = values.astype(np.float64)  # exact
    with np.errstate(all="ignore"):
        nearest = values.astype(np.float32)
        wide = nearest.astype(values.dtype)
        inexact = (wide != values) & ~np.isnan(values)
        bits = nearest.view(np.uint32).copy()
        even = inexact & (bits & np.uint32(1) == 0)
        # the other float32 bracketing the value: one step towards it in magnitude
        away = np.abs(wide) > np.abs(values)
        bits[even & away] -= np.uint32(1)
        bits[even & ~away] += np.uint32(1)
    return bits.view(np.float32).reshape(values.shape)


def _int_float32_odd(x: int) -> np.float32:
    """An integer as float32 rounded to odd, exactly (any size)."""
    a = abs(x)
    shift = max(a.bit_length() - 24, 0)
    q = a >> shift
    if a & ((1 << shift) - 1):
        q |= 1
    return np.float32(math.copysign(float(q << shift), x))


def _store(out: np.ndarray, values: np.ndarray, dt: np.dtype[Any]) -> None:
    """Write ``values`` cast to ``dt`` into ``out`` (which may be a bit view of ``dt``)."""
    out[...] = host_cast(values, dt).view(out.dtype).reshape(out.shape)


def fill_twin(out: np.ndarray, *args: Any) -> None:
    """``ca_fill``: every element of ``out`` gets the bits (lo, hi), its last two arguments."""
    lo, hi = int(args[-2]), int(args[-1])
    raw = (lo | hi << 64).to_bytes(16, "little")[: out.dtype.itemsize]
    out[...] = np.frombuffer(raw, dtype=out.dtype)[0]


def linspace_twin(dt: np.dtype[Any]) -> Callable[..., None]:
    """``ca_linspace`` storing ``dt``."""

    def twin(
        out: np.ndarray,
        n: Any,
        start: Any,
        stop: Any,
        delta: Any,
        step: Any,
        div: Any,
        floor_ints: Any,
    ) -> None:
        y = np.arange(int(n), dtype=np.float64)
        if div > 0:
            if step == 0.0:
                y /= float(div)
                y *= float(delta)
            else:
                y *= float(step)
        else:
            y *= float(delta)
        y += float(start)
        if 0 < div < n:  # endpoint: the last element is stop
            y[-1] = float(stop)
        if floor_ints:
            np.floor(y, out=y)
        _store(out, y, dt)

    return twin


def arange_twin(dt: np.dtype[Any]) -> Callable[..., None]:
    """``ca_arange`` storing ``dt``: numpy's fill arithmetic for the dtype."""
    code = dtype_info(dt).code

    def twin(out: np.ndarray, n: Any, i0: Any, i1: Any, f0: Any, f1: Any) -> None:
        i = np.arange(int(n), dtype=np.int64)
        y: np.ndarray
        with np.errstate(all="ignore"):
            if code <= 8:  # bool and integers: 64-bit, wrapping
                a, b = (np.uint64(int(v) & 0xFFFFFFFFFFFFFFFF) for v in (i0, i1))
                y = a + i.astype(np.uint64) * (b - a)
                if code != 8:
                    y = y.view(np.int64)
            else:
                # float64 and complex128 in double; the others in float
                t: Any = np.float64 if code in (12, 14) else np.float32
                first, second = t(f0), t(f1)
                y = first + i.astype(t) * (second - first)
                y[:2] = [first, second][: y.size]
        _store(out, y, dt)

    return twin


def convert_twin(dt: np.dtype[Any]) -> Callable[..., None]:
    """``ca_convert`` storing ``dt``."""

    def twin(out: np.ndarray, src: np.ndarray, *_: Any) -> None:
        _store(out, src, dt)

    return twin


def overflows(src: np.ndarray, stored: np.ndarray, dt: np.dtype[Any]) -> bool:
    """``ca_overflows`` (kernels/cast.cuh) over arrays: whether casting ``src`` to ``dt``
    (giving ``stored``) lost a value: an integer, or a float truncated toward zero,
    outside an integer ``dt``'s range, NaN or infinity to an integer, or a finite value
    that became infinite or NaN. bool never overflows; complex sources: the real part.

    >>> overflows(np.array([1e10]), np.array([0], "int8"), np.dtype("int8"))
    True
    """
    kind, src_kind = dtype_info(dt).kind, dtype_info(src.dtype).kind
    if kind == "b" or src.size == 0:
        return False
    if kind in "iu":
        info = np.iinfo(dt)
        if src_kind in "biu":
            wide = src.astype(np.int64) if src_kind != "u" else src
            return bool(np.any(wide > info.max) or (src_kind != "u" and np.any(wide < info.min)))
        re = (src.real if src_kind == "c" else src).astype(np.float64)
        lo, hi = float(info.min), float(info.max) + 1.0
        with np.errstate(invalid="ignore"):
            inside = (re >= lo) & (re < hi) if info.min == -(2**63) else (re > lo - 1) & (re < hi)
        return bool(not np.all(inside))
    if src_kind in "biu":
        return bool(not np.all(np.isfinite(_as_wide(stored))))
    return bool(np.any(np.isfinite(_as_wide(src)) & ~np.isfinite(_as_wide(stored))))


def _as_wide(a: np.ndarray) -> np.ndarray:
    """float64 or complex128 values of any float or complex array (bfloat16, FP8 too)."""
    return a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)


def convert_checked_twin(dt: np.dtype[Any]) -> Callable[..., None]:
    """``ca_convert_checked`` storing ``dt``: ``ca_convert``, and the flag set to 1 where
    a value overflows (:func:`overflows`)."""

    def twin(out: np.ndarray, src: np.ndarray, code: Any, flag: np.ndarray, *_: Any) -> None:
        _store(out, src, dt)
        if overflows(src, out.view(dt), dt):
            flag[...] = 1

    return twin


def rand_twin(dt: np.dtype[Any]) -> Callable[..., None]:
    """``ca_rand`` storing ``dt``."""

    def twin(out: np.ndarray, n: Any, k0: Any, k1: Any) -> None:
        _store(out, uniform_twin(int(n), int(k0), int(k1), dtype_name(dt)), dt)

    return twin


def randn_twin(dt: np.dtype[Any]) -> Callable[..., None]:
    """``ca_randn`` storing ``dt``."""

    def twin(out: np.ndarray, n: Any, k0: Any, k1: Any, mean: Any, std: Any) -> None:
        _store(out, normal_twin(int(n), int(k0), int(k1), float(mean), float(std)), dt)

    return twin
