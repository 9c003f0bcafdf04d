"""The whole op and cancellation contract also holds on the host-callback path.

``CUASYNC_HOST_SYNC`` is read once per process, so the suites run in a subprocess with
``CUASYNC_HOST_SYNC=callback`` (every await completes through ``cuLaunchHostFunc``), on
this suite's backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import HOST_CALLBACKS, run_python, run_script

from cuasync._backends import get_backend
from cuasync._backends.base import HOST_TASK_SPINWAIT
from cuasync._core.completion import _host_task_mode
from cuasync.errors import BackendUnavailableError

TESTS = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(HOST_CALLBACKS, reason="this whole run already uses CUASYNC_HOST_SYNC=callback")
def test_ops_and_cancellation_suites_pass_with_host_callbacks() -> None:
    suites = [
        "runtime/test_ops.py", "runtime/test_cancellation.py",
        "runtime/test_cross_stream.py", "runtime/test_graph.py",
    ]  # fmt: skip
    r = run_python(
        "-m", "pytest", "-q", "-p", "no:cacheprovider", *suites,
        timeout=600, cwd=str(TESTS), CUASYNC_HOST_SYNC="callback",
    )  # fmt: skip
    assert " passed" in r.stdout and " failed" not in r.stdout


HELD_AND_CANCELLED = """
import asyncio, cuasync, cuasync.testing as ct
from cuasync.errors import BackendUnavailableError
async def main():
    x = await cuasync.arange(1000, dtype="float32")
    await (x * 2)  # loads the kernels: a first load behind a gate may hang a GPU
    await (x + 1)
    with ct.gate() as gate:
        kept = asyncio.ensure_future((x * 2).to_host())
        dropped = asyncio.ensure_future((x + 1).to_host())
        await asyncio.sleep(0)  # both submitted, both suspended behind the gate
        dropped.cancel()
        gate.open()
        y = await kept
    try:
        await dropped
    except asyncio.CancelledError:
        print("cancelled")
    s = cuasync.stats()
    print(s.host_sync, s.reactor, s.completed_host_callback > 0, float(y.sum()))
    print("settled", ct.settle())
try:
    asyncio.run(main())
except BackendUnavailableError as e:
    print("unavailable", e)
"""


@pytest.mark.parametrize("mode", ["callback-spin", "callback-block"])
def test_host_task_sync_modes_complete_awaits_or_say_why_not(mode: str) -> None:
    out = run_script(HELD_AND_CANCELLED, CUASYNC_HOST_SYNC=mode).stdout.strip().splitlines()
    problem = get_backend().host_task_modes_problem()
    if problem is None:  # the emulator, or CUDA 13.2+ driver and bindings
        assert out == ["cancelled", f"{mode} False True 999000.0", "settled True"]
    else:
        assert out[0].startswith(f"unavailable CUASYNC_HOST_SYNC={mode}"), out
        assert "cuLaunchHostFunc_v2" in out[0] and "CUASYNC_HOST_SYNC=callback" in out[0]


def test_an_unavailable_sync_mode_is_a_typed_error_naming_the_fix() -> None:
    class OldDriver:
        def host_task_modes_problem(self) -> str:
            return "the driver supports CUDA 13.0"

    old: Any = OldDriver()
    with pytest.raises(BackendUnavailableError, match=r"CUDA 13\.0.*CUASYNC_HOST_SYNC=callback"):
        _host_task_mode(old, "callback-spin")
    assert _host_task_mode(old, "callback") is None  # plain modes never ask
    assert _host_task_mode(get_backend(), "reactor") is None
    if get_backend().host_task_modes_problem() is None:
        assert _host_task_mode(get_backend(), "callback-spin") == HOST_TASK_SPINWAIT


PER_THREAD_STREAM_HELD = """
import time, cuasync, cuasync.testing as ct
ptds = cuasync.Stream.from_handle(2)  # this thread's per-thread default stream
cuasync.wait(ptds).sync()
with ct.gate(ptds):
    after = cuasync.wait(2).submit()  # completes through a host function behind the gate
    deadline = time.monotonic() + 0.1  # 20 probe intervals of the background watcher
    while time.monotonic() < deadline and not after.done():
        time.sleep(0.001)
    print("pending" if not after.done() else "finished behind a closed gate")
after.wait()
print("probes", cuasync.stats().stale_probes > 0)
"""


def test_a_probe_from_another_thread_does_not_finish_per_thread_stream_work() -> None:
    # Handle 2 names the calling thread's per-thread default stream: the background
    # watcher, querying it from its own thread for a fault, found its own idle stream and
    # took the held host function for one whose signal was lost (issue 35, item 9).
    r = run_script(PER_THREAD_STREAM_HELD, CUASYNC_HOST_SYNC="callback", CUASYNC_STALE_US="100")
    assert r.stdout.split() == ["pending", "probes", "True"], r.stdout
