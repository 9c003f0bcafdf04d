// cuasync built-in kernels for the tensor creation API (cuasync/_creation.py).
//
// No #include: NVRTC needs no CUDA headers for them. float16 and bfloat16 travel as
// their unsigned short bit patterns, float8_e4m3fn and float8_e5m2 as their byte, and
// are converted by the functions below, which round exactly like numpy (float16) and
// ml_dtypes (bfloat16, FP8). (cuda_fp8.h's __nv_fp8_e4m3(float) saturates to 448 where
// ml_dtypes gives NaN, so it is not used even where the header is at hand.) Arithmetic
// that has a numpy twin uses the _rn intrinsics, so that nothing is contracted into an FMA.
//
// dtype codes (the K template argument, and src_code of ca_convert); the Python side
// keeps the same table:
//   0 bool  1 int8  2 int16  3 int32  4 int64  5 uint8  6 uint16  7 uint32  8 uint64
//   9 float16  10 bfloat16  11 float32  12 float64  13 complex64  14 complex128
//   15 float8_e4m3fn  16 float8_e5m2

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

// float <-> double keeping a NaN's sign, as numpy does (it becomes the quiet NaN): a GPU's
// conversion instructions need not keep it, and FP8 results carry it.
__device__ __forceinline__ double ca_f64(float f) {
    if (f == f) return (double)f;
    ca_u64 sign = (ca_u64)((unsigned)__float_as_int(f) & 0x80000000u) << 32;
    return __longlong_as_double((long long)(sign | 0x7ff8000000000000ULL));
}
__device__ __forceinline__ float ca_f32(double d) {
    if (d == d) return (float)d;
    unsigned sign = (unsigned)((ca_u64)__double_as_longlong(d) >> 32) & 0x80000000u;
    return __int_as_float((int)(sign | 0x7fc00000u));
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

// -- FP8 bit patterns (OCP E4M3FN and E5M2, as ml_dtypes) -------------------------------------
// From float, rounded to nearest even (wider sources reach them through ca_to_f32_odd,
// which keeps that rounding single). E4M3FN (bias 7, no infinity) makes a NaN, an infinity or anything that rounds
// past 448 a NaN, 0x7f with the sign: it does not saturate. E5M2 (bias 15) rounds past
// 57344 to infinity (0x7c) and makes every NaN 0x7e, with the sign.
__device__ __forceinline__ unsigned char ca_e4m3_from_float(float f) {
    unsigned bits = (unsigned)__float_as_int(f);
    unsigned char sign = (unsigned char)((bits >> 24) & 0x80u);
    unsigned a = bits & 0x7fffffffu;
    if (a > 0x43e80000u) return sign | 0x7fu;  // NaN, inf, or past 464 (the tie to 448)
    if (a < 0x3c800000u) {                      // below 2^-6: subnormal (m * 2^-9) or zero
        return sign | (unsigned char)rintf(__fmul_rn(__int_as_float((int)a), 512.0f));
    }
    a += 0x7ffffu + ((a >> 20) & 1u);  // the 23-bit significand to 3 bits, ties to even
    return sign | (unsigned char)((a >> 20) - (120u << 3));  // exponent bias 127 -> 7
}

__device__ __forceinline__ unsigned char ca_e5m2_from_float(float f) {
    unsigned bits = (unsigned)__float_as_int(f);
    unsigned char sign = (unsigned char)((bits >> 24) & 0x80u);
    unsigned a = bits & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7eu;   // NaN
    if (a >= 0x47700000u) return sign | 0x7cu;  // inf, or 61440 (the tie past 57344) and up
    if (a < 0x38800000u) {                       // below 2^-14: subnormal (m * 2^-16) or zero
        return sign | (unsigned char)rintf(__fmul_rn(__int_as_float((int)a), 65536.0f));
    }
    a += 0xfffffu + ((a >> 21) & 1u);  // the 23-bit significand to 2 bits, ties to even
    return sign | (unsigned char)((a >> 21) - (112u << 2));  // exponent bias 127 -> 15
}

// To float, exactly; a NaN becomes the quiet NaN with its sign (as ml_dtypes).
__device__ __forceinline__ float ca_e4m3_to_float(unsigned char b) {
    unsigned sign = (unsigned)(b & 0x80u) << 24, a = b & 0x7fu;
    if (a == 0x7fu) return __int_as_float((int)(sign | 0x7fc00000u));
    if (a < 8u) {  // subnormal: a * 2^-9
        return __int_as_float((int)(sign | (unsigned)__float_as_int((float)a * 0.001953125f)));
    }
    return __int_as_float((int)(sign | ((a + (120u << 3)) << 20)));
}

__device__ __forceinline__ float ca_e5m2_to_float(unsigned char b) {
    unsigned sign = (unsigned)(b & 0x80u) << 24, a = b & 0x7fu;
    if (a >= 0x7cu) return __int_as_float((int)(sign | (a == 0x7cu ? 0x7f800000u : 0x7fc00000u)));
    if (a < 4u) {  // subnormal: a * 2^-16
        return __int_as_float((int)(sign | (unsigned)__float_as_int((float)a * 1.52587890625e-05f)));
    }
    return __int_as_float((int)(sign | ((a + (112u << 2)) << 21)));
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
        case 10: return ca_real(ca_f64(ca_bf16_to_float(((const unsigned short*)base)[i])));
        case 11: return ca_real(ca_f64(((const float*)base)[i]));
        case 12: return ca_real(((const double*)base)[i]);
        case 13: {
            float2 c = ((const float2*)base)[i];
            return ca_complex(ca_f64(c.x), ca_f64(c.y));
        }
        case 14: {
            double2 c = ((const double2*)base)[i];
            return ca_complex(c.x, c.y);
        }
        case 15: return ca_real(ca_f64(ca_e4m3_to_float(((const unsigned char*)base)[i])));
        default: return ca_real(ca_f64(ca_e5m2_to_float(((const unsigned char*)base)[i])));
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
        default: return ca_f32(v.re);
    }
}

// To float rounded to odd: truncated toward zero, the last bit set where that was
// inexact. Rounding this to nearest even at 22 bits or fewer (bfloat16, FP8) gives the
// nearest-even rounding of the value itself: no double rounding through float32.
__device__ __forceinline__ float ca_to_f32_odd(const ca_val& v) {
    float t;
    bool inexact;
    switch (v.tag) {
        case 0:
            t = __ll2float_rz(v.i);
            inexact = (long long)t != v.i;
            break;
        case 1:
            t = __ull2float_rz(v.u);
            inexact = (ca_u64)t != v.u;
            break;
        default:
            if (v.re != v.re) return ca_f32(v.re);
            t = __double2float_rz(v.re);
            inexact = (double)t != v.re;
    }
    return inexact ? __int_as_float(__float_as_int(t) | 1) : t;
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
        *p = ca_bf16_from_float(ca_to_f32_odd(v));  // rounded once, as ml_dtypes 0.7
    } else if constexpr (K == 11) {
        *p = ca_to_f32(v);
    } else if constexpr (K == 12) {
        *p = ca_to_f64(v);
    } else if constexpr (K == 13) {
        *p = make_float2(ca_to_f32(v), v.tag == 3 ? ca_f32(v.im) : 0.0f);
    } else if constexpr (K == 14) {
        *p = make_double2(ca_to_f64(v), v.tag == 3 ? v.im : 0.0);
    } else if constexpr (K == 15) {
        *p = ca_e4m3_from_float(ca_to_f32_odd(v));  // rounded once, as ml_dtypes 0.7
    } else {
        *p = ca_e5m2_from_float(ca_to_f32_odd(v));
    }
}

// -- checked casts (astype(..., casting="checked")) ---------------------------------------
__device__ __forceinline__ bool ca_finite(const ca_val& v) {
    if (v.tag < 2) return true;
    // x - x is 0 for every finite x and NaN for an infinity or a NaN: no isfinite, which
    // NVRTC has as a device function and a host compiler only as std::isfinite.
    return v.re - v.re == 0.0 && (v.tag == 2 || v.im - v.im == 0.0);
}

// Whether storing v as dtype K loses it: an integer (or a float truncated toward zero)
// outside K's range, a NaN or infinity to an integer, or a finite float that becomes
// infinite or NaN (float16 past 65504, FP8 E4M3FN past 448). ``stored`` is the value
// read back after the store. bool never overflows; a complex source's imaginary part
// is not looked at (numpy drops it).
template <int K>
__device__ __forceinline__ bool ca_overflows(const ca_val& v, const ca_val& stored) {
    if constexpr (K == 0) {
        return false;
    } else if constexpr (K <= 8) {
        const double lo[9] = {0.0, -129.0, -32769.0, -2147483649.0, -9223372036854775808.0,
                              -1.0, -1.0, -1.0, -1.0};
        const double hi[9] = {0.0, 128.0, 32768.0, 2147483648.0, 9223372036854775808.0,
                              256.0, 65536.0, 4294967296.0, 18446744073709551616.0};
        const long long ilo[9] = {0, -128, -32768, -2147483647 - 1, -9223372036854775807LL - 1,
                                  0, 0, 0, 0};
        const ca_u64 umax[9] = {0, 127, 32767, 2147483647, 9223372036854775807ULL, 255, 65535,
                                4294967295ULL, 18446744073709551615ULL};
        switch (v.tag) {
            case 0: return v.i < ilo[K] || (v.i >= 0 && (ca_u64)v.i > umax[K]);
            case 1: return v.u > umax[K];
            default:  // NaN fails both comparisons; int64's low bound is exact
                if (K == 4) return !(v.re >= lo[K] && v.re < hi[K]);
                return !(v.re > lo[K] && v.re < hi[K]);
        }
    } else {
        return ca_finite(v) && !ca_finite(stored);
    }
}
