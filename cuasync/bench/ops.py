"""``ops``: tensor-op throughput, timed with device events: reductions (sum, max and min
of 256 MiB float32, and over the last and the first axis of an (8192, 8192) float32
matrix), elementwise adds (float32 at 64 and 256 MiB, bfloat16 at 64 MiB per operand),
``scatter``-add of 16M float32 updates into 1M bins, ``take_along_axis`` of a
(4096, 16384) float32 matrix with (4096, 4096) int64 indices, and ``exp(a * b + c)``
fused, unfused and (CuPy's) ``cupy.fuse``.

Each row names the call it times and the sizes, and gives the median device time and the
bandwidth (bytes read and written / time), for cuasync and, side by side where installed
and on a GPU, CuPy and PyTorch; the ``-- targets`` lines put them in ratio. Every library
is timed the same way: :func:`~._api.do_bench` on one stream of cuasync's (torch's and
CuPy's calls made with it as their current stream, an external stream), :data:`CALLS`
calls back to back between two events (cuasync's zipped into one submitted op, so one
completion flag for them all), the batches held behind a gate (host time left out), the
median batch over :data:`CALLS`. A submitted op ends with a completion flag written on
its stream (``cuStreamWriteValue32``, about 2.8 us of stream time after a 64 MiB add on
the H200), which torch's and CuPy's calls do not write: the adds also print a row of
cuasync's op submitted alone, each between two events, to show that cost. ``--only`` runs
some parts (:data:`PARTS`). The rows
with a target are taken in rounds (:func:`_rounds`): every library timed in turn each
round, the median round kept. On the emulator (numpy) the sizes shrink; the rows say so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import cuasync
from cuasync._backends import get_backend
from cuasync.errors import ArgumentError

from ._api import do_bench
from ._util import Report, size_name

SUITE = "ops"
MiB = 1 << 20

#: Calls of one library back to back between two timing events: the device time of one
#: call is the batch's over this (cuasync's calls zipped into one submitted op, whose
#: completion flag is then a tenth of a percent of a 64 MiB add).
CALLS = 10

#: The candidates of one comparison: each row's name (library and call), and a function
#: giving that call's device time in ms.
Timers = dict[str, Callable[[], float]]
#: The ``-- targets`` lines: each name, and its ratio.
Targets = list[tuple[str, float]]


def _cases(cuda: bool) -> list[tuple[str, tuple[int, ...], Any]]:
    big, side = (64 * MiB, 8192) if cuda else (MiB, 512)  # the emulator runs numpy
    whole, rows = (big,), (side, side)
    return [
        ("sum", whole, None),
        ("sum", rows, -1),
        ("sum", rows, 0),
        ("max", whole, None),
        ("max", rows, 0),
        ("min", whole, None),
        ("min", rows, 0),
    ]


#: The reductions with a target: their bandwidth over torch's, at least this.
_REDUCTION_TARGETS = {
    ("sum", 0): 0.95,
    ("max", None): 0.95,
    ("max", 0): 0.95,
    ("min", None): 0.95,
    ("min", 0): 0.95,
}


def _on_stream(lib: Any, stream: cuasync.Stream) -> Callable[[], Any]:
    """A context manager factory making ``stream`` the current stream of ``lib``
    (``torch.cuda`` or ``cupy.cuda``), as an external stream."""
    ext = lib.ExternalStream(stream.handle)
    if hasattr(lib, "synchronize") and hasattr(lib, "stream"):  # torch.cuda
        return lambda: lib.stream(ext)
    return lambda: ext  # cupy.cuda: a stream is its own context


def _foreign_ms(
    make: Callable[[], Any], run: Callable[[Any], Any], lib: Any, reps: int, stream: cuasync.Stream
) -> float:
    """The median device time of ``run(make())`` timed as cuasync's ops are
    (:func:`~._api.do_bench`: :data:`CALLS` calls between two events on ``stream``, the
    batches held behind a gate so host time is left out), ``stream`` the library's
    current stream (``lib`` is ``torch.cuda`` or ``cupy.cuda``)."""
    x = make()
    enter = _on_stream(lib, stream)
    if hasattr(lib, "synchronize"):  # the inputs, made on the library's own stream
        lib.synchronize()
    else:
        lib.Device().synchronize()

    def call() -> None:
        with enter():
            for _ in range(CALLS):
                run(x)

    return do_bench(call, warmup=1, rep=_batches(reps), stream=stream).median_ms / CALLS


def _timer(
    call: Callable[[], Any], lib: Any, reps: int, stream: cuasync.Stream
) -> Callable[[], float]:
    """A foreign library's ``call()`` timed by :func:`_foreign_ms`."""
    return lambda: _foreign_ms(lambda: None, lambda _: call(), lib, reps, stream)


def _cuasync_timer(
    build: Callable[[], Any], reps: int, stream: cuasync.Stream
) -> Callable[[], float]:
    """The median of ``do_bench`` over :data:`CALLS` ops ``build()`` makes, zipped into
    one submitted op, on ``stream``, over :data:`CALLS`."""

    def batch() -> Any:
        return cuasync.zip(*(build() for _ in range(CALLS)))

    return lambda: do_bench(batch, warmup=1, rep=_batches(reps), stream=stream).median_ms / CALLS


def _alone_timer(
    build: Callable[[], Any], reps: int, stream: cuasync.Stream
) -> Callable[[], float]:
    """The median of ``do_bench`` over the op ``build()`` makes, submitted alone (each
    call between two events: its kernel and its completion flag)."""
    return lambda: do_bench(build, warmup=3, rep=reps, stream=stream).median_ms


def _batches(reps: int) -> int:
    """Timed batches of :data:`CALLS` calls for about ``reps`` calls."""
    return max(3, reps // CALLS * 2)


def _rounds(timers: Timers, rounds: int) -> dict[str, list[float]]:
    """ms of each timer in each of ``rounds`` rounds, the timers taken in turn (in
    reverse order every other round), so each library sees the same stretches of a
    GPU whose clocks drift from one second to the next."""
    times: dict[str, list[float]] = {name: [] for name in timers}
    order = list(timers)
    for i in range(rounds):
        for name in order if i % 2 == 0 else order[::-1]:
            times[name].append(timers[name]())
    return times


def _report_rounds(
    report: Report, sizes: str, timers: Timers, rounds: int, nbytes: int
) -> dict[str, float]:
    """Time ``timers`` in rounds, write a row per candidate (``"<name>, <sizes>"``: the
    median round, the bandwidth ``nbytes`` / time, every round) and return the medians."""
    medians = {}
    for name, times in _rounds(timers, rounds).items():
        ms = medians[name] = float(np.median(times))
        each = ", ".join(f"{t * 1e3:,.1f}" for t in times)
        note = f"{nbytes / (ms / 1e3) / 1e9:,.0f} GB/s; rounds {each} us"
        report.value(SUITE, f"{name}, {sizes}", ms * 1e3, "us", note)
    return medians


def _speedup(
    medians: dict[str, float], torch_name: str | None, what: str, target: float
) -> Targets:
    """The target line of ``what``: the time of ``torch_name`` (when torch ran) over
    cuasync's (the first candidate)."""
    if torch_name is None:
        return []
    cuasync_ms = next(iter(medians.values()))
    return [(f"{what} / torch's (target >= {target})", medians[torch_name] / cuasync_ms)]


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def _cupy() -> Any:
    try:
        import cupy
    except ImportError:
        return None
    return cupy


#: The parts of the suite, each a function of (report, cuda, reps, rounds, stream), by the
#: name ``--only`` takes (``python -m cuasync.bench ops --only reductions,adds``).
PARTS = ("reductions", "adds", "scatter", "take_along_axis", "fusion")


def run(report: Report, quick: bool = False, only: Sequence[str] = PARTS) -> None:
    """Time the ``only`` parts of :data:`PARTS` (all by default), every library on one
    stream of cuasync's, then print the targets of those parts."""
    unknown = [p for p in only if p not in PARTS]
    if unknown:
        raise ArgumentError(f"ops bench: unknown part(s) {unknown}; choose from {', '.join(PARTS)}")
    print(f"== ops ({cuasync.backend_name()}: {cuasync.Device(0).name})", flush=True)
    cuda = get_backend().driver_handles
    reps = 10 if quick or not cuda else 50
    rounds = 3 if quick or not cuda else 5
    stream = cuasync.Device(0).new_stream()
    parts = {
        "reductions": lambda: _reductions(report, cuda, reps, rounds, stream),
        "adds": lambda: _adds(report, cuda, reps, rounds, stream),
        "scatter": lambda: _scatter_add(report, cuda, reps, rounds, stream),
        "take_along_axis": lambda: _take_along_axis(report, cuda, reps, rounds, stream),
        "fusion": lambda: _elementwise(report, cuda, reps, stream),
    }
    targets: Targets = []
    for name in PARTS:
        if name in only:
            targets += parts[name]()
    print("-- targets (ratios inside this run)")
    for name, ratio in targets:
        report.value(SUITE, name, ratio, "x")


def _reductions(
    report: Report, cuda: bool, reps: int, rounds: int, stream: cuasync.Stream
) -> Targets:
    """``cuasync.sum/max/min(x, axis=axis, out=out)`` against torch's ``x.sum/amax/amin``
    and CuPy's ``x.sum/max/min``, on the same values (ones for sums, else uniform)."""
    targets: Targets = []
    rng = np.random.default_rng(0)
    for op, shape, axis in _cases(cuda):
        host = np.ones(shape, np.float32) if op == "sum" else rng.random(shape, np.float32)
        x = cuasync.from_host(host).sync()
        fn = getattr(cuasync, op)
        out = fn(x, axis=axis).sync()  # the output, reused; compiles the kernel
        if not np.allclose(out.to_host().sync(), getattr(host, op)(axis=axis), rtol=1e-5):
            raise AssertionError(f"ops bench: {op} of {shape} along {axis} gave wrong values")
        timers: Timers = {
            f"cuasync {op}(x, axis={axis}, out=out)": _cuasync_timer(
                lambda: fn(x, axis=axis, out=out),  # noqa: B023 (timed in this iteration)
                reps,
                stream,
            )
        }
        torch_name = _reduction_others(timers, host, op, axis, reps, stream) if cuda else None
        sizes = f"x {shape} float32 ({size_name(x.nbytes)})"
        medians = _report_rounds(report, sizes, timers, rounds, x.nbytes)
        target = _REDUCTION_TARGETS.get((op, axis))
        if target is not None:
            what = f"{op} along {axis} of {shape} float32 bandwidth"
            targets += _speedup(medians, torch_name, what, target)
    return targets


def _reduction_others(
    timers: Timers, host: np.ndarray, op: str, axis: Any, reps: int, stream: cuasync.Stream
) -> str | None:
    """Add CuPy's and torch's timers of the reduction; torch's name, if it is there."""
    cupy, torch = _cupy(), _torch()
    if cupy is not None:
        xc = cupy.asarray(host)
        timers[f"cupy {cupy.__version__} x.{op}(axis={axis})"] = _timer(
            lambda: getattr(xc, op)(axis=axis), cupy.cuda, reps, stream
        )
    if torch is None:
        return None
    xt = torch.as_tensor(host, device="cuda")
    method = {"sum": "sum", "max": "amax", "min": "amin"}[op]
    if axis is None:
        name = f"torch {torch.__version__} x.{method}()"
        timers[name] = _timer(getattr(xt, method), torch.cuda, reps, stream)
    else:
        name = f"torch {torch.__version__} x.{method}(dim={axis})"
        timers[name] = _timer(lambda: getattr(xt, method)(dim=axis), torch.cuda, reps, stream)
    return name


def _adds(report: Report, cuda: bool, reps: int, rounds: int, stream: cuasync.Stream) -> Targets:
    """``cuasync.add(a, b, out=c)`` against ``torch.add(a, b, out=c)`` and
    ``cupy.add(a, b, out=c)`` (CuPy has no bfloat16): float32 at 64 and 256 MiB per
    operand, bfloat16 at 64 MiB (the emulator: 1, 4 and 1 MiB)."""
    scale = 1 if cuda else 64
    targets: Targets = []
    for dtype, nbytes in (
        ("float32", 64 * MiB // scale),
        ("float32", 256 * MiB // scale),
        ("bfloat16", 64 * MiB // scale),
    ):
        n = nbytes // (4 if dtype == "float32" else 2)
        a, b, c = (cuasync.full((n,), v, dtype).sync() for v in (0.5, 2.0, 0.0))
        cuasync.add(a, b, out=c).sync()
        if not np.allclose(c.to_host().sync()[:4].astype(np.float32), 2.5):
            raise AssertionError(f"ops bench: {dtype} add gave wrong values")
        timers: Timers = {
            "cuasync add(a, b, out=c)": _cuasync_timer(
                lambda: cuasync.add(a, b, out=c),  # noqa: B023 (timed in this iteration)
                reps,
                stream,
            )
        }
        torch_name = _add_others(timers, n, dtype, reps, stream) if cuda else None
        timers["cuasync add(a, b, out=c), one op submitted alone (kernel + completion flag)"] = (
            _alone_timer(
                lambda: cuasync.add(a, b, out=c),  # noqa: B023 (timed in this iteration)
                reps,
                stream,
            )
        )
        sizes = f"{dtype}, {n:,} elements ({size_name(nbytes)} each operand)"
        medians = _report_rounds(report, sizes, timers, rounds, 3 * nbytes)
        what = f"{dtype} add of {size_name(nbytes)} bandwidth"
        targets += _speedup(medians, torch_name, what, 0.95)
    return targets


def _add_others(
    timers: Timers, n: int, dtype: str, reps: int, stream: cuasync.Stream
) -> str | None:
    cupy, torch = _cupy(), _torch()
    if cupy is not None and dtype == "float32":
        ac, bc, cc = (cupy.full(n, v, cupy.float32) for v in (0.5, 2.0, 0.0))
        timers[f"cupy {cupy.__version__} cupy.add(a, b, out=c)"] = _timer(
            lambda: cupy.add(ac, bc, out=cc), cupy.cuda, reps, stream
        )
    if torch is None:
        return None
    kind = getattr(torch, dtype)
    at, bt, ct = (torch.full((n,), v, dtype=kind, device="cuda") for v in (0.5, 2.0, 0.0))
    name = f"torch {torch.__version__} torch.add(a, b, out=c)"
    timers[name] = _timer(lambda: torch.add(at, bt, out=ct), torch.cuda, reps, stream)
    return name


def _scatter_add(
    report: Report, cuda: bool, reps: int, rounds: int, stream: cuasync.Stream
) -> Targets:
    """``cuasync.scatter(bins, idx, upd, axis=0, mode="add", out=bins)`` (in place)
    against torch's ``bins.index_add_`` and ``bins.scatter_add_`` (which takes only
    int64 indices) and ``cupyx.scatter_add``: 16M float32 updates at int32 indices drawn
    uniformly (``default_rng(0)``) from 1M bins (the emulator: 64K into 4K)."""
    n, nbins = (16 * MiB, MiB) if cuda else (64 * 1024, 4096)
    rng = np.random.default_rng(0)
    idx_host = rng.integers(0, nbins, n, dtype=np.int32)
    upd_host = rng.random(n, np.float32)
    bins = cuasync.zeros((nbins,), "float32").sync()
    idx, upd = cuasync.from_host(idx_host).sync(), cuasync.from_host(upd_host).sync()
    cuasync.scatter(bins, idx, upd, axis=0, mode="add", out=bins).sync()
    want = np.bincount(idx_host, weights=upd_host, minlength=nbins)
    if not np.allclose(bins.to_host().sync(), want, rtol=1e-4, atol=1e-4):
        raise AssertionError("ops bench: scatter add gave wrong values")
    timers: Timers = {
        "cuasync scatter(bins, idx, upd, axis=0, mode='add', out=bins)": _cuasync_timer(
            lambda: cuasync.scatter(bins, idx, upd, axis=0, mode="add", out=bins), reps, stream
        )
    }
    torch_names = _scatter_others(timers, nbins, idx_host, upd_host, reps, stream) if cuda else []
    sizes = f"{n:,} float32 updates, uniform int32 idx (default_rng(0)), {nbins:,} bins"
    medians = _report_rounds(report, sizes, timers, rounds, n * 8)  # read idx and upd
    targets: Targets = []
    for torch_name, call in zip(torch_names, ("index_add_", "scatter_add_"), strict=False):
        targets += _speedup(medians, torch_name, f"scatter add speed (torch {call})", 0.9)
    return targets


def _scatter_others(
    timers: Timers,
    nbins: int,
    idx_host: np.ndarray,
    upd_host: np.ndarray,
    reps: int,
    stream: cuasync.Stream,
) -> list[str]:
    """Add CuPy's and torch's timers of the scatter-add; torch's names, where there."""
    cupy, torch = _cupy(), _torch()
    if cupy is not None:
        import cupyx

        bc, ic, uc = (cupy.asarray(a) for a in (np.zeros(nbins, np.float32), idx_host, upd_host))
        timers[f"cupy {cupy.__version__} cupyx.scatter_add(bins, idx, upd)"] = _timer(
            lambda: cupyx.scatter_add(bc, ic, uc), cupy.cuda, reps, stream
        )
    if torch is None:
        return []
    bt = torch.zeros(nbins, dtype=torch.float32, device="cuda")
    it, ut = (torch.as_tensor(a, device="cuda") for a in (idx_host, upd_host))
    it64 = it.long()
    v = torch.__version__
    names = [
        f"torch {v} bins.index_add_(0, idx, upd)",
        f"torch {v} bins.scatter_add_(0, idx64, upd)",
    ]
    timers[names[0]] = _timer(lambda: bt.index_add_(0, it, ut), torch.cuda, reps, stream)
    timers[names[1]] = _timer(lambda: bt.scatter_add_(0, it64, ut), torch.cuda, reps, stream)
    return names


def _take_along_axis(
    report: Report, cuda: bool, reps: int, rounds: int, stream: cuasync.Stream
) -> Targets:
    """``cuasync.take_along_axis(x, idx, axis=1, out=out)`` against ``torch.gather(x, 1,
    idx, out=out)`` and ``cupy.take_along_axis(x, idx, axis=1)``: x (4096, 16384)
    float32, idx (4096, 4096) int64 drawn uniformly (``default_rng(0)``) from each row
    (the emulator: (64, 256) and (64, 64))."""
    rows, cols, picks = (4096, 16384, 4096) if cuda else (64, 256, 64)
    rng = np.random.default_rng(0)
    x_host = rng.random((rows, cols), np.float32)
    idx_host = rng.integers(0, cols, (rows, picks), dtype=np.int64)
    x, idx = cuasync.from_host(x_host).sync(), cuasync.from_host(idx_host).sync()
    out = cuasync.empty((rows, picks), "float32").sync()
    cuasync.take_along_axis(x, idx, axis=1, out=out).sync()
    if not np.array_equal(out.to_host().sync(), np.take_along_axis(x_host, idx_host, axis=1)):
        raise AssertionError("ops bench: take_along_axis gave wrong values")
    timers: Timers = {
        "cuasync take_along_axis(x, idx, axis=1, out=out)": _cuasync_timer(
            lambda: cuasync.take_along_axis(x, idx, axis=1, out=out), reps, stream
        )
    }
    torch_name = _take_others(timers, x_host, idx_host, reps, stream) if cuda else None
    sizes = f"x ({rows}, {cols}) float32, idx ({rows}, {picks}) int64"
    nbytes = rows * picks * (8 + 4 + 4)  # read idx and the picked x, write out
    medians = _report_rounds(report, sizes, timers, rounds, nbytes)
    return _speedup(medians, torch_name, "take_along_axis speed (torch.gather)", 0.9)


def _take_others(
    timers: Timers, x_host: np.ndarray, idx_host: np.ndarray, reps: int, stream: cuasync.Stream
) -> str | None:
    """Add CuPy's and torch's timers of the gather; torch's name, if it is there."""
    cupy, torch = _cupy(), _torch()
    if cupy is not None:
        xc, ic = cupy.asarray(x_host), cupy.asarray(idx_host)
        timers[f"cupy {cupy.__version__} cupy.take_along_axis(x, idx, axis=1)"] = _timer(
            lambda: cupy.take_along_axis(xc, ic, axis=1), cupy.cuda, reps, stream
        )
    if torch is None:
        return None
    xt, it = (torch.as_tensor(a, device="cuda") for a in (x_host, idx_host))
    ot = torch.empty(idx_host.shape, dtype=torch.float32, device="cuda")
    name = f"torch {torch.__version__} torch.gather(x, 1, idx, out=out)"
    timers[name] = _timer(lambda: torch.gather(xt, 1, it, out=ot), torch.cuda, reps, stream)
    return name


def _elementwise(report: Report, cuda: bool, reps: int, stream: cuasync.Stream) -> Targets:
    """exp(a * b + c) fused and unfused over 64 MiB float32 operands, and the add that
    gives the fused kernel's floor (its traffic at add's bandwidth)."""
    n = (16 * MiB) if cuda else (MiB // 4)
    nbytes = 4 * n
    a, b, c, out = (cuasync.full((n,), v, "float32").sync() for v in (0.5, 2.0, -1.0, 0.0))
    tmp = cuasync.empty((n,), "float32").sync()
    cuasync.exp(a * b + c, out=out).sync()  # compiles the fused kernel
    if not np.allclose(out.to_host().sync()[:4], 1.0):
        raise AssertionError("ops bench: exp(a * b + c) gave wrong values")
    add_ms = _cuasync_timer(lambda: cuasync.add(a, b, out=out), reps, stream)()
    fused_ms = _cuasync_timer(lambda: cuasync.exp(a * b + c, out=out), reps, stream)()

    def unfused() -> Any:  # one kernel and one full-size temporary per node
        return cuasync.zip(
            cuasync.multiply(a, b, out=tmp), cuasync.add(tmp, c, out=tmp), cuasync.exp(tmp, out=out)
        )

    unfused_ms = _cuasync_timer(unfused, reps, stream)()
    label = f"{nbytes // MiB} MiB float32"
    add_gbps = 3 * nbytes / (add_ms / 1e3) / 1e9
    report.value(SUITE, f"cuasync add of {label}", add_ms * 1e3, "us", f"{add_gbps:,.0f} GB/s")
    report.value(SUITE, f"cuasync exp(a*b+c) fused, {label}", fused_ms * 1e3, "us")
    report.value(SUITE, f"cuasync exp(a*b+c) unfused, {label}", unfused_ms * 1e3, "us")
    others = _elementwise_others(n, reps, stream) if cuda else {}
    for name, ms in others.items():
        report.value(SUITE, f"{name}, {label}", ms * 1e3, "us")
    floor_ms = 4 * nbytes / (add_gbps * 1e9) * 1e3  # read 3, write 1, at add's bandwidth
    targets = [
        ("fused time / its traffic at add's bandwidth (target <= 1.15)", fused_ms / floor_ms),
        ("unfused time / fused time (target >= 1.8)", unfused_ms / fused_ms),
    ]
    for name, ms in others.items():
        if name.endswith("fuse"):
            targets.append(("fused time / cupy.fuse time (target <= 1.0)", fused_ms / ms))
    return targets


def _elementwise_others(n: int, reps: int, stream: cuasync.Stream) -> dict[str, float]:
    out: dict[str, float] = {}
    cupy, torch = _cupy(), _torch()
    if cupy is not None:
        v = cupy.__version__
        xs = [cupy.full(n, f, cupy.float32) for f in (0.5, 2.0, -1.0, 0.0)]

        def exp_fma(p: Any, q: Any, r: Any) -> Any:  # cupy.fuse names its kernel after it:
            return cupy.exp(p * q + r)  # a lambda's "<lambda>" is no C identifier

        fused = cupy.fuse(exp_fma)
        out[f"cupy {v} exp(a*b+c) unfused"] = _foreign_ms(
            lambda: xs, lambda x: cupy.exp(x[0] * x[1] + x[2], out=x[3]), cupy.cuda, reps, stream
        )
        out[f"cupy {v} exp(a*b+c) cupy.fuse"] = _foreign_ms(
            lambda: xs, lambda x: fused(x[0], x[1], x[2]), cupy.cuda, reps, stream
        )
    if torch is not None:
        v = torch.__version__
        ts = [
            torch.full((n,), f, dtype=torch.float32, device="cuda") for f in (0.5, 2.0, -1.0, 0.0)
        ]
        out[f"torch {v} exp(a*b+c) eager"] = _foreign_ms(
            lambda: ts, lambda x: torch.exp(x[0] * x[1] + x[2], out=x[3]), torch.cuda, reps, stream
        )
    return out
