"""8192 concurrent awaits of a tiny kernel beside a large long-lived heap, with the
cyclic GC's heap frozen and not: what the collector does to the gather, and why.

The completion suite's "heap not frozen" row (H200, 2026-12-02: 41.8k ops/s on uvloop
against 96k frozen) runs in a process that imported torch and CuPy (187k GC-tracked
objects, docs/performance.md). torch is not needed here: ``--heap N`` builds a synthetic
long-lived heap of N tracked objects (dicts, lists and tuples holding lists, so that none
is untracked), collected once so that it sits in the oldest generation, as an imported
library's objects do. The await is the H200's path: the native core (``Express``,
``LaunchAwait``) against the native module's stub driver (``core_cost.native_stub``:
each launch is counted and its flag stored at once) with bursts on, so that every
gathered await steps aside once, as on the GPU (there the submitter makes the launch);
``--generic`` runs the emulator's own path instead (declined by the core).

Per loop (uvloop, asyncio) and round, alternated: the gather with the heap frozen
(``gc.collect(); gc.freeze()``), not frozen (``gc.collect()`` once, then left alone: a
service's steady state), not frozen right after frozen rounds with no collection in
between (the suite's row: its last full pass was over the small unfrozen part, see
``long_lived_total`` below), and with the collector off. Each row: ops/s, collections
per generation in the gather (``gc.callbacks``), and the time spent in them.

Collections are also given per 1000 awaits. Then a census of one gather (collector off):
the GC-tracked objects alive when every task has taken its first step (a last task
counts them: ``gc.get_objects()`` by type, less those alive before), per await; those
left after the gather; and those only a collection frees (cyclic garbage); and the
census of awaits of a launch with arguments (``bump[1, 256](x, n)``). Last, the model:
CPython 3.11-3.13 collect the oldest generation when more than ``threshold2`` (10) young
collections of generation 1 have run since the last full one *and* the objects promoted
into it since (``long_lived_pending``) exceed a quarter of those it held after the last
full one (``long_lived_total``); a gather whose tasks keep K tracked objects alive each
promotes about 8192 * K of them, so it pays a full pass when 8192 * K > heap / 4.

Run: ``python3 tools/probes/gc_gather.py [--heap N] [--rounds R] [--tasks T]
[--generic]`` (any backend, after ``pip install -e .``; on a GPU the stub still
replaces the driver).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
import types
from collections import Counter
from collections.abc import Awaitable, Callable, Generator, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from core_cost import native_stub  # (this folder: the script's own)

import cuasync
import cuasync.testing
from cuasync._core.completion import get_hub
from cuasync.bench._util import run_loop
from cuasync.bench.completion import tiny
from cuasync.bench.launch import bump


class GcLog:
    """Collections per generation and the seconds spent in them (a ``gc.callbacks`` hook)."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.thread_time()
        else:
            g = info["generation"]
            self.count[g] += 1
            self.seconds[g] += time.thread_time() - self._t0

    @contextmanager
    def watching(self) -> Iterator[GcLog]:
        gc.callbacks.append(self)
        try:
            yield self
        finally:
            gc.callbacks.remove(self)


def make_heap(n: int) -> list[Any]:
    """``n`` GC-tracked objects that stay tracked: a dict, a list and a tuple holding it."""
    heap = []
    for i in range(n // 3):
        item = [i]
        heap.append({"item": item, "pair": (item, None)})
    return heap


async def one() -> None:
    await tiny[1, 32]()


@types.coroutine
def _held(k: int) -> Generator[None, None, None]:
    held = [[] for _ in range(k)] if k else None  # (k tracked lists, and the list of them)
    yield
    del held


def held(k: int) -> Callable[[], Awaitable[None]]:
    """A task that steps aside once holding ``k`` tracked objects beside its generator
    (one, as the core's ``LaunchIter`` is one)."""

    async def task() -> None:
        await _held(k)

    return task


#: What one gather's task awaits (``one``: the kernel; the sweep: ``held(k)``).
Task = Callable[[], Awaitable[None]]


async def gathers(task: Task, tasks: int, count: int) -> list[tuple[float, float, GcLog]]:
    """``count`` gathers of ``tasks`` awaits one after the other: (ops/s, ops per CPU
    second of this thread, its collections)."""
    out = []
    for _ in range(count):
        with GcLog().watching() as log:
            t0, c0 = time.perf_counter(), time.thread_time()
            await asyncio.gather(*(task() for _ in range(tasks)))
            wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
            out.append((tasks / wall, tasks / max(cpu, 1e-9), log))
    return out


def by_type() -> Counter[str]:
    return Counter(type(o).__qualname__ for o in gc.get_objects())


async def census(
    task: Task, tasks: int, held: bool = False
) -> tuple[Counter[str], Counter[str], int]:
    """(alive at the peak, left after, freed only by a collection), less the baseline;
    run with the collector off. ``held``: the streams are held by a gate until every
    await has stepped aside its last time and parked (the peak: a loop's whole cycle
    later), as work lasting longer than a burst does."""
    peak: Counter[str] = Counter()

    async def count() -> None:  # (the last task: every other one has taken its step)
        for _ in range(_PARKED_AFTER if held else 0):
            await asyncio.sleep(0)
        peak.update(by_type())
        if gate is not None:
            gate.open()

    gc.collect()
    gate = cuasync.testing.gate() if held else None
    base = by_type()
    base["Counter"] += 1  # (peak itself)
    await asyncio.gather(*(task() for _ in range(tasks)), count())
    after = by_type()
    cyclic = gc.collect()
    return peak - base, after - base, cyclic


#: Loop cycles after which every held await has parked (a burst steps aside at most 16
#: times before it parks).
_PARKED_AFTER = 40


def rows(counter: Counter[str], per: int) -> str:
    total = sum(counter.values())
    top = ", ".join(f"{k} {v / per:.2f}" for k, v in counter.most_common(14) if v >= per // 8)
    return f"{total / per:.2f} per await ({top})"


MODES = ("frozen", "not frozen", "unfrozen as the suite", "threshold0 x10", "GC off")


def timed(kind: str, mode: str, task: Task, tasks: int, count: int) -> list[Any]:
    """``count`` gathers on a fresh ``kind`` loop with the collector in ``mode``."""
    thresholds = gc.get_threshold()
    if mode == "frozen":
        gc.collect()
        gc.freeze()
    elif mode in ("not frozen", "threshold0 x10"):
        gc.collect()  # (long_lived_total: the whole heap, as after a service's start-up)
        if mode == "threshold0 x10":  # (not frozen either)
            gc.set_threshold(thresholds[0] * 10, *thresholds[1:])
    elif mode == "unfrozen as the suite":  # (after frozen gathers: its last full pass was small)
        gc.collect()
        gc.freeze()
        run_loop(kind, lambda: gathers(task, tasks, 1))
        gc.unfreeze()
    elif mode == "GC off":
        gc.disable()
    try:
        result: list[Any] = run_loop(kind, lambda: gathers(task, tasks, count))
        return result
    finally:
        gc.enable()
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def summary(got: list[tuple[float, float, GcLog]], tasks: int) -> str:
    cpu = statistics.median(r[1] for r in got)
    wall = statistics.median(r[0] for r in got)
    gens = [sum(r[2].count[g] for r in got) / len(got) for g in range(3)]
    ms = [sum(r[2].seconds[g] for r in got) / len(got) * 1e3 for g in range(3)]
    per_k = [g * 1000 / tasks for g in gens]
    return (
        f"{cpu / 1e3:6.1f}k ops/CPU-s ({wall / 1e3:5.1f}k wall) of {len(got)}; per gather: "
        f"collections {gens[0]:5.1f}/{gens[1]:5.2f}/{gens[2]:4.2f} "
        f"({per_k[0]:4.1f}/{per_k[1]:4.2f}/{per_k[2]:5.3f} per 1000 awaits), in them "
        f"{sum(ms):6.1f} ms CPU (full {ms[2]:6.1f})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--heap", type=int, default=187_000, help="long-lived tracked objects")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tasks", type=int, default=8192)
    ap.add_argument("--gathers", type=int, default=4, help="gathers per loop and round")
    ap.add_argument("--generic", action="store_true", help="the emulator's own path")
    ap.add_argument("--loops", default="uvloop,asyncio")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--sweep", default="0,1,2,4,8", help="held objects per sweep await")
    args = ap.parse_args()
    heap = make_heap(args.heap)
    hub = get_hub()
    hub.enable_bursts()
    stream = cuasync.Device(0).new_stream()
    tiny[1, 32]().sync_on(stream)
    gc.collect()
    t0 = time.thread_time()
    gc.collect()
    full = time.thread_time() - t0
    tracked = len(gc.get_objects())
    print(
        f"python {sys.version.split()[0]}, backend={cuasync.backend_name()}, "
        f"path={'generic' if args.generic else 'native core, stub driver, bursts on'}, "
        f"tracked={tracked} (synthetic heap {len(heap) // 1 * 3}), "
        f"thresholds={gc.get_threshold()}, a full collection {full * 1e3:.1f} ms CPU"
    )
    loops = args.loops.split(",")
    with nullcontext() if args.generic else native_stub():
        core = hub.express
        before = None if core is None else core.native_launches
        results: dict[tuple[str, str], list[Any]] = {}
        for _ in range(args.rounds):
            for kind in loops:
                for mode in args.modes.split(","):
                    got = timed(kind, mode, one, args.tasks, args.gathers)
                    results.setdefault((kind, mode), []).extend(got)
        for (kind, mode), got in results.items():
            print(f"  {kind:7} {mode:27} {summary(got, args.tasks)}")
        if core is not None and before is not None:
            print(f"  native launches {core.native_launches - before}")
        survivors = {}
        for kind in loops:
            gc.disable()
            try:
                peak, after, cyclic = run_loop(kind, lambda: census(one, args.tasks))
            finally:
                gc.enable()
            survivors[kind] = sum(peak.values()) / args.tasks
            print(f"  {kind} census: alive at the peak {rows(peak, args.tasks)}")
            print(f"  {kind} census: left after the gather {rows(after, args.tasks)}")
            cyclic_per = cyclic / args.tasks
            print(f"  {kind} census: freed only by a collection {cyclic_per:.2f} per await")
        x = cuasync.zeros((256,), "float32").sync_on(stream)

        async def with_args() -> None:  # (a tensor and an int: the op's tuples and a pair)
            await bump[1, 256](x, 256)

        gc.disable()
        try:
            peak, _, cyclic = run_loop(loops[0], lambda: census(with_args, args.tasks))
        finally:
            gc.enable()
        print(f"  {loops[0]} census of bump[1, 256](x, n): alive {rows(peak, args.tasks)}")
    if args.generic:  # (the stub lands every launch at once: no await parks)
        gc.disable()
        try:
            peak, after, cyclic = run_loop(loops[0], lambda: census(one, args.tasks, True))
        finally:
            gc.enable()
        print(f"  {loops[0]} census, parked behind a gate: alive {rows(peak, args.tasks)}")
        print(f"  {loops[0]} census, parked: left after the gather {rows(after, args.tasks)}")
        print(f"  {loops[0]} census, parked: freed only by a collection {cyclic / args.tasks:.2f}")
    print(
        f"  the sweep ({loops[0]}, not frozen): an await holding k tracked objects across its "
        f"one step aside; the rule's bound: long_lived_total / 4 = {tracked // 4} promoted"
    )
    for k in map(int, filter(None, args.sweep.split(","))):
        task = held(k)
        gc.disable()
        try:
            peak, _, _ = run_loop(loops[0], lambda: census(task, args.tasks))  # noqa: B023
        finally:
            gc.enable()
        got = []
        for _ in range(args.rounds):
            got += timed(loops[0], "not frozen", task, args.tasks, args.gathers)
        alive = sum(peak.values()) / args.tasks
        print(f"    k={k}: {alive:5.2f} alive per await; {summary(got, args.tasks)}")
    del heap


if __name__ == "__main__":
    main()
