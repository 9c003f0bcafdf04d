"""Where an await of real-length work spends its time over ``.sync()`` (issue #32 item 3):
the reactor's backoff, or the loop's wake-up.

One process per reactor setting (its ``backoff_max_ns``, the longest nap between two
scans of the flag words while awaits are parked; cuasync's hub uses 100 us): for a kernel
spinning 0.3 ms and 5 ms, on asyncio and uvloop, the p50 of ``await`` minus the p50 of
``.sync()`` of the same op (in turns), the loop's cross-thread wake floor (another
thread's ``call_soon_threadsafe``, no GPU) and the process's CPU above idle while the
awaits wait. With a short enough nap the reactor sees the flag within microseconds:
what is left over ``.sync()`` is then the loop's wake, and the CPU the price of the scans.

    python3 tools/probes/wake_parts.py              # 100 us, 20 us, 5 us, 1 us: a process each
    python3 tools/probes/wake_parts.py 20000        # one setting, this process
"""

from __future__ import annotations

import subprocess
import sys

SETTINGS = (100_000, 20_000, 5_000, 1_000)


def measure(backoff_ns: int, n: int = 60) -> None:
    import numpy as np

    from cuasync._native import NATIVE

    real = NATIVE.Reactor

    def reactor(*args: object, **kwargs: object) -> object:  # (the hub's, made at first use)
        kwargs["backoff_max_ns"] = backoff_ns
        return real(*args, **kwargs)

    NATIVE.Reactor = reactor
    from cuasync.bench import completion
    from cuasync.bench._util import run_loop
    from cuasync.bench.requests import _awaits_and_syncs, _wake_floor

    idle = completion._idle_cpu(0.2)
    for label, work_ns in (("0.3 ms", 300_000), ("5 ms", 5_000_000)):
        for kind in ("asyncio", "uvloop"):
            samples, cpu = run_loop(kind, lambda: _awaits_and_syncs(work_ns, n))  # noqa: B023
            floor = run_loop(kind, lambda: _wake_floor(n, work_ns / 1e9))  # noqa: B023
            over = (np.median(samples["await"]) - np.median(samples[".sync()"])) / 1e3
            print(
                f"backoff {backoff_ns / 1e3:5.0f} us  {label:>6} {kind:<8} await - .sync() "
                f"{over:7.1f} us   wake floor {np.median(floor) / 1e3:6.1f} us   "
                f"CPU above idle {cpu - idle:5.1f} % of a core",
                flush=True,
            )


if __name__ == "__main__":
    if len(sys.argv) > 1:
        measure(int(sys.argv[1]))
    else:
        for setting in SETTINGS:
            subprocess.run([sys.executable, __file__, str(setting)], check=False)
