"""``matmul``: an ``n x n x n`` product (4096 by default) in fp32, tf32, bf16 and fp16.

cuasync's ``matmul`` (cuBLAS on the op's stream, ``out=`` preallocated) is timed with
device events next to ``torch.matmul`` enqueued on the same stream (as
``torch.cuda.ExternalStream``), in interleaved pairs: TFLOP/s of each and the time
ratio cuasync / torch with its confidence interval. Without torch (or on the emulator)
only cuasync is timed.

>>> python -m cuasync.bench matmul          # --quick: n = 1024, fewer repetitions
"""

from __future__ import annotations

from typing import Any

import cuasync
from cuasync._backends import get_backend

from ._api import do_bench, do_bench_paired
from ._util import Report

SUITE = "matmul"

#: (label, dtype, precision, torch dtype name)
CASES = (
    ("fp32", "float32", "highest", "float32"),
    ("tf32", "float32", "tf32", "float32"),
    ("bf16", "bfloat16", "highest", "bfloat16"),
    ("fp16", "float16", "highest", "float16"),
)


def _torch() -> Any:
    if not get_backend().driver_handles:
        return None
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def run(report: Report, n: int = 4096, quick: bool = False) -> None:
    device = cuasync.Device(0)
    if quick:
        n = min(n, 1024)
    if cuasync.backend_name() == "emulator":
        n = min(n, 256)  # numpy on the CPU: keep it short
    print(f"== matmul ({cuasync.backend_name()}: {device.name}), {n}^3", flush=True)
    warmup, rep = (3, 10) if quick else (10, 50)
    flop = 2.0 * n**3
    stream = device.new_stream()
    torch = _torch()
    for label, dtype, precision, tdtype in CASES:
        a = cuasync.convert(cuasync.randn((n, n), seed=1).sync_on(stream), dtype).sync_on(stream)
        b = cuasync.convert(cuasync.randn((n, n), seed=2).sync_on(stream), dtype).sync_on(stream)
        c = cuasync.empty((n, n), dtype).sync_on(stream)

        def ours(a: Any = a, b: Any = b, c: Any = c, precision: str = precision) -> Any:
            return cuasync.matmul(a, b, out=c, precision=precision)

        if torch is None:
            r = do_bench(ours, warmup=warmup, rep=rep, stream=stream)
            report.value(SUITE, f"{label}: cuasync", flop / r.median_ms / 1e6, "GFLOP/s")
            continue
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        td = getattr(torch, tdtype)
        ta = torch.randn((n, n), device="cuda:0").to(td)
        tb = torch.randn((n, n), device="cuda:0").to(td)
        tc = torch.empty((n, n), device="cuda:0", dtype=td)
        ts = torch.cuda.ExternalStream(stream.handle, device="cuda:0")
        torch.cuda.synchronize()

        def theirs(ta: Any = ta, tb: Any = tb, tc: Any = tc, ts: Any = ts) -> None:
            with torch.cuda.stream(ts):
                torch.matmul(ta, tb, out=tc)

        p = do_bench_paired(ours, theirs, warmup=warmup, rep=rep, stream=stream)
        report.value(SUITE, f"{label}: cuasync", flop / p.a.median_ms / 1e9, "TFLOP/s")
        report.value(SUITE, f"{label}: torch", flop / p.b.median_ms / 1e9, "TFLOP/s")
        report.value(
            SUITE,
            f"{label}: time cuasync / torch",
            p.ratio,
            "x",
            f"CI [{p.ci_low:.3f}, {p.ci_high:.3f}]",
        )
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = False
