// Integer matrix products (cuasync/_ops/igemm.py): c[z] = alpha * a[z] @ b[z] + beta * c[z]
// for strided views (strides in elements, any sign; 0 for a broadcast batch), wrapping
// as numpy's integer matmul does. T is the element type, U the unsigned accumulator:
// 32 bits for elements of up to 32 bits, 64 otherwise. The sum modulo 2^bits(U) is the
// sum modulo 2^bits(T) once cast to T, so the result is numpy's whatever U is.
// 16x16 tiles of a and b in shared memory, one output element a thread; grid-stride over
// columns (x), rows (y) and batch (z), each block uniformly (its __syncthreads agree).
template <typename T, typename U>
__global__ void ca_igemm(T* c, const T* a, const T* b, long long batch, long long m,
                         long long n, long long k, long long sab, long long sam,
                         long long sak, long long sbb, long long sbk, long long sbn,
                         long long scb, long long scm, long long scn, U alpha, U beta) {
    __shared__ U ta[16][17];
    __shared__ U tb[16][17];
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (long long z = blockIdx.z; z < batch; z += gridDim.z) {
        for (long long r0 = (long long)blockIdx.y * 16; r0 < m; r0 += (long long)gridDim.y * 16) {
            for (long long c0 = (long long)blockIdx.x * 16; c0 < n;
                 c0 += (long long)gridDim.x * 16) {
                const long long row = r0 + ty, col = c0 + tx;
                U acc = 0;
                for (long long k0 = 0; k0 < k; k0 += 16) {
                    const long long ka = k0 + tx, kb = k0 + ty;
                    ta[ty][tx] = (row < m && ka < k) ? (U)(long long)a[z * sab + row * sam + ka * sak] : (U)0;
                    tb[ty][tx] = (kb < k && col < n) ? (U)(long long)b[z * sbb + kb * sbk + col * sbn] : (U)0;
                    __syncthreads();
#pragma unroll
                    for (int j = 0; j < 16; j++) acc += ta[ty][j] * tb[j][tx];
                    __syncthreads();
                }
                if (row < m && col < n) {
                    T* p = c + z * scb + row * scm + col * scn;
                    U v = alpha * acc;
                    if (beta != 0) v += beta * (U)(long long)*p;
                    *p = (T)v;
                }
            }
        }
    }
}
