"""The event loop's lag while the first await of a new expression compiles and loads.

A 1 ms ticker runs on the loop while ROUNDS first uses of new expression structures
run one after the other (the disk cache off, so each compiles with NVRTC): awaited
(compiled and loaded on cuasync's compile thread) and, as the control, run with
``.sync(allow_in_loop=True)`` (compiled on the loop thread, as every first use was
before 0.2). Prints the ticker's p99 and max lateness for each; target: p99 <= 5 ms
awaited. On the emulator the compile is NVRTC's (``CUASYNC_EMU_COMPILE=auto``).

    python tools/probes/first_use_lag.py [ROUNDS] [asyncio|uvloop]
"""

from __future__ import annotations

import sys

import cuasync
from cuasync.bench._lag import first_use_lag, idle_lag
from cuasync.bench._util import run_loop


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    kind = sys.argv[2] if len(sys.argv) > 2 else "asyncio"
    print(f"backend {cuasync.backend_name()}, loop {kind}, {rounds} first uses each")
    idle = run_loop(kind, lambda: idle_lag(0.5))
    print(f"idle loop (baseline):      p99 {idle / 1e3:7.2f} ms")
    for inline in (True, False):
        r = run_loop(kind, lambda: first_use_lag(rounds, inline))  # noqa: B023
        how = "inline (.sync, control)" if inline else "awaited (off the loop)"
        print(
            f"{how:26} p99 {r.p99_us / 1e3:7.2f} ms, max {r.max_us / 1e3:7.2f} ms, "
            f"{r.ticks} ticks, one first use {r.first_use_ms:.0f} ms"
        )


if __name__ == "__main__":
    main()
