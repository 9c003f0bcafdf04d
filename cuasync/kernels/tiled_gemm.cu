// Tiled matrix products (cuasync/_ops/tiled_gemm.py): c[z] = alpha * a[z] @ b[z] + beta * c[z]
// for strided views (strides in elements, any sign; 0 for a broadcast batch). Every
// integer product, and float products small enough that cuBLAS's host work would cost
// more than the product itself.
//
// T is the element type, U the accumulator, W what an element passes through on its way
// to U. Integers wrap as numpy's integer matmul does: U is the unsigned integer of 32 bits
// for elements of up to 32 bits, 64 otherwise, and W is long long (sign-extended first):
// the sum modulo 2^bits(U) is the sum modulo 2^bits(T) once cast to T, so the result is
// numpy's whatever U is. Floats accumulate in their own type (U = W = T), as cuBLAS's
// full-precision GEMM does.
//
// 16x16 tiles of a and b in shared memory, one output element a thread; grid-stride over
// columns (x), rows (y) and batch (z), each block uniformly (its __syncthreads agree). A
// launch writing a tensor the op made carries its scope's cancel word: a cancelled
// scope's blocks return at once.
template <typename T, typename U, typename W>
__global__ void ca_tiled_gemm(T* c, const T* a, const T* b, long long batch, long long m,
                              long long n, long long k, long long sab, long long sam,
                              long long sak, long long sbb, long long sbk, long long sbn,
                              long long scb, long long scm, long long scn, U alpha, U beta,
                              unsigned long long cuasync_cancel_word_) {
    if (ca_block_cancelled(cuasync_cancel_word_)) return;  // a cancelled scope's: skipped
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
                    ta[ty][tx] = (row < m && ka < k) ? (U)(W)a[z * sab + row * sam + ka * sak] : (U)0;
                    tb[ty][tx] = (kb < k && col < n) ? (U)(W)b[z * sbb + kb * sbk + col * sbn] : (U)0;
                    __syncthreads();
#pragma unroll
                    for (int j = 0; j < 16; j++) acc += ta[ty][j] * tb[j][tx];
                    __syncthreads();
                }
                if (row < m && col < n) {
                    T* p = c + z * scb + row * scm + col * scn;
                    U v = alpha * acc;
                    if (beta != (U)0) v += beta * (U)(W)*p;
                    *p = (T)v;
                }
            }
        }
    }
}
