"""``cancel``: the GPU time a cancel scope gives back when requests are cancelled while
their work is queued (issue 36).

**Queue.** 64 requests, each one awaited chain of 20 generated kernels (``sum(a * b + c,
axis=1)``: the elementwise expression fused into a reduction's loads, float32 operands of
``ROWS x COLS``: 3 GiB read a kernel on a GPU, ~0.7 ms on an H200; a few elements on the
emulator), all on one busy stream (a 20 ms sleep kernel ahead of them, then each other's
work): the requests arrive one after the other, each enqueueing its chain far faster
than the device runs it, so the chains queue up. Every other request is cancelled (its
task, as a client disconnecting does) as soon as its chain is on the stream, before the
next request arrives: queued, not started. (Not all 1,280 kernels at once
behind a closed gate: CUDA lets about 1,000 commands wait on a stream, and the enqueue
after them blocks the host until the stream drains: behind a gate, forever. So the
later chains queue as the stream makes room, the loop waiting in ``cuLaunchKernel``
meanwhile, the same in both ways; ``tools/probes/enqueue_limit.py``.) (A reduction,
because a chain keeps what it made until it lands: 1280 elementwise results of 2 GiB
cannot be alive at once.) Two ways, alternated in rounds in one run: **skip** (each
request inside ``cuasync.cancel_scope()``: the cancelled requests' queued kernels return
at once) and **no skip** (no scope: they run to the end). Rows: the stream's time from
its first request kernel to its last (device events), and the surviving requests' p50
latency from the round's start, each way; ``-- targets``: skip over no skip, <= 0.55 for
the stream, <= 0.6 for the survivors' p50.

**Host cost of the word.** A launch op built (host only) inside an open scope against
outside any, and an await of a tiny generated op (``x + 1``, 1024 float32) the same way
in alternated turns of 25: the differences (the await's: the median over pairs of
turns of their p50s' difference), each against the target <= 0.3 us. The await's
difference on a GPU holds device time too (in a scope the kernel loads the word before
it works): the same pairs again with the driver stubbed (nothing launched, nothing
loaded) give the host's part alone.

>>> python -m cuasync.bench cancel            # --quick: 16 requests of 5, one round
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from typing import Any

import numpy as np

import cuasync
import cuasync.testing as ct
from cuasync._backends import get_backend

from ._breakdown import stubbed_driver
from ._util import Report

SUITE = "cancel"
REQUESTS = 64
KERNELS = 20  # a request's chain
ROWS, COLS = 1 << 16, 1 << 12  # float32 operands of 1 GiB on a GPU: 3 GiB read a kernel
ROWS_EMULATED, COLS_EMULATED = 8, 128
HEAD_US, HEAD_US_EMULATED = 20_000, 2_000  # the stream's work before the requests' (sleep)


def _chain(a: cuasync.Tensor, b: cuasync.Tensor, c: cuasync.Tensor, n: int) -> Any:
    """``n`` kernels ``sum(a * b + c, axis=1)``, chained: all enqueued by one await."""
    op: Any = cuasync.sum(a * b + c, axis=1)
    for _ in range(n - 1):
        op = op.then(lambda _: cuasync.sum(a * b + c, axis=1))
    return op


async def _round(
    skip: bool, stream: cuasync.Stream, ops: tuple[Any, ...], head_us: float, size: tuple[int, int]
) -> tuple[float, float, int]:
    """One queue: (the stream's first-to-last request kernel time ms, the survivors' p50
    latency ms, the requests cancelled before they finished). ``size``: (requests,
    kernels a request)."""
    requests, kernels = size
    launched: list[int] = []
    finished: dict[int, float] = {}

    async def request(i: int) -> None:
        if skip:
            with cuasync.cancel_scope():
                launched.append(i)  # in the step that enqueues the chain
                await _chain(ops[0], ops[1], ops[2], kernels)
        else:
            launched.append(i)
            await _chain(ops[0], ops[1], ops[2], kernels)
        finished[i] = time.perf_counter()

    device = stream.device
    busy = ct.sleep(head_us, stream).submit()  # the stream is busy: the chains queue up
    start = cuasync.Event(device, timing=True).record(stream)
    began = time.perf_counter()
    gone = set(range(0, requests, 2))  # clients that disconnect while their work is queued
    tasks: list[asyncio.Task[None]] = []
    for i in range(requests):  # the requests arrive one after the other
        tasks.append(asyncio.create_task(request(i)))
        while len(launched) <= i:
            await asyncio.sleep(0)
        if i in gone:
            tasks[i].cancel()  # (its chain is on the stream: queued, not started)
    end = cuasync.Event(device, timing=True).record(stream)
    await asyncio.gather(*tasks, return_exceptions=True)
    await cuasync.wait(end)
    await busy
    caught = sum(tasks[i].cancelled() for i in gone)  # (not finished before the cancel)
    survivors = [(finished[i] - began) * 1e3 for i in range(requests) if i not in gone]
    return start.elapsed_ms(end), statistics.median(survivors), caught


async def _queue(report: Report, quick: bool) -> None:
    device = cuasync.get_default_device()
    emulated = not get_backend().driver_handles
    shape = (ROWS_EMULATED, COLS_EMULATED) if emulated or quick else (ROWS, COLS)
    a, b, c = [await cuasync.full(shape, v, "float32") for v in (1.0, 0.5, 0.25)]
    ops = (a, b, c)
    stream = device.new_stream()
    rounds = 1 if quick else 2 if emulated else 3
    size = (16, 5) if quick else (REQUESTS, KERNELS)  # (--quick: a smoke test)
    head_us = HEAD_US_EMULATED if emulated or quick else HEAD_US
    ways: dict[bool, list[tuple[float, float, int]]] = {True: [], False: []}
    with cuasync.use_policy(cuasync.SingleStream(stream)):
        await _chain(*ops, 2)  # the kernel compiled and loaded before the rounds
        for skip in (True, False):  # (warm: the words' slab and urgent stream, the pool)
            await _round(skip, stream, ops, head_us, size)
        counts = getattr(get_backend(), "counts", None)
        skipped = counts.skipped if counts is not None else 0
        for r in range(rounds):
            for skip in (True, False) if r % 2 == 0 else (False, True):
                busy, p50, caught = result = await _round(skip, stream, ops, head_us, size)
                ways[skip].append(result)
                print(f"    round {r + 1}/{rounds}, {'skip' if skip else 'no skip'}: stream "
                      f"{busy:.2f} ms, survivors p50 {p50:.2f} ms, {caught} cancelled "
                      "while queued", flush=True)  # fmt: skip
    moved = 3 * shape[0] * shape[1] * 4 / (1 << 30)
    note = f"{size[0]} requests x {size[1]} kernels ({moved:.3g} GiB read each), half cancelled"
    rows: dict[bool, tuple[float, float]] = {}
    for skip, results in ways.items():
        label = "skip" if skip else "no skip"
        busy = statistics.median(r[0] for r in results)
        p50 = statistics.median(r[1] for r in results)
        rows[skip] = (busy, p50)
        report.value(SUITE, f"cancel: stream first-to-last kernel, {label}", busy, "ms", note)
        report.value(SUITE, f"cancel: surviving requests p50, {label}", p50, "ms")
        caught_median = statistics.median(r[2] for r in results)
        report.value(
            SUITE,
            f"cancel: requests cancelled while queued, {label}",
            caught_median,
            "",
            f"of {size[0] // 2} (the others finished first: the stream was not busy enough)",
        )
    if counts is not None:  # the emulator counts the kernels that returned at once
        per_round = (counts.skipped - skipped) / rounds
        report.value(SUITE, "cancel: kernels skipped a skip round (emulator)", per_round, "")
    print("  -- targets")
    busy_ratio = rows[True][0] / rows[False][0]
    p50_ratio = rows[True][1] / rows[False][1]
    report.value(SUITE, "cancel: stream time, skip / no skip", busy_ratio, "x", "target <= 0.55")
    report.value(SUITE, "cancel: survivors' p50, skip / no skip", p50_ratio, "x", "target <= 0.6")


def _build_ns(make: Any, scoped: bool, n: int) -> float:
    """ns per op of ``n`` ops built by ``make()`` and taken unexecuted (host only)."""
    clock = time.perf_counter_ns
    if scoped:
        with cuasync.cancel_scope():
            t0 = clock()
            for _ in range(n):
                make()._take()
            return (clock() - t0) / n
    t0 = clock()
    for _ in range(n):
        make()._take()
    return (clock() - t0) / n


async def _host_cost(report: Report, quick: bool) -> None:
    marks = await cuasync.zeros((1,), "uint32")
    await ct.mark(marks, 0)
    kernel = ct.mark.__globals__["_kernel"]()  # (the mark kernel: it takes the word)
    launcher = kernel[1, 32]

    def make() -> Any:
        return launcher(marks, 0)

    n, rounds = (2000, 5) if quick else (20000, 9)
    built: dict[bool, list[float]] = {True: [], False: []}
    for r in range(rounds):
        for scoped in (True, False) if r % 2 == 0 else (False, True):
            built[scoped].append(_build_ns(make, scoped, n))
    b_in, b_out = (statistics.median(built[s]) / 1e3 for s in (True, False))
    report.value(SUITE, "cancel: a launch op built, in a scope", b_in, "us")
    report.value(SUITE, "cancel: a launch op built, no scope", b_out, "us")

    x = await cuasync.full((1024,), 1.0, "float32")
    turns = 30 if quick else 120
    a_in, a_out, paired = await _paired_awaits(x, turns)
    report.value(SUITE, "cancel: await x + 1 (1024 float32), in a scope", a_in, "us p50")
    report.value(SUITE, "cancel: await x + 1 (1024 float32), no scope", a_out, "us p50")
    report.value(
        SUITE,
        "cancel: host cost of carrying the word (await)",
        statistics.median(paired) / 1e3,
        "us",
        f"median of {len(paired)} paired turns' p50 differences (device time included: "
        "in a scope the kernel loads the word); target <= 0.3",
    )
    with stubbed_driver() as stubbed:  # the host's part alone: nothing runs, nothing loads
        if stubbed:
            _, _, paired = await _paired_awaits(x, turns)
            report.value(
                SUITE,
                "cancel: host cost of carrying the word (await, driver stubbed)",
                statistics.median(paired) / 1e3,
                "us",
                f"median of {len(paired)} paired turns' p50 differences; target <= 0.3",
            )
    report.value(
        SUITE,
        "cancel: host cost of carrying the word (build)",
        b_in - b_out,
        "us",
        "target <= 0.3",
    )


async def _paired_awaits(x: cuasync.Tensor, turns: int) -> tuple[float, float, list[float]]:
    """``await (x + 1.0)`` in turns of 25, in a scope and not, alternated: the p50 of
    each (µs) and each pair of turns' p50 difference (ns)."""
    clock = time.perf_counter_ns
    awaited: dict[bool, list[int]] = {True: [], False: []}
    paired: list[float] = []  # each pair of turns: in-scope p50 less no-scope p50
    last: list[int] = []
    for turn in range(turns):
        scoped = turn % 2 == 0
        times: list[int] = []
        with cuasync.cancel_scope() if scoped else contextlib.nullcontext():
            for _ in range(25):
                t0 = clock()
                await (x + 1.0)
                times.append(clock() - t0)
        awaited[scoped] += times
        if not scoped:
            paired.append(float(np.median(last)) - float(np.median(times)))
        last = times
    a_in, a_out = (float(np.percentile(awaited[s], 50)) / 1e3 for s in (True, False))
    return a_in, a_out, paired


def run(report: Report, quick: bool = False) -> None:
    """The suite: the queue (skip against no skip), then the word's host cost."""
    print(f"[{SUITE}]", flush=True)
    asyncio.run(_queue(report, quick))
    asyncio.run(_host_cost(report, quick))
