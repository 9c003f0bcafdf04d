"""cuasync in Ray actors, on a local Ray cluster of this machine, on the emulator.

One cluster for the module (two CPUs, two emulated GPUs, no dashboard), shut down at
the end. What is checked: cuasync imports and its native reactor runs in Ray's worker
processes (started fresh, not forked from the driver, which used cuasync before
``ray.init``); the backend setting reaches the workers through ``runtime_env``; an
async actor's methods await cuasync ops on the loop Ray runs in a thread of the actor,
woken by the reactor, without blocking the actor; each actor with ``num_gpus=1`` gets
its own ``CUDA_VISIBLE_DEVICES`` and uses it as device 0; blocking calls raise the
typed error on that loop and work in a threaded actor; objects of one process refuse
to travel and a kernel travels as source; examples/ray_workers.py serves requests.

Skipped where Ray is not installed (it is in the ``test`` extra; ``ray`` extra alone).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip(
    "ray", reason="Ray is not installed: pip install 'cuasync[ray]' (it is in the test extra)"
)
from helpers import reactor_path  # noqa: E402
from ray import cloudpickle  # noqa: E402

import cuasync  # noqa: E402
import cuasync.testing  # noqa: E402
from cuasync.errors import ProcessLocalError, SyncInEventLoopError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GPUS = 4  # emulated: two for the probes, two for the example's workers
PROBES = 2

SOURCE = r"""
extern "C" __global__ void add_one(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
"""


def _add_one_twin(x: np.ndarray, n: int) -> None:
    x[:n] += 1.0


def _example() -> Any:
    spec = importlib.util.spec_from_file_location(
        "ray_workers_example", ROOT / "examples" / "ray_workers.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ray_workers = _example()
# The workers cannot import this file or the example by name (neither is on their
# sys.path): Ray ships their classes and functions by value, as for a script's own.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(ray_workers)


class Probe:
    """A GPU worker that reports what cuasync sees in its process."""

    async def where(self) -> dict[str, Any]:
        from cuasync._backends import forked

        loop = asyncio.get_running_loop()
        return {
            "pid": os.getpid(),
            "ray_gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "backend_env": os.environ.get("CUASYNC_BACKEND"),
            "backend": cuasync.backend_name(),
            "devices": cuasync.device_count(),
            "loop_in_main_thread": threading.current_thread() is threading.main_thread(),
            "loop": type(loop).__name__,
            "forked": forked(),
        }

    async def sum_on_device(self, data: np.ndarray) -> float:
        t = await cuasync.from_host(data)
        return float((await t.to_host()).sum())

    async def nap(self, us: int) -> float:
        start = time.monotonic()
        await cuasync.testing.sleep(us)
        return time.monotonic() - start

    async def ping(self) -> str:
        return "pong"

    async def stats(self) -> dict[str, Any]:
        s = cuasync.stats()
        return {"native": s.native, "reactor": s.completed_reactor}

    async def block(self) -> Any:
        return cuasync.arange(4, dtype="float32").sync()

    async def tensor(self) -> Any:
        return await cuasync.arange(4, dtype="float32")

    async def launch(self, kernel: Any, data: np.ndarray) -> tuple[int, np.ndarray]:
        prepared_on_arrival = len(kernel._prepared)
        x = await cuasync.from_host(data)
        await kernel[1, 64](x, data.size)
        return prepared_on_arrival, await x.to_host()

    @ray.method(concurrency_group="first")
    async def make(self) -> str:
        self.shared = await cuasync.arange(8, dtype="float32")
        return threading.current_thread().name

    @ray.method(concurrency_group="second")
    async def read(self) -> tuple[str, float]:
        host = await self.shared.to_host()
        return threading.current_thread().name, float(host.sum())


class Blocking:
    """A threaded actor: plain methods, run in a pool of threads without event loops."""

    def total(self, n: int) -> float:
        return float(cuasync.arange(n, dtype="float32").sync().to_host().sync().sum())


# num_cpus=0: an actor holds a CPU of the two by default, and the example needs two.
ProbeActor: Any = ray.remote(num_gpus=1, num_cpus=0, concurrency_groups={"first": 1, "second": 1})(
    Probe
)
BlockingActor: Any = ray.remote(num_gpus=0, num_cpus=0, max_concurrency=2)(Blocking)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    cuasync.arange(4, dtype="float32").sync()  # the driver initializes cuasync before Ray starts
    ray.init(
        num_cpus=2,
        num_gpus=GPUS,  # no GPU here: Ray hands these ids out as if they were GPUs
        include_dashboard=False,
        logging_level="WARNING",
        configure_logging=False,
        # Workers of a local cluster inherit the driver's environment (the suite's
        # CUASYNC_EMU_DEVICES=2); runtime_env, which reaches other hosts too, wins.
        runtime_env={"env_vars": {"CUASYNC_BACKEND": "emulator", "CUASYNC_EMU_DEVICES": "1"}},
    )
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def probes(cluster: Any) -> Iterator[list[Any]]:
    actors = [ProbeActor.remote() for _ in range(PROBES)]
    yield actors
    for actor in actors:
        ray.kill(actor)


def test_each_actor_gets_one_gpu_as_device_0_and_its_own_loop(probes: list[Any]) -> None:
    seen = ray.get([p.where.remote() for p in probes])
    assert len({s["pid"] for s in seen}) == PROBES  # a process per actor
    visible = [s["cuda_visible_devices"] for s in seen]
    assert len(set(visible)) == PROBES and set(visible) <= {str(i) for i in range(GPUS)}
    for s in seen:
        assert s["ray_gpu_ids"] == [s["cuda_visible_devices"]]
        assert s["backend_env"] == "emulator" and s["backend"] == "emulator"  # runtime_env
        assert s["devices"] == 1  # runtime_env's setting (a GPU: CUDA_VISIBLE_DEVICES's one)
        assert not s["loop_in_main_thread"]  # Ray runs async actors' loop in a thread
        assert not s["forked"]  # a fresh interpreter, not a fork of the driver


@reactor_path  # (the actors inherit CUASYNC_HOST_SYNC)
def test_awaiting_in_an_actor_suspends_its_loop_and_the_reactor_wakes_it(
    probes: list[Any],
) -> None:
    actor = probes[0]
    before = ray.get(actor.stats.remote())
    napping = actor.nap.remote(1_500_000)  # 1.5 s of (emulated) device time
    assert ray.get(actor.ping.remote(), timeout=60) == "pong"  # the loop is free meanwhile
    ready, _ = ray.wait([napping], timeout=0)
    assert not ready
    assert ray.get(napping, timeout=60) >= 1.4
    after = ray.get(actor.stats.remote())
    assert after["native"] and after["reactor"] > before["reactor"]


def test_requests_fan_out_with_asyncio_gather(probes: list[Any]) -> None:
    data = [np.arange(1000, dtype=np.float32) * (i + 1) for i in range(8)]

    async def driver() -> list[float]:
        refs = [probes[i % len(probes)].sum_on_device.remote(d) for i, d in enumerate(data)]
        return list(await asyncio.gather(*refs))

    assert asyncio.run(driver()) == [float(d.sum()) for d in data]


def test_two_concurrency_groups_are_two_loops_sharing_the_device(probes: list[Any]) -> None:
    actor = probes[1]
    made_on = ray.get(actor.make.remote())
    read_on, total = ray.get(actor.read.remote())
    assert made_on != read_on  # one event loop (and thread) per group
    assert total == float(np.arange(8).sum())


def test_blocking_on_an_actor_loop_raises_the_typed_error(probes: list[Any]) -> None:
    with pytest.raises(SyncInEventLoopError, match="use 'await' instead"):
        ray.get(probes[0].block.remote())


def test_a_threaded_actor_may_block(cluster: Any) -> None:
    actor = BlockingActor.remote()
    try:
        assert ray.get([actor.total.remote(n) for n in (4, 5)]) == [6.0, 10.0]
    finally:
        ray.kill(actor)


def test_a_tensor_does_not_travel_between_processes(probes: list[Any]) -> None:
    with pytest.raises(ProcessLocalError, match=r"cuasync\.Tensor cannot be pickled"):
        ray.get(probes[0].tensor.remote())  # raised in the actor, re-raised here
    local = cuasync.arange(4, dtype="float32").sync()
    # refused here, before anything is sent: Ray raises a TypeError quoting cuasync's
    with pytest.raises(TypeError, match=r"(?s)cuasync\.Tensor cannot be pickled.*t\.to_host"):
        probes[0].sum_on_device.remote(local)


def test_a_kernel_launched_here_travels_as_source(probes: list[Any]) -> None:
    kernel = cuasync.Kernel(SOURCE, "add_one", emulate=_add_one_twin)
    data = np.arange(16, dtype=np.float32)
    x = cuasync.from_host(data).sync()
    kernel[1, 64](x, 16).sync()  # prepared for this process's device 0
    assert kernel._prepared
    prepared_on_arrival, out = ray.get(probes[0].launch.remote(kernel, data))
    assert prepared_on_arrival == 0  # none of this process's handles went along
    np.testing.assert_array_equal(out, data + 1)


def test_the_example_serves_requests_over_its_workers(
    cluster: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--workers", "2", "--requests", "6", "--rows", "64", "--cols", "32"]
    assert ray_workers.main(argv) == 0  # joins the running cluster, leaves it running
    out = capsys.readouterr().out
    assert "results checked: OK" in out and "6 requests over 2 worker(s)" in out
    workers = [line for line in out.splitlines() if line.startswith("  worker pid")]
    assert len(workers) == 2
    assert all("-> emulator device 0 of 1" in w and "'AsyncIO Thread" in w for w in workers)
    assert ray.is_initialized()
