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
