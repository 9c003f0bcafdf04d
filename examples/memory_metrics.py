"""Device memory for a service sharing a GPU: a budget, a peak, a trim, and metrics.

Caps this process at 256 MiB of cuasync allocations, shows the refusal past it, gives
the pool's idle memory back, and prints the numbers in Prometheus' text format (the
body of a ``/metrics`` endpoint; no client library needed).

    python examples/memory_metrics.py
"""

from __future__ import annotations

import asyncio

import cuasync
from cuasync.errors import OutOfMemoryError

MiB = 1 << 20


def prometheus_text(device: cuasync.Device) -> str:
    """``memory_stats()`` as Prometheus gauges, one line per field."""
    label = f'{{device="{device.ordinal}"}}'
    lines = []
    for name, value in device.memory_stats()._asdict().items():
        if value is None:
            continue  # no limit set
        metric = f"cuasync_{name}" if name.endswith(("_bytes", "s")) else f"cuasync_{name}_bytes"
        lines.append(f"# TYPE {metric} gauge\n{metric}{label} {value}\n")
    return "".join(lines)


async def main() -> None:
    device = cuasync.Device(0)
    device.set_memory_limit(256 * MiB)
    batch = await cuasync.zeros((128 * MiB,), "uint8")
    try:
        await cuasync.zeros((192 * MiB,), "uint8")  # 320 MiB in all: over the budget
    except OutOfMemoryError as exc:
        print("refused:", exc.nbytes // MiB, "MiB")
    del batch
    await device.synchronized()  # frees are stream-ordered (the loop keeps running)
    print("peak:", device.memory_stats().peak_live_bytes // MiB, "MiB")
    print("trimmed:", device.trim_pool() // MiB, "MiB")
    device.reset_peak_memory()
    print(prometheus_text(device), end="")


if __name__ == "__main__":
    asyncio.run(main())
