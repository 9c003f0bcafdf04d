"""Which kernels torch launches for the device rows, and how (issue #33's bfloat16 add,
issue #32's float32 adds): each kernel's name (its template arguments say its vector
width), grid, block, registers and shared memory, from torch's profiler (CUPTI).

    python3 tools/probes/torch_kernels.py    # on a machine with a GPU and torch
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any


def calls() -> dict[str, Callable[[], Any]]:
    """The torch calls the device rows time, by row."""
    import torch

    out: dict[str, Callable[[], Any]] = {}
    for label, dtype, n in (
        ("float32 add 64 MiB", torch.float32, 16 << 20),
        ("float32 add 256 MiB", torch.float32, 64 << 20),
        ("bfloat16 add 64 MiB", torch.bfloat16, 32 << 20),
    ):
        a, b, c = (torch.ones(n, dtype=dtype, device="cuda") for _ in range(3))
        out[label] = lambda a=a, b=b, c=c: torch.add(a, b, out=c)
    x = torch.ones(8192, 8192, device="cuda")
    out["float32 sum over axis 0 of (8192, 8192)"] = lambda: x.sum(0)
    return out


def kernels_of(call: Callable[[], Any]) -> list[dict[str, Any]]:
    """The kernel events of one profiled call (after a warm-up call)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    finally:
        os.unlink(path)
    return [e for e in events if e.get("cat") == "kernel"]


def main() -> int:
    try:
        import torch
    except ImportError:
        print("torch_kernels: needs torch")
        return 0
    if not torch.cuda.is_available():
        print("torch_kernels: needs a GPU")
        return 0
    print(f"torch_kernels: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for label, call in calls().items():
        print(label)
        for e in kernels_of(call):
            args = e.get("args", {})
            print(f"  {e['name']}")
            print(
                f"    grid {args.get('grid')} block {args.get('block')} "
                f"registers {args.get('registers per thread')} "
                f"shared {args.get('shared memory')} dur {e.get('dur')} us "
                f"occupancy {args.get('est. achieved occupancy %')}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
