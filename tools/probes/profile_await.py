"""Which Python functions the host time of ``await tiny_kernel[1, 32]()`` goes to.

Times N awaits (asyncio, default spin) with the driver real and with launches and flag
writes stubbed (``cuasync.bench._breakdown.stubbed_driver``), then prints cProfile's
top functions by own time for each. Profiling inflates every call, so read the ranking
and the calls per await, not the absolute times.
"""

import asyncio
import cProfile
import pstats
import sys
import time

import cuasync
from cuasync.bench._breakdown import stubbed_driver

N = 20000
kernel = cuasync.Kernel(r'extern "C" __global__ void tiny() {}', "tiny", emulate=lambda: None)
kernel[1, 32]().sync()
stream = cuasync.Device(0).new_stream()


async def main() -> None:
    with cuasync.use_policy(cuasync.SingleStream(stream)):
        for _ in range(N):
            await kernel[1, 32]()


def measure(label: str) -> None:
    asyncio.run(main())  # warm
    t = time.perf_counter()
    asyncio.run(main())
    print(f"== {label}: {(time.perf_counter() - t) / N * 1e6:.2f} us per await, unprofiled")
    profile = cProfile.Profile()
    profile.enable()
    asyncio.run(main())
    profile.disable()
    stats = pstats.Stats(profile, stream=sys.stdout)
    print(f"   {stats.total_calls / N:.1f} Python-visible calls per await")
    stats.sort_stats("tottime").print_stats(25)


measure("driver real")
with stubbed_driver():
    measure("driver stubbed")
