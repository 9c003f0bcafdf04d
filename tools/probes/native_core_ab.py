"""The native op core against the generic path, alternated in one process.

Two variants of the same ops, in rounds that alternate them (so the VM's drift falls
on both alike), p50 over N each:

- ``native``: the native launcher (``_reactor.Launcher``) builds ``kernel[g, b](...)``
  and the native express core (``_reactor.Express``) submits, spins and settles it;
- ``generic``: what ``CUASYNC_NATIVE=off`` gives, set up in-process (no core on the hub,
  no native launcher): the Python op layer with the same completion.

Rows: an awaited tiny kernel (asyncio, uvloop), ``bump[1, 256](x, n).submit_on`` and
``.sync_on``, and the raw cuda.bindings launch + synchronize beside them; then the same
awaits with the driver stubbed (``cuasync.bench._breakdown.stubbed_driver``: what is
left is cuasync's own host time).

Run on a GPU: ``python3 tools/probes/native_core_ab.py`` (after ``pip install -e .``);
on the emulator it runs too (the launch is then the emulator's, in Python).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

import cuasync
from cuasync import _config
from cuasync._core.completion import get_hub
from cuasync.bench._breakdown import stubbed_driver
from cuasync.bench._util import await_latency, run_loop, timed
from cuasync.bench.completion import _raw_launcher, tiny
from cuasync.bench.launch import bump

N = 2000
ROUNDS = 3
VARIANTS = ("native", "generic")


def p50(samples: list[int]) -> float:
    return float(np.median(samples)) / 1000


def each(fn: Callable[[], object], n: int = N) -> list[int]:
    """ns of each of ``n`` calls of ``fn`` (the bench's ``timed``, no warm-up)."""
    return timed(fn, n, warmup=0)


@contextmanager
def variant(name: str) -> Iterator[None]:
    """Launches and awaits as ``name`` makes them (see the module docstring)."""
    hub = get_hub()
    core, config = hub.express, _config.CONFIG
    for kernel in (tiny, bump):
        kernel._launcher_cache = None
    if name != "native":
        hub.express = None
        _config.CONFIG = dataclasses.replace(_config.config(), native=False)
    try:
        yield
    finally:
        hub.express, _config.CONFIG = core, config
        for kernel in (tiny, bump):
            kernel._launcher_cache = None


def main() -> None:
    hub = get_hub()
    print(
        f"backend={cuasync.backend_name()} native core={hub.express is not None} "
        f"native launch={hub.backend.fast_launch is not None}"
    )
    stream = cuasync.Device(0).new_stream()
    tiny.compile()
    x = cuasync.zeros((256,), "float32").sync_on(stream)
    bump[1, 256](x, 256).sync_on(stream)
    raw = _raw_launcher(stream)
    rows: dict[str, list[float]] = {}

    def row(name: str, us: float) -> None:
        rows.setdefault(name, []).append(us)

    for _ in range(ROUNDS):
        if raw is not None:
            launch, sync = raw
            row("raw launch + cuStreamSynchronize", p50(each(lambda: (launch(), sync()))))  # noqa: B023
        for name in VARIANTS:
            with variant(name):
                for kind in ("asyncio", "uvloop"):
                    samples = run_loop(kind, lambda: await_latency(tiny, N, stream))
                    row(f"{kind} await tiny[1, 32](), {name}", p50(samples))
                held: list[cuasync.DeviceFuture] = []
                samples = each(lambda: held.append(bump[1, 256](x, 256).submit_on(stream)))  # noqa: B023
                for f in held:
                    f.wait()
                row(f"bump[1, 256](x, n).submit_on(stream), {name}", p50(samples))
                samples = each(lambda: bump[1, 256](x, 256).sync_on(stream))
                row(f"bump[1, 256](x, n).sync_on(stream), {name}", p50(samples))
                with stubbed_driver():
                    for kind in ("asyncio", "uvloop"):
                        samples = run_loop(kind, lambda: await_latency(tiny, N, stream))
                        row(f"{kind} await, driver stubbed, {name}", p50(samples))
    core = hub.express
    if core is not None:
        print(
            f"native core: {core.launches} launches ({core.native_launches} native), "
            f"{core.declined} declined"
        )
    for name, values in rows.items():
        print(f"  {name:<58} p50 " + " ".join(f"{v:6.2f}" for v in values) + " us")


if __name__ == "__main__":
    main()
