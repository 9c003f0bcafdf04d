"""GPU workers as Ray actors: one async actor per GPU awaits cuasync ops; a driver fans out.

Each ``GpuWorker`` is a Ray *async actor* (its methods are ``async def``) that asks Ray
for one GPU (``num_gpus=1``). Ray starts it in a process of its own on a node with a
free GPU, sets ``CUDA_VISIBLE_DEVICES`` to that GPU, and runs its methods as tasks of
one event loop in a thread of that process. cuasync in the actor therefore sees exactly
one device, ordinal 0 (the GPU Ray assigned), and its native reactor thread (one per
process) wakes the actor's loop when device work lands: many requests interleave on
one actor and no method blocks its loop.

The driver splits a batch of requests over the actors and awaits all of them with
``asyncio.gather`` (Ray's object references are awaitable). Each request uploads a
matrix, sums its rows in a kernel and downloads the sums; the driver checks every
result against numpy. Only host data (numpy arrays) crosses processes: a
``cuasync.Tensor`` or op sent to another process raises ``ProcessLocalError``.

    python examples/ray_workers.py                    # a local Ray cluster on this machine
    python examples/ray_workers.py --address auto     # an existing cluster (``ray start``)
    python examples/ray_workers.py --gpus 4           # emulate four GPUs (no GPU here)

On a machine without an NVIDIA GPU (or with ``CUASYNC_BACKEND=emulator``; a GPU is
assumed with ``CUASYNC_BACKEND=cuda``) the local cluster declares ``--gpus`` (default
2) emulated GPUs: Ray still assigns one to each actor and sets ``CUDA_VISIBLE_DEVICES``;
cuasync's emulator runs the kernels. The driver passes its ``CUASYNC_*`` variables to
every worker through Ray's ``runtime_env``, since workers on other hosts do not inherit
the driver's environment.
Without Ray installed (``pip install 'cuasync[ray]'``) it says so and exits 0.
docs/ray.md explains what runs where.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import socket
import sys
import threading
import time
from typing import Any

import numpy as np

import cuasync

SOURCE = r"""
extern "C" __global__ void row_sums(const float* x, float* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        float acc = 0.0f;
        for (int c = 0; c < cols; ++c) acc += x[(long long)r * cols + c];
        out[r] = acc;
    }
}
"""


def _row_sums_twin(x: np.ndarray, out: np.ndarray, rows: int, cols: int) -> None:
    out[:rows] = x[: rows * cols].reshape(rows, cols).sum(axis=1, dtype=np.float32)


#: Defined here, in the driver's module: Ray pickles it with the actor class. A Kernel
#: pickles as its source and twin; each actor compiles it for its own GPU on first use.
row_sums = cuasync.Kernel(SOURCE, "row_sums", emulate=_row_sums_twin)
THREADS = 128


class GpuWorker:
    """The worker of one GPU; made a Ray actor class by :func:`actor_class`.

    Every method is ``async``: Ray runs them on the actor's event loop, where cuasync
    ops are awaited like any other awaitable (``op.sync()`` there would raise
    ``SyncInEventLoopError``: it would block the loop and every request on it).
    """

    def __init__(self) -> None:
        self.handled = 0

    async def describe(self) -> dict[str, Any]:
        """Where this actor runs and what cuasync sees there."""
        import ray

        loop = asyncio.get_running_loop()
        return {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "ray_gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "backend": cuasync.backend_name(),
            "devices": cuasync.device_count(),
            "device_0": cuasync.Device(0).name,
            "loop": f"{type(loop).__module__}.{type(loop).__qualname__}",
            "loop_thread": threading.current_thread().name,
        }

    async def handle(self, request: int, matrix: np.ndarray) -> tuple[int, np.ndarray]:
        """Sum the rows of ``matrix`` on this actor's GPU (device 0 of its process)."""
        rows, cols = matrix.shape
        x = await cuasync.from_host(matrix)  # Ray hands a read-only array: cuasync only reads it
        out = await cuasync.empty((rows,))
        await row_sums[(rows + THREADS - 1) // THREADS, THREADS](x, out, rows, cols)
        sums = await out.to_host()
        self.handled += 1
        return request, sums

    async def completion_stats(self) -> dict[str, Any]:
        """How this process's completions landed (inline, woken by the reactor, ...)."""
        stats = cuasync.stats()
        return {
            "handled": self.handled,
            "native_reactor": stats.native,
            "completed_inline": stats.completed_inline,
            "completed_reactor": stats.completed_reactor,
        }


def actor_class(ray: Any, num_gpus: float = 1) -> Any:
    """``GpuWorker`` as a Ray actor class asking for ``num_gpus`` GPUs per actor."""
    return ray.remote(num_gpus=num_gpus)(GpuWorker)


async def fan_out(workers: list[Any], matrices: list[np.ndarray]) -> list[np.ndarray]:
    """Send request ``i`` to worker ``i % len(workers)``; await them all at once."""
    refs = [workers[i % len(workers)].handle.remote(i, m) for i, m in enumerate(matrices)]
    answers = await asyncio.gather(*refs)
    assert [request for request, _ in answers] == list(range(len(matrices)))
    return [sums for _, sums in answers]


def worker_env(emulate: bool) -> dict[str, str]:
    """The driver's ``CUASYNC_*`` settings for every worker process (``runtime_env``)."""
    env = {k: v for k, v in os.environ.items() if k.startswith("CUASYNC_")}
    if emulate:
        env["CUASYNC_BACKEND"] = "emulator"
    return env


def has_nvidia_gpu() -> bool:
    """Whether the NVIDIA driver lists a GPU on this machine (creates no CUDA context)."""
    return bool(glob.glob("/proc/driver/nvidia/gpus/*"))


def connect(ray: Any, address: str | None, gpus: int) -> bool:
    """Start (``address`` None) or join a Ray cluster; whether GPUs are emulated."""
    if address is not None:
        ray.init(address=address, runtime_env={"env_vars": worker_env(False)})
        return False
    backend = os.environ.get("CUASYNC_BACKEND", "auto")
    emulate = backend == "emulator" or (backend == "auto" and not has_nvidia_gpu())
    ray.init(
        num_cpus=2,
        num_gpus=gpus if emulate else None,  # None: Ray counts this machine's GPUs
        include_dashboard=False,
        runtime_env={"env_vars": worker_env(emulate)},
    )
    return emulate


async def serve(ray: Any, workers: int | None, requests: int, rows: int, cols: int) -> bool:
    gpus = int(ray.cluster_resources().get("GPU", 0))
    count = min(gpus, workers) if workers else gpus
    if count < 1:
        print("the cluster has no GPU for a worker (ray.cluster_resources() lists none)")
        return False
    pool = [actor_class(ray).remote() for _ in range(count)]
    for info in await asyncio.gather(*(w.describe.remote() for w in pool)):
        print(
            f"  worker pid {info['pid']} on {info['host']}: Ray GPU {info['ray_gpu_ids']}, "
            f"CUDA_VISIBLE_DEVICES={info['CUDA_VISIBLE_DEVICES']!r} -> {info['backend']} "
            f"device 0 of {info['devices']} ({info['device_0']}); "
            f"loop {info['loop']} in {info['loop_thread']!r}"
        )
    rng = np.random.default_rng(0)
    # Small integers: every row sum is exact in float32.
    matrices = [rng.integers(0, 8, (rows, cols)).astype(np.float32) for _ in range(requests)]
    start = time.perf_counter()
    results = await fan_out(pool, matrices)
    elapsed = time.perf_counter() - start
    ok = all(
        np.array_equal(r, m.sum(axis=1, dtype=np.float32))
        for r, m in zip(results, matrices, strict=True)
    )
    print(
        f"{requests} requests over {count} worker(s) in {elapsed * 1e3:.0f} ms (first ones compile)"
    )
    for w, s in zip(
        pool, await asyncio.gather(*(w.completion_stats.remote() for w in pool)), strict=True
    ):
        print(f"  {w}: {s}")
    print(f"results checked: {'OK' if ok else 'MISMATCH'}")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--address", help="a running Ray cluster ('auto', 'ray://...')")
    parser.add_argument("--gpus", type=int, default=2, help="GPUs to emulate without a GPU")
    parser.add_argument(
        "--workers", type=int, help="at most this many workers (default: one per GPU)"
    )
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--cols", type=int, default=256)
    args = parser.parse_args(argv)
    try:
        import ray
    except ImportError:
        print("skipped: Ray is not installed (pip install 'cuasync[ray]')")
        return 0
    joined = ray.is_initialized()  # called from a program that already runs Ray (a test)
    if not joined:
        emulate = connect(ray, args.address, args.gpus)
        print(
            f"Ray {ray.__version__}: {'emulated GPUs' if emulate else 'GPUs'}, {ray.cluster_resources()}"
        )
    try:
        ok = asyncio.run(serve(ray, args.workers, args.requests, args.rows, args.cols))
    finally:
        if not joined:
            ray.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
