"""Where the host time of a DLPack or CAI exchange goes: per call, the Python functions
and the C functions called (``sys.setprofile``), the backend (driver) calls made
(counted on the backend), the time with the counters off, and with ``--profile`` a
cProfile ranking of each row.

On a GPU with torch: ``cuasync.from_dlpack(torch_tensor)``, ``torch.from_dlpack(
cuasync_tensor)``, ``cuasync.asarray`` of an object with a CuPy-like interface (stream
1) and the export of ``__cuda_array_interface__``. Elsewhere (the emulator) the producer
is a stand-in whose capsules release through a C function (no Python of its own), so
the import's rows count cuasync's work only, and the export's row is
``x.__dlpack__(stream=1, max_version=(1, 0))`` released at once.

    python3 tools/probes/dlpack_profile.py [--profile]
"""

import cProfile
import pstats
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import cuasync
from cuasync._backends import get_backend
from cuasync._interop import capsules

x = cuasync.arange(1024, dtype="float32").sync()


class StandIn:
    """A DLPack producer with no Python in its release: capsules of ``x``'s memory whose
    release is ``len(())``, premade (each is consumed once)."""

    def __init__(self, n: int) -> None:
        self.caps = [
            capsules.pack(len, (), x.ptr, 0, (1024,), (1,), 2, 32, 0, True) for _ in range(n)
        ]

    def __dlpack__(self, stream: Any = None, max_version: Any = None) -> Any:
        return self.caps.pop()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)


class Interface:
    """An object with only a ``__cuda_array_interface__`` naming the legacy stream (as
    CuPy's do)."""

    def __init__(self, t: cuasync.Tensor) -> None:
        self.__cuda_array_interface__ = {**t.__cuda_array_interface__, "stream": 1}


def cases(n: int) -> dict[str, Callable[[], Any]]:
    foreign = Interface(cuasync.arange(1024, dtype="float32").sync())
    rows: dict[str, Callable[[], Any]] = {
        "CAI import: cuasync.asarray(cupy-like)": lambda: cuasync.asarray(foreign),
        "CAI export: x.__cuda_array_interface__": lambda: x.__cuda_array_interface__,
    }
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and get_backend().driver_handles:
        tt = torch.arange(1024, dtype=torch.float32, device="cuda")
        torch.cuda.synchronize()
        rows["DLPack import: cuasync.from_dlpack(torch_tensor)"] = lambda: cuasync.from_dlpack(tt)
        rows["DLPack export: torch.from_dlpack(cuasync_tensor)"] = lambda: torch.from_dlpack(x)
        import cupy

        ca = cupy.arange(1024, dtype=cupy.float32)
        rows["DLPack export: torch.from_dlpack(cupy_array)"] = lambda: torch.from_dlpack(ca)
        rows["DLPack export: x.__dlpack__(stream=1, max_version=(1, 0))"] = lambda: x.__dlpack__(
            stream=1, max_version=(1, 0)
        )
        rows["DLPack export: ca.__dlpack__(stream=1, max_version=(1, 0))"] = lambda: ca.__dlpack__(
            stream=1, max_version=(1, 0)
        )
    else:
        producer = StandIn(4 * n + 1000)
        rows["DLPack import: cuasync.from_dlpack(stand-in)"] = lambda: cuasync.from_dlpack(producer)
        rows["DLPack export: x.__dlpack__(stream=1, max_version=(1, 0))"] = lambda: x.__dlpack__(
            stream=1, max_version=(1, 0)
        )
    return rows


def count_backend_calls() -> Counter[str]:
    backend = get_backend()
    calls: Counter[str] = Counter()
    for name in dir(type(backend)):
        if name.startswith(("event_", "stream_", "pointer_", "mem_")):
            fn = getattr(backend, name)
            if callable(fn):

                def counting(*a: Any, _fn: Any = fn, _name: str = name, **k: Any) -> Any:
                    calls[_name] += 1
                    return _fn(*a, **k)

                setattr(backend, name, counting)
    return calls


def consumer_calls() -> None:
    """What torch passes to ``__dlpack__`` (of a cuasync tensor, of a CuPy array) and
    which DLPack hooks each producer type offers (a C exchange API skips the calls)."""
    try:
        import cupy
        import torch
    except ImportError:
        return
    if not get_backend().driver_handles:
        return

    class Spy:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __dlpack__(self, **kwargs: Any) -> Any:
            print(f"  torch -> {type(self.inner).__name__}.__dlpack__({kwargs})")
            return self.inner.__dlpack__(**kwargs)

        def __dlpack_device__(self) -> Any:
            return self.inner.__dlpack_device__()

    ca = cupy.arange(1024, dtype=cupy.float32)
    for inner in (x, ca):
        torch.from_dlpack(Spy(inner))
        hooks = [a for a in dir(type(inner)) if "dlpack" in a.lower()]
        print(f"  {type(inner).__name__}: {hooks}")


def main() -> None:
    consumer_calls()
    n = 2000
    rows = cases(n)
    per_call: dict[str, float] = {}
    for what, fn in rows.items():  # (timed before the counters wrap the backend)
        for _ in range(200):
            fn()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        per_call[what] = (time.perf_counter() - t0) / n * 1e6
    driver = count_backend_calls()
    for what, fn in rows.items():
        fn()
        driver.clear()
        seen: Counter[str] = Counter()

        def profile(frame: Any, event: str, arg: Any, seen: Counter[str] = seen) -> None:
            if event == "call":
                seen["python"] += 1
            elif event == "c_call":
                seen["c"] += 1

        sys.setprofile(profile)
        for _ in range(100):
            fn()
        sys.setprofile(None)
        print(
            f"== {what}: {per_call[what]:.2f} us per call; per call: "
            f"{seen['python'] / 100 - 1:.0f} Python functions, {seen['c'] / 100:.0f} C functions, "
            f"backend calls {dict((k, v / 100) for k, v in driver.items()) or 'none'}"
        )
        if "--profile" in sys.argv:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(n):
                fn()
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(14)


main()
