// numpy.arange's values. The host stores first = start and second = start + step as the
// dtype holds them (numpy's setitem), and element i >= 2 is first + i * (second - first),
// computed as numpy's fill for the dtype does: in 64-bit integers, wrapping (bool and the
// integer dtypes: i0, i1 are first and second), in double (float64, complex128) or in
// float (float32, complex64, float16, and bfloat16 and FP8, which ml_dtypes fills in
// float too); f0, f1 are first and second, exact as doubles. Then stored in the dtype.
template <typename S, int K>
__global__ void ca_arange(S* out, long long n, long long i0, long long i1, double f0,
                          double f1, unsigned long long cuasync_cancel_word_) {
    if (ca_block_cancelled(cuasync_cancel_word_)) return;  // a cancelled scope's: skipped
    for (long long i = ca_first(); i < n; i += ca_stride()) {
        if constexpr (K <= 8) {
            ca_u64 v = (ca_u64)i0 + (ca_u64)i * ((ca_u64)i1 - (ca_u64)i0);
            ca_store<S, K>(out + i, K == 8 ? ca_unsigned(v) : ca_signed((long long)v));
        } else if constexpr (K == 12 || K == 14) {
            double y = i == 0 ? f0 : __dadd_rn(f0, __dmul_rn((double)i, __dsub_rn(f1, f0)));
            if (i == 1) y = f1;
            ca_store<S, K>(out + i, ca_real(y));
        } else {
            float s = (float)f0, d = __fsub_rn((float)f1, s);
            float y = i == 0 ? s : __fadd_rn(s, __fmul_rn((float)i, d));
            if (i == 1) y = (float)f1;
            ca_store<S, K>(out + i, ca_real((double)y));
        }
    }
}
