// out = src.astype(out's dtype) for a contiguous out; src is a strided view of up to 4
// (merged) dimensions whose dtype code is src_code. A source of out's own dtype is copied
// bit for bit (a gather: NaN payloads stay, as in numpy's same-dtype astype).
template <typename S, int K>
__global__ void ca_convert(S* out, const void* src, int src_code, long long n, long long d1,
                           long long d2, long long d3, long long s0, long long s1,
                           long long s2, long long s3) {
    bool flat = d3 == n;  // one dimension (contiguous or evenly strided): no divisions
    bool same = src_code == K;
    for (long long i = ca_first(); i < n; i += ca_stride()) {
        long long j = flat ? i * s3 : ca_offset(i, d1, d2, d3, s0, s1, s2, s3);
        if (same) {
            out[i] = ((const S*)src)[j];
        } else {
            ca_store<S, K>(out + i, ca_load(src, j, src_code));
        }
    }
}

// ca_convert that also sets *flag (zeroed before) where a value overflows (ca_overflows):
// the op reads it back when it lands and raises CastOverflowError.
template <typename S, int K>
__global__ void ca_convert_checked(S* out, const void* src, int src_code, unsigned* flag,
                                   long long n, long long d1, long long d2, long long d3,
                                   long long s0, long long s1, long long s2, long long s3) {
    bool flat = d3 == n;
    bool bad = false;
    for (long long i = ca_first(); i < n; i += ca_stride()) {
        long long j = flat ? i * s3 : ca_offset(i, d1, d2, d3, s0, s1, s2, s3);
        ca_val v = ca_load(src, j, src_code);
        ca_store<S, K>(out + i, v);
        bad = bad || ca_overflows<K>(v, ca_load(out, i, K));
    }
    if (bad) *flag = 1u;  // every writer writes 1: no atomic needed
}
