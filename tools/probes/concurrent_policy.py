"""8192 concurrent awaits: spin whenever the work lands within the budget (today), or
park at once whenever other tasks on the loop are ready to run (the issue's proposal)?

Runs ``asyncio.gather`` of 8192 awaits of a tiny kernel (the completion suite's
``_concurrent``) under each policy on asyncio and uvloop, with the completion counters,
and the sequential await p50 under each (nothing else ready: it should not change).
Launches take the generic path here (the hub's native core turned off, as
``CUASYNC_NATIVE=off`` does): the native await does not go through ``completion.wait``,
which is what the policies replace.
"""

import numpy as np

import cuasync
from cuasync._core import completion, op
from cuasync._native import PROCESS
from cuasync.bench import completion as suite
from cuasync.bench._util import await_latency, run_loop

DONE = completion.DONE
original = completion.wait


def park_when_others_ready(comp, adapter):  # type: ignore[no-untyped-def]
    """completion.wait, skipping the spin whenever other work is ready (no long_ops)."""
    if comp.state < DONE:
        hub = PROCESS.hub or completion.get_hub()
        if hub.spin_budget_us and adapter.others_ready():
            hub.stats.spins_skipped += 1
            settled = hub.settle(comp, 0)
        else:
            settled = hub.settle(comp)
        if not settled:
            return (yield from hub.suspend(comp, adapter))
    return comp.result()


stream = cuasync.Device(0).new_stream()
suite.tiny.compile()
completion.get_hub().express = None  # the generic path for every launch
for label, fn in (("today", original), ("park when others ready", park_when_others_ready)):
    op.wait = fn
    for kind in ("asyncio", "uvloop", "asyncio", "uvloop"):
        before = cuasync.stats()
        rate = run_loop(kind, lambda: suite._concurrent(8192))
        s = cuasync.stats()
        p50 = np.median(run_loop(kind, lambda: await_latency(suite.tiny, 2000, stream))) / 1e3
        print(
            f"{label:22s} {kind:8s} {rate:9,.0f} ops/s  inline "
            f"{s.completed_inline - before.completed_inline:5d} reactor "
            f"{s.completed_reactor - before.completed_reactor:5d} batches "
            f"{s.reactor_batches - before.reactor_batches:5d} skipped "
            f"{s.spins_skipped - before.spins_skipped:5d}; sequential await p50 {p50:6.2f} us",
            flush=True,
        )
op.wait = original
