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
// as ml_dtypes' casts); narrower integers are exact in float.
__device__ __forceinline__ float ca_br(float x) {
    return ca_bf16_to_float(ca_bf16_from_float(x));
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

// exp(a) = e^re (cos im, sin im); an imaginary part of 0 stays exactly 0 (numpy's cexp).
__device__ __forceinline__ float2 ca_zexp(float2 a) {
    float e = expf(a.x);
    if (a.y == 0.0f) return make_float2(e, a.y);
    float s, c;
    sincosf(a.y, &s, &c);
    return make_float2(e * c, e * s);
}
__device__ __forceinline__ double2 ca_zexp(double2 a) {
    double e = exp(a.x);
    if (a.y == 0.0) return make_double2(e, a.y);
    double s, c;
    sincos(a.y, &s, &c);
    return make_double2(e * c, e * s);
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
    if (isnan(re)) return ca_zmake(re, im - im);
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
