"""Time your own device work with cuasync.bench: one candidate, then two side by side.

python examples/benchmark.py
"""

from __future__ import annotations

import asyncio

import cuasync
import cuasync.bench


def main() -> None:
    x = cuasync.arange(1 << 20, dtype="float32").sync()
    print("dup:        ", cuasync.bench.do_bench(lambda: x.dup(), rep=50))
    paired = cuasync.bench.do_bench_paired(
        lambda: x[: 1 << 19].dup(),  # a: half the bytes
        lambda: x.dup(),  # b: all of them
        rep=50,
    )
    print("half / full:", f"{paired.ratio:.2f}", f"[{paired.ci_low:.2f}, {paired.ci_high:.2f}]")


async def in_a_service() -> None:
    x = await cuasync.ones((1 << 16,), "float32")
    result = await cuasync.bench.do_bench_async(lambda: x.dup(), rep=20)  # the loop runs on
    print("async dup:  ", result)


if __name__ == "__main__":
    main()
    asyncio.run(in_a_service())
