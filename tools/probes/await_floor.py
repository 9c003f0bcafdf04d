"""The floor under ``await tiny[1, 32]()``, against the raw launch + synchronize, alternated.

The completion suite's target is ``await`` p50 / raw launch + ``cuStreamSynchronize`` p50
<= 1.0, and both rows move by 10-20 % between runs on one VM. This probe takes, on
the running loop (uvloop, then asyncio), turns of 20 calls of each candidate, in rounds
of N calls each (p50 of each round, then the median of the rounds):

- raw cuda-bindings launch + ``cuStreamSynchronize`` (the suite's baseline, as it calls it);
- raw cuda-bindings launch + ``cuStreamWriteValue32`` + ``_reactor.spin_wait``: how an
  await learns of the end, from Python, less cuasync;
- ``_reactor.launch_and_write`` + ``spin_wait``: the same in two native calls (the floor of
  cuasync's path: what is left above it is the op layer);
- ``await tiny[1, 32]()`` (the suite's row) and ``tiny[1, 32]().sync_on(stream)``.

The rows' differences inside one round say how much the flag wins over the synchronize
on this machine, and how much of that the op layer spends.

Run on a GPU: ``python3 tools/probes/await_floor.py [N] [ROUNDS]`` (after
``pip install -e .``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import numpy as np

import cuasync
from cuasync._core.completion import get_hub
from cuasync.bench._util import run_loop
from cuasync.bench.completion import tiny

N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
TURN = 20
BUDGET_NS = 1_000_000


def rows_for(
    stream: cuasync.Stream, address: int, gen: list[int]
) -> dict[str, Callable[[], object]]:
    """The blocking candidates (the awaited one is timed apart, in the same turns)."""
    from cuda.bindings import driver as d

    native = get_hub().native
    function = tiny._prepare(stream.device).handle
    fn, h = int(function), int(stream.handle)

    def raw_sync() -> None:
        d.cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, h, 0, 0)
        d.cuStreamSynchronize(h)

    def raw_flag() -> None:
        gen[0] = (gen[0] + 1) & 0xFFFFFFFF
        d.cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, h, 0, 0)
        d.cuStreamWriteValue32(h, address, gen[0], 0)
        native.spin_wait(address, gen[0], BUDGET_NS)

    def native_flag() -> None:
        gen[0] = (gen[0] + 1) & 0xFFFFFFFF
        native.launch_and_write(fn, 1, 1, 1, 32, 1, 1, 0, h, 0, address, gen[0])
        native.spin_wait(address, gen[0], BUDGET_NS)

    return {
        "raw launch + cuStreamSynchronize": raw_sync,
        "raw launch + cuStreamWriteValue32 + spin_wait": raw_flag,
        "_reactor.launch_and_write + spin_wait": native_flag,
        "tiny[1, 32]().sync_on(stream)": lambda: tiny[1, 32]().sync_on(stream, allow_in_loop=True),
    }


AWAIT = "await tiny[1, 32]()"


async def rounds(stream: cuasync.Stream, address: int, gen: list[int]) -> dict[str, list[float]]:
    rows = rows_for(stream, address, gen)
    clock = time.perf_counter_ns
    out: dict[str, list[float]] = {AWAIT: [], **{name: [] for name in rows}}
    with cuasync.use_policy(cuasync.SingleStream(stream)):
        for _ in range(50):
            await tiny[1, 32]()
            for fn in rows.values():
                fn()
        for r in range(ROUNDS):
            samples: dict[str, list[int]] = {name: [] for name in out}
            for _ in range(0, N, TURN):
                bucket = samples[AWAIT]
                for _ in range(TURN):
                    t0 = clock()
                    await tiny[1, 32]()
                    bucket.append(clock() - t0)
                for name, fn in rows.items():
                    bucket = samples[name]
                    for _ in range(TURN):
                        t0 = clock()
                        fn()
                        bucket.append(clock() - t0)
            line = []
            for name, values in samples.items():
                us = float(np.median(values)) / 1000
                out[name].append(us)
                line.append(f"{us:.2f}")
            print(f"  round {r}: " + " / ".join(line) + " us", flush=True)
    return out


def main() -> None:
    hub = get_hub()
    stream = cuasync.Device(0).new_stream()
    tiny[1, 32]().sync_on(stream)
    print(f"backend={cuasync.backend_name()} native core={hub.express is not None}")
    if not hasattr(hub.native, "launch_and_write") or cuasync.backend_name() != "cuda":
        print("await_floor: needs the cuda backend and the native module")
        return
    slot = hub.free.pop()  # (a flag word of the hub's slab, for the raw rows)
    address = hub.slab + 4 * slot
    gen = [hub.gens[slot]]
    try:
        for kind in ("uvloop", "asyncio"):
            print(f"== {kind}: turns of {TURN}, {N} calls per row per round; columns:")
            print("   " + " / ".join([AWAIT, *rows_for(stream, address, gen)]))
            out = run_loop(kind, lambda: rounds(stream, address, gen))
            raw = out["raw launch + cuStreamSynchronize"]
            print("-- median of the rounds' p50, and its ratio to the raw launch + sync per round")
            for name, values in out.items():
                ratios = ", ".join(f"{v / b:.3f}" for v, b in zip(values, raw, strict=True))
                print(f"  {name:<48} {float(np.median(values)):6.2f} us   {ratios}")
    finally:
        hub.gens[slot] = gen[0]  # (the word holds it now: the slot's next user counts on)
        hub.free.append(slot)


if __name__ == "__main__":
    main()
