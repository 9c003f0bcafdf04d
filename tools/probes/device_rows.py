"""The device rows of issue 32 item 6 (and issue 33's bfloat16 add): candidate kernels.

For each row still under 0.95 x torch's bandwidth (``bench ops --only reductions,adds``,
H200 2026-12-03) the current cuasync op, 2-4 candidate kernels (raw CUDA C compiled
through ``cuasync.Kernel``; production code is not touched) and torch's op are timed on
one stream with device events (``cuasync.bench``'s gated per-call timing), the
candidates of a row interleaved in each of 5 rounds, the median call of each round, the
median round kept. One table: row, variant, us, GB/s, time ratio (torch's time over the
variant's: >= 0.95 is the target), max abs error against torch's result.

Rows: ``sum``/``max``/``min`` over axis 0 of (8192, 8192) float32; ``max``/``min`` of
all of 256 MiB float32; float32 add of 64 MiB (and 256 MiB, the row that is met, as a
guard) and bfloat16 add of 64 MiB operands. The ``current ... data`` variants of the
axis-0 rows time the current op on the bench's data of the other op (the bench sums
ones and takes the max of uniform values) to tell data from kernel.

    python tools/probes/device_rows.py            # a GPU (CUASYNC_BACKEND=cuda), torch
    python tools/probes/device_rows.py --only add # rows whose name contains "add"

Since phase 2 (2026-12-03) the ``current (cuasync op)`` variants run the ported kernels
(``ca_cols4`` for the axis-0 rows, ``ca_whole4`` for whole max/min, 1 vector a thread in
blocks of 128 for the adds, bfloat16 rounded in cvt.rn.bf16x2 pairs with NaN lanes made
cuasync's); ``current kernel, raw launches`` is the generic reduction kernel they
replaced (still the fallback). New candidates: float32 add with ld.global.nc
L1::no_allocate loads and st.global.cs stores, and a looping grid of 8 blocks an SM;
bfloat16 add 2 x 8 a thread in blocks of 128, the nc/cs variant, and the 8/SM loop; a
whole-array sum through ``ca_whole4`` beside the max/min rows. The add rows also time
the op on torch's buffers and torch's add on cuasync's (through DLPack): memory or kernel.

On the emulator it says that it needs a GPU, parses every kernel source through
``cuasync.Kernel`` (and compiles it for sm_90 where NVRTC is installed) and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
from gpu_probe import offline_check, time_row

import cuasync
from cuasync._backends import get_backend
from cuasync._launch import builtin
from cuasync._ops.reduce_codegen import ReduceSpec, float4_kernel, kernel_for
from cuasync._tensor import Tensor

BLOCK = 256

# -- kernel sources -----------------------------------------------------------------------
# The combines: one PTX instruction each (max.NaN / min.NaN propagate NaN as numpy does,
# sm_80 and later), applied per lane of a float4.
_COMMON = r"""
__device__ __forceinline__ float c_sum(float a, float b) { return a + b; }
__device__ __forceinline__ float c_max(float a, float b) {
    float r; asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r;
}
__device__ __forceinline__ float c_min(float a, float b) {
    float r; asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r;
}
__device__ __forceinline__ float comb(float a, float b) { return COMB(a, b); }
__device__ __forceinline__ float4 comb(float4 a, float4 b) {
    return make_float4(COMB(a.x, b.x), COMB(a.y, b.y), COMB(a.z, b.z), COMB(a.w, b.w));
}
template <typename V> __device__ __forceinline__ V ident();
template <> __device__ __forceinline__ float ident<float>() { return IDENT; }
template <> __device__ __forceinline__ float4 ident<float4>() {
    return make_float4(IDENT, IDENT, IDENT, IDENT);
}
// a partial written by another block: read through L2 (never a stale L1 line)
__device__ __forceinline__ float ldcg(const float* p) { return __ldcg(p); }
__device__ __forceinline__ float4 ldcg(const float4* p) { return __ldcg(p); }
"""

_IDENT = {"sum": "0.0f", "max": "__int_as_float(0xff800000)", "min": "__int_as_float(0x7f800000)"}

# Axis 0 of (R, N): a block is 32 threads across columns (V = float: 32 columns, a warp
# reads 128 bytes a row; float4: 128 columns, 512 bytes a row) by 8 warps; blockIdx.y is a
# split of rows_per_split rows, warp ty reading rows ty, ty + 8, ... of it, 8 loads in
# flight a thread. The 8 warps combine in shared memory. With one_pass the last block of
# a column strip to finish (a counter per strip, reset by that block) combines the
# strip's partials in split order, so one launch does all; else cols_finish does.
_COLS = r"""
template <typename V, int MINB>
__global__ void __launch_bounds__(256, MINB)
cols(const float* xp, float* outp, float* partp, int* count, long long R, long long N,
     long long rows_per_split, int splits, int one_pass) {
    constexpr int W = sizeof(V) / sizeof(float);
    const V* x = (const V*)xp;
    V* part = (V*)partp;
    V* out = (V*)outp;
    const long long nv = N / W;
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const long long c = (long long)blockIdx.x * 32 + tx;
    const long long lo = (long long)blockIdx.y * rows_per_split;
    const long long hi = lo + rows_per_split < R ? lo + rows_per_split : R;
    V a = ident<V>();
    if (c < nv) {
        long long r = lo + ty;
        for (; r + 56 < hi; r += 64) {
            V v[8];
            #pragma unroll
            for (int u = 0; u < 8; u++) v[u] = x[(r + 8 * u) * nv + c];
            a = comb(a, comb(comb(comb(v[0], v[1]), comb(v[2], v[3])),
                             comb(comb(v[4], v[5]), comb(v[6], v[7]))));
        }
        for (; r < hi; r += 8) a = comb(a, x[r * nv + c]);
    }
    __shared__ V sh[8][32];
    __shared__ int last;
    sh[ty][tx] = a;
    __syncthreads();
    if (ty == 0 && c < nv) {
        #pragma unroll
        for (int g = 1; g < 8; g++) a = comb(a, sh[g][tx]);
        if (splits == 1) out[c] = a;
        else part[(long long)blockIdx.y * nv + c] = a;
    }
    if (splits == 1 || !one_pass) return;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&count[blockIdx.x], 1) == splits - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    a = ident<V>();
    if (c < nv) {
        for (int s = ty; s < splits; s += 8) a = comb(a, ldcg(&part[(long long)s * nv + c]));
    }
    sh[ty][tx] = a;
    __syncthreads();
    if (ty == 0 && c < nv) {
        #pragma unroll
        for (int g = 1; g < 8; g++) a = comb(a, sh[g][tx]);
        out[c] = a;
    }
    if (threadIdx.x == 0) count[blockIdx.x] = 0;
}

__global__ void cols_finish(const float* partp, float* outp, long long N, int splits) {
    const float4* part = (const float4*)partp;
    const long long nv = N / 4, c = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= nv) return;
    float4 a = ident<float4>();
    for (int s = 0; s < splits; s++) a = comb(a, part[(long long)s * nv + c]);
    ((float4*)outp)[c] = a;
}
"""

# All of a contiguous array: L float4 loads in flight a thread, a block's L * blockDim
# vectors contiguous, the grid striding over the array; each lane of a float4 its own
# chain of combines; 32 registers (8 blocks of 256 an SM, no spills). Block results
# combine in one launch (the last block to finish) or, without one_pass, in whole_finish.
_WHOLE = r"""
__device__ __forceinline__ float block_comb(float s) {
    __shared__ float w[32];
    #pragma unroll
    for (int d = 16; d > 0; d >>= 1) s = comb(s, __shfl_xor_sync(0xffffffffu, s, d));
    if ((threadIdx.x & 31) == 0) w[threadIdx.x >> 5] = s;
    __syncthreads();
    s = (int)threadIdx.x < (int)(blockDim.x >> 5) ? w[threadIdx.x] : IDENT;
    if (threadIdx.x < 32) {
        #pragma unroll
        for (int d = 16; d > 0; d >>= 1) s = comb(s, __shfl_xor_sync(0xffffffffu, s, d));
    }
    return s;  // (in thread 0)
}

template <int L>
__global__ void __launch_bounds__(256, 8)
whole(const float* xp, float* out, float* part, int* count, long long n, int one_pass) {
    const float4* x = (const float4*)xp;
    const long long n4 = n / 4, T = blockDim.x, step = (long long)gridDim.x * T * L;
    float4 a = ident<float4>();
    long long i = (long long)blockIdx.x * T * L + threadIdx.x;
    for (; i + (L - 1) * T < n4; i += step) {
        float4 v[L];
        #pragma unroll
        for (int u = 0; u < L; u++) v[u] = x[i + u * T];
        #pragma unroll
        for (int u = 0; u < L; u++) a = comb(a, v[u]);
    }
    #pragma unroll
    for (int u = 0; u < L; u++) {
        if (i + u * T < n4) a = comb(a, x[i + u * T]);
    }
    float s = comb(comb(a.x, a.y), comb(a.z, a.w));
    if (blockIdx.x == 0 && threadIdx.x < n - n4 * 4) s = comb(s, xp[n4 * 4 + threadIdx.x]);
    s = block_comb(s);
    __shared__ int last;
    if (gridDim.x == 1) {
        if (threadIdx.x == 0) out[0] = s;
        return;
    }
    if (threadIdx.x == 0) part[blockIdx.x] = s;
    if (!one_pass) return;
    __threadfence();
    if (threadIdx.x == 0) last = atomicAdd(count, 1) == (int)gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    s = IDENT;
    for (int b = threadIdx.x; b < (int)gridDim.x; b += blockDim.x) s = comb(s, ldcg(&part[b]));
    __syncthreads();  // (block_comb's shared words are reused)
    s = block_comb(s);
    if (threadIdx.x == 0) {
        out[0] = s;
        count[0] = 0;
    }
}

__global__ void whole_finish(const float* part, float* out, int blocks) {
    float s = IDENT;
    for (int b = threadIdx.x; b < blocks; b += blockDim.x) s = comb(s, part[b]);
    s = block_comb(s);
    if (threadIdx.x == 0) out[0] = s;
}
"""

# c = a + b, float32: V float4 vectors of each operand a thread, all loaded before any is
# added, a block's V * blockDim vectors contiguous, one pass of the grid (no stride
# loop); CS: streaming stores (st.global.cs: evict first, the output is not read again).
_ADD = r"""
template <int V, int CS>
__global__ void add4(const float* a, const float* b, float* c, long long n) {
    const long long n4 = n / 4, T = blockDim.x;
    const long long base = (long long)blockIdx.x * T * V + threadIdx.x;
    float4 x[V], y[V];
    #pragma unroll
    for (int u = 0; u < V; u++) {
        const long long j = base + u * T;
        if (j < n4) { x[u] = ((const float4*)a)[j]; y[u] = ((const float4*)b)[j]; }
    }
    #pragma unroll
    for (int u = 0; u < V; u++) {
        const long long j = base + u * T;
        if (j >= n4) break;
        float4 r = make_float4(x[u].x + y[u].x, x[u].y + y[u].y, x[u].z + y[u].z,
                               x[u].w + y[u].w);
        if (CS) __stcs(&((float4*)c)[j], r);
        else ((float4*)c)[j] = r;
    }
    if (blockIdx.x == 0 && threadIdx.x < n - n4 * 4) {
        const long long i = n4 * 4 + threadIdx.x;
        c[i] = a[i] + b[i];
    }
}

// loads through the non-coherent path, not kept in L1 (each byte is read once)
__device__ __forceinline__ float4 ld_nc(const float4* p) {
    float4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
}

// 1 float4 of each operand a thread, one pass, ld.global.nc.L1::no_allocate loads and
// st.global.cs stores
__global__ void add4_nc(const float* a, const float* b, float* c, long long n) {
    const long long n4 = n / 4, j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j < n4) {
        const float4 x = ld_nc((const float4*)a + j), y = ld_nc((const float4*)b + j);
        __stcs(&((float4*)c)[j], make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w));
    }
    if (blockIdx.x == 0 && threadIdx.x < n - n4 * 4) {
        const long long i = n4 * 4 + threadIdx.x;
        c[i] = a[i] + b[i];
    }
}

// 1 float4 of each operand a thread, one pass, __ldg loads (ld.global.nc, what a
// compiler makes of const __restrict__ inputs); CS: st.global.cs stores
template <int CS>
__global__ void add4_ldg(const float* a, const float* b, float* c, long long n) {
    const long long n4 = n / 4, j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j < n4) {
        const float4 x = __ldg((const float4*)a + j), y = __ldg((const float4*)b + j);
        const float4 r = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
        if (CS) __stcs(&((float4*)c)[j], r);
        else ((float4*)c)[j] = r;
    }
    if (blockIdx.x == 0 && threadIdx.x < n - n4 * 4) {
        const long long i = n4 * 4 + threadIdx.x;
        c[i] = a[i] + b[i];
    }
}

// a grid of exactly 8 blocks an SM looping over the array, V float4 of each operand in
// flight a thread an iteration
template <int V>
__global__ void __launch_bounds__(256, 8) add4_loop(const float* a, const float* b, float* c,
                                                    long long n) {
    const long long n4 = n / 4, T = blockDim.x, step = (long long)gridDim.x * T * V;
    for (long long base = (long long)blockIdx.x * T * V + threadIdx.x; base < n4; base += step) {
        float4 x[V], y[V];
        #pragma unroll
        for (int u = 0; u < V; u++) {
            const long long j = base + u * T;
            if (j < n4) { x[u] = ((const float4*)a)[j]; y[u] = ((const float4*)b)[j]; }
        }
        #pragma unroll
        for (int u = 0; u < V; u++) {
            const long long j = base + u * T;
            if (j < n4) {
                ((float4*)c)[j] = make_float4(x[u].x + y[u].x, x[u].y + y[u].y,
                                              x[u].z + y[u].z, x[u].w + y[u].w);
            }
        }
    }
    if (blockIdx.x == 0 && threadIdx.x < n - n4 * 4) {
        const long long i = n4 * 4 + threadIdx.x;
        c[i] = a[i] + b[i];
    }
}
"""

# c = a + b, bfloat16: 8 elements a 16-byte load (uint4), computed in float32 (a
# bfloat16 is the top half of a float), rounded once to nearest even. R = 1: a pair a
# cvt.rn.bf16x2.f32 (what __float22bfloat162_rn compiles to; its NaN is the canonical
# 0x7fff); R = 0: integer rounding per element, quiet NaN keeping its sign (as cuasync's).
_ADD_BF16 = r"""
__device__ __forceinline__ unsigned bf_pair_cvt(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ unsigned bf_bits(float f) {
    unsigned u = __float_as_uint(f);
    if (f != f) return ((u >> 16) & 0x8000u) | 0x7fc0u;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
template <int R>
__device__ __forceinline__ unsigned bf_add2(unsigned p, unsigned q) {
    const float lo = __uint_as_float(p << 16) + __uint_as_float(q << 16);
    const float hi = __uint_as_float(p & 0xffff0000u) + __uint_as_float(q & 0xffff0000u);
    if (R) return bf_pair_cvt(lo, hi);
    return bf_bits(lo) | (bf_bits(hi) << 16);
}
// as cuasync's op: cvt.rn.bf16x2 pairs, a NaN lane made quiet with its sign kept
__device__ __forceinline__ unsigned bf_add2_fix(unsigned p, unsigned q) {
    const float lo = __uint_as_float(p << 16) + __uint_as_float(q << 16);
    const float hi = __uint_as_float(p & 0xffff0000u) + __uint_as_float(q & 0xffff0000u);
    unsigned r = bf_pair_cvt(lo, hi);
    if (lo != lo) r = (r & 0xffff0000u) | bf_bits(lo);
    if (hi != hi) r = (r & 0xffffu) | (bf_bits(hi) << 16);
    return r;
}
__device__ __forceinline__ uint4 ld_nc_u4(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ uint4 bf_add8(uint4 x, uint4 y) {
    return make_uint4(bf_add2_fix(x.x, y.x), bf_add2_fix(x.y, y.y), bf_add2_fix(x.z, y.z),
                      bf_add2_fix(x.w, y.w));
}
__device__ __forceinline__ void bf_tail(const void* ap, const void* bp, void* cp, long long n) {
    const long long n8 = n / 8;
    if (blockIdx.x == 0 && threadIdx.x < n - n8 * 8) {  // the last < 8 elements
        const long long i = n8 * 8 + threadIdx.x;
        const float f = __uint_as_float((unsigned)((const unsigned short*)ap)[i] << 16) +
                        __uint_as_float((unsigned)((const unsigned short*)bp)[i] << 16);
        ((unsigned short*)cp)[i] = (unsigned short)bf_bits(f);
    }
}

// V x 8 bf16 a thread, one pass; NC 1: ld.global.nc.L1::no_allocate loads, 2: __ldg
// (ld.global.nc); CS: st.global.cs
template <int V, int NC, int CS>
__global__ void addbf_fix(const void* ap, const void* bp, void* cp, long long n) {
    const uint4* a = (const uint4*)ap;
    const uint4* b = (const uint4*)bp;
    uint4* c = (uint4*)cp;
    const long long n8 = n / 8, T = blockDim.x;
    const long long base = (long long)blockIdx.x * T * V + threadIdx.x;
    uint4 x[V], y[V];
    #pragma unroll
    for (int u = 0; u < V; u++) {
        const long long j = base + u * T;
        if (j < n8) {
            x[u] = NC == 1 ? ld_nc_u4(a + j) : NC == 2 ? __ldg(a + j) : a[j];
            y[u] = NC == 1 ? ld_nc_u4(b + j) : NC == 2 ? __ldg(b + j) : b[j];
        }
    }
    #pragma unroll
    for (int u = 0; u < V; u++) {
        const long long j = base + u * T;
        if (j >= n8) break;
        const uint4 r = bf_add8(x[u], y[u]);
        if (CS) __stcs(c + j, r);
        else c[j] = r;
    }
    bf_tail(ap, bp, cp, n);
}

// a grid of exactly 8 blocks of 256 an SM looping, 1 x 8 bf16 a thread an iteration
__global__ void __launch_bounds__(256, 8) addbf_loop(const void* ap, const void* bp, void* cp,
                                                     long long n) {
    const uint4* a = (const uint4*)ap;
    const uint4* b = (const uint4*)bp;
    uint4* c = (uint4*)cp;
    const long long n8 = n / 8, step = (long long)gridDim.x * blockDim.x;
    for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < n8; j += step) {
        c[j] = bf_add8(a[j], b[j]);
    }
    bf_tail(ap, bp, cp, n);
}

template <int V, int R>
__global__ void addbf(const void* ap, const void* bp, void* cp, long long n) {
    const uint4* a = (const uint4*)ap;
    const uint4* b = (const uint4*)bp;
    uint4* c = (uint4*)cp;
    const long long n8 = n / 8, T = blockDim.x;
    const long long base = (long long)blockIdx.x * T * V + threadIdx.x;
    uint4 x[V], y[V];
    #pragma unroll
    for (int u = 0; u < V; u++) {
        const long long j = base + u * T;
        if (j < n8) { x[u] = a[j]; y[u] = b[j]; }
    }
    #pragma unroll
    for (int u = 0; u < V; u++) {
        const long long j = base + u * T;
        if (j >= n8) break;
        c[j] = make_uint4(bf_add2<R>(x[u].x, y[u].x), bf_add2<R>(x[u].y, y[u].y),
                          bf_add2<R>(x[u].z, y[u].z), bf_add2<R>(x[u].w, y[u].w));
    }
    if (blockIdx.x == 0 && threadIdx.x < n - n8 * 8) {  // the last < 8 elements
        const long long i = n8 * 8 + threadIdx.x;
        const unsigned short* as = (const unsigned short*)ap;
        const unsigned short* bs = (const unsigned short*)bp;
        const float f = __uint_as_float((unsigned)as[i] << 16) +
                        __uint_as_float((unsigned)bs[i] << 16);
        ((unsigned short*)cp)[i] = (unsigned short)bf_bits(f);
    }
}
"""


def _source(body: str, op: str = "sum") -> str:
    return f"#define COMB c_{op}\n#define IDENT {_IDENT[op]}\n{_COMMON}{body}"


def kernels() -> dict[str, cuasync.Kernel]:
    """Every candidate kernel, by a short name (parsed, not compiled)."""
    ks: dict[str, cuasync.Kernel] = {}
    for op in ("sum", "max", "min"):
        cols = _source(_COLS, op)
        ks[f"cols1 {op}"] = cuasync.Kernel(cols, "cols<float, 1>")
        ks[f"cols4 {op}"] = cuasync.Kernel(cols, "cols<float4, 1>")
        ks[f"cols4 8/SM {op}"] = cuasync.Kernel(cols, "cols<float4, 8>")
        ks[f"cols_finish {op}"] = cuasync.Kernel(cols, "cols_finish")
    for op in ("max", "min"):
        whole = _source(_WHOLE, op)
        for loads in (4, 8):
            ks[f"whole{loads} {op}"] = cuasync.Kernel(whole, f"whole<{loads}>")
        ks[f"whole_finish {op}"] = cuasync.Kernel(whole, "whole_finish")
    add = _source(_ADD)
    for v, cs in ((1, 0), (2, 0), (4, 0), (2, 1)):
        ks[f"add4 {v} {cs}"] = cuasync.Kernel(add, f"add4<{v}, {cs}>")
    ks["add4_nc"] = cuasync.Kernel(add, "add4_nc")
    for cs in (0, 1):
        ks[f"add4_ldg {cs}"] = cuasync.Kernel(add, f"add4_ldg<{cs}>")
    ks["add4_loop 2"] = cuasync.Kernel(add, "add4_loop<2>")
    bf = _source(_ADD_BF16)
    for v, r in ((1, 1), (2, 1), (2, 0)):
        ks[f"addbf {v} {r}"] = cuasync.Kernel(bf, f"addbf<{v}, {r}>")
    for v, nc, cs in ((2, 0, 0), (1, 1, 1), (1, 2, 0), (1, 2, 1), (1, 0, 1), (2, 2, 0)):
        ks[f"addbf_fix {v} {nc} {cs}"] = cuasync.Kernel(bf, f"addbf_fix<{v}, {nc}, {cs}>")
    ks["addbf_loop"] = cuasync.Kernel(bf, "addbf_loop")
    return ks


# -- timing -------------------------------------------------------------------------------
Variant = Callable[[], Any]  # enqueues one call on STREAM; returns the last op or None


def _host(t: Any) -> np.ndarray:
    """A cuasync tensor's or a torch tensor's values as float64 numpy."""
    if isinstance(t, cuasync.Tensor):
        return np.asarray(t.to_host().sync()).astype(np.float64)
    return t.detach().float().cpu().numpy().astype(np.float64)


class Table:
    """The rows printed at the end: row, variant, us, GB/s, torch's time / this one's,
    max abs error against torch's result."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(
        self,
        row: str,
        nbytes: int,
        variants: dict[str, Variant],
        outs: dict[str, Any],
        torch_name: str,
        stream: cuasync.Stream,
    ) -> None:
        import torch

        torch.cuda.synchronize()  # torch's inputs, made on its own stream
        for fn in variants.values():  # once, checked, before timing
            out = fn()
            if out is not None:
                out.submit_on(stream)
        stream.synchronize()
        ref = _host(outs[torch_name])
        errors = {
            name: float(np.max(np.abs(_host(o).reshape(ref.shape) - ref)))
            for name, o in outs.items()
        }
        us = time_row(variants, stream)
        for name, t in us.items():
            ratio = us[torch_name] / t
            err = errors.get(name)
            err_text = "-" if err is None else f"{err:.3g}"
            self.lines.append(
                f"{row:<26} {name:<44} {t:9.2f} {nbytes / t / 1e3:8,.0f} {ratio:7.3f} {err_text:>9}"
            )
        self.lines.append("")
        print(f"  {row}: done", flush=True)

    def print(self) -> None:
        head = f"{'row':<26} {'variant':<44} {'us':>9} {'GB/s':>8} {'torch/':>7} {'max err':>9}"
        print(head)
        print("-" * len(head))
        for line in self.lines:
            print(line)


# -- the rows -----------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="", help="rows whose name contains this")
    only = parser.parse_args().only
    ks = kernels_cache()
    if not get_backend().driver_handles:
        return offline_check("device_rows", ks)
    import torch

    start = time.perf_counter()
    stream = cuasync.Device(0).new_stream()
    ext = torch.cuda.ExternalStream(stream.handle)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"device_rows: {cuasync.Device(0).name}, {sms} SMs, torch {torch.__version__}")
    for k in ks.values():
        k.compile_image(_arch())
    table = Table()
    rows = [_axis0, _whole, _add32, _add_bf16]
    for fn in rows:
        fn(table, stream, ext, sms, only)
    table.print()
    print(f"({time.perf_counter() - start:.1f} s)")
    return 0


def _arch() -> str:
    major, minor = cuasync.Device(0).compute_capability
    return f"sm_{major}{minor}"


def _torch_call(ext: Any, call: Callable[[], Any]) -> Variant:
    """``call()`` made with ``ext`` (the probe's stream) torch's current stream."""
    import torch

    def run() -> None:
        with torch.cuda.stream(ext):
            call()

    return run


def _axis0(table: Table, stream: Any, ext: Any, sms: int, only: str) -> None:
    import torch

    r, n = 8192, 8192
    rng = np.random.default_rng(0)
    host = rng.random((r, n), np.float32)
    x = cuasync.from_host(host).sync()
    ones = cuasync.full((r, n), 1.0, "float32").sync()
    xt = torch.as_tensor(host, device="cuda")
    tones = torch.ones((r, n), device="cuda")
    ks = kernels_cache()
    for op in ("sum", "max", "min"):
        row = f"{op} axis 0 (8192, 8192)"
        if only and only not in row:
            continue
        fn = getattr(cuasync, op)
        outs: dict[str, Any] = {}
        variants: dict[str, Variant] = {}
        cur = outs["current (cuasync op)"] = fn(x, axis=0).sync()
        variants["current (cuasync op)"] = partial(fn, x, axis=0, out=cur)
        # the bench sums ones and takes the max/min of uniform values: both data here
        cur2 = fn(ones, axis=0).sync()
        variants["current on ones (diagnostic)"] = partial(fn, ones, axis=0, out=cur2)

        def cols(
            vec: int, splits: int, one_pass: bool, bound: str = "", op: str = op
        ) -> tuple[Variant, Any]:
            out = cuasync.full((n,), 0.0, "float32").sync()
            part = cuasync.full((splits * n,), 0.0, "float32").sync()
            strips = n // (32 * vec)
            count = cuasync.full((strips,), 0, "int32").sync()
            k = ks[f"cols{vec} {bound}{op}"]
            rows_per = -(-r // splits)
            finish = ks[f"cols_finish {op}"]

            def call() -> Any:
                first = k.launch(
                    x,
                    out,
                    part,
                    count,
                    r,
                    n,
                    rows_per,
                    splits,
                    int(one_pass),
                    grid=(strips, splits, 1),
                    block=BLOCK,
                )
                if one_pass:
                    return first
                first.submit_on(stream)
                return finish.launch(
                    part, out, n, splits, grid=(-(-n // 4 // 128), 1, 1), block=128
                )

            return call, out

        for name, args in (
            ("cols1 32 cols x 8 warps, 8 splits, 1 launch", (1, 8, True)),
            ("cols4 float4 128 cols, 16 splits, 1 launch", (4, 16, True)),
            ("cols4 float4 128 cols, 32 splits, 1 launch", (4, 32, True)),
            ("cols4 float4 128 cols, 32 splits, 2 launches", (4, 32, False)),
            ("cols4 float4, 32 splits, 1 launch, 32 regs (8/SM)", (4, 32, True, "8/SM ")),
        ):
            variants[name], outs[name] = cols(*args)
        name = "ca_cols4 (the op's kernel), raw launch, 16 splits"
        variants[name], outs[name] = _cols4_raw(op, x, 16)
        for splits in (8, 16, 32):  # 8: what the generic kernel picks for (8192, 8192)
            name = f"current kernel, raw launches, {splits} splits"
            variants[name], outs[name] = _current_kernel(op, x, 1, splits, stream)
        which = {"sum": "sum", "max": "amax", "min": "amin"}[op]
        tname = f"torch x.{which}(dim=0)"
        method = getattr(xt, which)
        outs[tname] = method(dim=0)
        variants[tname] = _torch_call(ext, partial(method, dim=0))
        on_ones = getattr(tones, which)
        variants["torch on ones (diagnostic)"] = _torch_call(ext, partial(on_ones, dim=0))
        table.add(row, r * n * 4, variants, outs, tname, stream)


def _current_kernel(
    op: str, x: cuasync.Tensor, nk: int, splits: int, stream: cuasync.Stream
) -> tuple[Variant, Any]:
    """The op's own generated kernel (``reduce_codegen.kernel_for``) launched as the op
    launches it, its workspace made once (the op allocates it each call), ``splits``
    passed explicitly: ``nk`` 1, axis 0 of a matrix (``mode 1``, a block 32 columns by 8
    groups, grid (columns / 32, splits)); ``nk`` 0, all of a vector (``mode 2``, 16-byte
    loads, ``splits`` blocks). Phase 1 combines the partials in a second launch."""
    kernel = kernel_for(("x", 0, "float32"), ReduceSpec(op, "float32", "float32"), nk, 1)
    if nk:
        r, n = x.shape
        m, k, mode, grid, rows = n, r, 1, (n // 32, splits, 1), (n // 32, 1, 1)
        dims: tuple[int, ...] = (n, r, 1, 1, n)  # da0, db0, os0, x0a0 (kept), x0b0 (reduced)
    else:
        m, k, mode, grid, rows = 1, x.size, 2, (splits, 1, 1), (1, 1, 1)
        dims = (x.size, 1)  # db0, x0b0
    chunk = -(-k // splits)
    chunk = -(-chunk // 4) * 4
    out = cuasync.full((m,), 0.0, "float32").sync()
    ws = cuasync.full((m * splits,), 0.0, "float32").sync()

    # x seen as the op passes it: (kept, reduced), strides in elements
    strides = (1, x.shape[1]) if nk else (1,)
    view = builtin.storage_view(Tensor(x.allocation, (m, k)[-1 - nk :], x.dtype, strides, x.offset))

    def call() -> Any:
        head = (out, ws, view, m, k, splits, chunk)
        kernel.launch(*head, 0, mode, *dims, grid=grid, block=BLOCK).submit_on(stream)
        return kernel.launch(*head, 1, mode, *dims, grid=rows, block=BLOCK)

    return call, out


def _cols4_raw(op: str, x: cuasync.Tensor, splits: int) -> tuple[Variant, Any]:
    """The op's ``ca_cols4`` over axis 0 of ``x`` launched raw: its workspace made once
    (no allocation and no counter memset a call, which the op does), to tell the kernel
    from what the op adds around it."""
    r, n = x.shape
    kernel = float4_kernel(op, whole=False)
    out = cuasync.full((n,), 0.0, "float32").sync()
    part = cuasync.full((splits * n,), 0.0, "float32").sync()
    count = cuasync.full((-(-n // 128),), 0, "uint32").sync()
    rows = -(-r // splits)
    grid = (-(-n // 128), splits, 1)
    call = partial(kernel.launch, out, part, count, x, r, n, n, rows, splits, grid=grid, block=256)
    return call, out


def _whole4_sum(x: cuasync.Tensor, blocks: int) -> Variant:
    """The production ``ca_whole4`` (``reduce_codegen.float4_kernel``) summing ``x``, its
    workspace made once (its counter starts at zero; the last block sets it back)."""
    kernel = float4_kernel("sum", whole=True)
    out = cuasync.full((1,), 0.0, "float32").sync()
    part = cuasync.full((blocks,), 0.0, "float32").sync()
    count = cuasync.full((1,), 0, "uint32").sync()
    return partial(kernel.launch, out, part, count, x, x.size, grid=(blocks, 1, 1), block=256)


_KS: dict[str, cuasync.Kernel] = {}


def kernels_cache() -> dict[str, cuasync.Kernel]:
    if not _KS:
        _KS.update(kernels())
    return _KS


def _whole(table: Table, stream: Any, ext: Any, sms: int, only: str) -> None:
    import torch

    n = 64 << 20
    host = np.random.default_rng(1).random(n, np.float32)
    x = cuasync.from_host(host).sync()
    xt = torch.as_tensor(host, device="cuda")
    ks = kernels_cache()
    for op in ("max", "min"):
        row = f"{op} all of 256 MiB"
        if only and only not in row:
            continue
        fn = getattr(cuasync, op)
        outs: dict[str, Any] = {}
        variants: dict[str, Variant] = {}
        cur = outs["current (cuasync op)"] = fn(x).sync()
        variants["current (cuasync op)"] = partial(fn, x, out=cur)
        total = cuasync.sum(x).sync()
        variants["cuasync sum, same bytes (diagnostic)"] = partial(cuasync.sum, x, out=total)

        def whole(loads: int, blocks: int, one_pass: bool, op: str = op) -> tuple[Variant, Any]:
            out = cuasync.full((1,), 0.0, "float32").sync()
            part = cuasync.full((blocks,), 0.0, "float32").sync()
            count = cuasync.full((1,), 0, "int32").sync()
            k, finish = ks[f"whole{loads} {op}"], ks[f"whole_finish {op}"]

            def call() -> Any:
                first = k.launch(
                    x, out, part, count, n, int(one_pass), grid=(blocks, 1, 1), block=BLOCK
                )
                if one_pass:
                    return first
                first.submit_on(stream)
                return finish.launch(part, out, blocks, grid=(1, 1, 1), block=1024)

            return call, out

        for name, args in (
            ("float4 x4 in flight, 2048 blocks, 2 launches", (4, 2048, False)),
            ("float4 x4 in flight, 2048 blocks, 1 launch", (4, 2048, True)),
            (f"float4 x8 in flight, {8 * sms} blocks (8/SM), 1 launch", (8, 8 * sms, True)),
            (f"float4 x4 in flight, {16 * sms} blocks, 1 launch", (4, 16 * sms, True)),
        ):
            variants[name], outs[name] = whole(*args)
        name = "current kernel, raw launches (no allocations)"
        variants[name], outs[name] = _current_kernel(op, x, 0, 2048, stream)
        # would a sum of all take ca_whole4 too? (the op's sums of all do not, unmeasured)
        name = f"ca_whole4 sum, {8 * sms} blocks, raw launch (diagnostic)"
        variants[name] = _whole4_sum(x, 8 * sms)
        tname = f"torch x.a{op}()"
        method = getattr(xt, f"a{op}")
        outs[tname] = method()
        variants[tname] = _torch_call(ext, method)
        table.add(row, n * 4, variants, outs, tname, stream)


def _add32(table: Table, stream: Any, ext: Any, sms: int, only: str) -> None:
    import torch

    ks = kernels_cache()
    for mib in (64, 256):
        row = f"float32 add {mib} MiB"
        if only and only not in row:
            continue
        n = mib * (1 << 20) // 4
        a, b, c = (cuasync.full((n,), v, "float32").sync() for v in (0.5, 2.0, 0.0))
        ta, tb, tc = (torch.full((n,), v, device="cuda") for v in (0.5, 2.0, 0.0))
        outs: dict[str, Any] = {"current (cuasync op)": c}
        variants: dict[str, Variant] = {"current (cuasync op)": partial(cuasync.add, a, b, out=c)}
        for v, cs, block in ((1, 0, 128), (2, 0, 256), (4, 0, 256), (2, 1, 256)):
            out = cuasync.full((n,), 0.0, "float32").sync()
            grid = -(-(n // 4) // (block * v))
            name = f"{v} float4/thread, block {block}, {grid} blocks{', st.cs' if cs else ''}"
            k = ks[f"add4 {v} {cs}"]
            variants[name] = partial(k.launch, a, b, out, n, grid=(grid, 1, 1), block=block)
            outs[name] = out
        # new candidates (2026-12-03, phase 2): the op is now 1 float4/thread, block 128
        grid = -(-(n // 4) // 128)
        for name, k, shape in (
            (
                f"1 float4/thread, block 128, ld.nc no_allocate + st.cs, {grid} blocks",
                ks["add4_nc"],
                (grid, 128),
            ),
            (
                f"2 float4/thread/iteration, {8 * sms} blocks of 256 (8/SM) looping",
                ks["add4_loop 2"],
                (8 * sms, 256),
            ),
            (
                f"1 float4/thread, block 128, __ldg loads, {grid} blocks",
                ks["add4_ldg 0"],
                (grid, 128),
            ),
            (
                f"1 float4/thread, block 128, __ldg + st.cs, {grid} blocks",
                ks["add4_ldg 1"],
                (grid, 128),
            ),
            ("2 float4/thread, block 128", ks["add4 2 0"], (-(-(n // 4) // 256), 128)),
        ):
            out = cuasync.full((n,), 0.0, "float32").sync()
            variants[name] = partial(k.launch, a, b, out, n, grid=(shape[0], 1, 1), block=shape[1])
            outs[name] = out
        _swapped_buffers(variants, outs, ext, (a, b), (ta, tb), "float32")
        tname = "torch.add(a, b, out=c)"
        outs[tname] = tc
        variants[tname] = _torch_call(ext, partial(torch.add, ta, tb, out=tc))
        table.add(row, 3 * n * 4, variants, outs, tname, stream)


def _swapped_buffers(
    variants: dict[str, Variant],
    outs: dict[str, Any],
    ext: Any,
    ours: tuple,
    theirs: tuple,
    dtype: str,
) -> None:
    """The op on torch's operands (and a torch output) and torch's add on cuasync's
    (and a cuasync output), shared through DLPack: tells the memory (allocator,
    placement) from the kernel."""
    import torch

    (a, b), (ta, tb) = ours, theirs
    n = a.shape[0]
    xa, xb = (cuasync.from_dlpack(t) for t in (ta, tb))
    xc = cuasync.from_dlpack(torch.zeros(n, dtype=ta.dtype, device="cuda"))
    name = "current (cuasync op) on torch's buffers"
    variants[name] = lambda: cuasync.add(xa, xb, out=xc)
    outs[name] = xc
    c2 = cuasync.full((n,), 0.0, dtype).sync()
    sa, sb, sc = (torch.from_dlpack(t) for t in (a, b, c2))
    name = "torch.add on cuasync's buffers"
    variants[name] = _torch_call(ext, lambda: torch.add(sa, sb, out=sc))
    outs[name] = c2


def _add_bf16(table: Table, stream: Any, ext: Any, sms: int, only: str) -> None:
    import torch

    row = "bfloat16 add 64 MiB"
    if only and only not in row:
        return
    ks = kernels_cache()
    n = 32 << 20
    rng = np.random.default_rng(2)
    ha, hb = (rng.standard_normal(n, np.float32) for _ in range(2))
    a, b = (cuasync.from_host(h).sync().astype("bfloat16").sync() for h in (ha, hb))
    c = cuasync.full((n,), 0.0, "bfloat16").sync()
    ta, tb = (torch.as_tensor(h, device="cuda").to(torch.bfloat16) for h in (ha, hb))
    tc = torch.empty(n, dtype=torch.bfloat16, device="cuda")
    outs: dict[str, Any] = {"current (cuasync op)": c}
    variants: dict[str, Variant] = {"current (cuasync op)": lambda: cuasync.add(a, b, out=c)}
    for v, rn, block in ((1, 1, 128), (2, 1, 256), (1, 1, 256), (2, 0, 256)):
        out = cuasync.full((n,), 0.0, "bfloat16").sync()
        grid = -(-(n // 8) // (block * v))
        how = "cvt.rn.bf16x2 pairs" if rn else "integer rounding"
        name = f"{v} x 8 bf16/thread, block {block}, {how}"
        k = ks[f"addbf {v} {rn}"]
        variants[name] = partial(k.launch, a, b, out, n, grid=(grid, 1, 1), block=block)
        outs[name] = out
    # new candidates (2026-12-03, phase 2): the op is now 1 x 8 a thread, block 128,
    # cvt.rn.bf16x2 pairs with NaN lanes fixed up; these keep that rounding
    n8 = n // 8
    for name, key, grid, block in (
        ("2 x 8 bf16/thread, block 128, pairs + NaN fix", "addbf_fix 2 0 0", -(-n8 // 256), 128),
        (
            "1 x 8 bf16/thread, block 128, ld.nc no_allocate + st.cs",
            "addbf_fix 1 1 1",
            -(-n8 // 128),
            128,
        ),
        ("1 x 8 bf16/thread, block 128, __ldg loads", "addbf_fix 1 2 0", -(-n8 // 128), 128),
        ("1 x 8 bf16/thread, block 128, __ldg + st.cs", "addbf_fix 1 2 1", -(-n8 // 128), 128),
        ("1 x 8 bf16/thread, block 128, st.cs", "addbf_fix 1 0 1", -(-n8 // 128), 128),
        ("2 x 8 bf16/thread, block 128, __ldg loads", "addbf_fix 2 2 0", -(-n8 // 256), 128),
        (
            f"1 x 8 bf16/thread/iteration, {8 * sms} blocks of 256 (8/SM) looping",
            "addbf_loop",
            8 * sms,
            256,
        ),
    ):
        out = cuasync.full((n,), 0.0, "bfloat16").sync()
        variants[name] = partial(ks[key].launch, a, b, out, n, grid=(grid, 1, 1), block=block)
        outs[name] = out
    _swapped_buffers(variants, outs, ext, (a, b), (ta, tb), "bfloat16")
    tname = "torch.add(a, b, out=c)"
    torch.add(ta, tb, out=tc)
    outs[tname] = tc
    variants[tname] = _torch_call(ext, lambda: torch.add(ta, tb, out=tc))
    table.add(row, 3 * n * 2, variants, outs, tname, stream)


if __name__ == "__main__":
    sys.exit(main())
