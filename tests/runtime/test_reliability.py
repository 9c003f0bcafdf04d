"""Defects found by attacking the runtime: exits, helper threads, stale reads, leaks, loops.

Each test holds work in flight with ``cuasync.testing`` (gates, the sleep op, the trap),
so it runs unchanged on a GPU and on the emulator. Scripts that need a fresh interpreter
(process exit, fork, a sticky fault, a missing native module) run in a subprocess on the
same backend as the suite.
"""

from __future__ import annotations

import asyncio
import gc
import shutil
import textwrap
import threading
import time
import traceback
import weakref
from pathlib import Path
from typing import cast

import numpy as np
import pytest
from helpers import ON_EMULATOR, new_loop, reactor_path, run_python, run_script

import cuasync
import cuasync.testing as ct
from cuasync._backends.emulator import EmulatorBackend
from cuasync.errors import DeviceError, DeviceFaultError, OutOfMemoryError

pytestmark = pytest.mark.anyio


# -- 2: a process with work in flight exits promptly ------------------------------------
@pytest.mark.parametrize(
    "last_lines",
    [
        "fut = cuasync.zeros((4,)).submit()",
        "gate = ct.gate(); fut = cuasync.zeros((4,)).submit()",  # still held at exit
        "fut = ct.sleep(5_000_000).submit()",  # 5 s of device work in flight at exit
        "pending = cuasync.upload_pending(cuasync.PinnedPool.default().acquire(64), "
        "cuasync.zeros((16,)).sync())",
    ],
    ids=["submitted", "gated", "sleeping", "pending-transfer"],
)
def test_script_ending_with_work_in_flight_exits_promptly(last_lines: str) -> None:
    start = time.monotonic()
    run_script(
        f"""
        import cuasync, cuasync.testing as ct
        {last_lines}
        """,
        timeout=30,
    )
    assert time.monotonic() - start < 20


def test_a_future_dropped_after_the_reactor_closed_at_exit_is_left_quietly() -> None:
    """A future still pending when the hub's exit handler closed the reactor (its flag
    words gone), dropped by a later exit handler, is left to the process's end: no
    "Exception ignored" from its finalizer reading a word that is no longer there."""
    r = run_script(
        """
        import atexit, cuasync, cuasync.testing as ct
        keep = {}
        atexit.register(keep.clear)  # before the hub's handler: runs after it
        keep["gate"] = ct.gate()
        keep["fut"] = cuasync.zeros((4,)).submit()
        print("pending", not keep["fut"].done())
        """,
        timeout=30,
    )
    assert r.stdout.strip() == "pending True"
    assert "Exception ignored" not in r.stderr, r.stderr


def test_tensors_dropped_after_the_streams_were_destroyed_at_exit_are_left_quietly() -> None:
    """Tensors dropped by an exit handler that runs after cuasync's streams were destroyed
    (their finalizers' exit hook) are left to the process's end: no free enqueued on a
    destroyed stream's handle ("could not free device memory ... unknown stream")."""
    r = run_script(
        """
        import atexit, numpy as np, cuasync
        keep = {}
        atexit.register(keep.clear)  # before cuasync's handlers: runs after them
        keep["big"] = cuasync.zeros((1 << 20,)).sync()
        keep["sum"] = (keep["big"] + 1.0).sync()
        keep["small"] = cuasync.from_host(np.ones(8)).sync()
        print("kept", len(keep))
        """,
        timeout=30,
    )
    assert r.stdout.strip() == "kept 3"
    assert "could not free" not in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_future_asked_after_the_reactor_closed_at_exit_answers_from_its_stream() -> None:
    """``done()`` in an exit handler that runs after the hub's (its flag words gone) asks
    the stream instead: work a gate still holds is not done, finished work is."""
    r = run_script(
        """
        import atexit, cuasync, cuasync.testing as ct
        s = cuasync.Device(0).new_stream()
        held = {}

        def ask():
            print("held", held["fut"].done(), "finished", held["other"].done())

        atexit.register(ask)  # before the hub's handler: runs after it
        held["gate"] = ct.gate(s)
        held["fut"] = cuasync.zeros((4,)).submit_on(s)
        other = cuasync.Device(0).new_stream()
        held["other"] = cuasync.zeros((4,)).submit_on(other)
        other.synchronize()  # (landed; its result not read yet)
        """,
        timeout=30,
    )
    assert r.stdout.strip() == "held False finished True"
    assert "Traceback" not in r.stderr, r.stderr


def test_the_background_watcher_stops_when_the_hub_closes_at_exit() -> None:
    """The hub's exit handler stops its watcher thread rather than leave it finishing
    work while the interpreter tears down the streams it would ask about: a daemon thread
    that the finalization stops in the middle of logging keeps logging's lock for good,
    and the next finalizer to log (asyncio's "Task was destroyed") hangs the exit."""
    r = run_script(
        """
        import cuasync
        from cuasync._core.completion import get_hub
        cuasync.zeros((4,)).sync()
        hub = get_hub()
        hub._close_at_exit()  # (what the exit handler does first)
        hub.background.thread.join(10)
        print("watcher running", hub.background.thread.is_alive())
        """,
        timeout=30,
    )
    assert r.stdout.strip() == "watcher running False"


def test_cuasyncs_threads_import_nothing_while_ops_run() -> None:
    """The finalization stops daemon threads where they stand: one stopped inside an
    import keeps the import lock, and the exit hangs at the next import (a pending
    Task's finalizer formatting its message). cuasync's threads (the emulator's device
    threads, the watcher, the copy threads) import nothing while kernels, copies and
    transfers run; their first use's compile does, on its own thread, before the work."""
    r = run_script(
        """
        import sys, threading
        imported = set()

        def hook(event, args):
            name = threading.current_thread().name
            if event == "import" and name.startswith("cuasync-") and "compile" not in name:
                imported.add(f"{args[0]} on {name.rsplit('-', 1)[0]}")

        sys.addaudithook(hook)
        import numpy as np
        import cuasync
        x = cuasync.from_host(np.arange(64, dtype=np.float32)).sync()
        y = (cuasync.exp(x) + x).sync()
        host = y.to_host().sync()
        total = cuasync.sum(y).sync()
        print("imported:", sorted(imported))
        """,
        timeout=60,
    )
    assert r.stdout.strip() == "imported: []", r.stdout


# -- 3: the background watcher survives busy servers ------------------------------------
def test_background_watcher_works_with_more_than_1024_open_fds() -> None:
    r = run_script(
        """
        import os, resource, cuasync, cuasync.testing as ct
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 4096), max(hard, 4096)))
        fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]  # as a busy server has
        with ct.no_leaks():
            s = cuasync.Device(0).new_stream()
            with ct.gate(s):
                futs = [cuasync.zeros((1024,)).submit_on(s) for _ in range(8)]
                del futs  # dropped unawaited: only the background watcher can finish them
        print("watcher fd", cuasync._core.completion.get_hub().background.queue.fileno() > 1024)
        """
    )
    assert r.stdout.strip() == "watcher fd True"


@reactor_path
def test_background_watcher_logs_an_error_and_keeps_running(caplog) -> None:
    from cuasync._core import completion

    hub = completion.get_hub()
    if hub.reactor is None:
        pytest.skip("the background watcher drains reactor queues; no native module here")
    original = completion.Hub.on_landed
    failures: list[int] = []

    def flaky(self: completion.Hub, slot: int) -> None:
        if not failures:
            failures.append(slot)
            raise KeyError("boom")
        original(self, slot)

    s = cuasync.Device(0).new_stream()
    completion.Hub.on_landed = flaky  # type: ignore[method-assign]
    try:
        with ct.gate(s):
            cuasync.zeros((8,)).submit_on(s)  # dropped: finished by the background watcher
        # The watcher logs right after the failure, on its own thread: wait for the log.
        assert wait_for_condition(lambda: "error while handling completion slot" in caplog.text)
        assert failures
        completion.Hub.on_landed = original  # type: ignore[method-assign]
        # Still alive: a completion nobody awaits is finished after the failure.
        armed = cuasync.stats().slots_armed  # still counts the one whose handling failed
        with ct.gate(s):
            cuasync.zeros((8,)).submit_on(s)
            assert cuasync.stats().slots_armed == armed + 2  # the gate holds a slot too
        assert wait_for_condition(lambda: cuasync.stats().slots_armed <= armed)
        assert hub.background.thread.is_alive()
    finally:
        completion.Hub.on_landed = original  # type: ignore[method-assign]
        for slot in failures:
            hub.on_landed(slot)  # finish the one the test broke, whatever happened
    assert ct.settle()


def wait_for_condition(condition, timeout: float = 10) -> bool:
    """Poll ``condition`` (work finished on another thread) until true or ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)
    return True


def test_host_callback_completions_finish_off_the_driver_thread(baseline) -> None:
    # A host function runs on a driver thread, where any driver call may deadlock the
    # driver. Finishing a completion frees memory and runs map functions: never there.
    from cuasync._backends import get_backend
    from cuasync._core import completion

    hub = completion.get_hub()
    saved, hub.use_reactor = hub.use_reactor, False  # every completion by host callback
    threads: list[str] = []
    try:
        s = cuasync.Device(0).new_stream()
        with ct.gate(s):
            mapped = cuasync.zeros((256,)).map(
                lambda t: threads.append(threading.current_thread().name) or t  # type: ignore[func-returns-value]
            )
            fut = mapped.submit_on(s)
            dropped = cuasync.zeros((1 << 16,)).submit_on(s)
            del dropped  # its output is freed by whoever finishes it
        assert fut.wait().shape == (256,)
        assert ct.settle()
    finally:
        hub.use_reactor = saved
    assert threads and threads[0] in ("cuasync-watcher", threading.current_thread().name)
    if ON_EMULATOR:
        assert cast(EmulatorBackend, get_backend()).host_function_calls == []


# -- 4: "known complete" is ordered with submissions ------------------------------------
@pytest.mark.parametrize("method", ["synchronize", "query"])
async def test_stream_sync_racing_a_submission_never_skips_its_ordering(
    anyio_backend, baseline, method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = cuasync.Device(0).new_stream(), cuasync.Device(0).new_stream()
    x = await cuasync.zeros((4096,)).submit_on(a)
    backend = cuasync._backends.get_backend()
    gates, submitted = [], []

    def racing_submission() -> None:  # another thread submits while a.synchronize() runs
        gates.append(ct.gate(a))  # held, so that a stale read would be seen
        submitted.append(cuasync.fill(x, 2.0).submit_on(a))

    def wrap(original):
        def call(handle: int):
            result = original(handle)
            if handle == a.handle and not submitted:
                t = threading.Thread(target=racing_submission)
                t.start()
                t.join()
            return result

        return call

    monkeypatch.setattr(backend, f"stream_{method}", wrap(getattr(backend, f"stream_{method}")))
    if method == "synchronize":
        a.synchronize(allow_in_loop=True)  # blocks this loop, briefly: the race is the point
    else:
        a.query()
    monkeypatch.undo()
    assert submitted and not submitted[0].done()
    read = x.to_host().submit_on(b)  # read after the racing write: b must wait for it
    gates[0].open()
    np.testing.assert_array_equal(await read, np.full(4096, 2.0, np.float32))
    await submitted[0]


# -- 5: a failed allocation leaves the accounting alone ---------------------------------
def test_failed_allocation_does_not_change_memory_used(baseline) -> None:
    dev = cuasync.Device(0)
    before = dev.memory_info().used
    for _ in range(3):
        with pytest.raises(OutOfMemoryError):
            cuasync.empty((1 << 48,), "uint8").sync()  # 256 TiB
    gc.collect()
    assert dev.memory_info().used == before >= 0


# -- 6: one future, two event loops -----------------------------------------------------
@pytest.mark.parametrize("second", ["asyncio", "uvloop", "trio"])
def test_future_awaited_from_two_loops_wakes_both_even_if_one_is_blocked(
    second: str, baseline
) -> None:
    import anyio

    s = cuasync.Device(0).new_stream()
    gate = ct.gate(s)
    fut = cuasync.from_host(np.arange(8.0)).then(lambda t: t.to_host()).submit_on(s)
    first_waiting, release_first = threading.Event(), threading.Event()
    results: dict[str, object] = {}

    async def first_loop() -> None:
        async def waiter() -> None:
            results["first"] = await fut

        task = asyncio.ensure_future(waiter())
        await asyncio.sleep(0)  # the waiter is suspended on fut
        first_waiting.set()
        release_first.wait()  # then this loop blocks: it drains nothing until released
        await task

    thread = threading.Thread(target=asyncio.run, args=(first_loop(),))
    thread.start()
    assert first_waiting.wait(10)

    async def second_loop() -> None:
        async def open_soon() -> None:
            await anyio.sleep(0.01)
            gate.open()

        async with anyio.create_task_group() as tg:
            tg.start_soon(open_soon)
            with anyio.fail_after(10):
                results["second"] = await fut

    backend = ("asyncio", {"use_uvloop": True}) if second == "uvloop" else (second, {})
    anyio.run(second_loop, backend=backend[0], backend_options=backend[1])
    release_first.set()
    thread.join(10)
    np.testing.assert_array_equal(results["second"], np.arange(8.0))
    assert results["first"] is results["second"]


# -- 7: closing a loop hands its pending completions over -------------------------------
@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_closing_a_loop_with_tasks_awaiting_ops_releases_everything(kind: str) -> None:
    loop = new_loop(kind)
    ct.settle()
    before = ct.snapshot()
    s = cuasync.Device(0).new_stream()
    gate = ct.gate(s)

    async def handler(i: int) -> None:
        if i % 2:
            await cuasync.zeros((1 << 16,)).submit_on(s)  # a future
        else:
            await ct.sleep(0, stream=s)  # an op

    tasks = [loop.create_task(handler(i)) for i in range(4)]
    loop.run_until_complete(asyncio.sleep(0.01))  # every task is suspended on its op
    assert not any(t.done() for t in tasks)
    loop.close()  # with the tasks still pending
    ref = weakref.ref(loop)
    del loop, tasks
    gate.open()
    assert ct.settle()
    assert ct.snapshot() == before
    gc.collect()
    assert ref() is None  # nothing keeps the closed loop alive


# -- 8 and 10: faults seen by polling; re-raises do not grow -----------------------------
def test_done_sees_a_fault_and_repeated_raises_do_not_grow_tracebacks() -> None:
    r = run_script(
        """
        import time, traceback, cuasync, cuasync.testing as ct
        from cuasync.errors import DeviceFaultError

        s = cuasync.Device(0).new_stream()
        fut = ct.sleep(3_000_000, stream=s).submit()    # pending when the device faults
        ct.trap().submit()
        deadline = time.monotonic() + 20
        while not fut.done() and time.monotonic() < deadline:
            time.sleep(0.001)                            # a user polling done()
        print("done:", fut.done(), type(fut.exception()).__name__)
        depths = []
        for _ in range(4):
            try:
                cuasync.zeros((4,)).sync()
            except DeviceFaultError as exc:
                depths.append(len(traceback.extract_tb(exc.__traceback__)))
        print("depths equal:", len(set(depths)) == 1, depths)
        errors = []
        for _ in range(3):
            try:
                fut.result()
            except DeviceFaultError as exc:
                errors.append(exc)
        print("fresh:", errors[1] is not errors[0], errors[1].__cause__ is errors[0])
        """
    )
    lines = r.stdout.splitlines()
    assert lines[0] == "done: True DeviceFaultError"
    assert lines[1].startswith("depths equal: True")
    assert lines[2] == "fresh: True True"


# -- 9: fork --------------------------------------------------------------------------
FORK = """
    import asyncio, os, sys, cuasync

    async def use():
        return [int(v) for v in await cuasync.arange(4, dtype="float32").then(lambda t: t.to_host())]

    if {init_first}:
        asyncio.run(use())
    pid = os.fork()
    if pid == 0:
        try:
            print("child:", asyncio.run(use()), flush=True)
        except RuntimeError as exc:
            print("child refused:", "'spawn'" in str(exc) and "fork" in str(exc), flush=True)
        sys.exit(0)                                   # a normal exit: atexit handlers run
    _, status = os.waitpid(pid, 0)
    print("parent:", asyncio.run(use()), os.waitstatus_to_exitcode(status))
"""


def test_fork_after_use_gives_the_child_a_clear_error_not_a_hang() -> None:
    r = run_script(FORK.format(init_first=True), timeout=60)
    assert r.stdout.splitlines() == ["child refused: True", "parent: [0, 1, 2, 3] 0"]


def test_fork_before_first_use_gives_the_child_a_working_cuasync() -> None:
    r = run_script(FORK.format(init_first=False), timeout=60)
    assert r.stdout.splitlines() == ["child: [0, 1, 2, 3]", "parent: [0, 1, 2, 3] 0"]


# -- 11: a missing native module is said, not silent -------------------------------------
def test_missing_native_module_fails_the_import_saying_how_to_build_it() -> None:
    r = run_script(
        """
        import sys
        sys.modules["cuasync._reactor"] = None    # as if built without a C compiler
        try:
            import cuasync
        except ImportError as exc:
            print("ImportError:", exc)
        """
    )
    assert r.stdout.startswith("ImportError: cuasync's native module cuasync._reactor")
    assert "pip install -e ." in r.stdout


def test_a_build_of_other_sources_fails_the_import(tmp_path) -> None:
    # A checkout updated without rebuilding: its native module was stamped with the hash of
    # other sources (SOURCE_HASH), and running it half-matched is refused.
    root = Path(cuasync.__file__).parent.parent
    shutil.copytree(
        root / "cuasync", tmp_path / "cuasync", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copytree(root / "reactor", tmp_path / "reactor")
    with open(tmp_path / "reactor" / "python" / "ledger.c", "a") as f:
        f.write("/* a change made after the build */\n")
    code = "try:\n    import cuasync\nexcept ImportError as exc:\n    print('ImportError:', exc)"
    r = run_python("-c", code, timeout=120, cwd=str(tmp_path))  # (the copy comes first)
    assert "is a build of other sources" in r.stdout and "pip install -e ." in r.stdout


def test_native_module_in_use_shows_in_stats() -> None:
    from cuasync._core import completion

    assert cuasync.stats().native is (completion.get_hub().native is not None) is True


# -- 13: awaiting outside asyncio and trio submits nothing -------------------------------
def test_awaiting_outside_a_supported_loop_fails_before_submitting(baseline) -> None:
    before = ct.snapshot()
    op = cuasync.zeros((1024,))
    coro = op.__await__()
    with pytest.raises(RuntimeError, match="asyncio, uvloop or trio"):
        coro.send(None)  # a bare driver, as curio or a hand-written runner would be
    assert ct.snapshot() == before
    assert op.sync().shape == (1024,)  # refused, not consumed


# -- 17: a numpy twin that raises fails its op, not the device ---------------------------
@pytest.mark.emulator_only(reason="a numpy twin (emulate=) runs only on the emulator")
def test_emulated_kernel_that_raises_fails_only_its_op(baseline) -> None:
    def twin(x, n):
        raise TypeError("bad twin")

    kernel = cuasync.Kernel('extern "C" __global__ void k(float* x, int n) { }', "k", emulate=twin)
    x = cuasync.zeros((4,)).sync()
    with pytest.raises(cuasync.errors.KernelError, match="bad twin") as info:
        kernel[1, 1](x, 4).sync()
    assert isinstance(info.value.__cause__, TypeError)
    assert not isinstance(info.value, (cuasync.errors.ArgumentError, DeviceFaultError))
    assert cuasync.Device(0).fault is None
    np.testing.assert_array_equal(cuasync.fill(x, 1.0).then(lambda t: t.to_host()).sync(), 1.0)
    with pytest.raises(cuasync.errors.KernelError):  # also inside a then chain, awaited
        asyncio.run(_await(cuasync.zeros((4,)).then(lambda t: kernel[1, 1](t, 4))))
    shared = kernel[1, 1](x, 4).shared()
    for _ in range(3):  # every consumer of a shared op fails, not only the first
        with pytest.raises(cuasync.errors.KernelError):
            shared.sync()


async def _await(op: cuasync.DeviceOp) -> object:
    return await op


# -- 18: a forgotten await says so -------------------------------------------------------
def test_an_op_dropped_unexecuted_warns_like_a_coroutine() -> None:
    x = cuasync.zeros((4,)).sync()
    with pytest.warns(RuntimeWarning, match=r"DeviceOp fill.*was never executed"):
        cuasync.fill(x, 5.0)  # no await
        gc.collect()


def test_debug_mode_says_where_the_forgotten_op_was_built(tmp_path) -> None:
    script = tmp_path / "service.py"
    script.write_text(
        textwrap.dedent(
            """
            import gc, warnings, cuasync
            warnings.simplefilter("always")
            def handler():
                cuasync.zeros((4,))        # forgotten
            handler()
            gc.collect()
            """
        )
    )
    r = run_script(f"import runpy; runpy.run_path({str(script)!r})", PYTHONASYNCIODEBUG="1")
    assert "was never executed" in r.stderr
    assert "in handler" in r.stderr and "cuasync.zeros((4,))" in r.stderr


# -- 19: cancelled work is released by reference counting --------------------------------
@pytest.mark.parametrize("what", ["zeros", "add"])
@pytest.mark.parametrize("how", ["op", "future"])
async def test_cancelled_work_is_released_without_the_cyclic_gc(
    anyio_backend, how: str, what: str
) -> None:
    # zeros: a library call of the native core; add: a kernel launch of it (a cancelled
    # await's frames stay in its traceback, inside a cycle: they must not hold the output)
    import anyio

    s = cuasync.Device(0).new_stream()
    x = await cuasync.zeros((1 << 16,)).submit_on(s)
    make = {"zeros": lambda: cuasync.zeros((1 << 16,)), "add": lambda: cuasync.add(x, 1.0)}[what]
    await make().submit_on(s)  # (seen: the native core's)
    assert ct.settle()
    before = ct.snapshot()
    gc.disable()
    try:
        with ct.gate(s):

            async def handler() -> None:
                if how == "op":
                    with cuasync.use_policy(cuasync.SingleStream(s)):
                        await make()
                else:
                    await make().submit_on(s)

            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(handler)
                await anyio.sleep(0.01)
                tg.cancel_scope.cancel()
        deadline = time.monotonic() + 10
        while ct.snapshot() != before and time.monotonic() < deadline:
            await cuasync.wait(s)
            await anyio.sleep(0.001)
        assert ct.snapshot() == before
    finally:
        gc.enable()


# -- the reactor takes a future that is already armed elsewhere --------------------------
def test_refused_await_does_not_break_a_later_one(baseline) -> None:
    # The tracebacks of refused awaits stay small too (no frames retained per raise).
    op = cuasync.value(1)
    errors = []
    for _ in range(3):
        coro = op.__await__()
        try:
            coro.send(None)
        except RuntimeError as exc:
            errors.append(len(traceback.extract_tb(exc.__traceback__)))
    assert len(set(errors)) == 1
    assert op.sync() == 1


def test_device_errors_are_device_errors() -> None:
    assert issubclass(cuasync.errors.KernelError, DeviceError)
