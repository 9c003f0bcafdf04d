"""Why a guarded region hangs behind a gate on a GPU (issue 36 item 4): with work held
behind a wait-value gate on one stream, does a word written on another stream (the
cancel words' urgent stream, or a plain one) land? Each case polls for 2 s, then opens
the gate and polls again. Never synchronizes (a hang would stop the probe).

    CUASYNC_BACKEND=cuda python3 tools/probes/guard_gate.py
"""

from __future__ import annotations

import time

import cuasync
import cuasync.testing as ct
from cuasync._backends import get_backend
from cuasync._launch.guard import guard_kernel


def _us(value: float | None) -> str:
    return "HELD" if value is None else f"{value:.0f} us"


def main() -> None:
    b = get_backend()
    dev = cuasync.Device(0)
    held = dev.new_stream()
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

    def plain_graph() -> None:
        b.stream_begin_capture(held.handle)
        memset()
        graph = b.stream_end_capture(held.handle)
        b.graph_launch(b.graph_instantiate(graph), held.handle)

    cases = {
        "nothing": lambda: None,
        "memset": memset,
        "plain graph": plain_graph,
        "conditional graph, scope cancelled (skipped)": lambda: conditional(True),
        "conditional graph, scope not cancelled (runs)": lambda: conditional(False),
    }
    conditional(False)  # (the guard kernel and the driver's graph machinery loaded)
    held.synchronize()
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


if __name__ == "__main__":
    main()
