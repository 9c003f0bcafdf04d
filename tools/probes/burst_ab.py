"""8192 concurrent awaits with the native burst path against launching on the loop thread,
alternated in one process, beside the sequential raw loop they are compared with.

With bursts on (``Hub.enable_bursts``, ``CUASYNC_SUBMITTER=on``), an await that finds
other tasks of its loop ready (or launches already queued) has the native core queue its
launch for the submitter thread and steps aside; off, it launches and spins on the loop
thread. Each round times, on uvloop and asyncio: the gather with bursts off, with bursts
on, and with bursts on and the cyclic GC off (a gather of 8192 tasks keeps tens of
thousands of objects alive, and the collector's passes over them are a large part of
its cost); then the raw loop (cuda-bindings launch + ``cuStreamSynchronize``). After the
rounds: what the core did with the bursts (queued, settled by the core, handed over to
Python's path) and the floors of a gather of empty tasks and of tasks that step aside
once (``sleep(0)``).

Run: ``python3 tools/probes/burst_ab.py [ROUNDS] [--import torch,cupy] [--freeze]``
(a GPU, after ``pip install -e .``; on the emulator it runs too, with no submitter:
every burst launches at once). ``--import`` first imports those modules (the benchmark
suite's process has torch and CuPy loaded: a heap the collector's full passes
traverse), ``--freeze`` then moves everything alive to the collector's permanent
generation (``gc.freeze()``, what a service does after its start-up).
"""

from __future__ import annotations

import asyncio
import gc
import sys
import time

import cuasync
from cuasync._core.completion import get_hub
from cuasync.bench._util import run_loop
from cuasync.bench.completion import _raw_launcher, _sequential_raw, tiny

N = 8192
_args = [a for a in sys.argv[1:] if not a.startswith("--")]
ROUNDS = int(_args[0]) if _args else 3
_IMPORTS = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--import=")), "")
_FREEZE = "--freeze" in sys.argv


async def _one() -> None:
    await tiny[1, 32]()


async def _nothing() -> None:
    return None


async def _step() -> None:
    await asyncio.sleep(0)


async def gather(task: object = _one) -> float:
    t0 = time.perf_counter()
    await asyncio.gather(*(task() for _ in range(N)))  # type: ignore[operator]
    return N / (time.perf_counter() - t0)


def timed(kind: str, bursts: bool, collect: bool, task: object = _one) -> float:
    hub = get_hub()
    hub.step_aside = bursts
    if not collect:
        gc.disable()
    try:
        return run_loop(kind, lambda: gather(task))
    finally:
        gc.enable()


def main() -> None:
    for name in filter(None, _IMPORTS.split(",")):
        try:
            __import__(name)
        except ImportError:
            print(f"({name} is not installed)")
    tiny[1, 32]().sync()
    hub = get_hub()
    hub.enable_bursts()
    stream = cuasync.Device(0).new_stream()
    if _FREEZE:
        gc.collect()
        gc.freeze()
    print(
        f"backend={cuasync.backend_name()} tasks={N} submitter={hub.submitter is not None} "
        f"raw={_raw_launcher(stream) is not None} native_core={hub.express is not None} "
        f"imported={_IMPORTS or '-'} frozen={gc.get_freeze_count() if _FREEZE else 0} "
        f"tracked={len(gc.get_objects())}"
    )
    core = hub.express
    for r in range(ROUNDS):
        row = []
        for kind in ("uvloop", "asyncio"):
            off = timed(kind, False, True)
            on = timed(kind, True, True)
            on_nogc = timed(kind, True, False)
            row.append(
                f"{kind}: off {off / 1e3:6.1f}k on {on / 1e3:6.1f}k on+GC off {on_nogc / 1e3:6.1f}k"
            )
        raw = _sequential_raw(N, stream)
        print(f"  round {r}: " + "; ".join(row) + f"; raw loop {raw / 1e3:6.1f}k ops/s")
    if core is not None:
        print(
            f"  core: queued {core.burst_queued}, settled by the core {core.burst_awaits}, "
            f"handed over {core.burst_handed_over}"
        )
    s = cuasync.stats()
    print(
        f"  stats: burst_awaits {s.burst_awaits}, launches_queued {s.launches_queued}, "
        f"inline {s.completed_inline}, reactor {s.completed_reactor}"
    )
    for kind in ("uvloop", "asyncio"):
        floors = [
            f"{name} {timed(kind, False, collect, task) / 1e3:6.1f}k"
            for name, task, collect in (
                ("empty", _nothing, True),
                ("sleep(0)", _step, True),
                ("sleep(0), GC off", _step, False),
            )
        ]
        print(f"  {kind} floors: " + ", ".join(floors))


if __name__ == "__main__":
    main()
