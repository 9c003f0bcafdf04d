"""Which kernels torch launches for the device rows, and how (issue #33's bfloat16 add,
issue #32's float32 adds): each kernel's name (its template arguments say its vector
width), grid, block, registers and shared memory, from torch's profiler (CUPTI).

Then where the device rows' last 5 % go: the kernel itself or the completion flag that
follows each submitted op (a ``cuStreamWriteValue32`` on the stream, inside the timing
events of ``cuasync.bench``; torch's calls have none). The same adds timed with the
events, torch's with and without such a write (or an event record) after it, and every
kernel's own duration from CUPTI. (``CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER`` is refused with
``CUDA_ERROR_INVALID_VALUE`` on the H200's driver: the v2 memops take no such flag.)

    python3 tools/probes/torch_kernels.py    # on a machine with a GPU and torch
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import cuasync


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
    flag_cost()
    return 0


def flag_cost() -> None:
    """Event-timed adds with and without a flag write after them, and CUPTI's durations."""
    import statistics

    import torch
    from cuda.bindings import driver
    from gpu_probe import time_row

    from cuasync._backends import get_backend

    backend: Any = get_backend()
    block = backend.host_alloc(64)
    word = backend.host_device_pointer(block)
    stream = cuasync.Device(0).new_stream()
    ext = torch.cuda.ExternalStream(stream.handle)
    err, marker = driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)
    assert int(err) == 0, err
    print("flag cost: event-timed us per call (median of alternated rounds)")
    for label, dtype, n in (
        ("float32 add 64 MiB", "float32", 16 << 20),
        ("bfloat16 add 64 MiB", "bfloat16", 32 << 20),
        ("float32 add 4 KiB", "float32", 1 << 10),
    ):
        a, b, c = (cuasync.full((n,), 1.0, dtype).sync() for _ in range(3))
        ta, tb, tc = (torch.from_dlpack(t) for t in (a, b, cuasync.full((n,), 0.0, dtype).sync()))

        def torch_add(flags: int | None, ta: Any = ta, tb: Any = tb, tc: Any = tc) -> None:
            with torch.cuda.stream(ext):
                torch.add(ta, tb, out=tc)
            if flags is not None:
                (err,) = driver.cuStreamWriteValue32(stream.handle, word, 1, flags)
                assert int(err) == 0, err

        def torch_add_event(ta: Any = ta, tb: Any = tb, tc: Any = tc) -> None:
            with torch.cuda.stream(ext):
                torch.add(ta, tb, out=tc)
            (err,) = driver.cuEventRecord(marker, stream.handle)
            assert int(err) == 0, err

        variants = {
            "cuasync.add (kernel + completion flag)": lambda a=a, b=b, c=c: cuasync.add(
                a, b, out=c
            ),
            "torch.add": lambda: torch_add(None),
            "torch.add + cuStreamWriteValue32 (flags 0)": lambda: torch_add(0),
            "torch.add + cuEventRecord (timing disabled)": torch_add_event,
        }
        us = time_row(variants, stream)
        for name, t in us.items():
            print(f"  {label:<22} {name:<48} {t:8.2f}  x torch {us['torch.add'] / t:6.3f}")
        # CUPTI: every kernel's own duration, the same calls
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                for fn in variants.values():
                    op = fn()
                    if op is not None:
                        op.submit_on(stream)
            stream.synchronize()
        durs: dict[str, list[float]] = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                t = getattr(e, "device_time", None) or getattr(e, "cuda_time", 0.0)
                durs.setdefault(e.name[:60], []).append(t)
        for name, ds in durs.items():
            print(f"  {label:<22} CUPTI {name:<60} {statistics.median(ds):8.2f} us (n={len(ds)})")
    print()


if __name__ == "__main__":
    sys.exit(main())
