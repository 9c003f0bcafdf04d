// numpy.linspace(start, stop, n, endpoint), evaluated in float64 in numpy's order:
// delta = stop - start and step = delta / div (div = n - 1 with the endpoint, n without)
// come from the host; y = i * step (or i / div * delta when step underflows to 0) +
// start, element div (the last, with the endpoint) is stop, integer dtypes take the floor.
template <typename S, int K>
__global__ void ca_linspace(S* out, long long n, double start, double stop, double delta,
                            double step, long long div, int floor_ints,
                            unsigned long long cuasync_cancel_word_) {
    if (ca_block_cancelled(cuasync_cancel_word_)) return;  // a cancelled scope's: skipped
    for (long long i = ca_first(); i < n; i += ca_stride()) {
        double y = (double)i;
        if (div > 0) {
            y = step == 0.0 ? __dmul_rn(__ddiv_rn(y, (double)div), delta) : __dmul_rn(y, step);
        } else {
            y = __dmul_rn(y, delta);
        }
        y = __dadd_rn(y, start);
        if (div > 0 && i == div) y = stop;
        if (floor_ints) y = floor(y);
        ca_store<S, K>(out + i, ca_real(y));
    }
}
