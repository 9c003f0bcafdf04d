"""Why a guarded region hangs behind a gate on a GPU (issue 36 item 4): with work held
behind a wait-value gate on one stream, does a word written on another stream (the
cancel words' urgent stream, or a plain one) land? Each case polls for 2 s, then opens
the gate and polls again. Never synchronizes (a hang would stop the probe).

Session 38 saw the fifth case hang in ``_reap_guards``: ``cuGraphExecDestroy`` of the
fourth case's executable (its completion event seen) while the fifth's graph waited
behind the gate; session 39 ran each way of reaping in a process of its own, stopped
after 30 s with every thread's stack: on the event alone the fifth case hung again, once
the stream was idle it never did, and neither did never destroying. So the backend
now destroys them once no region is in flight and the stream is idle. The probe runs
``backend`` (that rule), ``event`` (the old rule, kept here to show the hang) and
``never``.

Session 46 added cuBLAS cases (the call alone, in a plain captured graph, in a region
skipped and run: session 39 saw a cuBLAS region behind a gate hold the urgent stream,
where memset regions never did), the node census of a captured cuBLAS call (what it
adds to a graph), and a run with ``CUDA_DEVICE_MAX_CONNECTIONS=32`` (:data:`RUNS`).
Not yet run on a GPU.

    CUASYNC_BACKEND=cuda CUASYNC_GUARDS=on python3 tools/probes/guard_gate.py
    ... python3 tools/probes/guard_gate.py never       # one way, in this process
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import cuasync
import cuasync.testing as ct
from cuasync._backends import get_backend
from cuasync._launch.guard import guard_kernel


def _us(value: float | None) -> str:
    return "HELD" if value is None else f"{value:.0f} us"


REAPS = ("backend", "event", "never")


def _reaping(b: Any, way: str) -> None:
    """Make ``b._reap_guards`` reap the ``way`` the probe tries (see the module)."""
    if way == "backend" or not hasattr(b, "_reap_guards"):  # (the emulator has none)
        return

    def on_the_event() -> None:  # the rule of session 38, which hung
        with b._guard_lock:
            pending, b._guard_execs = b._guard_execs, []
        for entry in pending:
            graph_exec, event, ordinal, _ = entry
            if b.event_query(event):
                with b._context_of(ordinal):
                    b._conditional("cuGraphExecDestroy", graph_exec)
                b.event_destroy(event)
            else:
                with b._guard_lock:
                    b._guard_execs.append(entry)

    b._reap_guards = on_the_event if way == "event" else lambda: None


def run(way: str) -> None:
    b = get_backend()
    dev = cuasync.Device(0)
    held = dev.new_stream()
    _reaping(b, way)
    words = cuasync.zeros((64,), "uint32").sync()
    target = cuasync.zeros((1 << 16,), "uint8").sync()
    guard = guard_kernel()._prepare(dev).handle
    _, greatest = b.stream_priority_range(0)
    streams = {"urgent": b.stream_create(0, greatest), "plain": b.stream_create(0, 0)}
    value = [0]

    def lands(stream: int, seconds: float) -> float | None:
        value[0] += 1
        b.write_device_word(stream, words.ptr, value[0])
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            if b.stream_query(stream):
                return (time.perf_counter() - start) * 1e6
        return None

    def memset() -> None:
        b.memset_d8_async(target.ptr, 7, target.nbytes, held.handle)

    def conditional(cancelled: bool) -> None:
        # The guard's word packs the address (low 48 bits) with the scope's generation
        # (high 16): the scope is cancelled when the word holds its generation.
        address, generation = words.ptr + 4 * (8 if cancelled else 9), 5
        b.write_device_word(held.handle, address, generation if cancelled else 0)
        with b.guarded(held.handle, address | generation << 48, guard):
            memset()

    def plain_graph(body: Any = None) -> None:
        b.stream_begin_capture(held.handle)
        (body or memset)()
        graph = b.stream_end_capture(held.handle)
        b.graph_launch(b.graph_instantiate(graph), held.handle)

    ma, mb, mc = (cuasync.ones((1, 8, 8), "float32").sync() for _ in range(3))  # (batch, m, k)

    def gemm() -> None:  # the cuBLAS call a float matmul's region encloses
        b.gemm(held.handle, ma, mb, mc, 1.0, 0.0, "highest", list)

    def gemm_region(cancelled: bool) -> None:
        address, generation = words.ptr + 4 * (10 if cancelled else 11), 5
        b.write_device_word(held.handle, address, generation if cancelled else 0)
        with b.guarded(held.handle, address | generation << 48, guard):
            gemm()

    cases = {
        "nothing": lambda: None,
        "memset": memset,
        "plain graph": plain_graph,
        "conditional graph, scope cancelled (skipped)": lambda: conditional(True),
        "conditional graph, scope not cancelled (runs)": lambda: conditional(False),
        "cuBLAS call": gemm,
        "cuBLAS call in a plain graph": lambda: plain_graph(gemm),
        "cuBLAS region, scope cancelled (skipped)": lambda: gemm_region(True),
        "cuBLAS region, scope not cancelled (runs)": lambda: gemm_region(False),
    }
    conditional(False)  # (the guard kernel and the driver's graph machinery loaded)
    gemm_region(False)  # (cuBLAS loaded, its workspace made)
    held.synchronize()
    census(b, held.handle, gemm)
    for label, enqueue in cases.items():
        gate = ct.gate(held)
        enqueue()
        seen = {name: lands(s, 2.0) for name, s in streams.items()}
        gate._release()  # (open without waiting for cancel words: that wait is the suspect)
        after = {name: lands(s, 5.0) for name, s in streams.items()}
        done = held.query() or (time.sleep(0.5) or held.query())
        print(f"{label:<44}", end="")
        for name in streams:
            during, later = (_us(seen[name]), _us(after[name]))
            print(f"  {name}: {during:>9} / open {later:>8}", end="")
        print(f"  held stream done after: {done}")


def census(b: Any, stream: int, body: Any) -> None:
    """The node types of ``body`` captured alone (what a cuBLAS call adds to a graph)."""
    from cuda.bindings import driver as d

    b.stream_begin_capture(stream)
    body()
    graph = b.stream_end_capture(stream)
    try:
        _, nodes, count = d.cuGraphGetNodes(d.CUgraph(graph), 64)
        kinds = [d.cuGraphNodeGetType(node)[1].name for node in nodes[:count]]
        edges = d.cuGraphGetEdges(d.CUgraph(graph), 64)[-1]
        print(f"captured cuBLAS call: {count} node(s) {kinds}, {edges} edge(s)")
    except Exception as exc:  # (a census that fails must not hide the cases)
        print(f"captured cuBLAS call: census failed: {exc!r}")


#: The runs of ``main``: (way of reaping, CUDA_DEVICE_MAX_CONNECTIONS or None for the
#: driver's default, 8). 32 gives each stream more hardware queues to itself: if a
#: region's wait holds other streams only through a queue they share, it stops holding.
RUNS = [*((way, None) for way in REAPS), ("backend", "32")]


def main() -> None:
    """Each run of :data:`RUNS` in a process of its own (``faulthandler`` names where a
    stopped one hung, after 60 s), or the one way named on the command line in this
    process."""
    if len(sys.argv) > 1:
        run(sys.argv[1])
        return
    import os

    for way, connections in RUNS:
        env = dict(os.environ)
        env.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
        if connections is not None:
            env["CUDA_DEVICE_MAX_CONNECTIONS"] = connections
        print(f"== reap: {way}, CUDA_DEVICE_MAX_CONNECTIONS={connections or '(default)'}")
        code = (
            "import faulthandler, sys; faulthandler.dump_traceback_later(60, exit=True); "
            f"sys.argv = [sys.argv[0], {way!r}]; "
            "import runpy; runpy.run_path(" + repr(__file__) + ", run_name='__main__')"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        print(done.stdout, end="", flush=True)
        if done.returncode:
            err = done.stderr.splitlines()
            lines = [line for line in err if "cuasync" in line or "Thread" in line] or err[-6:]
            print(f"  exit {done.returncode}; where it stood:\n  " + "\n  ".join(lines[:12]))


if __name__ == "__main__":
    main()
