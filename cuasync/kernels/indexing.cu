// -- the indexing family: gather, take_along_axis, scatter, dynamic slices, pad ----------
// Every tensor a kernel here reads or writes is contiguous (the Python side gathers views
// first); sizes and offsets are 64-bit; each kernel is a grid-stride loop over the
// elements of its result (of its updates for scatter). A kernel's body (``*_body``) reads
// its operand (x, or scatter's updates) as ``x[i]``: a pointer, or a generated accessor
// computing a fused elementwise expression at i (cuasync/_ops/fused_operand.py).

// An index v into an axis of dim elements: mode 0 wraps (numpy's negative indices, then
// modulo), 1 clips to [0, dim), 2 gives -1 (dropped) for one outside [-dim, dim).
__device__ __forceinline__ long long ca_index(long long v, long long dim, int mode) {
    if (mode == 0) {
        v %= dim;
        return v < 0 ? v + dim : v;
    }
    if (mode == 1) return v < 0 ? 0 : (v >= dim ? dim - 1 : v);
    if (v < 0) v += dim;
    return (v < 0 || v >= dim) ? -1 : v;
}

// cuasync.gather: out[b, p, k, c] = x[b, p, idx[b, k], c] for x seen as (batch, pre, dim,
// inner), idx as (batch, nidx) and out as (batch, pre, nidx, inner). S is the unsigned
// integer of the element's size (double2 for 16 bytes): gathers only move bits.
template <typename S, typename I, typename X>
__device__ __forceinline__ void ca_gather_body(S* out, X x, const I* idx, long long n, long long pre,
                                             long long nidx, long long dim, long long inner,
                                             int mode) {
    for (long long i = ca_first(); i < n; i += ca_stride()) {
        long long c = i % inner, r = i / inner;
        long long k = r % nidx;
        r /= nidx;
        long long p = r % pre, b = r / pre;
        long long v = ca_index((long long)idx[b * nidx + k], dim, mode);
        out[i] = x[((b * pre + p) * dim + v) * inner + c];
    }
}
template <typename S, typename I>
__global__ void ca_gather(S* out, const S* x, const I* idx, long long n, long long pre,
                          long long nidx, long long dim, long long inner, int mode,
                          unsigned long long cuasync_cancel_word_) {
    if (ca_block_cancelled(cuasync_cancel_word_)) return;  // a cancelled scope's: skipped
    ca_gather_body<S, I>(out, x, idx, n, pre, nidx, dim, inner, mode);
}

// cuasync.take_along_axis: out[o, j, c] = x[o, idx[o, j, c], c] for x seen as (outer, dim,
// inner) and idx and out as (outer, nidx, inner).
template <typename S, typename I, typename X>
__device__ __forceinline__ void ca_gather_along_body(S* out, X x, const I* idx, long long n,
                                                   long long nidx, long long dim,
                                                   long long inner, int mode) {
    if (inner == 1) {  // along the last axis: one division (none for a 1-d x)
        for (long long i = ca_first(); i < n; i += ca_stride()) {
            long long v = ca_index((long long)idx[i], dim, mode);
            out[i] = x[(nidx == n ? 0 : i / nidx) * dim + v];
        }
        return;
    }
    for (long long i = ca_first(); i < n; i += ca_stride()) {
        long long c = i % inner, o = i / inner / nidx;
        long long v = ca_index((long long)idx[i], dim, mode);
        out[i] = x[(o * dim + v) * inner + c];
    }
}
template <typename S, typename I>
__global__ void ca_gather_along(S* out, const S* x, const I* idx, long long n, long long nidx,
                                long long dim, long long inner, int mode,
                                unsigned long long cuasync_cancel_word_) {
    if (ca_block_cancelled(cuasync_cancel_word_)) return;  // a cancelled scope's: skipped
    ca_gather_along_body<S, I>(out, x, idx, n, nidx, dim, inner, mode);
}

// -- scatter's combining stores: M 1 add, 2 min, 3 max (0, set, is a plain store) ---------
// Floats compare as numpy's minimum/maximum: a NaN on either side wins.
template <typename T>
__device__ __forceinline__ T ca_pick(T cur, T v, int m) {
    if (m == 2) return (cur != cur || cur < v) ? cur : v;
    return (cur != cur || cur > v) ? cur : v;
}

template <int M>
__device__ __forceinline__ void ca_combine(int* p, int v) {
    if constexpr (M == 1) atomicAdd(p, v);
    else if constexpr (M == 2) atomicMin(p, v);
    else atomicMax(p, v);
}
template <int M>
__device__ __forceinline__ void ca_combine(unsigned int* p, unsigned int v) {
    if constexpr (M == 1) atomicAdd(p, v);
    else if constexpr (M == 2) atomicMin(p, v);
    else atomicMax(p, v);
}
template <int M>
__device__ __forceinline__ void ca_combine(long long* p, long long v) {
    // two's complement: an unsigned add wraps as numpy's int64 add does
    if constexpr (M == 1) atomicAdd((unsigned long long*)p, (unsigned long long)v);
    else if constexpr (M == 2) atomicMin(p, v);
    else atomicMax(p, v);
}
template <int M>
__device__ __forceinline__ void ca_combine(unsigned long long* p, unsigned long long v) {
    if constexpr (M == 1) atomicAdd(p, v);
    else if constexpr (M == 2) atomicMin(p, v);
    else atomicMax(p, v);
}
template <int M>
__device__ __forceinline__ void ca_combine(float* p, float v) {
    if constexpr (M == 1) {
        atomicAdd(p, v);
    } else {  // a compare-and-swap loop on the bits
        int* word = (int*)p;
        int old = *word, seen;
        do {
            seen = old;
            int next = __float_as_int(ca_pick(__int_as_float(seen), v, M));
            if (next == seen) break;
            old = atomicCAS(word, seen, next);
        } while (old != seen);
    }
}
template <int M>
__device__ __forceinline__ void ca_combine(double* p, double v) {
    if constexpr (M == 1) {
        atomicAdd(p, v);
    } else {
        unsigned long long* word = (unsigned long long*)p;
        unsigned long long old = *word, seen;
        do {
            seen = old;
            unsigned long long next = (unsigned long long)__double_as_longlong(
                ca_pick(__longlong_as_double((long long)seen), v, M));
            if (next == seen) break;
            old = atomicCAS(word, seen, next);
        } while (old != seen);
    }
}
template <int M>
__device__ __forceinline__ void ca_combine(float2* p, float2 v) {  // add only
    atomicAdd(&p->x, v.x);
    atomicAdd(&p->y, v.y);
}
template <int M>
__device__ __forceinline__ void ca_combine(double2* p, double2 v) {  // add only
    atomicAdd(&p->x, v.x);
    atomicAdd(&p->y, v.y);
}

// float16 (F 0) and bfloat16 (F 1), stored as unsigned short: a compare-and-swap on the
// aligned 32-bit word holding the element, computing in float32 and rounding once (as
// numpy computes float16 and ml_dtypes bfloat16).
__device__ __forceinline__ float ca_narrow_to_float(unsigned short b, int f) {
    return f ? ca_bf16_to_float(b) : (float)ca_half_to_double(b);
}
template <int M, int F>
__device__ __forceinline__ void ca_combine_narrow(unsigned short* p, unsigned short v) {
    unsigned int* word = (unsigned int*)((unsigned long long)p & ~3ull);
    unsigned int shift = ((unsigned long long)p & 2ull) ? 16u : 0u;
    float value = ca_narrow_to_float(v, F);
    unsigned int old = *word, seen;
    do {
        seen = old;
        unsigned short bits = (unsigned short)(seen >> shift);
        float cur = ca_narrow_to_float(bits, F);
        float r = M == 1 ? cur + value : ca_pick(cur, value, M);
        unsigned short next = F ? ca_bf16_from_float(r) : ca_half_from_double((double)r);
        if (next == bits) break;
        old = atomicCAS(word, seen, (seen & ~(0xFFFFu << shift)) | ((unsigned int)next << shift));
    } while (old != seen);
}

// The element of out (seen as (outer, dim, inner)) update i of scatter goes to, or -1
// where its index is dropped (mode 2); a 1-d scatter (a histogram) divides nothing.
template <typename I>
__device__ __forceinline__ long long ca_scatter_at(long long i, const I* idx, long long n,
                                                   long long nidx, long long dim,
                                                   long long inner, int mode) {
    long long c = 0, o = 0;
    if (inner != 1) {
        c = i % inner;
        o = i / inner / nidx;
    } else if (nidx != n) {
        o = i / nidx;
    }
    long long v = ca_index((long long)idx[i], dim, mode);
    return v < 0 ? -1 : (o * dim + v) * inner + c;
}

// cuasync.scatter: out[o, idx[o, j, c], c] (op)= upd[o, j, c] for out seen as (outer, dim,
// inner) and idx and upd as (outer, nidx, inner). M 0 stores (of duplicate indices, one
// unspecified update lands; T is then the element's unsigned integer), 1-3 combine
// atomically (T the dtype's own C type). Mode 2 drops an out-of-range index's update.
template <typename T, typename I, int M, typename X>
__device__ __forceinline__ void ca_scatter_body(T* out, const I* idx, X upd, long long n,
                                              long long nidx, long long dim, long long inner,
                                              int mode) {
    for (long long i = ca_first(); i < n; i += ca_stride()) {
        long long at = ca_scatter_at(i, idx, n, nidx, dim, inner, mode);
        if (at < 0) continue;
        if constexpr (M == 0) {
            out[at] = upd[i];
        } else {
            ca_combine<M>(out + at, upd[i]);
        }
    }
}
template <typename T, typename I, int M>
__global__ void ca_scatter(T* out, const I* idx, const T* upd, long long n, long long nidx,
                           long long dim, long long inner, int mode) {
    ca_scatter_body<T, I, M>(out, idx, upd, n, nidx, dim, inner, mode);
}

// ca_scatter's combining modes (M 1-3) for float16 (F 0) and bfloat16 (F 1).
template <typename I, int M, int F, typename X>
__device__ __forceinline__ void ca_scatter_narrow_body(unsigned short* out, const I* idx, X upd,
                                                     long long n, long long nidx, long long dim,
                                                     long long inner, int mode) {
    for (long long i = ca_first(); i < n; i += ca_stride()) {
        long long at = ca_scatter_at(i, idx, n, nidx, dim, inner, mode);
        if (at >= 0) ca_combine_narrow<M, F>(out + at, upd[i]);
    }
}
template <typename I, int M, int F>
__global__ void ca_scatter_narrow(unsigned short* out, const I* idx, const unsigned short* upd,
                                  long long n, long long nidx, long long dim, long long inner,
                                  int mode) {
    ca_scatter_narrow_body<I, M, F>(out, idx, upd, n, nidx, dim, inner, mode);
}

// -- dynamic_slice / dynamic_update_slice --------------------------------------------
// The window of shape z (up to 6 axes, leading ones 1) of big (shape b) at start, read on
// the device (start[d - lead] for axis d >= lead; the first lead axes start at 0), each
// start clamped to [0, b - z] as XLA clamps. write 0 copies the window into small, 1
// copies small into the window.
// ca_window's body: W 0 reads the window of big into small, 1 writes small into it (the
// operand read, big or small, may be a fused accessor).
template <int W, typename I, typename B, typename Z>
__device__ __forceinline__ void ca_window_body(B big, Z small, const I* start, long long n,
                                               int lead, long long b0, long long b1,
                                               long long b2, long long b3, long long b4,
                                               long long b5, long long z0, long long z1,
                                               long long z2, long long z3, long long z4,
                                               long long z5) {
    const long long b[6] = {b0, b1, b2, b3, b4, b5};
    const long long z[6] = {z0, z1, z2, z3, z4, z5};
    long long base = 0;
    for (int d = 0; d < 6; ++d) {
        long long s = d < lead ? 0 : (long long)start[d - lead];
        long long hi = b[d] - z[d];
        s = s < 0 ? 0 : (s > hi ? hi : s);
        base = base * b[d] + s;
    }
    for (long long i = ca_first(); i < n; i += ca_stride()) {
        long long r = i, off = 0, step = 1;
        for (int d = 5; d >= 0; --d) {
            off += (r % z[d]) * step;
            r /= z[d];
            step *= b[d];
        }
        if constexpr (W == 1) {
            big[base + off] = small[i];
        } else {
            small[i] = big[base + off];
        }
    }
}
template <typename S, typename I>
__global__ void ca_window(S* big, S* small, const I* start, long long n, int lead,
                          long long b0, long long b1, long long b2, long long b3,
                          long long b4, long long b5, long long z0, long long z1,
                          long long z2, long long z3, long long z4, long long z5, int write) {
    if (write) {
        ca_window_body<1>(big, (const S*)small, start, n, lead, b0, b1, b2, b3, b4, b5, z0, z1,
                          z2, z3, z4, z5);
    } else {
        ca_window_body<0>((const S*)big, small, start, n, lead, b0, b1, b2, b3, b4, b5, z0, z1,
                          z2, z3, z4, z5);
    }
}

// -- pad --------------------------------------------------------------------------------
// out (shape o, up to 6 axes) is x (shape x) with before[d] elements before it on axis d:
// mode 0 fills the outside with the value (bits lo, hi), 1 repeats the edge, 2 reflects
// about the edge without repeating it (numpy's "reflect": period 2 (x - 1)).
template <typename S, typename X>
__device__ __forceinline__ void ca_pad_body(S* out, X x, long long n, int mode, long long x0,
                                          long long x1, long long x2, long long x3, long long x4,
                                          long long x5, long long p0, long long p1, long long p2,
                                          long long p3, long long p4, long long p5, long long o0,
                                          long long o1, long long o2, long long o3, long long o4,
                                          long long o5, unsigned long long lo,
                                          unsigned long long hi) {
    const long long xs[6] = {x0, x1, x2, x3, x4, x5};
    const long long ps[6] = {p0, p1, p2, p3, p4, p5};
    const long long os[6] = {o0, o1, o2, o3, o4, o5};
    S value;
    if constexpr (sizeof(S) == 16) {
        value = make_double2(__longlong_as_double((long long)lo),
                             __longlong_as_double((long long)hi));
    } else {
        value = (S)lo;
    }
    for (long long i = ca_first(); i < n; i += ca_stride()) {
        long long r = i, off = 0, step = 1;
        bool outside = false;
        for (int d = 5; d >= 0; --d) {
            long long j = r % os[d] - ps[d], dim = xs[d];
            r /= os[d];
            if (j < 0 || j >= dim) {
                if (mode == 0) {
                    outside = true;
                } else if (mode == 1 || dim == 1) {
                    j = j < 0 ? 0 : dim - 1;
                } else {
                    long long period = 2 * (dim - 1);
                    j %= period;
                    if (j < 0) j += period;
                    if (j >= dim) j = period - j;
                }
            }
            off += j * step;
            step *= dim;
        }
        out[i] = outside ? value : x[off];
    }
}
template <typename S>
__global__ void ca_pad(S* out, const S* x, long long n, int mode, long long x0, long long x1,
                       long long x2, long long x3, long long x4, long long x5, long long p0,
                       long long p1, long long p2, long long p3, long long p4, long long p5,
                       long long o0, long long o1, long long o2, long long o3, long long o4,
                       long long o5, unsigned long long lo, unsigned long long hi,
                       unsigned long long cuasync_cancel_word_) {
    if (ca_block_cancelled(cuasync_cancel_word_)) return;  // a cancelled scope's: skipped
    ca_pad_body<S>(out, x, n, mode, x0, x1, x2, x3, x4, x5, p0, p1, p2, p3, p4, p5, o0, o1, o2, o3,
                 o4, o5, lo, hi);
}

// -- fused operands ------------------------------------------------------------------------
// The bits of a value as another type of its size: what a fused operand (a generated
// accessor, cuasync/_ops/fused_operand.py) hands the bodies above for x[i].
template <typename To, typename From>
__device__ __forceinline__ To ca_bits_as(From v) {
    static_assert(sizeof(To) == sizeof(From), "ca_bits_as: sizes differ");
    To r;
    memcpy(&r, &v, sizeof(To));
    return r;
}
