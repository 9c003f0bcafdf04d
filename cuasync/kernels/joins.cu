// -- take -------------------------------------------------------------------------------
// cuasync.take: out[o, j, c] = x[o, idx[j], c] for a contiguous x seen as (outer, dim,
// inner) and a contiguous out of (outer, nidx, inner). S is the unsigned integer of the
// element's size (double2 for 16 bytes): take only moves bits. Indices wrap around
// (mode 0: -1 is the last) or are clipped to [0, dim) (mode 1, numpy's "clip").
template <typename S, typename I>
__global__ void ca_take(S* out, const S* x, const I* idx, long long n, long long nidx,
                        long long dim, long long inner, int mode,
                        unsigned long long cuasync_cancel_word_) {
    if (ca_block_cancelled(cuasync_cancel_word_)) return;  // a cancelled scope's: skipped
    for (long long i = ca_first(); i < n; i += ca_stride()) {
        long long c = i % inner, r = i / inner;
        long long j = r % nidx, o = r / nidx;
        long long v = (long long)idx[j];
        if (mode == 0) {
            v %= dim;
            if (v < 0) v += dim;
        } else {
            v = v < 0 ? 0 : (v >= dim ? dim - 1 : v);
        }
        out[i] = x[(o * dim + v) * inner + c];
    }
}

// -- tril / triu ----------------------------------------------------------------------
// out[..., r, c] = x[..., r, c] where (c - r <= k) for tril (upper 0), (c - r >= k) for
// triu (upper 1), else 0; x and out contiguous, (rows, cols) the last two axes.
template <typename S>
__global__ void ca_tri(S* out, const S* x, long long n, long long rows, long long cols,
                       long long k, int upper, unsigned long long cuasync_cancel_word_) {
    if (ca_block_cancelled(cuasync_cancel_word_)) return;  // a cancelled scope's: skipped
    for (long long i = ca_first(); i < n; i += ca_stride()) {
        long long c = i % cols, r = (i / cols) % rows;
        bool keep = upper ? (c - r >= k) : (c - r <= k);
        out[i] = keep ? x[i] : S{};
    }
}
