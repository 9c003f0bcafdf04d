"""``python -m cuasync``: a small end-to-end pipeline on the GPU, or on the emulator.

It says which backend and device it uses, fans eight requests out over the default
stream pool with ``asyncio.gather`` (upload, device-side copy of a strided block,
download, host-side reduction), checks every result and prints the completion stats.
"""

from __future__ import annotations

import asyncio
import sys
import time

import numpy as np

import cuasync


async def handle(request: int) -> tuple[int, float]:
    """One 'request': upload a matrix, copy a block of columns on the device, read it back."""
    host = np.arange(256 * 256, dtype=np.float32).reshape(256, 256) + request
    matrix = await cuasync.from_host(host)
    total = await matrix[:, 64:192].dup().then(lambda t: t.to_host()).map(lambda a: float(a.sum()))
    expected = float(host[:, 64:192].sum())
    if total != expected:
        raise SystemExit(f"request {request}: got {total}, expected {expected}")
    return request, total


def _why_not_cuda() -> str:
    """Why the cuda backend was not chosen: the one-line reason of its probe."""
    # Only on the emulator, to say why: the CUDA backend's module is not loaded otherwise.
    from ._backends import cuda

    return cuda.probe() or "CUASYNC_BACKEND=emulator"


async def main() -> None:
    dev = cuasync.get_default_device()
    print(
        f"cuasync {cuasync.__version__}: backend {cuasync.backend_name()!r}, "
        f"device {dev.ordinal}: {dev.name}"
    )
    if cuasync.backend_name() == "emulator":
        print(f"  (not on a GPU: {_why_not_cuda()})")
    start = time.perf_counter()
    results = await asyncio.gather(*(handle(i) for i in range(8)))
    elapsed = (time.perf_counter() - start) * 1e3
    for request, total in results:
        print(f"  request {request}: sum of columns 64..191 = {total:,.0f}")
    streams = len(getattr(dev.policy, "streams", [])) or 1
    print(f"8 requests over {streams} streams in {elapsed:.1f} ms, all results checked")
    s = cuasync.stats()
    print(
        f"completions: {s.completed_inline} inline, {s.completed_reactor} via reactor, "
        f"{s.completed_host_callback} via host callback; reactor wakeups {s.reactor_wakeups}; "
        f"native reactor {'on' if s.reactor else 'off'}"
    )
    used, total = dev.memory_info()
    print(f"device memory held by cuasync now: {used} of {total} bytes")


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.run(main())
    except ImportError:
        asyncio.run(main())
    sys.exit(0)
