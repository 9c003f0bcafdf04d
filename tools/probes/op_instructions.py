"""Instructions per op: build + ``submit_on`` of seen ops with the driver stubbed, counted.

The stubbed ratios of ``bench completion`` (an op's build + submit over its kernel's raw
launch) move by 10-20 % between runs on a shared 2-core host; instruction counts do not.
This runs each op's loop under callgrind (valgrind), collecting only inside the timed
calls (``--toggle-collect=list_vectorcall``: the loop is ``list(map(one, range(50)))``),
twice (5,000 and 10,000 ops), and prints the difference per op: one-time costs (a lazy
import, a first plan) cancel out. Needs valgrind; the emulator's host, no GPU.

    python3 tools/probes/op_instructions.py              # every op
    python3 tools/probes/op_instructions.py raw add exp  # some

The ops (x: 1024 float32, o: its out=, m: 64 x 64 float32, as ``bench completion``'s
rows): ``raw`` (the raw launch of add's kernel), ``add_out``, ``add``, ``raw_exp`` (the
raw launch of exp's kernel), ``exp`` (``exp(x * 2.0 + 1.0, out=o)``), ``raw_sum`` (the
raw launch of sum's kernel), ``sum``, ``matmul`` (its GEMM stubbed too). Each op is
given over ``raw`` and, where measured, over ``raw_<op>`` (its own kernel's launch, as
``bench completion`` puts them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any

OPS = ("raw", "add_out", "add", "raw_exp", "exp", "raw_sum", "sum", "matmul")
COUNTS = (5000, 10000)


def _loop(which: str, n: int) -> None:
    """The measured loop (run under callgrind): ``n`` ops in turns of 50."""
    import numpy as np

    import cuasync
    from cuasync._backends import get_backend
    from cuasync.bench import _breakdown

    stream = cuasync.Device(0).new_stream()
    x = cuasync.from_host(np.arange(1024, dtype=np.float32)).sync()
    o = cuasync.empty((1024,), "float32").sync()
    m = cuasync.from_host(np.ones((64, 64), np.float32)).sync()
    s = cuasync.empty((), "float32").sync()
    with _breakdown.stubbed_driver():
        for _ in range(2):  # (seen: the reduction's plan made, for its raw launch)
            cuasync.sum(x).sync()
        makers: dict[str, Any] = {
            "raw": _breakdown.raw_launch_of(cuasync.add(x, 1.0), lambda: o),
            "add_out": lambda: cuasync.add(x, 1.0, out=o),
            "add": lambda: cuasync.add(x, 1.0),
            "raw_exp": _breakdown.raw_launch_of(cuasync.exp(x * 2.0 + 1.0), lambda: o),
            "exp": lambda: cuasync.exp(x * 2.0 + 1.0, out=o),
            "raw_sum": _breakdown.raw_reduction_of(cuasync.sum(x), lambda: s, stream),
            "sum": lambda: cuasync.sum(x),
            "matmul": lambda: cuasync.matmul(m, m),
        }
        make = makers[which]
        backend = get_backend()
        backend.gemm = lambda *args: None  # type: ignore[method-assign]

        def one(_: int) -> Any:
            return make().submit_on(stream)

        for _ in range(20):  # seen: plans made, pools at their sizes
            futures = [one(0) for _ in range(50)]
            stream.synchronize()
            del futures
        turn = range(50)
        for _ in range(n // 50):
            futures = list(map(one, turn))  # (the only list() call collected)
            stream.synchronize()
            del futures
        del backend.gemm


def _count(which: str, n: int, workdir: str) -> int:
    out = os.path.join(workdir, f"callgrind.{which}.{n}")
    cmd = [
        "valgrind", "--tool=callgrind", "--toggle-collect=list_vectorcall",
        f"--callgrind-out-file={out}", sys.executable, "-W", "ignore", __file__,
        "--loop", which, str(n),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    for line in done.stderr.splitlines():
        if "Collected :" in line:
            return int(line.rsplit(":", 1)[1])
    raise RuntimeError(f"callgrind printed no total for {which}:\n{done.stderr[-2000:]}")


def main(ops: list[str]) -> None:
    if shutil.which("valgrind") is None:
        sys.exit("op_instructions: valgrind is not installed")
    unknown = [w for w in ops if w not in OPS]
    if unknown:
        sys.exit(f"op_instructions: unknown ops {unknown}; choose from {', '.join(OPS)}")
    per_op: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as workdir:
        for which in ops:
            low, high = (_count(which, n, workdir) for n in COUNTS)
            count = per_op[which] = (high - low) / (COUNTS[1] - COUNTS[0])
            raw = per_op.get("raw")
            ratio = f"  {count / raw:.2f} x the raw launch" if raw else ""
            own = per_op.get(f"raw_{which}")  # (its own kernel's raw launch, measured)
            if own:
                ratio += f", {count / own:.2f} x raw_{which}"
            print(f"{which:8s} {count:8.0f} instructions / op{ratio}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--loop"]:
        _loop(sys.argv[2], int(sys.argv[3]))
    else:
        main(sys.argv[1:] or ["raw", *OPS[1:]])
