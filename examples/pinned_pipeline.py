"""Double-buffered pipeline: upload, compute and download overlapping on two streams.

Each chunk goes host -> pinned buffer -> device (``upload_pending``) -> kernel
(``y = 2 * x``) -> pinned buffer (``download_pending``) -> host. Two slots, each with
its own stream, pinned buffers (from the process's pool) and device tensors: while one
slot's chunk is on the device, the host fills the other slot's buffer and enqueues its
work, and copies finished results out. Nothing is allocated per chunk.

Run: ``python examples/pinned_pipeline.py`` (on the emulator without a GPU).
"""

from __future__ import annotations

import asyncio
import sys
import time

import numpy as np

import cuasync

# ``rounds`` dependent FMAs per element stand in for real per-element work (they leave
# 2 * x[i] unchanged), so that the device has enough to do for the overlap to show.
SOURCE = r"""
extern "C" __global__ void scale2(const float* x, float* y, int n, int rounds) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = 2.0f * x[i];
        float acc = v;
        for (int k = 0; k < rounds; ++k) acc = fmaf(acc, 0.0f, v);
        y[i] = acc;
    }
}
"""


def _scale2_numpy(x: np.ndarray, y: np.ndarray, n: int, rounds: int) -> None:
    np.multiply(x[:n], 2.0, out=y[:n])


scale2 = cuasync.Kernel(SOURCE, "scale2", emulate=_scale2_numpy)

#: A chunk in flight: its index, the upload, the kernel's future, the download.
Work = tuple[int, cuasync.PendingTransfer, cuasync.DeviceFuture, cuasync.PendingTransfer]


class Slot:
    """One stage of the double buffer: a stream, two pinned buffers, two tensors."""

    def __init__(self, n: int, rounds: int) -> None:
        pool = cuasync.PinnedPool.default()
        self.n = n
        self.rounds = rounds
        self.stream = cuasync.Device(0).new_stream()
        self.inbuf = pool.acquire(4 * n, "float32")
        self.outbuf = pool.acquire(4 * n, "float32")
        self.x: cuasync.Tensor | None = None
        self.y: cuasync.Tensor | None = None
        self.work: Work | None = None

    async def setup(self) -> None:
        self.x = await cuasync.empty((self.n,), "float32").submit_on(self.stream)
        self.y = await cuasync.empty((self.n,), "float32").submit_on(self.stream)

    def start(self, k: int, chunk: np.ndarray) -> None:
        """Fill the input buffer and enqueue upload, kernel and download; returns at once."""
        assert self.x is not None and self.y is not None
        self.inbuf.array()[:] = chunk
        up = cuasync.upload_pending(self.inbuf, self.x, stream=self.stream)
        grid = (self.n + 255) // 256
        run = scale2[grid, 256](self.x, self.y, self.n, self.rounds).submit_on(self.stream)
        down = cuasync.download_pending(self.y, self.outbuf, stream=self.stream)
        self.work = (k, up, run, down)

    async def finish(self, results: list[np.ndarray | None]) -> None:
        """Wait for this slot's chunk and copy the result out of the pinned buffer."""
        if self.work is None:
            return
        k, up, run, down = self.work
        await up
        await run
        _, buf = await down
        results[k] = buf.array().copy()
        self.work = None


async def pipelined(
    chunks: list[np.ndarray], n: int, nslots: int, rounds: int
) -> tuple[list[np.ndarray | None], float]:
    slots = [Slot(n, rounds) for _ in range(nslots)]
    for slot in slots:
        await slot.setup()
    results: list[np.ndarray | None] = [None] * len(chunks)
    t0 = time.perf_counter()
    for k, chunk in enumerate(chunks):
        slot = slots[k % nslots]
        await slot.finish(results)  # its buffers are free again
        slot.start(k, chunk)
    for slot in slots:
        await slot.finish(results)
    elapsed = time.perf_counter() - t0
    for slot in slots:
        slot.inbuf.release()
        slot.outbuf.release()
    return results, elapsed


async def main() -> int:
    on_gpu = cuasync.backend_name() == "cuda"
    n = (4 << 20) if on_gpu else (1 << 16)  # floats per chunk: 16 MiB on a GPU
    count = 32 if on_gpu else 8
    rounds = 8192 if on_gpu else 0
    rng = np.random.default_rng(0)
    chunks = [rng.standard_normal(n).astype(np.float32) for _ in range(count)]
    mib = count * n * 4 / (1 << 20)
    print(f"backend: {cuasync.backend_name()}, device: {cuasync.Device(0).name}")
    await pipelined(chunks[:2], n, 2, rounds)  # warm-up: compile the kernel, fill the pool
    ok = True
    timings = {}
    for nslots, label in ((1, "one slot (no overlap)"), (2, "two slots (double-buffered)")):
        results, elapsed = await pipelined(chunks, n, nslots, rounds)
        good = all(
            r is not None and np.array_equal(r, 2 * c) for r, c in zip(results, chunks, strict=True)
        )
        ok = ok and good
        timings[nslots] = elapsed
        print(
            f"{label:<28} {count} chunks, {mib:.0f} MiB each way: {elapsed * 1e3:8.1f} ms "
            f"({2 * mib / 1024 / elapsed:.2f} GiB/s moved) {'OK' if good else 'WRONG RESULT'}"
        )
    print(f"overlap speed-up: {timings[1] / timings[2]:.2f}x")
    s = cuasync.PinnedPool.default().stats()
    print(
        f"pinned pool: {s.allocations} allocations, {s.reuses} reuses, {s.bytes_allocated >> 20} MiB pinned"
    )
    print("results checked:", "OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
