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

// -- float32 reductions read in float4 (cuasync/_ops/reduce_codegen.py: cols4_kernel,
// whole4_kernel). Op is a struct of static functions: ident(), comb(a, b) (a the earlier
// elements: sums keep their order, max/min keep the first of equal values and the first
// NaN, as the generic kernel does) and fin(a, K), the value stored for K elements.
template <typename Op>
__device__ __forceinline__ float4 ca_comb4(float4 a, float4 b) {
    return make_float4(Op::comb(a.x, b.x), Op::comb(a.y, b.y), Op::comb(a.z, b.z),
                       Op::comb(a.w, b.w));
}
template <typename Op>
__device__ __forceinline__ float4 ca_ident4() {
    return make_float4(Op::ident(), Op::ident(), Op::ident(), Op::ident());
}

// The first axis of R rows of N float32 (row stride ld, x and ld 16-byte aligned, N a
// multiple of 4), kept columns contiguous: a block is 32 threads across 128 columns (a
// float4 each: a warp reads 512 contiguous bytes of a row) by 8 warps. blockIdx.y is a
// split of rows_per_split rows; warp ty reads its own contiguous part of them, eight
// rows in flight a thread; the 8 warps combine in shared memory, in order. With one
// split the block stores the result. Otherwise it writes its partial, and the last
// block of a column strip to finish (count[blockIdx.x], zero before the launch: the op
// zeroes it in the launch's own workspace, and that block sets it back to zero) combines
// the strip's partials in split order and stores the result: one launch.
template <typename Op>
__global__ void __launch_bounds__(256)
ca_cols4(float* out, float* partp, unsigned* count, const float* xp, long long R,
         long long N, long long ld, long long rows_per_split, int splits,
         unsigned long long cuasync_cancel_word_) {
    if (ca_block_cancelled(cuasync_cancel_word_)) return;  // a cancelled scope's: skipped
    const float4* x = (const float4*)xp;
    float4* part = (float4*)partp;
    const long long nv = N / 4, lv = ld / 4;
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const long long c = (long long)blockIdx.x * 32 + tx;
    const long long lo = (long long)blockIdx.y * rows_per_split;
    const long long hi = ca_min_ll(R, lo + rows_per_split);
    const long long sub = (rows_per_split + 7) / 8;
    const long long wlo = lo + ty * sub, whi = ca_min_ll(hi, wlo + sub);
    float4 a = ca_ident4<Op>();
    if (c < nv) {
        long long r = wlo;
        for (; r + 7 < whi; r += 8) {
            float4 v[8];
            #pragma unroll
            for (int u = 0; u < 8; u++) v[u] = x[(r + u) * lv + c];
            a = ca_comb4<Op>(a, ca_comb4<Op>(
                ca_comb4<Op>(ca_comb4<Op>(v[0], v[1]), ca_comb4<Op>(v[2], v[3])),
                ca_comb4<Op>(ca_comb4<Op>(v[4], v[5]), ca_comb4<Op>(v[6], v[7]))));
        }
        for (; r < whi; r++) a = ca_comb4<Op>(a, x[r * lv + c]);
    }
    __shared__ float4 sh[8][32];
    __shared__ int last;
    sh[ty][tx] = a;
    __syncthreads();
    if (ty == 0 && c < nv) {
        for (int g = 1; g < 8; g++) a = ca_comb4<Op>(a, sh[g][tx]);
        if (splits == 1) {
            const long long K = R;
            ((float4*)out)[c] = make_float4(Op::fin(a.x, K), Op::fin(a.y, K),
                                            Op::fin(a.z, K), Op::fin(a.w, K));
        } else {
            part[(long long)blockIdx.y * nv + c] = a;
        }
    }
    if (splits == 1) return;
    __threadfence();  // (each writer's partial visible before the count says it is there)
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&count[blockIdx.x], 1u) == (unsigned)splits - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    // warp ty combines the splits [ty q, (ty + 1) q) in order, then the warps in order
    const int q = (splits + 7) / 8;
    a = ca_ident4<Op>();
    if (c < nv) {
        const int s1 = ty * q + q < splits ? ty * q + q : splits;
        for (int s = ty * q; s < s1; s++) a = ca_comb4<Op>(a, __ldcg(&part[(long long)s * nv + c]));
    }
    sh[ty][tx] = a;
    __syncthreads();
    if (ty == 0 && c < nv) {
        for (int g = 1; g < 8; g++) a = ca_comb4<Op>(a, sh[g][tx]);
        const long long K = R;
        ((float4*)out)[c] = make_float4(Op::fin(a.x, K), Op::fin(a.y, K), Op::fin(a.z, K),
                                        Op::fin(a.w, K));
    }
    if (threadIdx.x == 0) count[blockIdx.x] = 0;
}

// The combination of a block's floats (blockDim.x a multiple of 32), in thread 0.
template <typename Op>
__device__ float ca_block_comb(float s) {
    __shared__ float w[32];
    #pragma unroll
    for (int d = 16; d > 0; d >>= 1) s = Op::comb(s, __shfl_down_sync(0xffffffffu, s, d));
    if ((threadIdx.x & 31) == 0) w[threadIdx.x >> 5] = s;
    __syncthreads();
    s = (int)threadIdx.x < (int)(blockDim.x >> 5) ? w[threadIdx.x] : Op::ident();
    if (threadIdx.x < 32) {
        #pragma unroll
        for (int d = 16; d > 0; d >>= 1) s = Op::comb(s, __shfl_down_sync(0xffffffffu, s, d));
    }
    __syncthreads();  // (w may be used again)
    return s;
}

// All n float32 of a contiguous, 16-byte aligned array: L float4 loads in flight a
// thread, a block's L * blockDim vectors contiguous, the grid (8 blocks an SM, each of
// 256 threads at most 32 registers) striding over the array; each lane of a float4 its
// own chain of combines. Block results go to part[blockIdx.x]; the last block to finish
// (count[0], zero before the launch, set back to zero by that block) combines them and
// stores the result: one launch.
template <typename Op, int L>
__global__ void __launch_bounds__(256, 8)
ca_whole4(float* out, float* part, unsigned* count, const float* xp, long long n,
          unsigned long long cuasync_cancel_word_) {
    if (ca_block_cancelled(cuasync_cancel_word_)) return;  // a cancelled scope's: skipped
    const float4* x = (const float4*)xp;
    const long long n4 = n / 4, T = blockDim.x, step = (long long)gridDim.x * T * L;
    float4 a = ca_ident4<Op>();
    long long i = (long long)blockIdx.x * T * L + threadIdx.x;
    for (; i + (L - 1) * T < n4; i += step) {
        float4 v[L];
        #pragma unroll
        for (int u = 0; u < L; u++) v[u] = x[i + u * T];
        #pragma unroll
        for (int u = 0; u < L; u++) a = ca_comb4<Op>(a, v[u]);
    }
    #pragma unroll
    for (int u = 0; u < L; u++) {
        if (i + u * T < n4) a = ca_comb4<Op>(a, x[i + u * T]);
    }
    float s = Op::comb(Op::comb(a.x, a.y), Op::comb(a.z, a.w));
    if (blockIdx.x == 0 && threadIdx.x < n - n4 * 4) s = Op::comb(s, xp[n4 * 4 + threadIdx.x]);
    s = ca_block_comb<Op>(s);
    __shared__ int last;
    if (gridDim.x == 1) {
        if (threadIdx.x == 0) out[0] = Op::fin(s, n);
        return;
    }
    if (threadIdx.x == 0) part[blockIdx.x] = s;
    __threadfence();
    if (threadIdx.x == 0) last = atomicAdd(count, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    s = Op::ident();
    for (int b = threadIdx.x; b < (int)gridDim.x; b += blockDim.x) s = Op::comb(s, __ldcg(&part[b]));
    s = ca_block_comb<Op>(s);
    if (threadIdx.x == 0) {
        out[0] = Op::fin(s, n);
        count[0] = 0;
    }
}
