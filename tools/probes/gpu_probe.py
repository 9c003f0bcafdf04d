"""What the GPU probes share: their check without a GPU (kernels parsed, and compiled for
sm_90 where NVRTC is installed, so that sources are checked before device time is spent)
and their timing of candidate variants in alternated rounds.

    if not get_backend().driver_handles:
        return offline_check("device_rows", kernels())
    us = time_row({"current": op, "candidate": launch}, stream)
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from typing import Any

import cuasync
from cuasync.bench._api import _drive, _run

ROUNDS = 5
REPS = 32  # calls of each variant a round (two gated batches of 16)


def offline_check(probe: str, kernels: Mapping[str, cuasync.Kernel]) -> int:
    """Say that ``probe`` needs a GPU, compile ``kernels`` for sm_90 if NVRTC can, and
    return the probe's exit status (0: nothing here to fail)."""
    print(
        f"{probe}: needs a GPU (backend: {cuasync.backend_name()}); "
        f"{len(kernels)} kernel sources parsed"
    )
    try:
        for k in kernels.values():
            k.compile_image("sm_90")
        print(f"{probe}: all {len(kernels)} compiled for sm_90 (NVRTC)")
    except Exception as e:  # NVRTC missing or not usable here
        print(f"{probe}: not compiled here ({type(e).__name__}: {str(e)[:200]})")
    return 0


def time_row(variants: dict[str, Callable[[], Any]], stream: cuasync.Stream) -> dict[str, float]:
    """Median over ROUNDS rounds of each variant's median call (us); in a round every
    variant is timed in turn (``cuasync.bench``'s gated runs: 16 calls a gate, each
    between two events), the order reversed every other round (the GPU's clocks drift)."""
    names = list(variants)
    per: dict[str, list[float]] = {name: [] for name in names}
    for r in range(ROUNDS):
        for name in names if r % 2 == 0 else names[::-1]:
            [times] = _drive(_run([variants[name]], 2, REPS, stream), stream)
            per[name].append(statistics.median(times) * 1e3)
    return {name: statistics.median(ts) for name, ts in per.items()}
