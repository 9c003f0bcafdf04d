"""``peer``: copy bandwidth between device 0 and device 1, both directions.

For 1 MiB to 1 GiB (powers of 4; 1 to 16 MiB on the emulator, up to 16 MiB with
``--quick``), GB/s of:

* cuasync ``Tensor.to(dst)`` (a new tensor each time, its stream-ordered allocation
  included) and ``cuasync.memcpy(dst, src)`` into a preallocated tensor;
* the driver's ``cuMemcpyPeerAsync`` issued directly on the same stream (the ceiling);
* PyTorch ``.to("cuda:1")`` and ``dst.copy_(src)``, when torch is installed and sees two
  GPUs.

Each figure is ``repetitions * size / time`` between two timing events recorded on a
stream of the destination device around back-to-back copies (on the staged route the
first repetition's download may start before the start event). The copies are checked
for sizes up to 64 MiB. With one device the suite says so and does nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import cuasync
from cuasync._backends import get_backend
from cuasync._transfers.peer import peer_route

from ._util import Report, Row

SUITE = "peer"
MiB, GiB = 1 << 20, 1 << 30

TO = "cuasync Tensor.to(dst)"
MEMCPY = "cuasync memcpy(dst, src)"
DRIVER = "driver cuMemcpyPeerAsync"
TORCH_TO = 'torch .to("cuda:dst")'
TORCH_COPY = "torch dst.copy_(src)"
ROUTES = (TO, MEMCPY, DRIVER, TORCH_TO, TORCH_COPY)


def _size_name(n: int) -> str:
    return f"{n // GiB} GiB" if n >= GiB else f"{n // MiB} MiB"


def _reps(n: int, cuda: bool, quick: bool) -> int:
    budget = (256 * MiB if quick else 4 * GiB) if cuda else 32 * MiB
    return max(3, min(50, budget // n))


def _event_gbps(issue: Callable[[], Any], stream: cuasync.Stream, n: int, reps: int) -> float:
    """GB/s of ``reps`` back-to-back ``issue()`` calls, timed by events on ``stream``."""
    issue()  # warm-up: peer access, pool growth, lazy initialization
    stream.synchronize()
    start = cuasync.Event(stream.device, timing=True)
    end = cuasync.Event(stream.device, timing=True)
    start.record(stream)
    pending = [issue() for _ in range(reps)]
    end.record(stream)
    end.synchronize()
    for fut in pending:  # release outputs; also surfaces a failed copy
        if isinstance(fut, cuasync.DeviceFuture):
            fut.wait()
    return reps * n / (start.elapsed_ms(end) / 1e3) / 1e9


def _check(dst: cuasync.Tensor, expected: np.ndarray, what: str) -> None:
    if dst.nbytes <= 64 * MiB and not np.array_equal(dst.to_host().sync(), expected):
        raise AssertionError(f"peer bench: {what} copied wrong bytes")


def _cuasync_routes(a: int, b: int, n: int, reps: int) -> dict[str, float]:
    stream = cuasync.Device(b).new_stream()
    expected = (np.arange(n) % 251).astype(np.uint8)  # a pattern a stale buffer cannot have
    src = cuasync.from_host(expected, device=a).sync()
    dst = cuasync.empty((n,), "uint8", device=b).sync()
    out: dict[str, float] = {}

    def to() -> cuasync.DeviceFuture[cuasync.Tensor]:
        return src.to(b).submit_on(stream)

    out[TO] = _event_gbps(to, stream, n, reps)
    _check(src.to(b).sync_on(stream), expected, TO)
    out[MEMCPY] = _event_gbps(lambda: cuasync.memcpy(dst, src).submit_on(stream), stream, n, reps)
    _check(dst, expected, MEMCPY)
    backend = get_backend()
    peer_route(src.device, dst.device)
    src_ptr, dst_ptr, handle = src.ptr, dst.ptr, stream.handle
    out[DRIVER] = _event_gbps(
        lambda: backend.memcpy_peer_async(dst_ptr, b, src_ptr, a, n, handle), stream, n, reps
    )
    return out


class _Torch:
    """PyTorch's copies from ``cuda:a`` to ``cuda:b``, timed by events on a ``b`` stream."""

    def __init__(self, a: int, b: int, n: int) -> None:
        import torch

        self.torch = torch
        self.target = f"cuda:{b}"
        self.src = torch.ones(n, dtype=torch.uint8, device=f"cuda:{a}")
        self.dst = torch.empty(n, dtype=torch.uint8, device=self.target)
        self.stream = torch.cuda.Stream(device=b)

    def gbps(self, issue: Callable[[], Any], n: int, reps: int) -> float:
        torch = self.torch
        with torch.cuda.device(self.target), torch.cuda.stream(self.stream):
            issue()
            self.stream.synchronize()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record(self.stream)
            for _ in range(reps):
                issue()
            end.record(self.stream)
            end.synchronize()
            return float(reps * n / (start.elapsed_time(end) / 1e3) / 1e9)

    def routes(self, n: int, reps: int) -> dict[str, float]:
        to = self.gbps(lambda: self.src.to(self.target, non_blocking=True), n, reps)
        copy = self.gbps(lambda: self.dst.copy_(self.src, non_blocking=True), n, reps)
        return {TORCH_TO: to, TORCH_COPY: copy}


def _torch_problem() -> str | None:
    """Why the torch columns are left out, or None when they can run."""
    if not get_backend().driver_handles:
        return "torch runs on GPUs only (this is the emulator)"
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if torch.cuda.device_count() < 2:
        return f"torch sees {torch.cuda.device_count()} GPU(s)"
    return None


def _table(title: str, results: dict[int, dict[str, float]]) -> None:
    sizes = sorted(results)
    print(f"\n  {title} GB/s", flush=True)
    print("  " + f"{'route':<32}" + "".join(f"{_size_name(n):>11}" for n in sizes))
    for route in ROUTES:
        if any(route in results[n] for n in sizes):
            cells = [results[n].get(route) for n in sizes]
            text = "".join(f"{c:11.2f}" if c is not None else f"{'-':>11}" for c in cells)
            print("  " + f"{route:<32}" + text, flush=True)


def run(report: Report, quick: bool = False) -> None:
    backend = get_backend()
    count = cuasync.device_count()
    print(f"== peer ({backend.name}: {count} device(s))", flush=True)
    if count < 2:
        print(
            f"  skipped: peer copies need 2 devices; this {backend.name} backend has {count} "
            f"({backend.more_devices_hint})"
        )
        return
    cuda = backend.driver_handles  # a GPU: torch columns, and budgets to match
    d0, d1 = cuasync.Device(0), cuasync.Device(1)
    route = "peer (device to device)" if peer_route(d0, d1) else "staged through pinned host"
    print(f"  device 0: {d0.name}\n  device 1: {d1.name}\n  route: {route}", flush=True)
    problem = _torch_problem()
    if problem is not None:
        print(f"  torch columns skipped: {problem}", flush=True)
    top = (16 * MiB if quick else GiB) if cuda else (4 if quick else 16) * MiB
    sizes = [n for n in (MiB << (2 * k) for k in range(6)) if n <= top]
    for a, b in ((0, 1), (1, 0)):
        results: dict[int, dict[str, float]] = {}
        for n in sizes:
            reps = _reps(n, cuda, quick)
            row = _cuasync_routes(a, b, n, reps)
            if problem is None:
                row.update(_Torch(a, b, n).routes(n, reps))
            results[n] = row
            for name, value in row.items():
                label = f"{a}->{b} {_size_name(n)}: {name}"
                report.rows.append(Row(SUITE, label, value=value, unit="GB/s", note=route))
        _table(f"device {a} -> device {b}", results)
