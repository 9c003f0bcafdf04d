"""Block size and grid cap of the contiguous elementwise kernel (add of 64 MiB float32).

Each combination in one run, next to torch's add timed the same way (events around
back-to-back launches). Patches cuasync._launch.builtin's launch constants in-process.
"""

import cuasync
from cuasync._backends import get_backend
from cuasync._launch import builtin
from cuasync._ops import codegen

n = 16 << 20
a, b, out = (cuasync.full((n,), v).sync() for v in (0.5, 2.0, 0.0))
stream = cuasync.Device(0).new_stream()
backend = get_backend()


def back_to_back_us(fn, reps=50):  # type: ignore[no-untyped-def]
    fn().sync_on(stream)
    start, end = (backend.event_create(0, timing=True) for _ in range(2))
    stream.synchronize()
    backend.event_record(start, stream.handle)
    for _ in range(reps):
        fn().submit_on(stream)
    backend.event_record(end, stream.handle)
    backend.event_synchronize(end)
    return backend.event_elapsed_ms(start, end) * 1e3 / reps


sms = 132
for block in (128, 256, 512):
    for cap in (sms * 4, sms * 8, sms * 16, 1 << 16):
        builtin._BLOCK, builtin._MAX_BLOCKS = block, cap
        codegen._kernels.clear()
        us = back_to_back_us(lambda: cuasync.add(a, b, out=out))
        gbps = 12 * n / us / 1e3
        print(f"block {block:3d} grid cap {cap:6d}: add {us:6.2f} us ({gbps:5.0f} GB/s)")
try:
    import torch

    ts = [torch.full((n,), v, device="cuda") for v in (0.5, 2.0, 0.0)]
    for _ in range(3):
        torch.add(ts[0], ts[1], out=ts[2])
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(50):
        torch.add(ts[0], ts[1], out=ts[2])
    end.record()
    end.synchronize()
    us = start.elapsed_time(end) * 1e3 / 50
    print(f"torch add {us:6.2f} us ({12 * n / us / 1e3:5.0f} GB/s)")
except ImportError:
    pass
