"""The floor under cuasync's completion figures: each way of learning that a tiny kernel
finished, timed in C with no Python (``driver_floor.c``), beside the same calls made from
Python through cuda-bindings.

Builds ``driver_floor.c`` with gcc (it dlopens ``libcuda.so.1``: no CUDA headers or
toolkit needed) into a temporary directory and runs it, then times the Python twins.

    python3 tools/probes/driver_floor.py [N]
"""

from __future__ import annotations

import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
N = int(sys.argv[1]) if len(sys.argv) > 1 else 20000


def c_floor() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        exe = pathlib.Path(tmp) / "driver_floor"
        subprocess.run(
            [
                "gcc",
                "-O2",
                "-std=c11",
                str(HERE / "driver_floor.c"),
                "-o",
                str(exe),
                "-ldl",
                "-lpthread",
            ],
            check=True,
        )
        subprocess.run([str(exe), str(N)], check=True)


def python_twins() -> None:
    from cuda.bindings import driver as d

    import cuasync
    from cuasync.bench.completion import tiny

    stream = cuasync.Device(0).new_stream()
    tiny.compile()
    function = tiny._prepare(stream.device).handle
    h = stream.handle

    def p50(fn) -> float:
        for _ in range(N // 10):
            fn()
        out = []
        clock = time.perf_counter_ns
        for _ in range(N):
            t0 = clock()
            fn()
            out.append(clock() - t0)
        return statistics.median(out) / 1e3

    def launch_sync() -> None:
        d.cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, h, 0, 0)
        d.cuStreamSynchronize(h)

    count = [0]

    def launch_only() -> None:
        d.cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, h, 0, 0)
        count[0] += 1
        if count[0] % 64 == 0:
            d.cuStreamSynchronize(h)

    print("python (cuda-bindings):")
    print(f"  {'launch + cuStreamSynchronize':58s} p50 {p50(launch_sync):7.2f} us")
    print(f"  {'cuLaunchKernel host time (no params)':58s} p50 {p50(launch_only):7.2f} us")


if __name__ == "__main__":
    c_floor()
    python_twins()
