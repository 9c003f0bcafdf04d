"""Tensor creation: ``ones``, ``full``, ``fill``, ``arange``, ``linspace``, ``eye``,
``eye_rect``, ``convert``, ``rand`` and ``randn`` as lazy ops.

Each is a built-in CUDA C++ kernel compiled with NVRTC (one template instantiation per
dtype, chosen by a name expression such as ``"ca_convert<float, 11>"``) with a numpy twin
that runs it on the emulator backend. Arguments are checked when the op is built, so a
bad one raises a typed error and enqueues nothing.

>>> x = await cuasync.arange(8)                       # 0, 1, ..., 7 as float32
>>> h = await cuasync.convert(x, "float16")
>>> noise = await cuasync.randn((4, 4), seed=7)      # the same numbers on every backend
"""

from __future__ import annotations

import math
import secrets
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._backends import get_backend
from ._copies import _device_arg, new_tensor
from ._core.context import ExecutionContext
from ._core.device import Device
from ._core.op import DeviceOp, device_op
from ._core.output import Output
from ._dtypes import SUPPORTED, as_dtype, dtype_name
from ._kernel import Kernel
from ._tensor import Shape, Tensor, check_shape
from .errors import ArgumentError, DTypeError, ShapeError

__all__ = [
    "arange",
    "convert",
    "eye",
    "eye_rect",
    "fill",
    "full",
    "linspace",
    "ones",
    "philox4x32_10",
    "rand",
    "randn",
]

# The dtype codes shared with the CUDA source (its K template argument and src_code).
_CODES: dict[str, int] = {
    "bool": 0,
    "int8": 1,
    "int16": 2,
    "int32": 3,
    "int64": 4,
    "uint8": 5,
    "uint16": 6,
    "uint32": 7,
    "uint64": 8,
    "float16": 9,
    "bfloat16": 10,
    "float32": 11,
    "float64": 12,
    "complex64": 13,
    "complex128": 14,
}

# The C type a kernel sees for each dtype; float16 and bfloat16 travel as their bits.
_STORAGE: dict[str, str] = {
    "bool": "bool",
    "int8": "signed char",
    "int16": "short",
    "int32": "int",
    "int64": "long long",
    "uint8": "unsigned char",
    "uint16": "unsigned short",
    "uint32": "unsigned int",
    "uint64": "unsigned long long",
    "float16": "unsigned short",
    "bfloat16": "unsigned short",
    "float32": "float",
    "float64": "double",
    "complex64": "float2",
    "complex128": "double2",
}

# ``fill`` only moves bits: one instantiation per element size.
_BITS: dict[int, tuple[str, str]] = {
    1: ("unsigned char", "uint8"),
    2: ("unsigned short", "uint16"),
    4: ("unsigned int", "uint32"),
    8: ("unsigned long long", "uint64"),
    16: ("double2", "complex128"),
}

_RANDOM_DTYPES = ("float16", "bfloat16", "float32", "float64")
_SIGNIFICAND_BITS = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}

SOURCE = r"""
// cuasync built-in kernels for the tensor creation API (cuasync/_creation.py).
//
// No #include: NVRTC needs no CUDA headers for them. float16 and bfloat16 travel as
// their unsigned short bit patterns and are converted by the functions below, which
// round exactly like numpy (float16) and ml_dtypes (bfloat16). Arithmetic that has a
// numpy twin uses the _rn intrinsics, so that nothing is contracted into an FMA.
//
// dtype codes (the K template argument, and src_code of ca_convert); the Python side
// keeps the same table:
//   0 bool  1 int8  2 int16  3 int32  4 int64  5 uint8  6 uint16  7 uint32  8 uint64
//   9 float16  10 bfloat16  11 float32  12 float64  13 complex64  14 complex128

typedef unsigned long long ca_u64;

// A value on its way to a destination type, kept exact: a signed or an unsigned
// integer, a real float (float16, bfloat16 and float32 are exact as double) or a complex.
struct ca_val {
    int tag;  // 0 signed, 1 unsigned, 2 real, 3 complex
    long long i;
    ca_u64 u;
    double re;
    double im;
};

__device__ __forceinline__ ca_val ca_make(int tag, long long i, ca_u64 u, double re,
                                          double im) {
    ca_val v;
    v.tag = tag;
    v.i = i;
    v.u = u;
    v.re = re;
    v.im = im;
    return v;
}
__device__ __forceinline__ ca_val ca_signed(long long i) { return ca_make(0, i, 0, 0, 0); }
__device__ __forceinline__ ca_val ca_unsigned(ca_u64 u) { return ca_make(1, 0, u, 0, 0); }
__device__ __forceinline__ ca_val ca_real(double d) { return ca_make(2, 0, 0, d, 0); }
__device__ __forceinline__ ca_val ca_complex(double re, double im) {
    return ca_make(3, 0, 0, re, im);
}

// -- float16 and bfloat16 bit patterns ----------------------------------------------------
__device__ __forceinline__ double ca_pow2(int e) {  // 2^e, -1022 <= e <= 1023
    return __longlong_as_double((long long)(e + 1023) << 52);
}

// IEEE binary16 from double, rounded to nearest even (numpy's double -> half cast).
__device__ unsigned short ca_half_from_double(double d) {
    ca_u64 bits = (ca_u64)__double_as_longlong(d);
    unsigned short sign = (unsigned short)((bits >> 48) & 0x8000u);
    int exp = (int)((bits >> 52) & 0x7ff);
    ca_u64 sig = bits & 0xfffffffffffffULL;
    if (exp == 0x7ff) {  // inf, or NaN keeping the top of its payload
        if (sig == 0) return sign | 0x7c00u;
        unsigned short nan = (unsigned short)(0x7c00u + (sig >> 42));
        if (nan == 0x7c00u) nan++;
        return sign | nan;
    }
    double a = fabs(d);
    if (a >= 65520.0) return sign | 0x7c00u;  // rounds past 65504, the largest half
    if (a < 6.103515625e-05) {                // below 2^-14: subnormal or zero
        return sign | (unsigned short)rint(__dmul_rn(a, 16777216.0));
    }
    int e = exp - 1023;                               // -14 .. 15
    double m = rint(__dmul_rn(a, ca_pow2(10 - e)));  // 1024 .. 2048, exact scaling
    return sign | (unsigned short)(((e + 15) << 10) + (int)m - 1024);
}

__device__ __forceinline__ double ca_half_to_double(unsigned short h) {
    unsigned exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    double mag;
    if (exp == 0x1f) {
        mag = man ? __longlong_as_double(0x7ff8000000000000LL | ((long long)man << 42))
                  : __longlong_as_double(0x7ff0000000000000LL);
    } else if (exp == 0) {
        mag = (double)man * 5.9604644775390625e-08;  // man * 2^-24
    } else {
        mag = (double)(man + 1024u) * ca_pow2((int)exp - 25);
    }
    return (h & 0x8000u) ? -mag : mag;
}

// bfloat16 from float, rounded to nearest even; a NaN becomes the quiet NaN (ml_dtypes).
__device__ __forceinline__ unsigned short ca_bf16_from_float(float f) {
    unsigned bits = (unsigned)__float_as_int(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (bits & 0x80000000u) ? 0xffc0u : 0x7fc0u;
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (unsigned short)(bits >> 16);
}

__device__ __forceinline__ float ca_bf16_to_float(unsigned short b) {
    return __int_as_float((int)((unsigned)b << 16));
}

// -- loading and storing with numpy's casting rules ---------------------------------------
__device__ ca_val ca_load(const void* base, long long i, int code) {
    switch (code) {
        case 0: return ca_signed(((const unsigned char*)base)[i] != 0);
        case 1: return ca_signed(((const signed char*)base)[i]);
        case 2: return ca_signed(((const short*)base)[i]);
        case 3: return ca_signed(((const int*)base)[i]);
        case 4: return ca_signed(((const long long*)base)[i]);
        case 5: return ca_unsigned(((const unsigned char*)base)[i]);
        case 6: return ca_unsigned(((const unsigned short*)base)[i]);
        case 7: return ca_unsigned(((const unsigned int*)base)[i]);
        case 8: return ca_unsigned(((const ca_u64*)base)[i]);
        case 9: return ca_real(ca_half_to_double(((const unsigned short*)base)[i]));
        case 10: return ca_real((double)ca_bf16_to_float(((const unsigned short*)base)[i]));
        case 11: return ca_real((double)((const float*)base)[i]);
        case 12: return ca_real(((const double*)base)[i]);
        case 13: {
            float2 c = ((const float2*)base)[i];
            return ca_complex((double)c.x, (double)c.y);
        }
        default: {
            double2 c = ((const double2*)base)[i];
            return ca_complex(c.x, c.y);
        }
    }
}

__device__ __forceinline__ bool ca_truth(const ca_val& v) {
    switch (v.tag) {
        case 0: return v.i != 0;
        case 1: return v.u != 0;
        case 2: return v.re != 0.0;  // NaN is true, as in numpy
        default: return v.re != 0.0 || v.im != 0.0;
    }
}

// Floats reach integers through a 64-bit integer and wrap, like numpy on x86-64;
// complex values contribute their real part.
__device__ __forceinline__ long long ca_to_i64(const ca_val& v) {
    switch (v.tag) {
        case 0: return v.i;
        case 1: return (long long)v.u;
        default: return (long long)v.re;
    }
}

__device__ __forceinline__ ca_u64 ca_to_u64(const ca_val& v) {
    switch (v.tag) {
        case 0: return (ca_u64)v.i;
        case 1: return v.u;
        default:
            return v.re >= 9223372036854775808.0 ? (ca_u64)v.re : (ca_u64)(long long)v.re;
    }
}

__device__ __forceinline__ float ca_to_f32(const ca_val& v) {
    switch (v.tag) {
        case 0: return (float)v.i;
        case 1: return (float)v.u;
        default: return (float)v.re;
    }
}

__device__ __forceinline__ double ca_to_f64(const ca_val& v) {
    switch (v.tag) {
        case 0: return (double)v.i;
        case 1: return (double)v.u;
        default: return v.re;
    }
}

template <typename S, int K>
__device__ __forceinline__ void ca_store(S* p, const ca_val& v) {
    if constexpr (K == 0) {
        *p = ca_truth(v);
    } else if constexpr (K <= 7) {
        *p = (S)ca_to_i64(v);
    } else if constexpr (K == 8) {
        *p = ca_to_u64(v);
    } else if constexpr (K == 9) {
        *p = ca_half_from_double(ca_to_f64(v));
    } else if constexpr (K == 10) {
        *p = ca_bf16_from_float(ca_to_f32(v));  // via float, like ml_dtypes
    } else if constexpr (K == 11) {
        *p = ca_to_f32(v);
    } else if constexpr (K == 12) {
        *p = ca_to_f64(v);
    } else if constexpr (K == 13) {
        *p = make_float2(ca_to_f32(v), v.tag == 3 ? (float)v.im : 0.0f);
    } else {
        *p = make_double2(ca_to_f64(v), v.tag == 3 ? v.im : 0.0);
    }
}

// -- indexing --------------------------------------------------------------------------
// Element offset of linear index i in a view of up to 4 (merged) dimensions d0..d3 (d0
// follows from the element count), strides in elements.
__device__ __forceinline__ long long ca_offset(long long i, long long d1, long long d2,
                                               long long d3, long long s0, long long s1,
                                               long long s2, long long s3) {
    long long i3 = i % d3;
    i /= d3;
    long long i2 = i % d2;
    i /= d2;
    long long i1 = i % d1;
    i /= d1;
    return i * s0 + i1 * s1 + i2 * s2 + i3 * s3;
}

__device__ __forceinline__ long long ca_first() {
    return (long long)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ long long ca_stride() { return (long long)gridDim.x * blockDim.x; }

// -- kernels ---------------------------------------------------------------------------
// out[...] = value for any strided view. S is the unsigned integer of the element's size
// (double2 for 16-byte elements); (lo, hi) are the value's bits, little-endian.
template <typename S>
__global__ void ca_fill(S* out, long long n, long long d1, long long d2, long long d3,
                        long long s0, long long s1, long long s2, long long s3,
                        unsigned long long lo, unsigned long long hi) {
    S value;
    if constexpr (sizeof(S) == 16) {
        value = make_double2(__longlong_as_double((long long)lo),
                             __longlong_as_double((long long)hi));
    } else {
        value = (S)lo;
    }
    if (d3 == n) {  // one dimension (contiguous or evenly strided): no divisions
        for (long long i = ca_first(); i < n; i += ca_stride()) out[i * s3] = value;
        return;
    }
    for (long long i = ca_first(); i < n; i += ca_stride()) {
        out[ca_offset(i, d1, d2, d3, s0, s1, s2, s3)] = value;
    }
}

// numpy.linspace(start, stop, n) (endpoint included), evaluated in float64 in numpy's
// order: delta = stop - start and step = delta / div (div = n - 1) come from the host;
// y = i * step (or i / div * delta when step underflows to 0) + start, the last element
// is stop, integer dtypes take the floor. arange(n) is linspace(0, n - 1, n).
template <typename S, int K>
__global__ void ca_linspace(S* out, long long n, double start, double stop, double delta,
                            double step, long long div, int floor_ints) {
    for (long long i = ca_first(); i < n; i += ca_stride()) {
        double y = (double)i;
        if (div > 0) {
            y = step == 0.0 ? __dmul_rn(__ddiv_rn(y, (double)div), delta) : __dmul_rn(y, step);
        } else {
            y = __dmul_rn(y, delta);
        }
        y = __dadd_rn(y, start);
        if (div > 0 && i == n - 1) y = stop;
        if (floor_ints) y = floor(y);
        ca_store<S, K>(out + i, ca_real(y));
    }
}

// out = src.astype(out's dtype) for a contiguous out; src is a strided view of up to 4
// (merged) dimensions whose dtype code is src_code.
template <typename S, int K>
__global__ void ca_convert(S* out, const void* src, int src_code, long long n, long long d1,
                           long long d2, long long d3, long long s0, long long s1,
                           long long s2, long long s3) {
    bool flat = d3 == n;  // one dimension (contiguous or evenly strided): no divisions
    for (long long i = ca_first(); i < n; i += ca_stride()) {
        long long j = flat ? i * s3 : ca_offset(i, d1, d2, d3, s0, s1, s2, s3);
        ca_store<S, K>(out + i, ca_load(src, j, src_code));
    }
}

// Philox4x32-10 (Salmon, Moraes, Dror, Shaw, SC'11; as in Random123) of the counter
// (lo, hi, 0, 0) under the key (k0, k1).
__device__ __forceinline__ void ca_philox(ca_u64 counter, unsigned k0, unsigned k1,
                                          unsigned r[4]) {
    unsigned c0 = (unsigned)counter, c1 = (unsigned)(counter >> 32), c2 = 0u, c3 = 0u;
#pragma unroll
    for (int round = 0; round < 10; ++round) {
        if (round) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        unsigned hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        unsigned hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    r[0] = c0;
    r[1] = c1;
    r[2] = c2;
    r[3] = c3;
}

__device__ __forceinline__ ca_u64 ca_join(unsigned lo, unsigned hi) {
    return ((ca_u64)hi << 32) | lo;
}

// Uniform [0, 1). float16/bfloat16/float32 element i is lane i % 4 of counter i / 4,
// mapped as (x >> (32 - p)) * 2^-p with p the significand bits (11, 8, 24): exact in the
// dtype. float64 element i takes lanes 2(i % 2), 2(i % 2) + 1 of counter i / 2 as a
// 64-bit word w (high lane on top): (w >> 11) * 2^-53.
template <typename S, int K>
__global__ void ca_rand(S* out, long long n, unsigned k0, unsigned k1) {
    const int per = K == 12 ? 2 : 4;
    const int p = K == 9 ? 11 : (K == 10 ? 8 : 24);
    long long counters = (n + per - 1) / per;
    for (long long c = ca_first(); c < counters; c += ca_stride()) {
        unsigned r[4];
        ca_philox((ca_u64)c, k0, k1, r);
#pragma unroll
        for (int lane = 0; lane < per; ++lane) {
            long long i = c * per + lane;
            if (i >= n) break;
            double u;
            if constexpr (K == 12) {
                u = (double)(ca_join(r[2 * lane], r[2 * lane + 1]) >> 11) * ca_pow2(-53);
            } else {
                u = (double)(r[lane] >> (32 - p)) * ca_pow2(-p);
            }
            ca_store<S, K>(out + i, ca_real(u));
        }
    }
}

// Normal(mean, std) by Box-Muller in float64, counter c for the pair (2c, 2c + 1):
// u1 = ((w0 >> 11) + 1) 2^-53 in (0, 1], u2 = (w1 >> 11) 2^-53 in [0, 1) with
// w0 = r1:r0, w1 = r3:r2; z = sqrt(-2 log u1) * (cos, sin)(2 pi u2); out = mean + std z,
// rounded to the dtype.
template <typename S, int K>
__global__ void ca_randn(S* out, long long n, unsigned k0, unsigned k1, double mean,
                         double std) {
    long long counters = (n + 1) / 2;
    for (long long c = ca_first(); c < counters; c += ca_stride()) {
        unsigned r[4];
        ca_philox((ca_u64)c, k0, k1, r);
        double u1 = (double)((ca_join(r[0], r[1]) >> 11) + 1) * ca_pow2(-53);
        double u2 = (double)(ca_join(r[2], r[3]) >> 11) * ca_pow2(-53);
        double radius = sqrt(__dmul_rn(-2.0, log(u1)));
        double theta = __dmul_rn(6.283185307179586, u2);
        double z0 = __dmul_rn(radius, cos(theta));
        double z1 = __dmul_rn(radius, sin(theta));
        ca_store<S, K>(out + 2 * c, ca_real(__dadd_rn(mean, __dmul_rn(std, z0))));
        if (2 * c + 1 < n) {
            ca_store<S, K>(out + 2 * c + 1, ca_real(__dadd_rn(mean, __dmul_rn(std, z1))));
        }
    }
}
"""

_BLOCK = 256
_MAX_BLOCKS = 1 << 16


def _blocks(work: int) -> int:
    return max(1, min((work + _BLOCK - 1) // _BLOCK, _MAX_BLOCKS))


# -- numpy twins --------------------------------------------------------------------------
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
    p = _SIGNIFICAND_BITS[dtype_name_]
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


def _cast(values: np.ndarray, dt: np.dtype[Any]) -> np.ndarray:
    """``values.astype(dt)`` with numpy's rules, without warnings (worker threads)."""
    with np.errstate(all="ignore"):
        if values.dtype.kind == "c" and _kind(dt) != "c":
            if _kind(dt) == "b":
                return values != 0
            values = values.real
        return values.astype(dt)


def _store(out: np.ndarray, values: np.ndarray, dt: np.dtype[Any]) -> None:
    """Write ``values`` cast to ``dt`` into ``out`` (which may be a bit view of ``dt``)."""
    out[...] = _cast(values, dt).view(out.dtype).reshape(out.shape)


def _fill_twin(out: np.ndarray, *args: Any) -> None:
    lo, hi = int(args[-2]), int(args[-1])
    raw = (lo | hi << 64).to_bytes(16, "little")[: out.dtype.itemsize]
    out[...] = np.frombuffer(raw, dtype=out.dtype)[0]


def _linspace_twin(dt: np.dtype[Any]) -> Callable[..., None]:
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
        if div > 0:
            y[-1] = float(stop)
        if floor_ints:
            np.floor(y, out=y)
        _store(out, y, dt)

    return twin


def _convert_twin(dt: np.dtype[Any]) -> Callable[..., None]:
    def twin(out: np.ndarray, src: np.ndarray, *_: Any) -> None:
        _store(out, src, dt)

    return twin


def _rand_twin(dt: np.dtype[Any]) -> Callable[..., None]:
    def twin(out: np.ndarray, n: Any, k0: Any, k1: Any) -> None:
        _store(out, uniform_twin(int(n), int(k0), int(k1), dtype_name(dt)), dt)

    return twin


def _randn_twin(dt: np.dtype[Any]) -> Callable[..., None]:
    def twin(out: np.ndarray, n: Any, k0: Any, k1: Any, mean: Any, std: Any) -> None:
        _store(out, normal_twin(int(n), int(k0), int(k1), float(mean), float(std)), dt)

    return twin


# -- the kernels ------------------------------------------------------------------------
_kernels: dict[tuple[str, str], Kernel] = {}
_kernels_lock = threading.Lock()


def _make(family: str, key: str) -> Kernel:
    if family == "fill":
        storage, _ = _BITS[int(key)]
        return Kernel(SOURCE, f"ca_fill<{storage}>", emulate=_fill_twin)
    dt = SUPPORTED[key]
    expression = f"ca_{family}<{_STORAGE[key]}, {_CODES[key]}>"
    twins = {
        "linspace": _linspace_twin,
        "convert": _convert_twin,
        "rand": _rand_twin,
        "randn": _randn_twin,
    }
    return Kernel(SOURCE, expression, emulate=twins[family](dt))


def _kernel(family: str, key: str) -> Kernel:
    kernel = _kernels.get((family, key))
    if kernel is None:
        with _kernels_lock:
            kernel = _kernels.get((family, key))
            if kernel is None:
                kernel = _kernels[(family, key)] = _make(family, key)
    return kernel


def builtin_kernels() -> list[Kernel]:
    """Every built-in creation kernel, one per dtype instantiation (for compile checks)."""
    keys: list[tuple[str, str]] = [("fill", str(size)) for size in _BITS]
    names = [name for name in _CODES if name in SUPPORTED]
    keys += [(family, name) for family in ("linspace", "convert") for name in names]
    keys += [
        (family, name) for family in ("rand", "randn") for name in _RANDOM_DTYPES if name in names
    ]
    return [_kernel(family, key) for family, key in keys]


# -- launching -------------------------------------------------------------------------
def _launch(ctx: ExecutionContext, kernel: Kernel, work: int, *args: Any) -> None:
    """Enqueue one launch of ``kernel`` in this op's execution context."""
    op = kernel.launch(*args, grid=_blocks(work), block=_BLOCK)
    op._take()
    op._enqueue(ctx)


def _bit_view(t: Tensor, storage_dtype: str) -> Tensor:
    """``t`` as the unsigned integers a kernel stores (same layout, same allocation)."""
    dt = SUPPORTED[storage_dtype]
    if dt == t.dtype:
        return t
    return Tensor(t.allocation, t.shape, dt, t.strides, t.offset)


def _storage_view(t: Tensor) -> Tensor:
    """``t`` as its kernels' C type sees it: float16 and bfloat16 as uint16 bits."""
    name = dtype_name(t.dtype)
    return _bit_view(t, "uint16") if name in ("float16", "bfloat16") else t


def _chunks(t: Tensor) -> list[tuple[Tensor, list[int], list[int], int]]:
    """Split a view into sub-views of at most 4 merged dimensions.

    Returns ``(sub-view, [d1, d2, d3], [s0, s1, s2, s3], first linear index)`` for each.
    """
    merged: list[tuple[int, int]] = []
    for d, s in zip(t.shape, t.strides, strict=True):
        if d == 1:
            continue
        if merged and merged[-1][1] == s * d:
            merged[-1] = (merged[-1][0] * d, s)
        else:
            merged.append((d, s))
    if not merged:
        merged = [(1, 1)]
    outer, inner = merged[:-4], merged[-4:]
    padded = [(1, 0)] * (4 - len(inner)) + inner
    dims = [d for d, _ in padded]
    strides = [s for _, s in padded]
    shape = tuple(d for d, _ in inner)
    size = math.prod(shape)
    out = []
    for k, index in enumerate(np.ndindex(*(d for d, _ in outer))):
        offset = t.offset + sum(i * s for i, (_, s) in zip(index, outer, strict=True))
        sub = Tensor(t.allocation, shape, t.dtype, tuple(s for _, s in inner), offset)
        out.append((sub, dims[1:], strides, k * size))
    return out


def _flat(t: Tensor) -> Tensor:
    return _storage_view(Tensor(t.allocation, (t.size,), t.dtype, None, t.offset))


def _enqueue_fill(ctx: ExecutionContext, t: Tensor, bits: tuple[int, int]) -> None:
    if t.size == 0:
        return
    view_dtype = _BITS[t.itemsize][1]
    kernel = _kernel("fill", str(t.itemsize))
    for sub, dims, strides, _ in _chunks(t):
        _launch(ctx, kernel, sub.size, _bit_view(sub, view_dtype), sub.size, *dims, *strides, *bits)


# -- validation ------------------------------------------------------------------------
def _kind(dt: np.dtype[Any]) -> str:
    """'b', 'i', 'u', 'f' or 'c' (bfloat16 is 'f')."""
    name = dtype_name(dt)
    if name == "bfloat16":
        return "f"
    return dt.kind


def _count(n: Any, argument: str) -> int:
    if not isinstance(n, (int, np.integer)) or isinstance(n, (bool, np.bool_)):
        raise ShapeError(f"{argument} must be an int >= 0, got {type(n).__name__} {n!r}")
    if n < 0:
        raise ShapeError(f"{argument} must be an int >= 0, got {n}")
    return int(n)


def _is_real_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating, bool, np.bool_))


def _real(value: Any, argument: str, *, finite: bool = True) -> float:
    if not _is_real_number(value) or isinstance(value, (bool, np.bool_)):
        raise ArgumentError(
            f"{argument} must be a real number, got {type(value).__name__} {value!r}"[:200]
        )
    try:
        out = float(value)
    except OverflowError:
        raise ArgumentError(f"{argument}={value!r} is too large for a float64") from None
    if finite and not math.isfinite(out):
        raise ArgumentError(f"{argument} must be finite, got {value!r}")
    return out


def _representable(value: Any, dt: np.dtype[Any], argument: str) -> np.ndarray:
    """``value`` as a 0-d array of ``dt``, or :class:`ArgumentError` if ``dt`` cannot hold it."""
    name = dtype_name(dt)
    kind = _kind(dt)
    if isinstance(value, (complex, np.complexfloating)):
        if kind != "c":
            if value.imag != 0:
                raise ArgumentError(
                    f"{argument}={value!r} is complex but the dtype is {name}; pass a real "
                    "value or use a complex dtype"
                )
            value = value.real
    elif not _is_real_number(value):
        raise ArgumentError(
            f"{argument} must be a number (bool, int, float or complex), got "
            f"{type(value).__name__} {value!r}"[:200]
        )
    if kind == "b":
        if value not in (0, 1):
            raise ArgumentError(
                f"{argument}={value!r} does not fit in bool; use 0, 1, True or False"
            )
        return np.asarray(bool(value))
    if kind in "iu":
        if isinstance(value, (float, np.floating)) and not (
            math.isfinite(value) and value == math.floor(value)
        ):
            raise ArgumentError(f"{argument}={value!r} is not an integer; {name} cannot hold it")
        info = np.iinfo(dt)
        if not info.min <= int(value) <= info.max:
            raise ArgumentError(
                f"{argument}={value!r} does not fit in {name} ({info.min}..{info.max})"
            )
        return np.asarray(int(value), dtype=dt)
    part_dtype = {"complex64": SUPPORTED["float32"], "complex128": SUPPORTED["float64"]}.get(
        name, dt
    )
    parts = (
        [value.real, value.imag] if isinstance(value, (complex, np.complexfloating)) else [value]
    )
    for part in parts:
        try:
            as_float = float(part)
        except OverflowError:
            as_float = math.inf
            finite = False
        else:
            with np.errstate(all="ignore"):
                stored = np.asarray(as_float).astype(part_dtype).astype(np.float64)
            finite = not math.isfinite(as_float) or bool(np.isfinite(stored))
        if not finite:
            raise ArgumentError(f"{argument}={value!r} overflows {name}")
    with np.errstate(all="ignore"):
        return np.asarray(value).astype(dt)


def _bits(value: np.ndarray) -> tuple[int, int]:
    """The little-endian bits of a 0-d array as two 64-bit words (zero padded)."""
    raw = value.tobytes().ljust(16, b"\0")
    return int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")


def _seed(seed: Any) -> tuple[int, int]:
    if seed is None:
        seed = secrets.randbits(64)
    elif not isinstance(seed, (int, np.integer)) or isinstance(seed, (bool, np.bool_)):
        raise ArgumentError(f"seed must be None or an int in 0..2**64-1, got {type(seed).__name__}")
    elif not 0 <= int(seed) < 2**64:
        raise ArgumentError(f"seed must be None or an int in 0..2**64-1, got {seed}")
    seed = int(seed)
    return seed & 0xFFFFFFFF, seed >> 32


def _random_dtype(dtype: Any, what: str) -> np.dtype[Any]:
    dt = as_dtype(dtype)
    if dtype_name(dt) not in _RANDOM_DTYPES:
        raise DTypeError(
            f"{what} makes floating-point numbers: dtype must be one of "
            f"{', '.join(n for n in _RANDOM_DTYPES if n in SUPPORTED)}, got {dtype_name(dt)}"
        )
    return dt


# -- the public ops --------------------------------------------------------------------
def _fill_op(
    shape: Shape, dt: np.dtype[Any], bits: tuple[int, int], device: Device, name: str
) -> DeviceOp[Tensor]:
    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        t = new_tensor(ctx, shape, dt, name)
        _enqueue_fill(ctx, t, bits)
        return Output.ready(t)

    return device_op(enqueue, device, name)


def full(
    shape: Any, value: Any, dtype: Any = "float32", *, device: int | Device | None = None
) -> DeviceOp[Tensor]:
    """An op allocating a tensor of ``shape`` with every element ``value``.

    ``value`` must be representable in ``dtype`` (an int in range for integer dtypes, a
    finite float that does not overflow, ...), else :class:`~cuasync.errors.ArgumentError`.

    >>> t = await cuasync.full((2, 3), 7, "int32")
    """
    dims = check_shape(shape)
    dt = as_dtype(dtype)
    bits = _bits(_representable(value, dt, "value"))
    return _fill_op(dims, dt, bits, _device_arg(device), "full")


def ones(
    shape: Any, dtype: Any = "float32", *, device: int | Device | None = None
) -> DeviceOp[Tensor]:
    """An op allocating a tensor of ones.

    >>> t = await cuasync.ones((4, 4), "float16")
    """
    dims = check_shape(shape)
    dt = as_dtype(dtype)
    return _fill_op(dims, dt, _bits(_representable(1, dt, "value")), _device_arg(device), "ones")


def fill(tensor: Tensor, value: Any) -> DeviceOp[Tensor]:
    """An op setting every element of ``tensor`` (any view, strided too) to ``value``.

    Writes in place and outputs ``tensor``; it allocates nothing, so it can be recorded
    in a graph.

    >>> t = await cuasync.zeros((4, 4))
    >>> await cuasync.fill(t[:, 1], 2.5)      # one column
    """
    if not isinstance(tensor, Tensor):
        raise ArgumentError(f"tensor must be a cuasync.Tensor, got {type(tensor).__name__}")
    t = tensor
    bits = _bits(_representable(value, t.dtype, "value"))

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        ctx.write(t.allocation, "tensor")
        _enqueue_fill(ctx, t, bits)
        return Output.ready(t)

    return device_op(enqueue, t.device, "fill", graph_node=True)


def eye_rect(
    rows: Any, cols: Any, dtype: Any = "float32", *, device: int | Device | None = None
) -> DeviceOp[Tensor]:
    """An op allocating a ``rows`` x ``cols`` matrix with ones on the main diagonal.

    >>> m = await cuasync.eye_rect(2, 3)        # [[1, 0, 0], [0, 1, 0]]
    """
    r = _count(rows, "rows")
    c = _count(cols, "cols")
    dt = as_dtype(dtype)
    bits = _bits(_representable(1, dt, "value"))
    target = _device_arg(device)

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        t = new_tensor(ctx, (r, c), dt, "eye")
        if t.nbytes:
            get_backend().memset_d8_async(t.ptr, 0, t.nbytes, ctx.handle)
            diagonal = Tensor(t.allocation, (min(r, c),), dt, (c + 1,), 0)
            _enqueue_fill(ctx, diagonal, bits)
        return Output.ready(t)

    return device_op(enqueue, target, "eye")


def eye(n: Any, dtype: Any = "float32", *, device: int | Device | None = None) -> DeviceOp[Tensor]:
    """An op allocating the ``n`` x ``n`` identity matrix.

    >>> i = await cuasync.eye(3, "float64")
    """
    k = _count(n, "n")
    return eye_rect(k, k, dtype, device=device)


def _ramp_op(
    n: int,
    dt: np.dtype[Any],
    start: float,
    stop: float,
    device: Device,
    name: str,
) -> DeviceOp[Tensor]:
    div = n - 1
    delta = stop - start
    step = delta / div if div > 0 else math.nan
    floor_ints = int(_kind(dt) in "iu")
    kernel = _kernel("linspace", dtype_name(dt))

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        t = new_tensor(ctx, (n,), dt, name)
        if n:
            _launch(ctx, kernel, n, _flat(t), n, start, stop, delta, step, div, floor_ints)
        return Output.ready(t)

    return device_op(enqueue, device, name)


def arange(
    n: Any, dtype: Any = "float32", *, device: int | Device | None = None
) -> DeviceOp[Tensor]:
    """An op allocating ``[0, 1, ..., n - 1]`` (like ``numpy.arange(n, dtype=dtype)``).

    The last value, ``n - 1``, must be representable in ``dtype``.

    >>> x = await cuasync.arange(5, "int64")
    """
    k = _count(n, "n")
    dt = as_dtype(dtype)
    if k:
        try:
            _representable(k - 1, dt, "n - 1")
        except ArgumentError as exc:
            raise ArgumentError(
                f"n={k}: the last value of arange, {k - 1}, does not fit in {dtype_name(dt)} "
                f"({exc})"
            ) from None
    return _ramp_op(k, dt, 0.0, float(max(k - 1, 0)), _device_arg(device), "arange")


def linspace(
    start: Any,
    stop: Any,
    n: Any,
    dtype: Any = "float32",
    *,
    device: int | Device | None = None,
) -> DeviceOp[Tensor]:
    """An op allocating ``n`` evenly spaced values from ``start`` to ``stop`` inclusive.

    Same values as ``numpy.linspace(start, stop, n, dtype=dtype)`` (computed in float64,
    floored for integer dtypes). ``start`` and ``stop`` are finite real numbers that fit
    in ``dtype``.

    >>> t = await cuasync.linspace(0.0, 1.0, 5)      # 0, .25, .5, .75, 1
    """
    a = _real(start, "start")
    b = _real(stop, "stop")
    k = _count(n, "n")
    dt = as_dtype(dtype)
    for value, argument in ((a, "start"), (b, "stop")):
        _representable(math.floor(value) if _kind(dt) in "iu" else value, dt, argument)
    return _ramp_op(k, dt, a, b, _device_arg(device), "linspace")


def convert(tensor: Tensor, dtype: Any) -> DeviceOp[Tensor]:
    """An op producing a new contiguous tensor: ``tensor`` cast to ``dtype``.

    numpy's casting rules (``ndarray.astype``): floats to integers truncate toward zero,
    complex to real keeps the real part, anything to bool is ``!= 0``. Out-of-range and
    NaN float-to-integer conversions are undefined, as in numpy.

    >>> h = await cuasync.convert(x, "float16")
    """
    if not isinstance(tensor, Tensor):
        raise ArgumentError(f"tensor must be a cuasync.Tensor, got {type(tensor).__name__}")
    src = tensor
    dt = as_dtype(dtype)
    kernel = _kernel("convert", dtype_name(dt))
    code = _CODES[dtype_name(src.dtype)]

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        t = new_tensor(ctx, src.shape, dt, "convert")
        if t.size:
            flat = _flat(t)
            for sub, dims, strides, first in _chunks(src):
                out = Tensor(flat.allocation, sub.shape, flat.dtype, None, flat.offset + first)
                _launch(ctx, kernel, sub.size, out, sub, code, sub.size, *dims, *strides)
        return Output.ready(t)

    return device_op(enqueue, src.device, "convert")


def rand(
    shape: Any,
    seed: Any = None,
    dtype: Any = "float32",
    *,
    device: int | Device | None = None,
) -> DeviceOp[Tensor]:
    """An op allocating uniform random numbers in ``[0, 1)`` (counter-based Philox4x32-10).

    A seed gives the same numbers on every backend and device; ``seed=None`` draws one.

    >>> u = await cuasync.rand((1024,), seed=42)
    """
    dims = check_shape(shape)
    key = _seed(seed)
    dt = _random_dtype(dtype, "rand")
    return _random_op(dims, dt, "rand", (*key,), _device_arg(device))


def randn(
    shape: Any,
    mean: Any = 0.0,
    std: Any = 1.0,
    seed: Any = None,
    dtype: Any = "float32",
    *,
    device: int | Device | None = None,
) -> DeviceOp[Tensor]:
    """An op allocating normal random numbers (Philox4x32-10 and Box-Muller in float64).

    With a seed the numbers match across backends (float64 results to the last bits of
    ``log``/``cos``/``sin``, which differ between libraries).

    >>> z = await cuasync.randn((256, 256), mean=0.0, std=0.02, seed=1)
    """
    dims = check_shape(shape)
    m = _real(mean, "mean")
    s = _real(std, "std")
    if s < 0:
        raise ArgumentError(f"std must be >= 0, got {std!r}")
    key = _seed(seed)
    dt = _random_dtype(dtype, "randn")
    return _random_op(dims, dt, "randn", (*key, m, s), _device_arg(device))


def _random_op(
    dims: Shape, dt: np.dtype[Any], family: str, args: tuple[Any, ...], device: Device
) -> DeviceOp[Tensor]:
    kernel = _kernel(family, dtype_name(dt))
    n = math.prod(dims)
    per = 2 if family == "randn" or dtype_name(dt) == "float64" else 4

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        t = new_tensor(ctx, dims, dt, family)
        if n:
            _launch(ctx, kernel, (n + per - 1) // per, _flat(t), n, *args)
        return Output.ready(t)

    return device_op(enqueue, device, family)
