"""What a guarded region costs (issue 36 item 4): ``cuasync.zeros(n).sync()`` and a
float32 ``matmul`` inside a cancel scope, with every region guarded (a conditional graph
node on a GPU) against none guarded, alternated in turns; p50 host time of each.

    CUASYNC_BACKEND=cuda python3 tools/probes/guard_cost.py
"""

from __future__ import annotations

import statistics
import time

import cuasync
from cuasync._launch import guard


def p50(fn, turns: int = 20, rounds: int = 10) -> tuple[float, float]:
    on, off = [], []
    for _ in range(rounds):
        for policy, out in ((0.0, on), (float("inf"), off)):
            guard.POLICY.min_ns = policy
            for _ in range(turns):
                t = time.perf_counter()
                fn()
                out.append((time.perf_counter() - t) * 1e6)
    return statistics.median(on), statistics.median(off)


def main() -> None:
    x = cuasync.ones((64, 64)).sync()
    with cuasync.cancel_scope():
        for label, fn in (
            ("zeros(1024).sync()", lambda: cuasync.zeros((1024,)).sync()),
            ("zeros(16 Mi float32).sync()", lambda: cuasync.zeros((1 << 24,)).sync()),
            ("matmul(64x64, 64x64).sync()", lambda: cuasync.matmul(x, x).sync()),
        ):
            fn()
            on, off = p50(fn)
            print(f"{label:<34} guarded p50 {on:8.1f} us   unguarded {off:8.1f} us", end="")
            print(f"   +{on - off:.1f} us")


if __name__ == "__main__":
    main()
