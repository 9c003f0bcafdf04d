"""``ops``: tensor-op throughput, timed with device events: reductions (sum of 256 MiB
float32, last-axis and first-axis sums of an (8192, 8192) float32 matrix), an elementwise
add of 64 MiB float32 operands, and ``exp(a * b + c)`` fused, unfused and (CuPy's)
``cupy.fuse``.

Each row gives the median device time and the bandwidth (bytes read and written / time),
for cuasync and, side by side where installed and on a GPU, CuPy and PyTorch; the
``-- targets`` lines put them in ratio.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import cuasync
from cuasync._backends import get_backend

from ._api import do_bench
from ._util import Report

SUITE = "ops"
MiB = 1 << 20


def _cases(cuda: bool) -> list[tuple[str, tuple[int, ...], Any]]:
    big, side = (64 * MiB, 8192) if cuda else (MiB, 512)  # the emulator runs numpy
    return [
        (f"sum of {big * 4 // MiB} MiB float32", (big,), None),
        (f"sum over the last axis of ({side}, {side}) float32", (side, side), -1),
        (f"sum over the first axis of ({side}, {side}) float32", (side, side), 0),
    ]


def _foreign_ms(make: Callable[[], Any], run: Callable[[Any], Any], lib: Any, reps: int) -> float:
    """Mean device time of ``run(x)`` over ``reps`` back-to-back calls, with
    the library's own events (``lib`` is ``torch.cuda`` or ``cupy.cuda``)."""
    x = make()
    for _ in range(3):
        run(x)
    if hasattr(lib, "Event") and hasattr(lib, "synchronize"):  # torch.cuda
        start, end = lib.Event(enable_timing=True), lib.Event(enable_timing=True)
        lib.synchronize()
        start.record()
        for _ in range(reps):
            run(x)
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / reps
    start, end = lib.Event(), lib.Event()  # cupy.cuda
    lib.Device().synchronize()
    start.record()
    for _ in range(reps):
        run(x)
    end.record()
    end.synchronize()
    return float(lib.get_elapsed_time(start, end)) / reps


def _others(shape: tuple[int, ...], axis: Any, reps: int) -> dict[str, float]:
    out: dict[str, float] = {}
    try:
        import cupy

        out[f"cupy {cupy.__version__}"] = _foreign_ms(
            lambda: cupy.ones(shape, cupy.float32), lambda x: x.sum(axis=axis), cupy.cuda, reps
        )
    except ImportError:
        pass
    try:
        import torch

        dims = () if axis is None else (axis,)
        out[f"torch {torch.__version__}"] = _foreign_ms(
            lambda: torch.ones(shape, dtype=torch.float32, device="cuda"),
            lambda x: x.sum(dim=dims) if dims else x.sum(),
            torch.cuda,
            reps,
        )
    except ImportError:
        pass
    return out


def run(report: Report, quick: bool = False) -> None:
    print(f"== ops ({cuasync.backend_name()}: {cuasync.Device(0).name})", flush=True)
    cuda = get_backend().driver_handles
    reps = 10 if quick or not cuda else 50
    for name, shape, axis in _cases(cuda):
        x = cuasync.ones(shape, "float32").sync()
        out = cuasync.sum(x, axis=axis).sync()  # the output, reused; compiles the kernel
        want = float(np.prod(shape)) / (out.size or 1)
        got = out.to_host().sync()
        if not np.allclose(got, want, rtol=1e-5):
            raise AssertionError(f"ops bench: {name} gave {got.ravel()[:4]}, expected {want}")
        r = do_bench(lambda: cuasync.sum(x, axis=axis, out=out), warmup=3, rep=reps)  # noqa: B023
        gbps = x.nbytes / (r.median_ms / 1e3) / 1e9
        report.value(SUITE, f"cuasync {name}", r.median_ms * 1e3, "us", f"{gbps:,.0f} GB/s")
        if cuda:
            for lib, ms in _others(shape, axis, reps).items():
                gbps = x.nbytes / (ms / 1e3) / 1e9
                report.value(SUITE, f"{lib} {name}", ms * 1e3, "us", f"{gbps:,.0f} GB/s")
    _elementwise(report, cuda, reps)


def _elementwise(report: Report, cuda: bool, reps: int) -> None:
    """An add of two 64 MiB float32 tensors, and exp(a * b + c) fused and unfused."""
    n = (16 * MiB) if cuda else (MiB // 4)
    nbytes = 4 * n
    a, b, c, out = (cuasync.full((n,), v, "float32").sync() for v in (0.5, 2.0, -1.0, 0.0))
    tmp = cuasync.empty((n,), "float32").sync()
    cuasync.add(a, b, out=out).sync()
    if not np.allclose(out.to_host().sync()[:4], 2.5):
        raise AssertionError("ops bench: add gave wrong values")
    cuasync.exp(a * b + c, out=out).sync()  # compiles the fused kernel
    if not np.allclose(out.to_host().sync()[:4], 1.0):
        raise AssertionError("ops bench: exp(a * b + c) gave wrong values")
    add_ms = do_bench(lambda: cuasync.add(a, b, out=out), warmup=3, rep=reps).median_ms
    fused_ms = do_bench(lambda: cuasync.exp(a * b + c, out=out), warmup=3, rep=reps).median_ms

    def unfused() -> Any:  # one kernel and one full-size temporary per node
        return cuasync.zip(
            cuasync.multiply(a, b, out=tmp), cuasync.add(tmp, c, out=tmp), cuasync.exp(tmp, out=out)
        )

    unfused_ms = do_bench(unfused, warmup=3, rep=reps).median_ms
    label = f"{nbytes // MiB} MiB float32"
    add_gbps = 3 * nbytes / (add_ms / 1e3) / 1e9
    report.value(SUITE, f"cuasync add of {label}", add_ms * 1e3, "us", f"{add_gbps:,.0f} GB/s")
    report.value(SUITE, f"cuasync exp(a*b+c) fused, {label}", fused_ms * 1e3, "us")
    report.value(SUITE, f"cuasync exp(a*b+c) unfused, {label}", unfused_ms * 1e3, "us")
    others = _elementwise_others(n, reps) if cuda else {}
    for name, ms in others.items():
        unit_note = f"{3 * nbytes / (ms / 1e3) / 1e9:,.0f} GB/s" if name.endswith(" add") else ""
        report.value(SUITE, f"{name}, {label}", ms * 1e3, "us", unit_note)
    print("-- targets (ratios inside this run)")
    floor_ms = 4 * nbytes / (add_gbps * 1e9) * 1e3  # read 3, write 1, at add's bandwidth
    report.value(
        SUITE,
        "fused time / its traffic at add's bandwidth (target <= 1.15)",
        fused_ms / floor_ms,
        "x",
    )
    report.value(SUITE, "unfused time / fused time (target >= 1.8)", unfused_ms / fused_ms, "x")
    for name, ms in others.items():
        if name.endswith(" add") and name.startswith("torch"):
            report.value(SUITE, "add bandwidth / torch's (target >= 0.95)", ms / add_ms, "x")
        if name.endswith("fuse"):
            report.value(SUITE, "fused time / cupy.fuse time (target <= 1.0)", fused_ms / ms, "x")


def _elementwise_others(n: int, reps: int) -> dict[str, float]:
    out: dict[str, float] = {}
    try:
        import cupy

        v = cupy.__version__
        xs = [cupy.full(n, f, cupy.float32) for f in (0.5, 2.0, -1.0, 0.0)]

        def exp_fma(p: Any, q: Any, r: Any) -> Any:  # cupy.fuse names its kernel after it:
            return cupy.exp(p * q + r)  # a lambda's "<lambda>" is no C identifier

        fused = cupy.fuse(exp_fma)
        out[f"cupy {v} add"] = _foreign_ms(
            lambda: xs, lambda x: cupy.add(x[0], x[1], out=x[3]), cupy.cuda, reps
        )
        out[f"cupy {v} exp(a*b+c) unfused"] = _foreign_ms(
            lambda: xs, lambda x: cupy.exp(x[0] * x[1] + x[2], out=x[3]), cupy.cuda, reps
        )
        out[f"cupy {v} exp(a*b+c) cupy.fuse"] = _foreign_ms(
            lambda: xs, lambda x: fused(x[0], x[1], x[2]), cupy.cuda, reps
        )
    except ImportError:
        pass
    try:
        import torch

        v = torch.__version__
        ts = [
            torch.full((n,), f, dtype=torch.float32, device="cuda") for f in (0.5, 2.0, -1.0, 0.0)
        ]
        out[f"torch {v} add"] = _foreign_ms(
            lambda: ts, lambda x: torch.add(x[0], x[1], out=x[3]), torch.cuda, reps
        )
        out[f"torch {v} exp(a*b+c) eager"] = _foreign_ms(
            lambda: ts, lambda x: torch.exp(x[0] * x[1] + x[2], out=x[3]), torch.cuda, reps
        )
    except ImportError:
        pass
    return out
