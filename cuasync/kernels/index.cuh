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
