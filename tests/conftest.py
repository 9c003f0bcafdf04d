"""Shared fixtures: the event-loop matrix, backend command counts, leak checks, helpers.

Behaviour tests hold work in flight with ``cuasync.testing`` (gates, the sleep op, the
trap), so they run unchanged on a GPU and on the emulator. Only tests of the emulator's
own knobs are marked ``@pytest.mark.emulator_only(reason=...)``.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import gc
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import settings

# Two emulated devices, so that multi-device behaviour is tested in CI (ignored on cuda).
os.environ.setdefault("CUASYNC_EMU_DEVICES", "2")
# The kernel cache is on by default, in the user's home (~/.cache/cuasync): the suite
# keeps its own in a temporary directory, never the real one, one for the whole run: the
# process that makes it (xdist's controller) removes it at exit, and its xdist workers and
# their subprocesses (a nested pytest run too) inherit it, so that a kernel one of them
# compiled is read back by the others (NVRTC is most of the emulator's time).
os.environ["CUASYNC_KERNEL_CACHE"] = os.environ.get(
    "CUASYNC_TEST_RUN_KERNEL_CACHE"
) or tempfile.mkdtemp(prefix="cuasync-test-kernels-")

import helpers
from helpers import BACKEND, ON_EMULATOR, STREAM_COMMANDS, settle

import cuasync
import cuasync.testing
from cuasync._backends import get_backend
from cuasync._core import block_cache, wake

if "CUASYNC_TEST_RUN_KERNEL_CACHE" not in os.environ:  # (made above, by this process)
    os.environ["CUASYNC_TEST_RUN_KERNEL_CACHE"] = os.environ["CUASYNC_KERNEL_CACHE"]
    atexit.register(shutil.rmtree, os.environ["CUASYNC_KERNEL_CACHE"], ignore_errors=True)

# Property tests draw the same examples on every run: a run fails only on a change, never
# on a draw no earlier run made. ``--hypothesis-profile=explore`` draws fresh ones, to
# look for new failures (with ``--hypothesis-seed=N`` too: "repeatable" ignores seeds).
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile("repeatable")


pytest_plugins = ["pytester"]


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[Any, ...]]]:
    """The launch plans made from now on (their op, shape and strides: the plan cache's
    misses), starting from an empty cache."""
    from cuasync._ops import launch_plan

    found: list[tuple[Any, ...]] = []
    helpers.emptied(monkeypatch, launch_plan._plans)
    make = launch_plan._make_plan

    def spy(node: Any, shape: Any, strides: Any, tensors: Any) -> Any:
        found.append((node.name, shape, strides))
        return make(node, shape, strides, tensors)

    monkeypatch.setattr(launch_plan, "_make_plan", spy)
    yield found


@pytest.fixture(autouse=True)
def _memos_match_the_dicts() -> Iterator[None]:
    """A test that emptied a seen-kind dict (``helpers.emptied``) leaves the native memos
    holding what it made; once its entries are back, the memos are cleared too."""
    yield
    if helpers.EMPTIED_THIS_TEST[0]:
        helpers.EMPTIED_THIS_TEST[0] = False
        helpers.forget_memos()


@pytest.fixture(scope="session", autouse=True)
def _kernels_loaded_before_any_gate():
    """On a GPU, loading a kernel module may wait for the device's pending work, so a
    kernel first launched behind a closed gate would wait for the gate: load the built-in
    ones up front, on every device. The emulator, which refuses such a first load, is
    given the same start, so that it flags exactly what would hang a GPU (a test's own
    or a fused kernel first loaded behind a gate)."""
    from cuasync._launch.builtin import builtin_kernels
    from cuasync._launch.guard import guard_kernel

    # Each xdist worker starts at its own place in the list: what the others compiled
    # meanwhile it reads from the run's kernel cache.
    kernels = builtin_kernels()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    start = len(kernels) * int(worker.removeprefix("gw")) // workers
    kernels = kernels[start:] + kernels[:start]
    for ordinal in range(cuasync.device_count()):
        for kernel in kernels:
            kernel.compile(ordinal)
        cuasync.testing._device_ops.load(cuasync.Device(ordinal))  # the sleep and trap kernels
        guard_kernel().compile(ordinal)  # (a guarded region's, in a cancel scope)
    if not ON_EMULATOR:
        # The first stream-ordered allocation of a process grows the device's memory
        # pool, which took 5 ms in the driver on an H200: tests that time an await
        # against work in flight would see it land during the enqueue.
        for ordinal in range(cuasync.device_count()):
            cuasync.zeros((1 << 20,), "uint8", device=ordinal).sync()
    # What lives now (imported modules, compiled kernels) lives as long as the worker: kept
    # out of the cyclic GC's passes, which the leak checks force four times a test
    # (``settle``: a pass over 120k objects took 0.1 s, half the runtime tests' time).
    gc.collect()
    gc.freeze()


#: ``CUASYNC_TEST_HANG_DUMP=FILE``: a test still running after ``CUASYNC_TEST_HANG_SECONDS``
#: (default 60) appends every thread's stack to FILE (tools/gpu-check sets it), so that a
#: hang on a machine you cannot watch comes back with its cause.
_HANG_DUMP = os.environ.get("CUASYNC_TEST_HANG_DUMP")


@contextlib.contextmanager
def _hang_dump(item: pytest.Item, path: str) -> Iterator[None]:
    """Append every thread's stack to ``path`` if ``item`` is still running after the
    hang timeout."""
    import faulthandler

    with open(path, "a") as dump:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        dump.write(f"{worker} {item.nodeid}\n")  # which test a dump below belongs to
        dump.flush()
        faulthandler.dump_traceback_later(
            float(os.environ.get("CUASYNC_TEST_HANG_SECONDS", "60")), file=dump
        )
        try:
            yield
        finally:
            faulthandler.cancel_dump_traceback_later()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (pyproject's addopts): one worker more than there are cores, since
    much of the suite waits on subprocesses and device work rather than computing; at
    most 8, each worker holding its own device contexts on a GPU."""
    return min(8, len(os.sched_getaffinity(0)) + 1)


#: The xdist run this worker belongs to (unset without xdist: nothing runs beside a test).
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID")


@contextlib.contextmanager
def _turn(alone: bool) -> Iterator[None]:
    """A test's turn among the run's workers: a shared hold of the run's lock file, or an
    exclusive one for tests marked ``alone``. Every worker passes a turnstile first, so
    that an ``alone`` test waiting for the lock is not starved by the shared holders."""
    base = os.path.join(tempfile.gettempdir(), f"cuasync-tests-{_RUN}")
    with open(base + ".turnstile", "a") as turnstile, open(base + ".lock", "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        if _RUN is not None:
            stack.enter_context(_turn(item.get_closest_marker("alone") is not None))
        if _HANG_DUMP:
            stack.enter_context(_hang_dump(item, _HANG_DUMP))
        yield


#: ``CUASYNC_TEST_FAILURE_LOG=FILE``: each failure is appended to FILE as it happens (its
#: id and the end of its report), so a run cut short by a hang or a time limit still
#: says which tests failed (tools/gpu-check sets it).
_FAILURE_LOG = os.environ.get("CUASYNC_TEST_FAILURE_LOG")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # (under xdist the controller sees every worker's reports again: logged once, there)
    if _FAILURE_LOG and report.failed and not hasattr(report, "node"):
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        text = report.longreprtext[-3000:]
        with open(_FAILURE_LOG, "a") as log:
            log.write(f"== {worker} {report.nodeid} ({report.when})\n{text}\n")


def pytest_report_header(config: pytest.Config) -> str:
    dev = cuasync.Device(0)
    return f"cuasync backend: {BACKEND} ({dev.name}); CUASYNC_SPIN_BUDGET_US={os.environ.get('CUASYNC_SPIN_BUDGET_US', '20')}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_gpu = pytest.mark.skip(reason="needs a real GPU (run with CUASYNC_BACKEND=cuda)")
    for item in items:
        if "gpu" in item.keywords and ON_EMULATOR:
            item.add_marker(skip_gpu)
        marker = item.get_closest_marker("emulator_only")
        if marker is not None and not ON_EMULATOR:
            reason = marker.kwargs.get("reason", "uses the emulator's own knobs")
            item.add_marker(pytest.mark.skip(reason=f"emulator only: {reason}"))


#: The event loops an async test runs on: all three where the loop is the subject (awaits,
#: completion, cancellation, wake-ups, copies that wake a loop from another thread), and
#: asyncio alone in the folders and modules listed: an op's result, or the bytes a copy
#: between devices moves, do not depend on the loop that awaits it. (A module with an
#: ``anyio_backend`` fixture of its own picks its loops.)
LOOPS = [
    pytest.param(("asyncio", {}), id="asyncio"),
    pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
    pytest.param(("trio", {}), id="trio"),
]
ONE_LOOP = ("tensors", "test_multi_device.py")  # folders and modules


def _picks_its_loops(metafunc: pytest.Metafunc) -> bool:
    """Whether a test names its loops itself: a module fixture, the plugin's marker, or a
    ``parametrize`` of ``anyio_backend``."""
    if hasattr(metafunc.module, "anyio_backend"):
        return True
    if metafunc.definition.get_closest_marker("cuasync_loops") is not None:
        return True
    return any(
        "anyio_backend" in str(mark.args[0])
        for mark in metafunc.definition.iter_markers("parametrize")
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "anyio_backend" not in metafunc.fixturenames or _picks_its_loops(metafunc):
        return
    path = metafunc.definition.path
    one = path.parent.name in ONE_LOOP or path.name in ONE_LOOP
    metafunc.parametrize("anyio_backend", LOOPS[:1] if one else LOOPS, indirect=True)


@pytest.fixture
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, object]]:
    return request.param


@pytest.fixture
def reactor_wake() -> Iterator[None]:
    """Today's park for one test: a parked await is woken by the reactor alone (the early
    wake of ``cuasync/_core/wake.py`` off), for tests of the reactor's own path."""
    saved = wake.POLICY.on
    wake.POLICY.on = False
    try:
        yield
    finally:
        wake.POLICY.on = saved


@pytest.fixture
def quiet_device() -> Iterator[cuasync.Device]:
    """Device 0, with earlier tests' garbage collected and their work settled, and no
    collection during the test: nothing is freed behind its back while it compares two
    memory snapshots. Its memory limit is lifted afterwards."""
    assert cuasync.testing.settle()
    gc.disable()
    dev = cuasync.Device(0)
    try:
        yield dev
    finally:
        gc.enable()
        dev.set_memory_limit(None)


@pytest.fixture
def emu():
    """The emulator's own knobs (``cuasync.emulator``), reset after the test."""
    import cuasync.emulator as emulator

    if not ON_EMULATOR:
        pytest.skip("tests the emulator's own knobs (cuasync.emulator)")
    yield emulator
    emulator.set_delay(0)


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the stream commands handed to the backend during the test, in order.

    Counts at the driver interface, so "building an op enqueues nothing" is checked on a
    GPU and on the emulator alike. No garbage collection runs meanwhile unless the test
    asks for it: collecting earlier tests' reference cycles frees tensors, and each free
    is a command. Small blocks cached for reuse are given back first, so that each
    allocation the test makes is a driver command (until the test frees one itself).
    """
    settle()
    for ordinal in range(cuasync.device_count()):
        block_cache.flush(cuasync.Device(ordinal))
    backend = get_backend()
    calls: list[str] = []

    def counting(name: str, call: Callable[..., object]) -> Callable[..., object]:
        def command(*args: object, **kwargs: object) -> object:
            calls.append(name)  # list.append is atomic: finalizers on other threads may free
            return call(*args, **kwargs)

        return command

    for name in STREAM_COMMANDS:
        monkeypatch.setattr(backend, name, counting(name, getattr(backend, name)))
    gc.disable()
    try:
        yield calls
    finally:
        gc.enable()


@pytest.fixture
def baseline():
    """Asserts that memory (every device) and slots return to where they were."""
    with cuasync.testing.no_leaks() as before:
        yield before


@pytest.fixture
def no_emu_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulator runs kernels' numpy twins without compiling each source first.

    For suites that launch many generated kernels: their sources are compile-checked by
    a test of their own instead (one NVRTC compile per kernel would take minutes).
    """
    import dataclasses

    from cuasync import _config

    monkeypatch.setattr(_config, "CONFIG", dataclasses.replace(_config.config(), emu_compile="off"))
