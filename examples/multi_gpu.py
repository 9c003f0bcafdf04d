"""Data parallel over every device: shard, compute, reduce on device 0 with peer copies.

A matrix of ``rows x cols`` is split by rows over all devices. Each device sums the
columns of its shard (a partial result, like a gradient of one data-parallel replica);
the partials are copied to device 0 (device to device where the devices can access each
other's memory, through pinned host memory otherwise) and added up there. The result is
checked against numpy, and per-device timings are printed.

The fan-out runs twice: with ``asyncio.gather`` and with an anyio task group (on trio
when it is installed). On a machine with one GPU it runs with that one device.

    python examples/multi_gpu.py              # CUASYNC_EMU_DEVICES=2 for two emulated devices
"""

from __future__ import annotations

import asyncio
import sys
import time

import numpy as np

import cuasync

SOURCE = r"""
extern "C" __global__ void column_sums(const float* x, float* out, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < cols) {
        float acc = 0.0f;
        for (int r = 0; r < rows; ++r) acc += x[(long long)r * cols + c];
        out[c] = acc;
    }
}

extern "C" __global__ void accumulate(float* acc, const float* part, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) acc[i] += part[i];
}
"""


def _column_sums_twin(x: np.ndarray, out: np.ndarray, rows: int, cols: int) -> None:
    out[:cols] = x[: rows * cols].reshape(rows, cols).sum(axis=0, dtype=np.float32)


def _accumulate_twin(acc: np.ndarray, part: np.ndarray, n: int) -> None:
    acc[:n] += part[:n]


column_sums = cuasync.Kernel(SOURCE, "column_sums", emulate=_column_sums_twin)
accumulate = cuasync.Kernel(SOURCE, "accumulate", emulate=_accumulate_twin)
THREADS = 256


def _blocks(n: int) -> int:
    return (n + THREADS - 1) // THREADS


async def partial_on(device: int, shard: np.ndarray, timings: dict[int, float]) -> cuasync.Tensor:
    """Upload ``shard`` to ``device`` and sum its columns there."""
    start = time.perf_counter()
    rows, cols = shard.shape
    with cuasync.use_device(device):  # ops below allocate on ``device``, use its policy
        x = await cuasync.from_host(shard)
        out = await cuasync.empty((cols,))
        await column_sums[_blocks(cols), THREADS](x, out, rows, cols)
    timings[device] = time.perf_counter() - start
    return out


async def add_up(moved: list[cuasync.Tensor]) -> cuasync.Tensor:
    """Sum the partials (all on device 0 by now) into the first one."""
    total, n = moved[0], moved[0].size
    for part in moved[1:]:
        await accumulate[_blocks(n), THREADS](total, part, n)
    return total


def _shards(matrix: np.ndarray, count: int) -> list[np.ndarray]:
    return np.array_split(matrix, count, axis=0)


def _report(variant: str, timings: dict[int, float], reduce_s: float, ok: bool) -> None:
    per_device = ", ".join(f"device {d}: {t * 1e3:.1f} ms" for d, t in sorted(timings.items()))
    print(f"[{variant}] shards: {per_device}; reduce on device 0: {reduce_s * 1e3:.1f} ms")
    print(f"[{variant}] result checked: {'OK' if ok else 'MISMATCH'}")


async def with_gather(matrix: np.ndarray, expected: np.ndarray) -> bool:
    timings: dict[int, float] = {}
    shards = _shards(matrix, cuasync.device_count())
    partials = await asyncio.gather(*(partial_on(d, s, timings) for d, s in enumerate(shards)))
    start = time.perf_counter()
    moved = await asyncio.gather(*(p.to(0) for p in partials))  # a new tensor each
    total = await add_up(list(moved))
    reduce_s = time.perf_counter() - start
    ok = bool(np.array_equal(await total.to_host(), expected))
    _report("asyncio.gather", timings, reduce_s, ok)
    return ok


async def with_task_group(matrix: np.ndarray, expected: np.ndarray) -> bool:
    import anyio

    timings: dict[int, float] = {}
    shards = _shards(matrix, cuasync.device_count())
    partials: dict[int, cuasync.Tensor] = {}
    moved: dict[int, cuasync.Tensor] = {}

    async def compute(device: int) -> None:
        partials[device] = await partial_on(device, shards[device], timings)

    async def move(device: int) -> None:
        moved[device] = await partials[device].to(0)

    async with anyio.create_task_group() as tg:
        for device in range(len(shards)):
            tg.start_soon(compute, device)
    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for device in partials:
            tg.start_soon(move, device)
    total = await add_up([moved[d] for d in sorted(moved)])
    reduce_s = time.perf_counter() - start
    ok = bool(np.array_equal(await total.to_host(), expected))
    _report("anyio task group", timings, reduce_s, ok)
    return ok


def main(rows: int = 4096, cols: int = 1000) -> int:
    count = cuasync.device_count()
    peers = [
        f"{a}->{b}: {'peer' if cuasync.Device(a).can_access_peer(b) else 'staged'}"
        for a in range(count)
        for b in range(count)
        if a != b
    ]
    print(f"backend: {cuasync.backend_name()}, {count} device(s)")
    for d in range(count):
        print(f"  device {d}: {cuasync.Device(d).name}")
    print("  copies between devices:", ", ".join(peers) if peers else "none (one device)")
    print("  (the first variant's timings include compiling the kernels for each device)")
    # Small integers: every partial and total sum is exact in float32.
    matrix = np.random.default_rng(0).integers(0, 8, (rows, cols)).astype(np.float32)
    expected = matrix.sum(axis=0, dtype=np.float32)
    ok = asyncio.run(with_gather(matrix, expected))
    try:
        import anyio
    except ImportError:
        print("[anyio task group] skipped: anyio is not installed")
    else:
        backend = "trio" if _has("trio") else "asyncio"
        ok = anyio.run(with_task_group, matrix, expected, backend=backend) and ok
    return 0 if ok else 1


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


if __name__ == "__main__":
    sys.exit(main())
