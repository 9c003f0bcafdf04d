// -- reductions (cuasync/_ops/reduce_codegen.py generates the kernels around these) -------
// An accumulator is a struct {v, i}: the value, and for argmax/argmin the index of the
// element it came from. Blocks are multiples of 32 threads, at most 1024.

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

__device__ __forceinline__ long long ca_min_ll(long long a, long long b) { return a < b ? a : b; }
