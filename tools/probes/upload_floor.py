"""The floor under a 4 KiB ``from_host(a).sync_on(stream)``, against torch, alternated.

The transfers suite compares ``from_host(a).sync_on(stream)`` of 4 KiB with torch's
pageable ``copy_`` + synchronize; both rows move by 10-20 % between runs on one VM (its
vCPUs' two speeds), and one after the other they may catch different speeds. This
probe alternates, in rounds of N calls each (p50 of each round, then of all):

- ``from_host(a).sync_on(stream)`` (the suite's row), and its build alone;
- torch ``dst.copy_(src)`` + synchronize, and ``from_numpy(a).cuda()`` + synchronize;
- the same DMA from cuda-bindings: ``cuMemcpyHtoDAsync`` from pinned memory +
  ``cuStreamSynchronize``, and from the pageable array + ``cuStreamSynchronize``;
- what cuasync's path does, less cuasync: the staging memcpy into pinned memory, the
  native copy and flag write (``_reactor.copy_and_write``) and the spin on the flag;

then the counters that say which path the uploads took (the core's uploads and
inline settles, its declines, the staging blocks reused).

Run on a GPU: ``python3 tools/probes/upload_floor.py [N] [ROUNDS]`` (after
``pip install -e .``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np

import cuasync
from cuasync._core.completion import get_hub
from cuasync._transfers.staging import staging_pool
from cuasync.bench._util import timed

N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
SIZE = 4096


def main() -> None:
    import torch
    from cuda.bindings import driver as d

    stream = cuasync.Device(0).new_stream()
    host = np.ones(SIZE // 4, np.float32)
    hub = get_hub()
    cuasync.from_host(host).sync_on(stream)  # (the machinery set up)
    core = hub.express
    print(f"backend={cuasync.backend_name()} native core={core is not None}")
    dst = cuasync.empty((SIZE,), "uint8").sync_on(stream)
    block = staging_pool().acquire(SIZE)
    pinned = block.scratch(SIZE).view(np.float32)
    h = stream.handle
    src = torch.from_numpy(host)
    tdst = torch.empty(SIZE // 4, dtype=torch.float32, device="cuda")
    tsync = torch.cuda.current_stream().synchronize
    native = hub.native
    slot = hub.free.pop()  # (a flag word of the hub's slab, for the raw rows)
    address = hub.slab + 4 * slot
    gen = [hub.gens[slot]]

    def build() -> None:
        cuasync.from_host(host)._consumed = True

    def torch_copy() -> None:
        tdst.copy_(src)
        tsync()

    def torch_cuda() -> None:
        src.cuda()
        tsync()

    def raw_pinned() -> None:
        d.cuMemcpyHtoDAsync(dst.ptr, block.address, SIZE, h)
        d.cuStreamSynchronize(h)

    def raw_pageable() -> None:
        d.cuMemcpyHtoDAsync(dst.ptr, host.ctypes.data, SIZE, h)
        d.cuStreamSynchronize(h)

    def staged_flag() -> None:
        np.copyto(pinned, host)
        gen[0] = (gen[0] + 1) & 0xFFFFFFFF
        native.copy_and_write(dst.ptr, block.address, SIZE, h, address, gen[0])
        native.spin_wait(address, gen[0], 1_000_000)

    rows: list[tuple[str, Callable[[], object]]] = [
        ("from_host(a).sync_on(stream)", lambda: cuasync.from_host(host).sync_on(stream)),
        ("torch dst.copy_(src) + synchronize", torch_copy),
        ("torch from_numpy(a).cuda() + synchronize", torch_cuda),
        ("raw cuMemcpyHtoDAsync pinned + synchronize", raw_pinned),
        ("raw cuMemcpyHtoDAsync pageable + synchronize", raw_pageable),
        ("memcpy to pinned + copy_and_write + spin", staged_flag),
        ("from_host(a) build alone", build),
    ]
    before = (
        (core.uploads, core.completed_inline, core.declined, core.staging_reuses) if core else None
    )
    stats = cuasync.stats()
    samples: dict[str, list[float]] = {name: [] for name, _ in rows}
    for r in range(ROUNDS):
        print(f"-- round {r}", flush=True)
        for name, fn in rows:
            us = float(np.median(timed(fn, N, warmup=20))) / 1000
            samples[name].append(us)
            print(f"  {name:<46} p50 {us:7.2f} us", flush=True)
    print("-- median of the rounds' p50")
    for name, values in samples.items():
        print(f"  {name:<46} {float(np.median(values)):7.2f} us", flush=True)
    ratios = [a / b for a, b in zip(samples[rows[0][0]], samples[rows[1][0]], strict=True)]
    print(f"  from_host / torch copy_, per round: {', '.join(f'{x:.2f}' for x in ratios)}")
    hub.gens[slot] = gen[0]  # (the word holds it now: the slot's next user counts on)
    hub.free.append(slot)
    if core is not None and before is not None:
        after = (core.uploads, core.completed_inline, core.declined, core.staging_reuses)
        names = ("core uploads", "settled by the core", "declined", "staging reuses")
        print(
            "-- " + ", ".join(f"{n} {a - b}" for n, a, b in zip(names, after, before, strict=True))
        )
    now = cuasync.stats()
    print(
        f"-- inline {now.completed_inline - stats.completed_inline}, reactor "
        f"{now.completed_reactor - stats.completed_reactor}"
    )


if __name__ == "__main__":
    main()
