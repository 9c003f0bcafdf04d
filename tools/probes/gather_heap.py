"""What a gather of 8192 tiny launches costs with a large collectable heap (issue 32 item
4): ops gathered as asyncio futures (``asyncio.gather(*ops)``), a coroutine awaiting each
op (a Task per op), TensorOps ``cuasync.add(x, 1.0)`` (x 1024 float32) gathered as
futures, and ``asyncio.sleep(0)`` tasks; ops/s by round, the median and the
rate over all rounds together, the cyclic GC's collections by generation, and how the ops
ended (settled by the loop, or woken by the reactor). A heap of
550k tracked lists stands in for what torch and CuPy import. ``--stubbed``: launches do
nothing and flags are written by the host (``_breakdown.stubbed_driver``), the host's
share alone.

    python tools/probes/gather_heap.py [--stubbed] [--asyncio] [futures|tasks|tensors|idle ...]
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import time

import cuasync
from cuasync.bench import _breakdown
from cuasync.bench.completion import tiny

COUNT, ROUNDS = 8192, 8
HEAP = [[[] for _ in range(10)] for _ in range(50_000)]  # (kept alive: the point)


async def _one() -> None:
    await tiny[1, 32]()


async def _round(kind: str, x: cuasync.Tensor) -> float:
    t0 = time.perf_counter()
    if kind == "futures":
        await asyncio.gather(*(tiny[1, 32]() for _ in range(COUNT)))
    elif kind == "tensors":
        await asyncio.gather(*(cuasync.add(x, 1.0) for _ in range(COUNT)))
    elif kind == "tasks":
        await asyncio.gather(*(_one() for _ in range(COUNT)))
    else:
        await asyncio.gather(*(asyncio.sleep(0) for _ in range(COUNT)))
    return COUNT / (time.perf_counter() - t0)


async def _rounds(kind: str) -> list[float]:
    await tiny[1, 32]()
    x = await cuasync.full((1024,), 1.0, "float32")
    await cuasync.add(x, 1.0)  # (its kernel prepared: no first use in the rounds)
    return [await _round(kind, x) for _ in range(ROUNDS)]


def main() -> None:
    args = sys.argv[1:]
    stubbed = "--stubbed" in args
    run = asyncio.run if "--asyncio" in args else _uvloop_run()
    kinds = [a for a in args if not a.startswith("--")] or ["futures", "tasks", "tensors", "idle"]
    with _breakdown.stubbed_driver() if stubbed else contextlib.nullcontext():
        for kind in kinds:
            counts = [0, 0, 0]

            def count(phase: str, info: dict[str, int], counts: list[int] = counts) -> None:
                if phase == "stop":
                    counts[info["generation"]] += 1

            gc.collect()
            gc.callbacks.append(count)
            before = cuasync.stats()
            rates = run(_rounds(kind))
            after = cuasync.stats()
            gc.callbacks.remove(count)
            overall = len(rates) / sum(1 / r for r in rates)
            print(
                f"{kind:8s} median {sorted(rates)[len(rates) // 2] / 1e3:6.1f}k ops/s, over all "
                f"rounds {overall / 1e3:6.1f}k; rounds "
                + ", ".join(f"{r / 1e3:.0f}k" for r in rates)
                + f"; GC collections by generation {counts}; settled by the loop "
                f"{after.completed_inline - before.completed_inline}, woken by the reactor "
                f"{after.completed_reactor - before.completed_reactor}"
            )


def _uvloop_run():  # type: ignore[no-untyped-def]
    import uvloop

    return uvloop.run


if __name__ == "__main__":
    print(f"backend {cuasync.get_default_device()!r}")
    main()
