// -- elementwise ops (cuasync/_ops/codegen.py generates the kernels around these) -------
__device__ __forceinline__ long long ca_first() {
    return (long long)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ long long ca_stride() { return (long long)gridDim.x * blockDim.x; }

// N consecutive elements, loaded and stored as one (aligned) access: 16 bytes of float.
template <typename T, int N>
struct alignas(sizeof(T) * N) ca_vec {
    T v[N];
};

// A float16 value computed in float32, rounded to float16 (as numpy's half loops do).
__device__ __forceinline__ float ca_hr(double x) {
    return (float)ca_half_to_double(ca_half_from_double(x));
}

// A bfloat16 value computed in float32: the value rounded to bfloat16 (nearest even),
// as a float. A double or 64-bit integer rounds once (through float rounded to odd,
// as ml_dtypes' casts); narrower integers are exact in float. For a float, the bits of
// ca_bf16_to_float(ca_bf16_from_float(x)), NaN made quiet with its sign, computed in
// place (no shift down and up: a bfloat16 kernel is a few integer ops an element).
__device__ __forceinline__ float ca_br(float x) {
    unsigned bits = (unsigned)__float_as_int(x);
    if (x != x) return __int_as_float((int)((bits & 0x80000000u) | 0x7fc00000u));
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return __int_as_float((int)(bits & 0xffff0000u));
}
// The bits of a float that holds a bfloat16 value exactly (a result of ca_br, or a
// loaded bfloat16): what ca_bf16_from_float gives for it, without rounding again.
__device__ __forceinline__ unsigned short ca_bf16_exact(float x) {
    unsigned bits = (unsigned)__float_as_int(x);
    if (x != x) return (unsigned short)(((bits >> 16) & 0x8000u) | 0x7fc0u);
    return (unsigned short)(bits >> 16);
}
// Two floats rounded to bfloat16 (nearest even) in one instruction (cvt.rn.bf16x2.f32,
// sm_80 and later), lo in the low half: the bits of ca_bf16_exact(ca_br(x)) for each,
// a NaN made cuasync's (quiet, its sign kept) where cvt gives its canonical 0x7fff.
__device__ __forceinline__ unsigned ca_bf16x2_rn(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    if (lo != lo) r = (r & 0xffff0000u) | ca_bf16_exact(lo);
    if (hi != hi) r = (r & 0xffffu) | ((unsigned)ca_bf16_exact(hi) << 16);
    return r;
#else
    return ca_bf16_exact(ca_br(lo)) | ((unsigned)ca_bf16_exact(ca_br(hi)) << 16);
#endif
}
__device__ __forceinline__ float ca_br(double x) { return ca_br(ca_to_f32_odd(ca_real(x))); }
__device__ __forceinline__ float ca_br(long long x) {
    return ca_br(ca_to_f32_odd(ca_signed(x)));
}
__device__ __forceinline__ float ca_br(ca_u64 x) { return ca_br(ca_to_f32_odd(ca_unsigned(x))); }
template <typename T>
__device__ __forceinline__ float ca_br(T x) {
    return ca_br((float)x);
}

// Three-way comparison of a signed and an unsigned 64-bit integer, by value.
__device__ __forceinline__ int ca_cmp3_iu(long long a, ca_u64 b) {
    return a < 0 ? -1 : ((ca_u64)a < b ? -1 : ((ca_u64)a == b ? 0 : 1));
}
__device__ __forceinline__ int ca_cmp3_ui(ca_u64 a, long long b) { return -ca_cmp3_iu(b, a); }

// numpy's remainder: the sign of the divisor; x % 0 is 0 for integers.
template <typename T>
__device__ __forceinline__ T ca_imod_np(T a, T b) {
    if (b == 0) return (T)0;
    if ((T)-1 < (T)0 && b == (T)-1) return (T)0;  // INT_MIN % -1 overflows in C++
    T r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}
template <typename T>
__device__ __forceinline__ T ca_fmod_np(T a, T b) {
    T m = fmod(a, b);
    if (b == 0) return m;  // nan
    if (m != 0) {
        if ((b < 0) != (m < 0)) m += b;
    } else {
        m = copysign((T)0, b);
    }
    return m;
}

// numpy's integer power, wrapping; a negative exponent (an error in numpy) gives 0,
// except for bases 1 and -1.
template <typename T>
__device__ __forceinline__ T ca_ipow(T a, T b) {
    if ((T)-1 < (T)0 && b < 0) {
        if (a == 1) return 1;
        if (a == (T)-1) return (b & 1) ? a : (T)1;
        return 0;
    }
    ca_u64 base = (ca_u64)a, result = 1, e = (ca_u64)b;
    while (e) {
        if (e & 1) result *= base;
        base *= base;
        e >>= 1;
    }
    return (T)result;
}

// -- complex64 (float2) and complex128 (double2) -----------------------------------------
// Written out here (NVRTC has no <complex>): numpy's formulas, with the _rn intrinsics
// where numpy's result is exact arithmetic (nothing contracted into an FMA), and
// numpy's branch cuts for log and sqrt (along the negative real axis; the sign of a
// zero imaginary part picks the side).
__device__ __forceinline__ float2 ca_zmake(float re, float im) { return make_float2(re, im); }
__device__ __forceinline__ double2 ca_zmake(double re, double im) {
    return make_double2(re, im);
}
// any value as complex64 / complex128 (a real one with imaginary part 0)
__device__ __forceinline__ float2 ca_zc64(float2 v) { return v; }
__device__ __forceinline__ float2 ca_zc64(double2 v) { return make_float2(ca_f32(v.x), ca_f32(v.y)); }
template <typename T>
__device__ __forceinline__ float2 ca_zc64(T v) { return make_float2((float)v, 0.0f); }
__device__ __forceinline__ float2 ca_zc64(double v) { return make_float2(ca_f32(v), 0.0f); }
__device__ __forceinline__ double2 ca_zc128(double2 v) { return v; }
__device__ __forceinline__ double2 ca_zc128(float2 v) {
    return make_double2(ca_f64(v.x), ca_f64(v.y));
}
__device__ __forceinline__ double2 ca_zc128(float v) { return make_double2(ca_f64(v), 0.0); }
template <typename T>
__device__ __forceinline__ double2 ca_zc128(T v) { return make_double2((double)v, 0.0); }

__device__ __forceinline__ float ca_radd(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double ca_radd(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float ca_rsub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double ca_rsub(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ float ca_rmul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double ca_rmul(double a, double b) { return __dmul_rn(a, b); }

template <typename Z>
__device__ __forceinline__ Z ca_zadd(Z a, Z b) {
    return ca_zmake(ca_radd(a.x, b.x), ca_radd(a.y, b.y));
}
template <typename Z>
__device__ __forceinline__ Z ca_zsub(Z a, Z b) {
    return ca_zmake(ca_rsub(a.x, b.x), ca_rsub(a.y, b.y));
}
template <typename Z>
__device__ __forceinline__ Z ca_zmul(Z a, Z b) {
    return ca_zmake(ca_rsub(ca_rmul(a.x, b.x), ca_rmul(a.y, b.y)),
                    ca_radd(ca_rmul(a.x, b.y), ca_rmul(a.y, b.x)));
}
template <typename Z>
__device__ __forceinline__ Z ca_zneg(Z a) { return ca_zmake(-a.x, -a.y); }
template <typename Z>
__device__ __forceinline__ Z ca_zconj(Z a) { return ca_zmake(a.x, -a.y); }
template <typename Z>
__device__ __forceinline__ bool ca_zeq(Z a, Z b) { return a.x == b.x && a.y == b.y; }

// a / b by Smith's method, scaled by the larger part of b (numpy's); b == 0 divides
// each part by 0 (inf or NaN, as numpy).
template <typename Z>
__device__ __forceinline__ Z ca_zdiv(Z a, Z b) {
    auto br = fabs(b.x), bi = fabs(b.y);
    if (br >= bi) {
        if (br == 0 && bi == 0) return ca_zmake(a.x / br, a.y / bi);
        auto rat = b.y / b.x;
        auto scl = 1 / ca_radd(b.x, ca_rmul(b.y, rat));
        return ca_zmake(ca_rmul(ca_radd(a.x, ca_rmul(a.y, rat)), scl),
                        ca_rmul(ca_rsub(a.y, ca_rmul(a.x, rat)), scl));
    }
    auto rat = b.x / b.y;
    auto scl = 1 / ca_radd(b.y, ca_rmul(b.x, rat));
    return ca_zmake(ca_rmul(ca_radd(ca_rmul(a.x, rat), a.y), scl),
                    ca_rmul(ca_rsub(ca_rmul(a.y, rat), a.x), scl));
}

__device__ __forceinline__ float ca_zabs(float2 a) { return hypotf(a.x, a.y); }
__device__ __forceinline__ double ca_zabs(double2 a) { return hypot(a.x, a.y); }
__device__ __forceinline__ float ca_zarg(float2 a) { return atan2f(a.y, a.x); }
__device__ __forceinline__ double ca_zarg(double2 a) { return atan2(a.y, a.x); }

// exp(a) = e^re (cos im, sin im): an imaginary part of 0 stays exactly 0; a real part
// past exp's range is taken in steps (e^x sin y may be finite where e^x is not, as
// glibc's cexp); an infinite real part with a non-finite imaginary one gives C99's
// values (+inf: inf + i NaN; -inf: 0 with the imaginary part's sign), as numpy's.
__device__ __forceinline__ void ca_sincos(float y, float* s, float* c) { sincosf(y, s, c); }
__device__ __forceinline__ void ca_sincos(double y, double* s, double* c) { sincos(y, s, c); }
template <typename Z>
__device__ __forceinline__ Z ca_zexp(Z a) {
    typedef decltype(a.x) R;
    R x = a.x;
    if (a.y == 0) return ca_zmake(exp(x), a.y);
    if (isinf(x) && !isfinite(a.y)) {
        return x > 0 ? ca_zmake(x, a.y - a.y) : ca_zmake((R)0, copysign((R)0, a.y));
    }
    R s, c;
    ca_sincos(a.y, &s, &c);
    // the largest exponent times ln 2: e^t is finite
    const R t = sizeof(R) == 4 ? (R)88.0296919311130543 : (R)709.089565712824051;
    if (x > t && isfinite(x)) {
        R et = exp(t);
        x -= t, s *= et, c *= et;
        if (x > t) x -= t, s *= et, c *= et;
    }
    R e = exp(x);
    return ca_zmake(e * c, e * s);
}
// log(a) = (log |a|, arg a): the cut along the negative reals, -0 imaginary below it.
template <typename Z>
__device__ __forceinline__ Z ca_zlog(Z a) {
    return ca_zmake(log(ca_zabs(a)), ca_zarg(a));
}
// The principal square root (re >= 0), the imaginary part with the sign of a's (so the
// cut is the negative reals, -0 below); numpy's csqrt for finite values and infinities.
template <typename Z>
__device__ __forceinline__ Z ca_zsqrt(Z a) {
    typedef decltype(a.x) R;
    R re = a.x, im = a.y;
    if (re == 0 && im == 0) return ca_zmake((R)0, im);
    if (isinf(im)) return ca_zmake(fabs(im), im);
    if (isnan(re)) return ca_zmake(re, re);  // NaN + i NaN for a finite im (C99's)
    if (isinf(re)) {
        if (re > 0) return ca_zmake(re, isnan(im) ? im : copysign((R)0, im));
        return ca_zmake(isnan(im) ? im : (R)0, copysign(-re, im));
    }
    if (isnan(im)) return ca_zmake(im, im);
    R t = sqrt(ca_rmul(fabs(re) + ca_zabs(a), (R)0.5));
    if (re >= 0) return ca_zmake(t, im / (2 * t));
    return ca_zmake(fabs(im) / (2 * t), copysign(t, im));
}

// -- the array API's functions (issue 34) -------------------------------------------------
// Shifts as numpy's: a shift by the width or more (or by a negative amount) gives 0, or
// -1 for a negative value shifted right; a left shift is done unsigned (no UB) and wraps.
template <typename T>
__device__ __forceinline__ T ca_lshift(T a, T b) {
    if ((ca_u64)(long long)b >= sizeof(T) * 8) return (T)0;
    return (T)((ca_u64)a << (int)b);
}
template <typename T>
__device__ __forceinline__ T ca_rshift(T a, T b) {
    if ((ca_u64)(long long)b >= sizeof(T) * 8) return a < (T)0 ? (T)-1 : (T)0;
    return (T)(a >> (int)b);
}

// numpy's floor division: integers round toward -inf, x // 0 is 0 and MIN // -1 wraps
// to MIN; floats as numpy's npy_floor_divide (the quotient of npy_divmod: floor of
// (a - fmod(a, b)) / b, corrected to the nearest integer; a / b where b is 0).
template <typename T>
__device__ __forceinline__ T ca_ifloordiv_np(T a, T b) {
    if (b == 0) return (T)0;
    if ((T)-1 < (T)0 && b == (T)-1) return (T)(0ULL - (ca_u64)a);
    T q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
    return q;
}
template <typename T>
__device__ __forceinline__ T ca_floordiv_np(T a, T b) {
    if (b == 0) return a / b;
    T mod = fmod(a, b);
    T div = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0))) div -= (T)1;
    if (div == 0) return copysign((T)0, a / b);
    T fl = floor(div);
    if (div - fl > (T)0.5) fl += (T)1;
    return fl;
}

// numpy's logaddexp: log(exp(a) + exp(b)) without overflow; equal arguments (infinities
// of one sign too) give a + log(2).
template <typename T>
__device__ __forceinline__ T ca_logaddexp(T a, T b) {
    if (a == b) return a + (T)0.693147180559945309417232121458176568;
    T d = a - b;
    if (d > 0) return a + log1p(exp(-d));
    if (d <= 0) return b + log1p(exp(d));
    return d;  // NaN
}

// nextafter in float16 / bfloat16 (computed on as float): one step of their own bits.
__device__ __forceinline__ unsigned short ca_next_bits(unsigned short bits, float a, float b) {
    if (a == 0) return (unsigned short)(b < 0 ? 0x8001u : 0x0001u);
    return (unsigned short)(((a < b) == (a > 0)) ? bits + 1 : bits - 1);
}
__device__ __forceinline__ float ca_nextafter_h(float a, float b) {
    if (a != a || b != b) return a + b;
    if (a == b) return b;
    unsigned short h = ca_next_bits(ca_half_from_double((double)a), a, b);
    return (float)ca_half_to_double(h);
}
__device__ __forceinline__ float ca_nextafter_bf(float a, float b) {
    if (a != a || b != b) return a + b;
    if (a == b) return b;
    return ca_bf16_to_float(ca_next_bits(ca_bf16_from_float(a), a, b));
}

// complex: a * a, 1 / a (numpy's Smith-style reciprocal), rounding and classifying each
// part, and log2 / log10 as numpy's (log scaled by log2(e) / log10(e)).
template <typename Z>
__device__ __forceinline__ Z ca_zsquare(Z a) { return ca_zmul(a, a); }
template <typename Z>
__device__ __forceinline__ Z ca_zrecip(Z a) {
    typedef decltype(a.x) R;
    if (fabs(a.y) <= fabs(a.x)) {
        R r = a.y / a.x, d = ca_radd(a.x, ca_rmul(a.y, r));
        return ca_zmake((R)1 / d, -r / d);
    }
    R r = a.x / a.y, d = ca_radd(ca_rmul(a.x, r), a.y);
    return ca_zmake(r / d, (R)-1 / d);
}
template <typename Z>
__device__ __forceinline__ Z ca_zrint(Z a) { return ca_zmake(rint(a.x), rint(a.y)); }
template <typename Z>
__device__ __forceinline__ bool ca_zisnan(Z a) { return isnan(a.x) || isnan(a.y); }
template <typename Z>
__device__ __forceinline__ bool ca_zisinf(Z a) { return isinf(a.x) || isinf(a.y); }
template <typename Z>
__device__ __forceinline__ bool ca_zisfinite(Z a) { return isfinite(a.x) && isfinite(a.y); }
template <typename Z>
__device__ __forceinline__ Z ca_zlog2(Z a) {
    typedef decltype(a.x) R;
    Z l = ca_zlog(a);
    return ca_zmake(ca_rmul(l.x, (R)1.442695040888963407359924681001892137),
                    ca_rmul(l.y, (R)1.442695040888963407359924681001892137));
}
template <typename Z>
__device__ __forceinline__ Z ca_zlog10(Z a) {
    typedef decltype(a.x) R;
    Z l = ca_zlog(a);
    return ca_zmake(ca_rmul(l.x, (R)0.434294481903251827651128918916605082),
                    ca_rmul(l.y, (R)0.434294481903251827651128918916605082));
}

// -- complex trigonometric and hyperbolic functions and their inverses (issue 34) ---------
// numpy's branch cuts and special values (C99 Annex G, as npymath): asin, acos and atanh
// cut the real axis outside [-1, 1], acosh below 1, asinh and atan the imaginary axis
// outside [-i, i]; the sign of a zero on a cut picks its side. Computed in double (a
// complex64 is widened and rounded once), by Kahan's formulas ("Branch cuts for complex
// elementary functions", 1987): products of principal square roots, which keep the
// signs of zeros and lose no accuracy near the cuts; then asinh(z) = i asin(-iz) and
// atan(z) = -i atanh(iz), C99's own definitions.
__device__ __forceinline__ double2 ca_zasin_finite(double x, double y) {
    double2 m = ca_zsqrt(make_double2(1.0 - x, -y));  // sqrt(1 - z)
    double2 p = ca_zsqrt(make_double2(1.0 + x, y));   // sqrt(1 + z)
    return make_double2(atan(x / (m.x * p.x - m.y * p.y)), asinh(m.x * p.y - m.y * p.x));
}
__device__ __forceinline__ double2 ca_zacos_finite(double x, double y) {
    double2 m = ca_zsqrt(make_double2(1.0 - x, -y));
    double2 p = ca_zsqrt(make_double2(1.0 + x, y));
    return make_double2(2.0 * atan(m.x / p.x), asinh(p.x * m.y - p.y * m.x));
}
// The value of a function whose argument has an infinite or NaN part, from the large-|z|
// form log(2z) (asinh, and acosh on the right half-plane), as C99's tables give it.
__device__ __forceinline__ double2 ca_zlog_big(double x, double y) {
    return make_double2(log(hypot(x, y)) + 0.693147180559945309417232121458176568, atan2(y, x));
}
__device__ __forceinline__ double2 ca_zasinh(double2 a) {
    double x = a.x, y = a.y;
    if (isfinite(x) && isfinite(y)) {
        double2 s = ca_zasin_finite(y, -x);  // asinh(z) = i asin(-iz)
        return make_double2(-s.y, s.x);
    }
    if (isnan(x) && y == 0) return a;
    if (isnan(x) || isnan(y)) {
        if (isinf(x)) return make_double2(x, y);        // inf + i NaN, with x's sign
        if (isinf(y)) return make_double2(fabs(y), x);  // NaN + i inf: +inf + i NaN
        return make_double2(x + y, x + y);
    }
    double2 r = ca_zlog_big(fabs(x), y);  // an infinite part, no NaN
    return make_double2(copysign(r.x, x), r.y);
}
__device__ __forceinline__ double2 ca_zasin(double2 a) {  // asin(z) = -i asinh(iz)
    if (isnan(a.x) && isinf(a.y)) return a;                                 // numpy's
    if (isinf(a.x) && isnan(a.y)) return make_double2(a.y, fabs(a.x));  // NaN + i inf
    double2 s = ca_zasinh(make_double2(-a.y, a.x));
    return make_double2(s.y, -s.x);
}
__device__ __forceinline__ double2 ca_zacos(double2 a) {
    double x = a.x, y = a.y;
    if (isfinite(x) && isfinite(y)) return ca_zacos_finite(x, y);
    if (isnan(x) || isnan(y)) {
        if (isinf(y)) return make_double2(x + y - y, -y);
        if (isinf(x)) return make_double2(x - x + y, -fabs(x));  // NaN - i inf
        if (x == 0) return make_double2(1.570796326794896619231321691639751442, y);
        return make_double2(x + y, x + y);
    }
    double2 r = ca_zlog_big(x, y);  // acos(z) = -i log(z + i sqrt(1 - z^2)) for large z
    return make_double2(fabs(r.y), -copysign(r.x, y));
}
__device__ __forceinline__ double2 ca_zacosh(double2 a) {
    double x = a.x, y = a.y;
    if (isfinite(x) && isfinite(y)) {
        double2 m = ca_zsqrt(make_double2(x - 1.0, y));  // sqrt(z - 1)
        double2 p = ca_zsqrt(make_double2(x + 1.0, y));  // sqrt(z + 1)
        return make_double2(asinh(m.x * p.x + m.y * p.y), 2.0 * atan(m.y / p.x));
    }
    // acosh(z) = ±i acos(z), the sign that makes the real part >= 0 (C99's tables)
    if (x == 0 && isnan(y)) return make_double2(y, 1.570796326794896619231321691639751442);
    double2 c = ca_zacos(a);
    if (!isinf(c.x) && !isinf(c.y) && (isnan(c.x) || isnan(c.y))) {
        return make_double2(x + y, x + y);
    }
    return make_double2(fabs(c.y), copysign(c.x, y));
}
__device__ __forceinline__ double2 ca_zatanh(double2 a) {
    const double half_pi = 1.570796326794896619231321691639751442;
    double x = a.x, y = a.y, ax = fabs(x);
    if (isnan(x) || isnan(y)) {
        if (isinf(y)) return make_double2(copysign(0.0, x), copysign(half_pi, y));
        if (isinf(x) || x == 0) return make_double2(copysign(0.0, x), y + x - x);
        return make_double2(x + y, x + y);
    }
    if (isinf(x) || isinf(y)) return make_double2(copysign(0.0, x), copysign(half_pi, y));
    if (ax > 1e150 || fabs(y) > 1e150) {  // (1 - x)^2 + y^2 would overflow: ~1/z
        double s = fmax(ax, fabs(y)), u = ax / s, v = y / s;
        return make_double2(copysign(u / (u * u + v * v) / s, x), copysign(half_pi, y));
    }
    // atanh(-z) = -atanh(z): the real part computed for |x|, without cancellation
    double d = (1.0 - ax) * (1.0 - ax) + y * y;
    double re = 0.25 * log1p(4.0 * ax / d);
    double im = 0.5 * atan2(2.0 * y, (1.0 - ax) * (1.0 + ax) - y * y);
    return make_double2(copysign(re, x), im);
}
__device__ __forceinline__ double2 ca_zatan(double2 a) {  // atan(z) = -i atanh(iz)
    // atan(+-inf + i NaN) = +-pi/2 + 0i, numpy's: not through atanh(-NaN + i inf), whose
    // real part's sign would be the NaN's, and a NaN's sign does not survive negation on
    // every device (PTX neg: "NaN inputs yield an unspecified NaN")
    if (isinf(a.x) && isnan(a.y))
        return make_double2(copysign(1.570796326794896619231321691639751442, a.x), 0.0);
    double2 s = ca_zatanh(make_double2(-a.y, a.x));
    return make_double2(s.y, -s.x);
}
// sinh, cosh: the products of the real functions, a zero part kept exactly (numpy's
// csinh/ccosh for finite values); tanh: Kahan's form (as npymath's ctanh), 1 for a large
// real part, where sinh and cosh overflow.
__device__ __forceinline__ double2 ca_zsinh(double2 a) {
    double x = a.x, y = a.y;
    if (y == 0) return make_double2(sinh(x), y);
    if (!isfinite(y)) {
        if (x == 0) return make_double2(x, y - y);
        if (isinf(x)) return make_double2(fabs(x), y - y);
        return make_double2(y - y, y - y);
    }
    if (isinf(x)) return make_double2(x * cos(y), fabs(x) * sin(y));
    if (x == 0) return make_double2(x * cos(y), sin(y));
    return make_double2(sinh(x) * cos(y), cosh(x) * sin(y));
}
__device__ __forceinline__ double2 ca_zcosh(double2 a) {
    double x = a.x, y = a.y;
    if (y == 0) return make_double2(cosh(x), isnan(x) ? y : copysign(0.0, x) * y);
    if (!isfinite(y)) {
        if (x == 0) return make_double2(y - y, 0.0);
        if (isinf(x)) return make_double2(x * x, y - y);
        return make_double2(y - y, y - y);
    }
    if (isinf(x)) return make_double2(x * x * cos(y), x * sin(y));
    if (x == 0) return make_double2(cos(y), x * sin(y));
    return make_double2(cosh(x) * cos(y), sinh(x) * sin(y));
}
__device__ __forceinline__ double2 ca_ztanh(double2 a) {
    double x = a.x, y = a.y;
    if (y == 0) return make_double2(tanh(x), y);
    if (isnan(x)) return make_double2(x, x);
    if (isinf(x)) {
        double zero = isfinite(y) ? copysign(0.0, sin(y) * cos(y)) : copysign(0.0, y);
        return make_double2(copysign(1.0, x), zero);
    }
    if (!isfinite(y)) return make_double2(x == 0 ? x : y - y, y - y);
    if (fabs(x) >= 22) {  // tanh(x) is 1 in double; the imaginary part ~ 4 e^-2|x| sin cos
        double e = exp(-fabs(x));
        return make_double2(copysign(1.0, x), 4.0 * sin(y) * cos(y) * e * e);
    }
    double t = tan(y), beta = 1.0 + t * t, s = sinh(x), rho = sqrt(1.0 + s * s);
    double den = 1.0 + beta * s * s;
    return make_double2(beta * rho * s / den, t / den);
}
// sin(z) = -i sinh(iz), cos(z) = cosh(iz), tan(z) = -i tanh(iz): C99's definitions
__device__ __forceinline__ double2 ca_zsin(double2 a) {
    if (isinf(a.y) && !isfinite(a.x)) return make_double2(a.x - a.x, fabs(a.y));  // numpy's
    double2 s = ca_zsinh(make_double2(-a.y, a.x));
    return make_double2(s.y, -s.x);
}
__device__ __forceinline__ double2 ca_zcos(double2 a) {
    return ca_zcosh(make_double2(-a.y, a.x));
}
__device__ __forceinline__ double2 ca_ztan(double2 a) {
    double2 s = ca_ztanh(make_double2(-a.y, a.x));
    return make_double2(s.y, -s.x);
}
// complex64: the same functions in double, rounded once
#define CA_Z64_BY_DOUBLE(f) \
    __device__ __forceinline__ float2 f(float2 a) { return ca_zc64(f(ca_zc128(a))); }
CA_Z64_BY_DOUBLE(ca_zasin)
CA_Z64_BY_DOUBLE(ca_zacos)
CA_Z64_BY_DOUBLE(ca_zatan)
CA_Z64_BY_DOUBLE(ca_zasinh)
CA_Z64_BY_DOUBLE(ca_zacosh)
CA_Z64_BY_DOUBLE(ca_zatanh)
CA_Z64_BY_DOUBLE(ca_zsinh)
CA_Z64_BY_DOUBLE(ca_zcosh)
CA_Z64_BY_DOUBLE(ca_ztanh)
CA_Z64_BY_DOUBLE(ca_zsin)
CA_Z64_BY_DOUBLE(ca_zcos)
CA_Z64_BY_DOUBLE(ca_ztan)
#undef CA_Z64_BY_DOUBLE

// -- complex expm1, log1p, sign, power and truth values (issue 34) ------------------------
// numpy's formulas, computed in the operand's own precision as numpy's loops compute them
// (so both round alike where a formula cancels): expm1(z) = (expm1(x) cos y - 2 sin^2(y/2),
// e^x sin y); log1p(z) = (log |z + 1|, arg(z + 1)); sign(z) = z / |z|, 0 for 0, ±1 along
// the one infinite part (NaN for two), as numpy's.
template <typename Z>
__device__ __forceinline__ Z ca_zexpm1(Z a) {
    typedef decltype(a.x) R;
    R h = sin(a.y / (R)2);
    return ca_zmake(ca_rsub(ca_rmul(expm1(a.x), cos(a.y)), ca_rmul(ca_rmul((R)2, h), h)),
                    ca_rmul(exp(a.x), sin(a.y)));
}
template <typename Z>
__device__ __forceinline__ Z ca_zlog1p(Z a) {
    typedef decltype(a.x) R;
    R re = ca_radd(a.x, (R)1);
    return ca_zmake(log(hypot(re, a.y)), atan2(a.y, re));
}
template <typename Z>
__device__ __forceinline__ Z ca_zsign(Z a) {
    typedef decltype(a.x) R;
    R m = hypot(a.x, a.y);
    if (isnan(m)) return ca_zmake(m, m);
    if (isinf(m)) {
        if (isinf(a.x) && isinf(a.y)) return ca_zmake(m - m, m - m);
        if (isinf(a.x)) return ca_zmake(copysign((R)1, a.x), (R)0);
        return ca_zmake((R)0, copysign((R)1, a.y));
    }
    if (m == 0) return ca_zmake((R)0, (R)0);
    return ca_zmake(a.x / m, a.y / m);
}
// a * b with C99's recovery of infinities (Annex G: a product NaN in both parts whose
// operand has an infinite part is an infinity), as C compilers multiply complex numbers.
template <typename Z>
__device__ __forceinline__ Z ca_zmul_c99(Z p, Z q) {
    typedef decltype(p.x) R;
    R a = p.x, b = p.y, c = q.x, d = q.y;
    R ac = ca_rmul(a, c), bd = ca_rmul(b, d), ad = ca_rmul(a, d), bc = ca_rmul(b, c);
    R x = ca_rsub(ac, bd), y = ca_radd(ad, bc);
    if (!isnan(x) || !isnan(y)) return ca_zmake(x, y);
    bool again = false;
    if (isinf(a) || isinf(b)) {  // p is infinite: box it, its partner's NaNs made 0
        a = copysign(isinf(a) ? (R)1 : (R)0, a);
        b = copysign(isinf(b) ? (R)1 : (R)0, b);
        if (isnan(c)) c = copysign((R)0, c);
        if (isnan(d)) d = copysign((R)0, d);
        again = true;
    }
    if (isinf(c) || isinf(d)) {
        c = copysign(isinf(c) ? (R)1 : (R)0, c);
        d = copysign(isinf(d) ? (R)1 : (R)0, d);
        if (isnan(a)) a = copysign((R)0, a);
        if (isnan(b)) b = copysign((R)0, b);
        again = true;
    }
    if (!again && (isinf(ac) || isinf(bd) || isinf(ad) || isinf(bc))) {  // overflowed
        if (isnan(a)) a = copysign((R)0, a);
        if (isnan(b)) b = copysign((R)0, b);
        if (isnan(c)) c = copysign((R)0, c);
        if (isnan(d)) d = copysign((R)0, d);
        again = true;
    }
    if (!again) return ca_zmake(x, y);
    const R inf = (R)__int_as_float(0x7f800000);
    return ca_zmake(inf * ca_rsub(ca_rmul(a, c), ca_rmul(b, d)),
                    inf * ca_radd(ca_rmul(a, d), ca_rmul(b, c)));
}
// a ** b as numpy's npy_cpow: 1 for b == 0; for a == 0, 0 where re(b) > 0 else NaN; an
// integral real b in (-100, 100) by repeated squaring (1 / the power for a negative b);
// otherwise exp(b log a).
template <typename Z>
__device__ __forceinline__ Z ca_zpow(Z a, Z b) {
    typedef decltype(a.x) R;
    if (b.x == 0 && b.y == 0) return ca_zmake((R)1, (R)0);
    if (a.x == 0 && a.y == 0) {
        if (b.x > 0) return ca_zmake((R)0, (R)0);
        const R nan = (R)__int_as_float(0x7fc00000);
        return ca_zmake(nan, nan);
    }
    if (b.y == 0 && fabs(b.x) < 100 && b.x == trunc(b.x)) {
        int n = (int)b.x;
        if (n == 1) return a;
        if (n == 2) return ca_zmul(a, a);
        if (n == 3) return ca_zmul(a, ca_zmul(a, a));
        int m = n < 0 ? -n : n;
        Z acc = ca_zmake((R)1, (R)0), p = a;
        for (int mask = 1;; mask <<= 1) {
            if (m & mask) acc = ca_zmul(acc, p);
            if (m < (mask << 1)) break;
            p = ca_zmul(p, p);
        }
        return n < 0 ? ca_zdiv(ca_zmake((R)1, (R)0), acc) : acc;
    }
    return ca_zexp(ca_zmul_c99(b, ca_zlog(a)));
}
// The truth value of a complex number (numpy's: either part nonzero; NaN is true).
template <typename Z>
__device__ __forceinline__ bool ca_znonzero(Z a) { return a.x != 0 || a.y != 0; }
