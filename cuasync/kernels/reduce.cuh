// -- reductions (cuasync/_ops/reduce_codegen.py generates the kernels around these) -------
// An accumulator is a struct {v, i}: the value (a float2 or double2 for complex), and for
// argmax/argmin the index of the element it came from. Blocks are multiples of 32
// threads, at most 1024.

__device__ __forceinline__ float ca_shfl(float v, int d) {
    return __shfl_down_sync(0xffffffffu, v, d);
}
__device__ __forceinline__ double ca_shfl(double v, int d) {
    return __shfl_down_sync(0xffffffffu, v, d);
}
// Every integer type (bool too) travels as 64 bits, which keeps its value.
template <typename T>
__device__ __forceinline__ T ca_shfl(T v, int d) {
    return (T)__shfl_down_sync(0xffffffffu, (long long)v, d);
}
// complex64 and complex128 accumulators: a part at a time.
__device__ __forceinline__ float2 ca_shfl(float2 v, int d) {
    return make_float2(ca_shfl(v.x, d), ca_shfl(v.y, d));
}
__device__ __forceinline__ double2 ca_shfl(double2 v, int d) {
    return make_double2(ca_shfl(v.x, d), ca_shfl(v.y, d));
}

// The combination of the 32 accumulators of a warp, in its lane 0.
template <typename A, typename F>
__device__ __forceinline__ A ca_warp_reduce(A a, F combine) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) {
        A b;
        b.v = ca_shfl(a.v, d);
        b.i = ca_shfl(a.i, d);
        a = combine(a, b);
    }
    return a;
}

// The combination of a block's accumulators, in thread 0. Every thread of the block
// must call it (it synchronizes the block twice, so a loop may call it again).
template <typename A, typename F>
__device__ A ca_block_reduce(A a, A identity, F combine) {
    __shared__ A part[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    a = ca_warp_reduce(a, combine);
    if (lane == 0) part[warp] = a;
    __syncthreads();
    int warps = (blockDim.x + 31) >> 5;
    a = (int)threadIdx.x < warps ? part[threadIdx.x] : identity;
    if (warp == 0) a = ca_warp_reduce(a, combine);
    __syncthreads();
    return a;
}

// The combination of the accumulators of threads t, t + cols, t + 2 cols, ... (a block
// of groups rows of cols threads, at most 256), in order, in the first row's threads t.
// Every thread of the block must call it (it synchronizes the block twice).
template <typename A, typename F>
__device__ A ca_group_reduce(A a, F combine, int cols, int groups) {
    __shared__ A part[256];
    if (groups == 1) return a;
    part[threadIdx.x] = a;
    __syncthreads();
    if ((int)threadIdx.x < cols) {
        for (int g = 1; g < groups; g++) a = combine(a, part[threadIdx.x + g * cols]);
    }
    __syncthreads();
    return a;
}

__device__ __forceinline__ long long ca_min_ll(long long a, long long b) { return a < b ? a : b; }

// -- complex accumulators (complex64 as float2, complex128 as double2) --------------------
// numpy's formulas, with the _rn intrinsics so that nothing is contracted into an FMA.
__device__ __forceinline__ float2 ca_cadd(float2 a, float2 b) {
    return make_float2(__fadd_rn(a.x, b.x), __fadd_rn(a.y, b.y));
}
__device__ __forceinline__ double2 ca_cadd(double2 a, double2 b) {
    return make_double2(__dadd_rn(a.x, b.x), __dadd_rn(a.y, b.y));
}
__device__ __forceinline__ float2 ca_cmul(float2 a, float2 b) {
    return make_float2(__fsub_rn(__fmul_rn(a.x, b.x), __fmul_rn(a.y, b.y)),
                       __fadd_rn(__fmul_rn(a.x, b.y), __fmul_rn(a.y, b.x)));
}
__device__ __forceinline__ double2 ca_cmul(double2 a, double2 b) {
    return make_double2(__dsub_rn(__dmul_rn(a.x, b.x), __dmul_rn(a.y, b.y)),
                        __dadd_rn(__dmul_rn(a.x, b.y), __dmul_rn(a.y, b.x)));
}
__device__ __forceinline__ float2 ca_conj(float2 a) { return make_float2(a.x, -a.y); }
__device__ __forceinline__ double2 ca_conj(double2 a) { return make_double2(a.x, -a.y); }
// |a|^2, the square a norm sums
__device__ __forceinline__ float ca_abs2(float2 a) {
    return __fadd_rn(__fmul_rn(a.x, a.x), __fmul_rn(a.y, a.y));
}
__device__ __forceinline__ double ca_abs2(double2 a) {
    return __dadd_rn(__dmul_rn(a.x, a.x), __dmul_rn(a.y, a.y));
}
// a mean: both parts divided by the count
__device__ __forceinline__ float2 ca_cdivr(float2 a, long long k) {
    return make_float2(__fdiv_rn(a.x, (float)k), __fdiv_rn(a.y, (float)k));
}
__device__ __forceinline__ double2 ca_cdivr(double2 a, long long k) {
    return make_double2(__ddiv_rn(a.x, (double)k), __ddiv_rn(a.y, (double)k));
}
// NaN in either part (numpy's complex max/min/argmax/argmin let it win)
__device__ __forceinline__ bool ca_cnan(float2 a) { return a.x != a.x || a.y != a.y; }
__device__ __forceinline__ bool ca_cnan(double2 a) { return a.x != a.x || a.y != a.y; }
// any value as complex64 / complex128 (a real one with imaginary part 0)
__device__ __forceinline__ float2 ca_to_c64(float2 v) { return v; }
__device__ __forceinline__ float2 ca_to_c64(double2 v) { return make_float2((float)v.x, (float)v.y); }
template <typename T>
__device__ __forceinline__ float2 ca_to_c64(T v) { return make_float2((float)v, 0.0f); }
__device__ __forceinline__ double2 ca_to_c128(double2 v) { return v; }
__device__ __forceinline__ double2 ca_to_c128(float2 v) { return make_double2(v.x, v.y); }
template <typename T>
__device__ __forceinline__ double2 ca_to_c128(T v) { return make_double2((double)v, 0.0); }
