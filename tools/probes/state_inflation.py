"""Which step of the completion suite leaves the process slower afterwards?

In ``python -m cuasync.bench completion launch`` (H200, 2026-12-01) uvloop's inline
await p50 was 20.9 us after asyncio's 15.5 (alternated alone, both are ~14.8), and the
launch suite's submit_on cost 30 us per launch (10 us alone). This runs the completion
suite's steps one by one and re-measures both costs after each.
"""

import gc
import os
import time

import numpy as np

import cuasync
from cuasync._core.completion import get_hub
from cuasync.bench import completion as c
from cuasync.bench._util import await_latency, run_loop
from cuasync.bench.launch import bump

# CUASYNC_PROBE_IMPORT=torch,cupy: import (and initialize) them first, as the bench does.
for name in filter(None, os.environ.get("CUASYNC_PROBE_IMPORT", "").split(",")):
    module = __import__(name)
    if name == "torch":
        (module.ones(4, device="cuda") + 1).sum().item()
    elif name == "cupy":
        (module.ones(4) + 1).sum().item()
    print("imported", name)

hub = get_hub()
stream = cuasync.Device(0).new_stream()
x = cuasync.zeros((256,), "float32").sync_on(stream)
c.tiny.compile()
bump[1, 256](x, 256).sync_on(stream)


def measure(after: str) -> None:
    held = []
    t0 = time.perf_counter_ns()
    for _ in range(4096):
        held.append(bump[1, 256](x, 256).submit_on(stream))
    submit = (time.perf_counter_ns() - t0) / 4096 / 1e3
    for f in held:
        f.wait()
    del held
    p50 = np.median(run_loop("asyncio", lambda: await_latency(c.tiny, 2000, stream))) / 1e3
    s = cuasync.stats()
    print(
        f"after {after:34s} submit mean {submit:6.2f} us  await p50 {p50:6.2f} us  "
        f"gc tracked {len(gc.get_objects()):8d}  threads {len(__import__('threading').enumerate())}"
        f"  callbacks pending {s.callbacks_pending} armed {s.slots_armed}",
        flush=True,
    )


def with_hub(spin: int, reactor: bool, kind: str) -> None:
    hub.spin_budget_us, hub.use_reactor = spin, reactor
    run_loop(kind, lambda: await_latency(c.tiny, 2000, stream))
    hub.spin_budget_us, hub.use_reactor = 20, True


measure("nothing")
measure("nothing (again)")
for kind in ("asyncio", "uvloop", "asyncio", "uvloop"):
    p50 = np.median(run_loop(kind, lambda: await_latency(c.tiny, 2000, stream))) / 1e3
    print(f"  {kind} await p50 {p50:6.2f} us")
run_loop("asyncio", lambda: c._executor_latency(2000, stream))
measure("asyncio executor latency")
with_hub(20, True, "asyncio")
measure("asyncio await spin 20")
with_hub(0, True, "asyncio")
measure("asyncio await spin 0")
with_hub(0, False, "asyncio")
measure("asyncio await host callback")
run_loop("asyncio", lambda: c._concurrent(8192))
measure("asyncio 8192 concurrent")
run_loop("asyncio", lambda: c._executor_concurrent(8192, stream))
measure("asyncio 8192 concurrent executor")
gc.collect()
measure("gc.collect()")
