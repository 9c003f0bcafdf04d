"""What the tests share besides fixtures: the backend in use, subprocess runners, and
waits on conditions that hold whatever the timing (``from helpers import wait_until``).

Fixtures stay in ``conftest.py``; test modules import these names from here, never from
the conftest.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from typing import Any

import pytest

import cuasync
import cuasync.testing

BACKEND = cuasync.backend_name()
ON_EMULATOR = BACKEND == "emulator"

#: Whether this run completes every await through host callbacks (no flag writes).
HOST_CALLBACKS = os.environ.get("CUASYNC_HOST_SYNC") == "callback"

#: For tests of the flag-write reactor itself (a run with host callbacks has none).
reactor_path = pytest.mark.skipif(
    HOST_CALLBACKS,
    reason="about the flag-write reactor; this run uses CUASYNC_HOST_SYNC=callback",
)


#: Whether this run takes the native fast path (``CUASYNC_NATIVE`` unset or ``on``).
NATIVE_ON = os.environ.get("CUASYNC_NATIVE", "on").strip().lower() in ("", "on")


def emptied(monkeypatch: pytest.MonkeyPatch, cache: dict[Any, Any]) -> None:
    """Empty ``cache`` for the test, in place (the native builders hold the dict itself:
    ``launch_plan._plans``, ``expr._NODES``, ``reductions._RESOLVED``), and the memos of
    recent answers in front of those; ``monkeypatch`` puts the dict's entries back."""
    for key in list(cache):
        monkeypatch.delitem(cache, key)
    forget_memos()
    EMPTIED_THIS_TEST[0] = True  # (the conftest forgets the memos again after the test)


#: Whether this test emptied a cache (``emptied``): after it, the memos hold what the
#: test made, no longer what the dicts (their entries put back) hold.
EMPTIED_THIS_TEST = [False]


def forget_memos() -> None:
    """Clear the native memos of recent answers in front of the seen-kind dicts."""
    from cuasync._ops import expr, launch_plan, reductions

    for memo in (launch_plan.LAUNCHES.memo, expr.NODES.memo, reductions.REDUCE.memo):
        memo.clear()


def generic_path(monkeypatch: pytest.MonkeyPatch, *kernels: Any) -> None:
    """Set this process up in-process as ``CUASYNC_NATIVE=off`` sets one up: no native
    core on the hub, no native ``from_host`` builder, no native ``Launcher`` for launchers
    made from now on (those ``kernels`` cached are dropped); completion stays as it is.
    ``monkeypatch`` undoes it all."""
    import dataclasses

    from cuasync import _config
    from cuasync._core.completion import get_hub
    from cuasync._transfers import copies as _copies

    monkeypatch.setattr(_config, "CONFIG", dataclasses.replace(_config.config(), native=False))
    monkeypatch.setattr(get_hub(), "express", None)
    monkeypatch.setattr(_copies, "_build", None)
    for kernel in kernels:
        monkeypatch.setattr(kernel, "_launcher_cache", None)


def run_script(code: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter on this suite's backend (configuration is read
    once per process, and some behaviour is per process: exits, forks, sticky faults);
    fails on a non-zero exit, or (with every thread's stack) past ``timeout``."""
    return run_python("-c", textwrap.dedent(code), timeout=timeout, **env)


def _device_memory() -> str:
    """(For a child's failure: a context it could not create may mean a full device, held
    by other processes: the driver's free bytes and, where there is one, nvidia-smi's
    list of the processes on the GPU; cuasync's own accounting cannot see those.)"""
    try:
        stats = cuasync.Device(0).memory_stats()
        seen = f"driver: {stats.driver_free} of {stats.driver_total} bytes free"
    except Exception as exc:
        seen = f"memory unknown: {exc!r}"
    try:
        smi = (
            subprocess.run(
                ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
            )
            .stdout.strip()
            .replace("\n", "; ")
        )
    except (OSError, subprocess.SubprocessError):
        smi = ""
    apps = f"; processes on the GPU (pid, memory): {smi}" if smi else ""
    return f"\n(device 0, seen from the test process: {seen}{apps})"


def run_python(*args: str, timeout: float, cwd: str | None = None, **env: str):
    """``python -X faulthandler *args`` on this suite's backend; fails on a non-zero exit.

    Past ``timeout`` the process is stopped with SIGABRT, so the failure shows where each
    of its threads was."""
    full = {**os.environ, "PYTHONWARNINGS": "ignore::DeprecationWarning", **env}
    argv = [sys.executable, "-X", "faulthandler", *args]
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full, cwd=cwd
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            out, err = proc.communicate()
            pytest.fail(f"still running after {timeout} s; its stacks:\n{out[-4000:]}{err}")
    assert proc.returncode == 0, out[-4000:] + err[-4000:] + _device_memory()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


#: How many ops (each a kernel and its completion) a test may hold behind a closed gate.
#: CUDA blocks the enqueue after about 1,000 commands wait on a stream, and after 56
#: (kernel, host function) pairs (tools/probes/enqueue_limit.py, H200): past that a
#: gated test hangs on a GPU, though the emulator has no such limit.
GATE_CAPACITY = 40 if HOST_CALLBACKS else 400


#: Backend calls that put a command on a stream (or, for allocations, order one there).
STREAM_COMMANDS = (
    "mem_alloc_async",
    "mem_free_async",
    "memcpy_htod_async",
    "memcpy_dtoh_async",
    "memcpy_dtod_async",
    "memcpy_2d_async",
    "memset_d8_async",
    "write_value32",
    "stream_wait_value32",
    "launch_host_func",
    "launch_host_signal",
    "launch_kernel",
    "queue_launch",
    "gemm",
    "event_record",
    "stream_wait_event",
    "graph_upload",
    "graph_launch",
)


#: How an await learns about completion: a flag write (reactor) or a host function.
COMPLETION = ("write_value32", "launch_host_signal", "launch_host_func")


def new_loop(kind: str) -> asyncio.AbstractEventLoop:
    """A new event loop of ``kind``, "asyncio" or "uvloop" (skips where uvloop is missing),
    for a test that runs it itself (``run_until_complete``, then ``close``)."""
    if kind == "uvloop":
        return pytest.importorskip("uvloop").new_event_loop()
    return asyncio.new_event_loop()


def settle() -> None:
    """Wait until every completion has been observed (background watcher included)."""
    cuasync.testing.settle()


def still_pending(done: Callable[[], bool], seconds: float = 0.02) -> bool:
    """Whether ``done()`` stays false for ``seconds``.

    For work held behind a closed gate, directly or through ordering on another stream:
    it can never finish, so this holds whatever the timing. Were the ordering missing,
    the work would run at once and finish well within the window; the window only gives
    that failure time to show.
    """
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if done():
            return False
        time.sleep(0.0005)  # polling a condition with a deadline
    return not done()


async def await_held(make_op: Callable[[], Any]) -> Any:
    """``await make_op()`` with the op held behind a gate until the await has suspended.

    Whatever the machine's load, the work cannot land during the await's inline spin,
    so the await completes through whatever watches suspended awaits (the reactor, or
    host callbacks). Asserts the work was still held when the await suspended.
    """
    import anyio

    results: list[Any] = []
    suspended = False

    async def waiter() -> None:
        nonlocal suspended
        op = make_op()
        suspended = True  # set in the step that submits, spins and suspends below
        results.append(await op)

    with cuasync.testing.gate() as gate:
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            # Parked, not only submitted: the gate stays closed until the await has
            # spun, found its work held, and suspended on it.
            await wait_until(lambda: suspended and awaited_completions() > 0)
            assert not results
            gate.open()
    return results[0]


def python_calls(fn: Callable[[], object], within: str | None = None) -> list[str]:
    """The names of the Python functions ``fn()`` calls, in order (``sys.setprofile``),
    ``fn`` itself left out; ``within``: only those defined in files under that directory.

    >>> python_calls(lambda: t.__dlpack__(stream=1))   # the export in C: []
    """
    called: list[str] = []
    own = getattr(fn, "__code__", None)

    def profile(frame: Any, event: str, arg: Any) -> None:
        code = frame.f_code
        if event != "call" or code is own:
            return
        if within is None or code.co_filename.startswith(within):
            called.append(code.co_name)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return called


def awaited_completions() -> int:
    """Pending completions with a waiter: awaits parked on their work."""
    from cuasync._core.completion import get_hub

    hub = get_hub()
    pending = hub.slots.completions() + list(hub.callback_pending)
    return sum(1 for c in pending if c._waiters)


async def wait_until(
    condition: Callable[[], bool], timeout: float = 10.0, between: float = 0.0
) -> None:
    """Let the event loop run until ``condition()`` holds (e.g. every task is waiting),
    looking again after each ``between`` seconds (0: each pass of the loop; more: the
    caller's task is not ready meanwhile, so another task's await is alone on its loop)."""
    import anyio

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:  # (where every thread was: a blocked one is why)
            pytest.fail(f"timed out waiting for the condition; the threads:\n{thread_stacks()}")
        await anyio.sleep(between)


def thread_stacks() -> str:
    """Every thread's Python stack, innermost call last (for a failure's message)."""
    import threading
    import traceback

    names = {t.ident: t.name for t in threading.enumerate()}
    return "\n".join(
        f"-- {names.get(ident, ident)}\n" + "".join(traceback.format_stack(frame)[-8:])
        for ident, frame in sys._current_frames().items()
    )


def on_device(a: Any) -> cuasync.Tensor:
    """The host array ``a`` uploaded (blocking: test set-up).

    >>> x = on_device(np.arange(4.0))
    """
    return cuasync.from_host(a).sync()


def on_host(op: Any) -> Any:
    """What ``op`` computes, run and brought back as a numpy array (blocking).

    >>> np.testing.assert_array_equal(on_host(cuasync.add(x, 1.0)), want)
    """
    return op.sync().to_host().sync()
