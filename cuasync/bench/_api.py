"""Time device work with device events: ``do_bench`` and ``do_bench_paired``, each with
an ``_async`` twin to ``await`` inside an event loop (as httpx pairs Client/AsyncClient).

``fn`` is called once per repetition, with no arguments. If it returns a
:class:`~cuasync.DeviceOp` (build a fresh one each call: an op runs once), the op is
submitted on the benchmark's stream; if it returns None, it must have enqueued its work
on that stream itself (pass ``stream=``, e.g. a foreign stream wrapped with
``cuasync.Stream.from_handle``). Each repetition is bracketed by two timing events on
the stream, so the times are device times. The warmup runs first, ungated (it loads
kernels); the timed repetitions are then enqueued in batches behind a
:func:`cuasync.testing.gate`, released together, so the device runs them back to back
and the host's submission cost is not measured.

>>> x = cuasync.ones((1 << 20,)).sync()
>>> r = cuasync.bench.do_bench(lambda: x.dup(), rep=50)
>>> print(r.median_ms, r.p10_ms, r.p90_ms)
>>> r = await cuasync.bench.do_bench_async(lambda: x.dup())
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

from .._core.device import Event, Stream, get_default_device
from .._core.loops import check_blocking_allowed
from .._core.op import DeviceFuture, DeviceOp
from .._interop.wait import wait
from ..errors import ArgumentError
from ..testing import gate
from ._results import BenchResult, PairedResult

__all__ = ["do_bench", "do_bench_async", "do_bench_paired", "do_bench_paired_async"]

Candidate = Callable[[], Any]

#: Repetitions held behind one gate: their outputs stay alive until the batch lands.
_BATCH = 16

# A run is a generator: it yields the futures of each enqueued batch (None where ``fn``
# enqueued its own work), its driver waits for them and the stream, sync or async, and it
# returns the times of each candidate.
_Run = Generator[list[DeviceFuture[Any] | None], None, list[list[float]]]


def do_bench(
    fn: Candidate, *, warmup: int = 10, rep: int = 100, stream: Stream | None = None
) -> BenchResult:
    """Run ``fn``'s work ``warmup`` times, then time it ``rep`` times; blocks.

    >>> print(cuasync.bench.do_bench(lambda: x.dup()))
    median 0.0213 ms (p10 0.0209, p90 0.0220, mean 0.0215; 100 reps)
    """
    check_blocking_allowed("cuasync.bench.do_bench()", False)
    stream = _stream(stream)
    [times] = _drive(_run([fn], warmup, rep, stream), stream)
    return BenchResult.from_times(times)


async def do_bench_async(
    fn: Candidate, *, warmup: int = 10, rep: int = 100, stream: Stream | None = None
) -> BenchResult:
    """:func:`do_bench` for an event loop: awaits the device instead of blocking.

    >>> r = await cuasync.bench.do_bench_async(lambda: x.dup())
    """
    stream = _stream(stream)
    [times] = await _drive_async(_run([fn], warmup, rep, stream), stream)
    return BenchResult.from_times(times)


def do_bench_paired(
    a: Candidate,
    b: Candidate,
    *,
    warmup: int = 10,
    rep: int = 100,
    stream: Stream | None = None,
    confidence: float = 0.95,
) -> PairedResult:
    """Time ``a`` and ``b`` in ``rep`` interleaved pairs (ABBA order) on one stream and
    report ``a``'s time over ``b``'s with a bootstrap confidence interval; blocks.

    >>> r = cuasync.bench.do_bench_paired(lambda: x.dup(), lambda: x.astype("float32"))
    >>> r.ratio, (r.ci_low, r.ci_high), r.significant
    """
    check_blocking_allowed("cuasync.bench.do_bench_paired()", False)
    _check_confidence(confidence)
    stream = _stream(stream)
    ta, tb = _drive(_run([a, b], warmup, rep, stream), stream)
    return PairedResult.from_times(ta, tb, confidence)


async def do_bench_paired_async(
    a: Candidate,
    b: Candidate,
    *,
    warmup: int = 10,
    rep: int = 100,
    stream: Stream | None = None,
    confidence: float = 0.95,
) -> PairedResult:
    """:func:`do_bench_paired` for an event loop: awaits the device instead of blocking."""
    _check_confidence(confidence)
    stream = _stream(stream)
    ta, tb = await _drive_async(_run([a, b], warmup, rep, stream), stream)
    return PairedResult.from_times(ta, tb, confidence)


def _stream(stream: Stream | None) -> Stream:
    if stream is None:
        return get_default_device().new_stream()
    if not isinstance(stream, Stream):
        raise ArgumentError(f"stream must be a cuasync.Stream, got {type(stream).__name__}")
    return stream


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ArgumentError(f"confidence must be between 0 and 1, got {confidence!r}")


def _check_count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ArgumentError(f"{name} must be an int >= 1, got {value!r}")
    return value


def _submit(fn: Candidate, stream: Stream) -> DeviceFuture[Any] | None:
    out = fn()
    if isinstance(out, DeviceOp):
        return out.submit_on(stream)
    if out is not None:
        raise ArgumentError(
            f"the benchmarked function must return a cuasync.DeviceOp (a fresh one per "
            f"call) or None, got {type(out).__name__}"
        )
    return None


def _run(fns: Sequence[Candidate], warmup: int, rep: int, stream: Stream) -> _Run:
    for fn in fns:
        if isinstance(fn, DeviceOp) or not callable(fn):
            raise ArgumentError(
                "pass a function that builds the op (lambda: ...): an op runs only once"
            )
    _check_count(warmup, "warmup")
    _check_count(rep, "rep")
    yield [_submit(fn, stream) for _ in range(warmup) for fn in fns]
    times: list[list[float]] = [[] for _ in fns]
    for first in range(0, rep, _BATCH):
        marks: list[tuple[int, Event, Event]] = []
        futures: list[DeviceFuture[Any] | None] = []
        with gate(stream):  # opens on exit, also when fn raises
            for i in range(first, min(first + _BATCH, rep)):
                order = range(len(fns)) if i % 2 == 0 else range(len(fns) - 1, -1, -1)
                for k in order:
                    start = Event(stream.device, timing=True).record(stream)
                    futures.append(_submit(fns[k], stream))
                    marks.append((k, start, Event(stream.device, timing=True).record(stream)))
        yield futures
        for k, start, end in marks:
            times[k].append(start.elapsed_ms(end))
    return times


def _drive(run: _Run, stream: Stream) -> list[list[float]]:
    try:
        futures = next(run)
        while True:
            stream.synchronize()
            for fut in futures:
                if fut is not None:
                    fut.wait()  # raises the op's error
            futures = run.send(None)
    except StopIteration as done:
        return done.value


async def _drive_async(run: _Run, stream: Stream) -> list[list[float]]:
    try:
        futures = next(run)
        while True:
            for fut in futures:
                if fut is not None:
                    await fut
            await wait(stream)  # and the work fn enqueued itself, and the last event
            futures = run.send(None)
    except StopIteration as done:
        return done.value
