"""How many elements per thread the contiguous elementwise kernel should load (UNROLL).

Times a float32 add of 64 MiB operands and exp(a*b+c) with each UNROLL in one run,
next to torch's add (device-event timing, cuasync.bench.do_bench).
"""

import cuasync
from cuasync._ops import codegen, tensorop
from cuasync.bench import do_bench

n = 16 << 20  # 64 MiB of float32
a, b, c, out = (cuasync.full((n,), v).sync() for v in (0.5, 2.0, -1.0, 0.0))
for unroll in (1, 2, 4, 8, 16):
    codegen.UNROLL = tensorop.UNROLL = unroll
    codegen._kernels.clear()
    cuasync.add(a, b, out=out).sync()
    cuasync.exp(a * b + c, out=out).sync()
    add = do_bench(lambda: cuasync.add(a, b, out=out), warmup=5, rep=50).median_ms
    fma = do_bench(lambda: cuasync.exp(a * b + c, out=out), warmup=5, rep=50).median_ms
    print(
        f"UNROLL {unroll:2d}: add {add * 1e3:7.2f} us ({3 * 4 * n / add / 1e6:6.0f} GB/s), "
        f"exp(a*b+c) {fma * 1e3:7.2f} us ({4 * 4 * n / fma / 1e6:6.0f} GB/s)"
    )
try:
    import torch

    ts = [torch.full((n,), v, device="cuda") for v in (0.5, 2.0, 0.0)]
    torch.add(ts[0], ts[1], out=ts[2])
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(50):
        torch.add(ts[0], ts[1], out=ts[2])
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end) / 50
    print(f"torch add {ms * 1e3:7.2f} us ({3 * 4 * n / ms / 1e6:6.0f} GB/s)")
except ImportError:
    pass
