"""Is an inline await slower on uvloop than on asyncio, or was it the order of the runs?

The completion suite measures asyncio first, then uvloop (20.0 vs 16.0 us p50 on the
H200, 2026-12-01). This alternates the two loops, three rounds each, in one process,
and prints each round's p50 and how the awaits completed.
"""

import numpy as np

import cuasync
from cuasync.bench._util import await_latency, run_loop
from cuasync.bench.completion import tiny

stream = cuasync.Device(0).new_stream()
tiny.compile()
for round_ in range(3):
    for kind in ("uvloop", "asyncio") if round_ % 2 else ("asyncio", "uvloop"):
        before = cuasync.stats()
        samples = np.array(run_loop(kind, lambda: await_latency(tiny, 3000, stream))) / 1e3
        after = cuasync.stats()
        inline = after.completed_inline - before.completed_inline
        reactor = after.completed_reactor - before.completed_reactor
        print(
            f"round {round_} {kind:8s} p50 {np.median(samples):6.2f} us  p10 "
            f"{np.percentile(samples, 10):6.2f}  p90 {np.percentile(samples, 90):6.2f}  "
            f"inline {inline} reactor {reactor}"
        )
