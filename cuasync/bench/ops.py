"""``ops``: tensor-op throughput: reductions (sum of 256 MiB float32, last-axis and
first-axis sums of an (8192, 8192) float32 matrix), timed with device events.

Each row gives the median device time and the read bandwidth (input bytes / time), for
cuasync and, side by side where installed and on a GPU, CuPy and PyTorch.
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
