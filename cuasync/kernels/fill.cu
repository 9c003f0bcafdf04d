// -- kernels ---------------------------------------------------------------------------
// out[...] = value for any strided view. S is the unsigned integer of the element's size
// (double2 for 16-byte elements); (lo, hi) are the value's bits, little-endian.
template <typename S>
__global__ void ca_fill(S* out, long long n, long long d1, long long d2, long long d3,
                        long long s0, long long s1, long long s2, long long s3,
                        unsigned long long lo, unsigned long long hi,
                        unsigned long long cuasync_cancel_word_) {
    if (ca_block_cancelled(cuasync_cancel_word_)) return;  // a cancelled scope's: skipped
    S value;
    if constexpr (sizeof(S) == 16) {
        value = make_double2(__longlong_as_double((long long)lo),
                             __longlong_as_double((long long)hi));
    } else {
        value = (S)lo;
    }
    if (d3 == n) {  // one dimension (contiguous or evenly strided): no divisions
        for (long long i = ca_first(); i < n; i += ca_stride()) out[i * s3] = value;
        return;
    }
    for (long long i = ca_first(); i < n; i += ca_stride()) {
        out[ca_offset(i, d1, d2, d3, s0, s1, s2, s3)] = value;
    }
}
