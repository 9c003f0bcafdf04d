"""Bursts of awaits: an await of a launch that finds other tasks ready steps aside.

(Each op runs in a task of its own here, ``asyncio.create_task(op)``: handed to
``asyncio.gather`` or ``ensure_future`` as it is, an op is an asyncio future, watched
without a task: tests/runtime/test_op_futures.py.)

With ``CUASYNC_SUBMITTER=on`` (the default: ``Hub.step_aside``; these tests turn it on
whatever the setting, and one checks the setting), such an await on asyncio and uvloop
queues its launch (on a GPU for the native submitter thread, which makes the driver
calls; on the emulator it launches at once, its launches only queue work) and yields,
so the other ready tasks submit theirs meanwhile; it then finishes as any await does.
What a user relies on holds through it: each await returns its output when its work is
done, work on one stream runs in submission order, an op submitted after queued launches
runs after them, a cancelled await lets its work land and releases it, a failed launch
raises from its await, and nothing leaks. Gates hold the work, so every test runs on a
GPU too. trio has no bare yield: its awaits launch and spin as always (the counters say
so). The last tests run the native core's bursts against a real submitter thread on the
emulator (over the module's stub driver table), and count what an await in a burst keeps
alive for the cyclic GC (what a gather of thousands of them makes it traverse).
"""

from __future__ import annotations

import asyncio
import gc
import types
from collections.abc import Awaitable, Callable, Generator, Iterator
from typing import Any

import anyio
import numpy as np
import pytest
from helpers import wait_until
from test_express import bump  # x[:n] += 1, a kernel and its twin

import cuasync
import cuasync.testing as ct
from cuasync._core import express
from cuasync._core.completion import get_hub
from cuasync.errors import DriverError

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("stepping_aside")]


@pytest.fixture
def stepping_aside(monkeypatch: pytest.MonkeyPatch) -> None:
    """Awaits in a burst step aside (``CUASYNC_SUBMITTER=on``) for the test."""
    hub = get_hub()
    monkeypatch.setattr(hub, "step_aside", hub.step_aside)  # (restored afterwards)
    hub.enable_bursts()


#: The loops whose tasks step aside (a test that relies on asyncio's run order).
ASYNCIO = [
    pytest.param(("asyncio", {}), id="asyncio"),
    pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
]


def _in_flight() -> int:
    """Submissions (and gate words) outstanding: flag slots, or host callbacks."""
    s = cuasync.stats()
    return s.slots_armed + s.callbacks_pending


def _steps_aside(anyio_backend: Any) -> bool:
    """Whether awaits in a burst step aside: on asyncio and uvloop, through the native
    core (with flag slots; with ``CUASYNC_NATIVE=off`` every await takes the generic
    path, which launches and waits as always)."""
    hub = get_hub()
    return anyio_backend[0] == "asyncio" and hub.use_reactor and hub.express is not None


async def test_a_burst_of_awaits_returns_each_output_in_stream_order(
    anyio_backend: Any, baseline: Any
) -> None:
    stream = cuasync.Device(0).new_stream()
    x = await cuasync.zeros((256,), dtype="float32")
    await bump[1, 256](x, 256)  # loaded
    results: list[Any] = []

    async def one() -> None:
        results.append(await bump[1, 256](x, 256))

    before = cuasync.stats()
    with cuasync.use_policy(cuasync.SingleStream(stream)):
        async with anyio.create_task_group() as tg:
            for _ in range(300):
                tg.start_soon(one)
    after = cuasync.stats()
    assert len(results) == 300 and all(r is x for r in results)
    np.testing.assert_array_equal(await x.to_host(), np.full(256, 301, np.float32))
    stepped = after.burst_awaits - before.burst_awaits
    if _steps_aside(anyio_backend):
        assert stepped >= 1
    else:
        assert stepped == 0
    if get_hub().submitter is not None and _steps_aside(anyio_backend):
        assert after.launches_queued > before.launches_queued


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_a_bad_spin_budget_raises_in_a_burst_before_anything_is_submitted(
    anyio_backend: Any, baseline: Any, stepping_aside: None
) -> None:
    # Awaits in a burst spin later, in Python: the core checks the budget in every mode,
    # so a bad one is worded and takes no slot (it took one, then failed unworded).
    if not _steps_aside(anyio_backend):
        pytest.skip("awaits step aside on asyncio through the native core only")
    x = await cuasync.zeros((64,), dtype="float32")
    await bump[1, 64](x, 64)
    hub = get_hub()
    armed, bursts = cuasync.stats().slots_armed, cuasync.stats().burst_awaits
    errors: list[str] = []

    async def one() -> None:
        try:
            await bump[1, 64](x, 64)
        except TypeError as exc:
            errors.append(str(exc))

    budget = hub.spin_budget_us
    hub.spin_budget_us = 5.0  # type: ignore[assignment]  # (not an int)
    try:
        async with anyio.create_task_group() as tg:
            for _ in range(20):
                tg.start_soon(one)
    finally:
        hub.spin_budget_us = budget
    assert len(errors) == 20 and all("spin_budget_us must be an int" in e for e in errors)
    assert cuasync.stats().slots_armed == armed
    assert cuasync.stats().burst_awaits == bursts  # (none was launched to step aside)
    np.testing.assert_array_equal(await x.to_host(), np.ones(64, np.float32))


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_an_op_submitted_after_queued_launches_runs_after_them(
    anyio_backend: Any, baseline: Any
) -> None:
    # asyncio runs ready tasks in the order they were scheduled, so the reader submits
    # after every bump; its read is ordered after their writes even while they are still
    # queued for the submitter (behind the gate, all of them are).
    stream = cuasync.Device(0).new_stream()
    x = await cuasync.zeros((64,), dtype="float32")
    await bump[1, 64](x, 64)
    seen: list[np.ndarray] = []
    done = 0

    async def bumper() -> None:
        nonlocal done
        await bump[1, 64](x, 64)
        done += 1

    async def reader() -> None:
        seen.append(await x.to_host())

    with cuasync.use_policy(cuasync.SingleStream(stream)), ct.gate(stream) as gate:
        async with anyio.create_task_group() as tg:
            for _ in range(40):
                tg.start_soon(bumper)
            tg.start_soon(reader)
            await wait_until(lambda: _in_flight() >= 42)  # the gate, 40 bumps, the read
            assert done == 0 and not seen
            gate.open()
    np.testing.assert_array_equal(seen[0], np.full(64, 41, np.float32))


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_an_await_cancelled_while_stepping_aside_lets_its_work_land(
    anyio_backend: Any, baseline: Any
) -> None:
    stream = cuasync.Device(0).new_stream()
    x = await cuasync.zeros((32,), dtype="float32")
    await bump[1, 32](x, 32)
    before = cuasync.stats()
    with cuasync.use_policy(cuasync.SingleStream(stream)), ct.gate(stream) as gate:
        tasks = [asyncio.create_task(bump[1, 32](x, 32)) for _ in range(4)]
        await asyncio.sleep(0)  # each has submitted (and stepped aside, or parked)
        for task in tasks:
            task.cancel()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(o, asyncio.CancelledError) for o in outcomes)
        assert cuasync.stats().burst_awaits - before.burst_awaits == 0  # none resumed
        gate.open()
    ct.settle()  # the background watcher releases what they used
    np.testing.assert_array_equal(await x.to_host(), np.full(32, 5, np.float32))


async def test_a_failed_launch_in_a_burst_raises_from_its_await(
    anyio_backend: Any, baseline: Any
) -> None:
    x = await cuasync.zeros((32,), dtype="float32")
    await bump[1, 32](x, 32)
    outcomes: list[Any] = []

    async def good() -> None:
        outcomes.append(await bump[1, 32](x, 32))

    async def bad() -> None:
        try:
            await bump[1, 32, 64 * 1024](x, 32)  # more dynamic shared memory than allowed
        except DriverError as exc:
            outcomes.append(exc)

    async with anyio.create_task_group() as tg:
        for f in (good, bad, good, bad, good):
            tg.start_soon(f)
    errors = [o for o in outcomes if isinstance(o, DriverError)]
    assert len(outcomes) == 5 and len(errors) == 2
    assert all(e.code == 1 for e in errors)  # CUDA_ERROR_INVALID_VALUE
    np.testing.assert_array_equal(await x.to_host(), np.full(32, 4, np.float32))


_SCRIPT = (
    "import asyncio, cuasync\n"
    "from cuasync._core.completion import get_hub\n"
    "k = cuasync.Kernel('extern \"C\" __global__ void k(float* x) { x[0] += 1.0f; }',\n"
    "                  'k', emulate=lambda x: x.__setitem__(0, x[0] + 1))\n"
    "async def main():\n"
    "    x = await cuasync.zeros((1,))\n"
    "    for rounds in range(1, 21):  # (an await steps aside only if its kernel lands soon)\n"
    "        await asyncio.gather(*(asyncio.create_task(k[1, 1](x)) for _ in range(100)))\n"
    "        if cuasync.stats().burst_awaits:\n"
    "            break\n"
    "    s = cuasync.stats()\n"
    "    hub = get_hub()\n"
    "    core = hub.use_reactor and hub.express is not None\n"
    "    count = int((await x.to_host())[0])\n"
    "    print(count == 100 * rounds, hub.step_aside, core, s.burst_awaits > 0)\n"
    "asyncio.run(main())\n"
)


@pytest.mark.parametrize(("setting", "steps"), [(None, "True"), ("off", "False"), ("on", "True")])
def test_cuasync_submitter_says_whether_bursts_step_aside(setting: str | None, steps: str) -> None:
    from helpers import run_script

    env = {} if setting is None else {"CUASYNC_SUBMITTER": setting}
    done = run_script(_SCRIPT, timeout=120, **env)
    count, step_aside, flags, stepped = done.stdout.split()
    assert count == "True" and step_aside == steps
    # (with host callbacks for every await, or CUASYNC_NATIVE=off, no launch takes the
    # native core: none steps aside)
    assert stepped == str(steps == "True" and flags == "True")


# -- the native core's bursts, with a real submitter thread (on the emulator) -------------


@pytest.fixture
def native_submitter(monkeypatch: pytest.MonkeyPatch, stepping_aside: None) -> Any:
    """On the emulator, a real native submitter over the module's stub driver table, and
    bump packed and launched natively: a burst's awaits take the path they take on a GPU
    (the native core queues each launch for the submitter's thread, which makes it and
    writes its flag; the stub launches nothing, so x is left as it was). On a GPU the
    tests above run that path with the driver's own entry points."""
    from helpers import ON_EMULATOR

    from cuasync._backends._params import _layout

    if not ON_EMULATOR:
        pytest.skip("on a GPU the tests above take this path with the driver's entry points")
    hub = get_hub()
    if hub.express is None or not hub.use_reactor:
        pytest.skip("needs the native core (off with CUASYNC_NATIVE=off) and flag slots")
    native = hub.native
    prepared = bump._prepare(cuasync.Device(0))
    monkeypatch.setattr(prepared, "fast", (0xF00D, _layout(["Q", "i"], [0])))
    backend = get_hub().backend
    monkeypatch.setattr(backend, "fast_launch", native.launch_packed, raising=False)
    current = native.CurrentOrdinal()  # (the backend's record of this thread's context)
    current.ordinal = 0
    monkeypatch.setattr(backend, "current", current, raising=False)
    native.set_entry_points(**native.stub_entry_points())
    submitter = native.Submitter(hub.reactor)
    monkeypatch.setattr(hub, "submitter", submitter)
    native.set_launch_fence(submitter)
    try:
        yield submitter
    finally:
        native.set_launch_fence(None)
        submitter.close(1.0)
        native.set_entry_points()  # (the stub table off: the emulator launches in Python)


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_a_burst_through_the_native_submitter_returns_each_output(
    anyio_backend: Any, baseline: Any, native_submitter: Any
) -> None:
    x = await cuasync.zeros((64,), dtype="float32")
    core = get_hub().express
    native = get_hub().native
    before, launches = cuasync.stats(), native.stub_launches()
    queued, settled = core.burst_queued, core.burst_awaits
    results = await asyncio.gather(*(asyncio.create_task(bump[1, 64](x, 64)) for _ in range(200)))
    after = cuasync.stats()
    assert all(r is x for r in results)
    assert native.stub_launches() - launches == 200  # each launched once, by someone
    # all but (on uvloop) the loop iteration's first await queued theirs and stepped aside
    assert core.burst_queued - queued >= 199
    assert native_submitter.launched >= 199
    assert after.burst_awaits - before.burst_awaits >= 199
    assert core.burst_awaits - settled > 0  # the core settled them itself
    assert after.slots_armed == before.slots_armed


@pytest.mark.parametrize("anyio_backend", [ASYNCIO[0]], indirect=True)
async def test_an_await_in_a_burst_that_python_submits_is_queued_by_the_native_core(
    anyio_backend: Any, baseline: Any, native_submitter: Any
) -> None:
    # express.await_launch (where the native await hands over a first use, or an await
    # it cannot take) submits through the core as well: in a burst, the core queues the
    # launch for the submitter and Python steps aside and settles it. There is no
    # second submission in Python.
    x = await cuasync.zeros((32,), dtype="float32")
    core = get_hub().express
    before, queued, launches = cuasync.stats(), core.burst_queued, core.launches

    class ThroughPython:
        def __await__(self) -> Any:
            return express.await_launch(bump[1, 32](x, 32))

    asyncio.get_running_loop().call_soon(lambda: None)  # another callback ready: a burst
    assert await ThroughPython() is x
    after = cuasync.stats()
    assert (core.burst_queued - queued, core.launches - launches) == (1, 1)
    assert after.burst_awaits - before.burst_awaits == 1  # stepped aside, in Python
    assert after.slots_armed == before.slots_armed


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_awaits_cancelled_while_queued_let_their_work_land_and_free_it(
    anyio_backend: Any, baseline: Any, native_submitter: Any
) -> None:
    x = await cuasync.zeros((32,), dtype="float32")
    core = get_hub().express
    queued, settled = core.burst_queued, core.burst_awaits
    tasks = [asyncio.create_task(bump[1, 32](x, 32)) for _ in range(8)]
    await asyncio.sleep(0)  # each has queued its launch and stepped aside
    assert core.burst_queued - queued >= 7
    for task in tasks:
        task.cancel()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    # (on uvloop the loop iteration's first await launched and spun: it finished)
    cancelled = [o for o in outcomes if isinstance(o, asyncio.CancelledError)]
    assert len(cancelled) >= 7 and all(o is x for o in outcomes if o not in cancelled)
    assert core.burst_awaits == settled  # none settled by the core: they were cancelled
    ct.settle()  # the background watcher frees what they used (baseline checks it)


@pytest.mark.parametrize("anyio_backend", [ASYNCIO[0]], indirect=True)
async def test_a_queued_await_dropped_before_it_finishes_lets_its_work_land(
    anyio_backend: Any, baseline: Any, native_submitter: Any
) -> None:
    import gc

    x = await cuasync.zeros((32,), dtype="float32")
    loop = asyncio.get_running_loop()
    loop.call_soon(lambda: None)  # another callback ready: the await is in a burst
    it = bump[1, 32](x, 32).__await__()
    assert it.send(None) is None  # queued, and stepping aside
    del it  # (a task destroyed while it stepped aside)
    gc.collect()
    ct.settle()  # its completion was handed to the background watcher, which frees it


@pytest.mark.parametrize("anyio_backend", [ASYNCIO[0]], indirect=True)
async def test_a_queued_launch_the_submitter_fails_raises_from_its_await(
    anyio_backend: Any, baseline: Any, native_submitter: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ctypes

    from cuasync._backends.cuda import CudaBackend

    x = await cuasync.zeros((32,), dtype="float32")
    native = get_hub().native
    launch_t = ctypes.CFUNCTYPE(ctypes.c_int, *[ctypes.c_void_p] * 1, *[ctypes.c_uint32] * 7,
                                *[ctypes.c_void_p] * 3)  # fmt: skip
    refuse = launch_t(lambda *args: 1)  # CUDA_ERROR_INVALID_VALUE
    entry = native.stub_entry_points()
    entry["launch_kernel"] = ctypes.cast(refuse, ctypes.c_void_p).value
    native.set_entry_points(**entry)
    hub = get_hub()
    submitter = native.Submitter(hub.reactor)  # (it takes the entry points set now)
    monkeypatch.setattr(hub, "submitter", submitter)
    native.set_launch_fence(submitter)
    backend = hub.backend

    def queued_error(sub: Any, slot: int, stream: int) -> BaseException | None:
        status = sub.status(slot)
        return DriverError(status, "cuLaunchKernel") if status else None

    monkeypatch.setattr(backend, "queued_error", queued_error, raising=False)
    assert CudaBackend.queued_error is not queued_error  # (the GPU's words its own)
    try:
        loop = asyncio.get_running_loop()
        loop.call_soon(lambda: None)  # another callback ready: the await is in a burst
        with pytest.raises(DriverError) as caught:
            await bump[1, 32](x, 32)
        assert caught.value.code == 1
    finally:
        native.set_launch_fence(native_submitter)
        submitter.close(1.0)


@pytest.mark.parametrize("anyio_backend", [ASYNCIO[0]], indirect=True)
async def test_a_launch_made_at_once_is_not_failed_by_an_earlier_queued_launch(
    anyio_backend: Any, baseline: Any, native_submitter: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A burst await whose launch the core made at once (here: no native launch) and that
    # hands over to Python's path must not read the submitter's status word of its
    # slot: a queued launch on that slot may have failed there earlier (a review found
    # the succeeding await raising that old error).
    import ctypes

    x = await cuasync.zeros((32,), dtype="float32")
    hub = get_hub()
    native, backend = hub.native, hub.backend
    launch_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint32] * 7,
                                *[ctypes.c_void_p] * 3)  # fmt: skip
    refuse = launch_t(lambda *args: 1)  # CUDA_ERROR_INVALID_VALUE
    entry = native.stub_entry_points()
    entry["launch_kernel"] = ctypes.cast(refuse, ctypes.c_void_p).value

    def queued_error(sub: Any, slot: int, stream: int) -> BaseException | None:
        status = sub.status(slot)  # (as CudaBackend.queued_error reads it)
        return DriverError(status, "cuLaunchKernel") if status else None

    monkeypatch.setattr(backend, "queued_error", queued_error, raising=False)
    loop = asyncio.get_running_loop()
    stream = cuasync.Device(0).new_stream()
    native.set_entry_points(**entry)
    submitter = native.Submitter(hub.reactor)
    monkeypatch.setattr(hub, "submitter", submitter)
    native.set_launch_fence(submitter)
    try:
        with ct.gate(stream) as gate, cuasync.use_policy(cuasync.SingleStream(stream)):
            loop.call_soon(lambda: None)  # another callback ready: a burst
            with pytest.raises(DriverError):
                await bump[1, 32](x, 32)  # queued, and refused by the submitter
            monkeypatch.setattr(backend, "fast_launch", None, raising=False)  # made at once
            handed = hub.express.burst_handed_over
            loop.call_soon(lambda: None)
            task = asyncio.create_task(bump[1, 32](x, 32))  # (the same slot, reused)
            await wait_until(lambda: hub.express.burst_handed_over > handed)
            gate.open()
            assert await task is x
    finally:
        native.set_launch_fence(native_submitter)
        submitter.close(1.0)


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_a_lone_launch_the_native_core_submits_completes(
    anyio_backend: Any, baseline: Any, native_submitter: Any
) -> None:
    # The core builds the launch's ExecutionContext itself, slot by slot: one it left
    # unset (``checks``, added in Python) failed every lone launch on the H200.
    x = await cuasync.zeros((64,), dtype="float32")
    assert await bump[1, 64](x, 64) is x
    assert bump[1, 64](x, 64).sync(allow_in_loop=True) is x
    fut = bump[1, 64](x, 64).submit()
    assert await fut is x


# -- what an await in a burst keeps alive for the cyclic GC ----------------------------

NOP = 'extern "C" __global__ void cuasync_nop() {}'


def _nop_twin() -> None:
    """The numpy twin of ``nop`` (module-level: kernels pickle)."""


nop = cuasync.Kernel(NOP, "cuasync_nop", emulate=_nop_twin)


@pytest.fixture
def native_launches(monkeypatch: pytest.MonkeyPatch, stepping_aside: None) -> Iterator[None]:
    """The native core's await of a launch, as on a GPU: there, as it is; on the emulator,
    ``nop`` packed and launched natively against the module's stub driver table (the
    launch lands at once; the emulator launches in Python otherwise, with an error box
    per launch and its own queued work)."""
    from helpers import ON_EMULATOR

    from cuasync._backends._params import _layout

    hub = get_hub()
    if hub.express is None or not hub.use_reactor:
        pytest.skip("counts the native core's await (off with CUASYNC_NATIVE=off) over flags")
    device = cuasync.Device(0)
    nop._prepare(device)
    if not ON_EMULATOR:
        yield
        return
    native, backend = hub.native, hub.backend
    monkeypatch.setattr(nop._prepare(device), "fast", (0xF00D, _layout([], [])))
    monkeypatch.setattr(backend, "fast_launch", native.launch_packed, raising=False)
    current = native.CurrentOrdinal()  # (the backend's record of this thread's context)
    current.ordinal = 0
    monkeypatch.setattr(backend, "current", current, raising=False)
    monkeypatch.setattr(hub, "submitter", None)  # (no fence: each launch made at once)
    native.set_entry_points(**native.stub_entry_points())
    try:
        yield
    finally:
        native.set_entry_points()  # (the stub table off: the emulator launches in Python)


@types.coroutine
def _step_aside() -> Generator[None, None, None]:
    yield  # (the bare yield of an await in a burst)


async def _alive_per_task(task: Callable[[], Awaitable[None]], n: int) -> tuple[float, float]:
    """(GC-tracked objects alive per task when each of ``n`` gathered tasks has taken its
    first step, less those alive before; those only a collection frees, per task), with
    the collector off (a last task counts them)."""
    alive: list[int] = []

    async def count() -> None:
        alive.append(len(gc.get_objects()))

    await asyncio.sleep(0)  # (a loop step: asyncio lets go of an earlier gather's tasks)
    gc.collect()
    gc.disable()
    try:
        before = len(gc.get_objects())
        await asyncio.gather(*(task() for _ in range(n)), count())
        await asyncio.sleep(0)
    finally:
        gc.enable()
    cyclic = gc.collect()
    return (alive[0] - before) / n, cyclic / n


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_an_await_in_a_burst_keeps_only_its_op_alive_beyond_a_bare_step_aside(
    anyio_backend: Any, baseline: Any, native_launches: None
) -> None:
    # What makes the cyclic GC cost a gather of thousands of awaits is what each keeps
    # alive (tracked) while it steps aside: the collector's young passes run per 700 of
    # them, and those promoted make the full passes over the whole heap. Beside a task
    # that steps aside once through a generator (its one iterator), an await of a seen
    # launch keeps only the op alive: its iterator is the generator's peer, and the op's
    # arguments, none here, are the shared empty tuple (not two lists); no cycle is
    # left for a collection to free.
    async def step() -> None:
        await _step_aside()

    async def launch() -> None:
        await nop[1, 32]()

    await launch()  # (seen: its launcher made)
    n = 1000
    control, control_cyclic = await _alive_per_task(step, n)
    before = cuasync.stats()
    awaits, cyclic = await _alive_per_task(launch, n)
    assert cuasync.stats().burst_awaits - before.burst_awaits >= n - 1  # each stepped aside
    assert awaits - control <= 1.05  # the op (and a first await that parked, at most)
    assert cyclic == control_cyclic == 0
