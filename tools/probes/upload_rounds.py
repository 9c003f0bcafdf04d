"""Why a 4 KiB ``from_host`` costs more in some processes than in others.

Session 25 measured ``from_host(4 KiB).sync_on(stream)`` at 30-37 us in a fresh process
but 22.7 us inside ``small_upload.py`` (which runs torch and raw cuda-bindings copies
first), and the transfers suite's submission table gave ~49 us for a submission alone
where its fixed-cost row gave 24 us for the whole upload. This probe runs, in one
fresh process, rounds of each candidate alternated (p50 of each round):

- ``sync_on``: ``from_host(a).sync_on(stream)`` (the fixed-cost row);
- ``submit+wait``: the submission alone timed, then ``fut.wait()`` (the suite's table);
- ``submit+poll``: the submission alone timed, then ``fut.done()`` polled (no
  blocking wait between submissions: the thread never sleeps);
- torch ``dst.copy_(src)`` + synchronize, and ``from_numpy(a).cuda()`` + synchronize,
  first measured only after cuasync's first rounds (torch imported late).

If cuasync's rounds before torch is imported are slower than those after, the cost is
process state; if ``submit+wait`` is slower than ``submit+poll``, a blocking wait
between submissions makes the next one slower (the thread slept).

Each round prints its start time, to set beside the GPU's clocks sampled meanwhile:
``nvidia-smi --query-gpu=timestamp,pstate,clocks.sm,clocks.mem --format=csv -lms 250``.

Run on a GPU: ``python3 tools/probes/upload_rounds.py`` (after ``pip install -e .``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

import cuasync
from cuasync.bench._util import timed

N = 1000
host = np.ones(1024, np.float32)


def rounds(label: str, fn: Callable[[], object], n: int = N) -> float:
    us = float(np.median(timed(fn, n, warmup=20))) / 1000
    print(f"  {label:<40} p50 {us:7.1f} us", flush=True)
    return us


def submission(stream: cuasync.Stream, poll: bool) -> float:
    """p50 of the submission alone, the previous one waited (or polled) before it."""
    samples = []
    clock = time.perf_counter_ns
    for _ in range(N + 20):
        t0 = clock()
        fut = cuasync.from_host(host).submit_on(stream)
        samples.append(clock() - t0)
        if poll:
            while not fut.done():
                pass
        else:
            fut.wait()
    return float(np.median(samples[20:])) / 1000


def torch_copies(torch: Any) -> list[tuple[str, Callable[[], object]]]:
    src, dst = torch.from_numpy(host), torch.empty(1024, device="cuda")

    def copy() -> None:
        dst.copy_(src)
        torch.cuda.synchronize()

    def to_cuda() -> None:
        src.cuda()
        torch.cuda.synchronize()

    return [("torch copy_ + synchronize", copy), ("torch .cuda() + sync", to_cuda)]


def main() -> None:
    stream = cuasync.Device(0).new_stream()
    cuasync.from_host(host).sync_on(stream)
    print(f"backend={cuasync.backend_name()} native={cuasync.stats().native}")
    torch_rows: list[tuple[str, Callable[[], object]]] = []
    start = time.monotonic()
    for r in range(6):
        late = " (torch not imported yet)" if r < 2 else ""
        print(f"-- round {r}{late}, at {time.monotonic() - start:.1f} s")
        rounds("from_host(a).sync_on(stream)", lambda: cuasync.from_host(host).sync_on(stream))
        for poll in (False, True):
            label = "submit (then poll done())" if poll else "submit (then wait())"
            print(f"  {label:<40} p50 {submission(stream, poll):7.1f} us", flush=True)
        if r == 1 and cuasync.backend_name() == "cuda":
            try:
                import torch
            except ImportError:
                continue
            torch_rows = torch_copies(torch)
        for label, fn in torch_rows:
            rounds(label, fn)


if __name__ == "__main__":
    main()
