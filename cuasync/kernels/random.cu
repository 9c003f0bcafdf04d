// Philox4x32-10 (Salmon, Moraes, Dror, Shaw, SC'11; as in Random123) of the counter
// (lo, hi, 0, 0) under the key (k0, k1).
__device__ __forceinline__ void ca_philox(ca_u64 counter, unsigned k0, unsigned k1,
                                          unsigned r[4]) {
    unsigned c0 = (unsigned)counter, c1 = (unsigned)(counter >> 32), c2 = 0u, c3 = 0u;
#pragma unroll
    for (int round = 0; round < 10; ++round) {
        if (round) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        unsigned hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        unsigned hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    r[0] = c0;
    r[1] = c1;
    r[2] = c2;
    r[3] = c3;
}

__device__ __forceinline__ ca_u64 ca_join(unsigned lo, unsigned hi) {
    return ((ca_u64)hi << 32) | lo;
}

// Uniform [0, 1). float16/bfloat16/float32 element i is lane i % 4 of counter i / 4,
// mapped as (x >> (32 - p)) * 2^-p with p the significand bits (11, 8, 24): exact in the
// dtype. float64 element i takes lanes 2(i % 2), 2(i % 2) + 1 of counter i / 2 as a
// 64-bit word w (high lane on top): (w >> 11) * 2^-53.
template <typename S, int K>
__global__ void ca_rand(S* out, long long n, unsigned k0, unsigned k1,
                        unsigned long long cuasync_cancel_word_) {
    if (ca_block_cancelled(cuasync_cancel_word_)) return;  // a cancelled scope's: skipped
    const int per = K == 12 ? 2 : 4;
    const int p = K == 9 ? 11 : (K == 10 ? 8 : 24);
    long long counters = (n + per - 1) / per;
    for (long long c = ca_first(); c < counters; c += ca_stride()) {
        unsigned r[4];
        ca_philox((ca_u64)c, k0, k1, r);
#pragma unroll
        for (int lane = 0; lane < per; ++lane) {
            long long i = c * per + lane;
            if (i >= n) break;
            double u;
            if constexpr (K == 12) {
                u = (double)(ca_join(r[2 * lane], r[2 * lane + 1]) >> 11) * ca_pow2(-53);
            } else {
                u = (double)(r[lane] >> (32 - p)) * ca_pow2(-p);
            }
            ca_store<S, K>(out + i, ca_real(u));
        }
    }
}

// Normal(mean, std) by Box-Muller in float64, counter c for the pair (2c, 2c + 1):
// u1 = ((w0 >> 11) + 1) 2^-53 in (0, 1], u2 = (w1 >> 11) 2^-53 in [0, 1) with
// w0 = r1:r0, w1 = r3:r2; z = sqrt(-2 log u1) * (cos, sin)(2 pi u2); out = mean + std z,
// rounded to the dtype.
template <typename S, int K>
__global__ void ca_randn(S* out, long long n, unsigned k0, unsigned k1, double mean,
                         double std, unsigned long long cuasync_cancel_word_) {
    if (ca_block_cancelled(cuasync_cancel_word_)) return;  // a cancelled scope's: skipped
    long long counters = (n + 1) / 2;
    for (long long c = ca_first(); c < counters; c += ca_stride()) {
        unsigned r[4];
        ca_philox((ca_u64)c, k0, k1, r);
        double u1 = (double)((ca_join(r[0], r[1]) >> 11) + 1) * ca_pow2(-53);
        double u2 = (double)(ca_join(r[2], r[3]) >> 11) * ca_pow2(-53);
        double radius = sqrt(__dmul_rn(-2.0, log(u1)));
        double theta = __dmul_rn(6.283185307179586, u2);
        double z0 = __dmul_rn(radius, cos(theta));
        double z1 = __dmul_rn(radius, sin(theta));
        ca_store<S, K>(out + 2 * c, ca_real(__dadd_rn(mean, __dmul_rn(std, z0))));
        if (2 * c + 1 < n) {
            ca_store<S, K>(out + 2 * c + 1, ca_real(__dadd_rn(mean, __dmul_rn(std, z1))));
        }
    }
}
