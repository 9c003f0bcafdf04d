"""``interop``: what a zero-copy exchange with torch and CuPy costs the host, per call.

Rows (p50 and p99 of host time per call, a (1024,) float32 tensor, the result dropped at
once so the release is timed too), candidates taken in turns (:func:`._util.interleaved`):

- DLPack import: ``cuasync.from_dlpack(torch_tensor)`` beside ``cupy.from_dlpack(torch_tensor)``;
- DLPack export: ``torch.from_dlpack(cuasync_tensor)`` beside ``torch.from_dlpack(cupy_array)``;
- CUDA array interface import: ``cuasync.asarray(cupy_array)`` beside
  ``torch.as_tensor(cupy_array, device="cuda")``.

The ``-- targets`` lines put cuasync's p50 over CuPy's (import and export: target
``<= 1.0``). Without torch and CuPy (the emulator) the cuasync rows alone run, against a
producer that hands out another cuasync tensor's capsules and an object whose CUDA Array
Interface names the legacy stream, as CuPy's arrays do.

>>> python -m cuasync.bench interop
"""

from __future__ import annotations

from typing import Any

import numpy as np

import cuasync
from cuasync._backends import get_backend

from ._util import Report, interleaved

SUITE = "interop"


class _Interface:
    """A CUDA Array Interface producer naming the legacy stream, as CuPy's arrays do
    (where CuPy is missing)."""

    def __init__(self, tensor: cuasync.Tensor) -> None:
        self.tensor = tensor  # (owns the memory)
        self.__cuda_array_interface__ = {**tensor.__cuda_array_interface__, "stream": 1}


class _Producer:
    """A DLPack producer handing out a cuasync tensor's capsules (where torch is missing)."""

    def __init__(self, tensor: cuasync.Tensor) -> None:
        self.tensor = tensor

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.tensor.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.tensor.__dlpack_device__()


def _libraries() -> tuple[Any, Any]:
    try:
        import cupy
        import torch
    except ImportError:
        return None, None
    return torch, cupy


def run(report: Report, n: int = 20000) -> None:
    print(f"== interop ({cuasync.backend_name()}: {cuasync.Device(0).name})", flush=True)
    x = cuasync.arange(1024, dtype="float32").sync()
    torch, cupy = _libraries() if get_backend().driver_handles else (None, None)
    if torch is None:
        producer = _Producer(cuasync.arange(1024, dtype="float32").sync())
        interface = _Interface(cuasync.arange(1024, dtype="float32").sync())
        samples = interleaved(
            {
                "cuasync.from_dlpack(producer)": lambda: cuasync.from_dlpack(producer),
                "x.__dlpack__(stream=1) (released)": lambda: x.__dlpack__(stream=1),
                "cuasync.asarray(interface), stream 1": lambda: cuasync.asarray(interface),
            },
            n,
        )
        for name, ns in samples.items():
            report.latency(SUITE, f"{name}, (1024,) float32", ns, "no torch/CuPy here")
        return
    assert cupy is not None  # (both or neither: _libraries)
    tt = torch.arange(1024, dtype=torch.float32, device="cuda")
    ca = cupy.arange(1024, dtype=cupy.float32)
    torch.cuda.synchronize()
    rows = {
        "import": {
            "cuasync.from_dlpack(torch_tensor)": lambda: cuasync.from_dlpack(tt),
            "cupy.from_dlpack(torch_tensor)": lambda: cupy.from_dlpack(tt),
        },
        "export": {
            "torch.from_dlpack(cuasync_tensor)": lambda: torch.from_dlpack(x),
            "torch.from_dlpack(cupy_array)": lambda: torch.from_dlpack(ca),
        },
        "CAI import": {
            "cuasync.asarray(cupy_array)": lambda: cuasync.asarray(ca),
            "torch.as_tensor(cupy_array)": lambda: torch.as_tensor(ca, device="cuda"),
        },
    }
    p50: dict[str, float] = {}
    for kind, candidates in rows.items():
        for name, ns in interleaved(candidates, n).items():
            row = report.latency(SUITE, f"{kind}: {name}, (1024,) float32", ns)
            p50[name] = float(np.median(ns)) / 1e3 if row.p50_us is None else row.p50_us
    print("-- targets (ratios inside this run)")
    for what, ours, theirs in (
        ("DLPack import", "cuasync.from_dlpack(torch_tensor)", "cupy.from_dlpack(torch_tensor)"),
        ("DLPack export", "torch.from_dlpack(cuasync_tensor)", "torch.from_dlpack(cupy_array)"),
    ):
        report.value(SUITE, f"{what}: cuasync / CuPy (target <= 1.0)", p50[ours] / p50[theirs], "x")
