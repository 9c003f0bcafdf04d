"""The express path of kernel launches behaves as the generic path does.

``await kernel[grid, block](...)`` and ``.submit_on(stream)`` of a launch go through
``cuasync._core.express`` when they can. Each test runs three times: through the native
module's express core (``_reactor.Express``), through the express path in Python (the
core turned off), and with both turned off (every launch then takes
``DeviceOp._start`` and ``completion.wait``). It asserts what a user sees: outputs,
counters, ordering across streams, errors, cancellation, nothing leaked. Gates hold the
work, so they run on a GPU too.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
from conftest import ON_EMULATOR, await_held, wait_until

import cuasync
import cuasync.testing as ct
from cuasync._backends import get_backend
from cuasync._core import express
from cuasync._core.completion import get_hub
from cuasync.errors import ArgumentError, KernelError, ReentrancyError

pytestmark = pytest.mark.anyio

BUMP = r"""
extern "C" __global__ void bump(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
"""


def _bump_twin(x: Any, n: int) -> None:
    x[:n] += 1.0


def _failing_twin(x: Any, n: int) -> None:
    raise ValueError("the kernel's twin failed")


bump = cuasync.Kernel(BUMP, "bump", emulate=_bump_twin)


class Path:
    """Which path launches take in a test: ``express`` (the core's or Python's), and the
    attempts of the path under test (whether each took the launch)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.express = name != "generic"
        self.attempts: list[bool] = []

    def check(self) -> None:
        """On the express run, every launch took it, where awaits use flag slots (with
        host callbacks it never can)."""
        if self.express:
            assert self.attempts, "no launch reached the express path"
            assert all(self.attempts) == get_hub().use_reactor, self.attempts


class _CoreSpy:
    """The hub's native core, recording whether each call took the launch."""

    def __init__(self, core: Any, attempts: list[bool]) -> None:
        self.core, self.attempts = core, attempts

    def launch(self, op: Any, stream: cuasync.Stream, mode: int, adapter: Any) -> Any:
        sent = self.core.launch(op, stream, mode, adapter)
        self.attempts.append(sent is not express.GENERIC)
        return sent


@pytest.fixture(params=["core", "express", "generic"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Path:
    chosen = Path(request.param)
    hub = get_hub()
    if chosen.name == "core":
        if hub.express is None:
            pytest.skip("the native module is not built: launches have no native core")
        monkeypatch.setattr(hub, "express", _CoreSpy(hub.express, chosen.attempts))
        return chosen
    monkeypatch.setattr(hub, "express", None)
    if not chosen.express:
        monkeypatch.setattr(express, "_enqueue", lambda op, stream, *spin: None)
        return chosen
    enqueue = express._enqueue

    def spy(op: Any, stream: cuasync.Stream, *spin: Any) -> Any:
        sent = enqueue(op, stream, *spin)
        chosen.attempts.append(sent is not None)
        return sent

    monkeypatch.setattr(express, "_enqueue", spy)
    return chosen


class _ReadOnly:
    """``t`` exported read-only through the CUDA Array Interface."""

    def __init__(self, t: cuasync.Tensor) -> None:
        self.__cuda_array_interface__ = {
            "shape": t.shape,
            "typestr": "<f4",
            "data": (t.ptr, True),
            "version": 3,
        }


def _in_flight() -> int:
    """Completions and gate words outstanding: flag slots, or host callbacks."""
    s = cuasync.stats()
    return s.slots_armed + s.callbacks_pending


def _completions(s: cuasync.Stats) -> int:
    return s.completed_inline + s.completed_reactor + s.completed_host_callback


async def test_an_awaited_launch_returns_its_output_and_settles_the_counters(
    anyio_backend: Any, baseline: Any, path: Path
) -> None:
    x = await cuasync.zeros((300,), dtype="float32")
    await bump[2, 256](x, 300)  # loaded, and the first launch's lazy set-up done
    before = cuasync.stats()
    out = await bump[2, 256](x, 300)
    after = cuasync.stats()
    assert out is x  # the non-const pointer argument
    assert _completions(after) - _completions(before) == 1
    assert after.slots_armed == before.slots_armed
    np.testing.assert_array_equal(await x.to_host(), np.full(300, 2, np.float32))
    path.check()


async def test_a_held_launch_parks_and_lands_when_released(
    anyio_backend: Any, baseline: Any, path: Path
) -> None:
    x = await cuasync.zeros((64,), dtype="float32")
    await bump[1, 64](x, 64)
    before = cuasync.stats()
    out = await await_held(lambda: bump[1, 64](x, 64))
    after = cuasync.stats()
    assert out is x
    assert after.completed_inline == before.completed_inline  # it could not land inline
    assert _completions(after) - _completions(before) == 1
    np.testing.assert_array_equal(await x.to_host(), np.full(64, 2, np.float32))
    path.check()


async def test_a_future_of_a_launch(anyio_backend: Any, baseline: Any, path: Path) -> None:
    s = cuasync.Device(0).new_stream()
    x = await cuasync.zeros((32,), dtype="float32")
    await bump[1, 32](x, 32)
    with ct.gate(s) as g:
        fut = bump[1, 32](x, 32).submit_on(s)
        assert fut.stream is s
        assert not fut.done()
        g.open()
        assert await fut is x
    assert fut.done() and fut.result() is x
    np.testing.assert_array_equal(await x.to_host(), np.full(32, 2, np.float32))
    path.check()


async def test_a_launch_on_another_stream_waits_for_the_tensors_writer(
    anyio_backend: Any, baseline: Any, path: Path
) -> None:
    # The access records order the launch after the upload that writes x on stream a:
    # held at a gate on a, the upload cannot have run when the launch on b does.
    a, b = cuasync.Device(0).new_stream(), cuasync.Device(0).new_stream()
    x = await cuasync.zeros((128,), dtype="float32")
    await bump[1, 128](x, 128)
    with ct.gate(a) as g:
        upload = cuasync.fill(x, 10.0).submit_on(a)
        with cuasync.use_policy(cuasync.SingleStream(b)):
            task_out: list[Any] = []

            async def launch() -> None:
                task_out.append(await bump[1, 128](x, 128))

            import anyio

            async with anyio.create_task_group() as tg:
                tg.start_soon(launch)
                await wait_until(lambda: _in_flight() >= 3 or bool(task_out))
                assert not task_out  # the gate's word, the fill's and the launch's: held
                g.open()
        await upload
    assert task_out == [x]
    np.testing.assert_array_equal(await x.to_host(), np.full(128, 11, np.float32))
    path.check()


async def test_a_cancelled_launch_keeps_its_tensor_until_it_lands(
    anyio_backend: Any, baseline: Any, path: Path
) -> None:
    import anyio

    s = cuasync.Device(0).new_stream()
    x = await cuasync.zeros((256,), dtype="float32")
    await bump[1, 256](x, 256)
    with ct.gate(s):
        with cuasync.use_policy(cuasync.SingleStream(s)):
            with anyio.move_on_after(0.01) as scope:
                await bump[1, 256](x, 256)
            assert scope.cancelled_caught
        assert not s.query()  # the launch is still held: it goes on after the cancel
    s.synchronize()
    np.testing.assert_array_equal(await x.to_host(), np.full(256, 2, np.float32))
    path.check()


async def test_what_the_express_path_leaves_to_the_generic_one(
    anyio_backend: Any, baseline: Any, path: Path
) -> None:
    # A thread already submitting, and a read-only tensor written to: the same errors.
    x = await cuasync.zeros((16,), dtype="float32")
    await bump[1, 16](x, 16)

    def inner(t: cuasync.Tensor) -> cuasync.DeviceOp[Any]:
        bump[1, 16](t, 16).submit()  # executing another op inside then()
        return cuasync.value(t)

    with pytest.raises(ReentrancyError):
        await cuasync.value(x).then(inner)
    readonly = cuasync.asarray(_ReadOnly(x))
    with pytest.raises(ArgumentError, match="read-only"):
        await bump[1, 16](readonly, 16)
    np.testing.assert_array_equal(await x.to_host(), np.ones(16, np.float32))
    if path.express:  # the warm-up launch only: the other two were left to the generic path
        assert path.attempts == [get_hub().use_reactor, False, False]


@pytest.mark.skipif(not ON_EMULATOR, reason="emulator only: a numpy twin raises there")
async def test_a_failing_twin_raises_from_the_await(
    anyio_backend: Any, baseline: Any, path: Path
) -> None:
    failing = cuasync.Kernel(BUMP, "bump", emulate=_failing_twin)
    x = await cuasync.zeros((8,), dtype="float32")
    with pytest.raises(KernelError, match="twin failed"):
        await failing[1, 8](x, 8)
    assert await bump[1, 8](x, 8) is x  # the stream goes on
    path.check()


def test_a_launch_run_with_sync(baseline: Any, path: Path) -> None:
    x = cuasync.zeros((40,), dtype="float32").sync()
    bump[1, 64](x, 40).sync()
    before = cuasync.stats()
    assert bump[1, 64](x, 40).sync() is x
    s = cuasync.Device(0).new_stream()
    assert bump[1, 64](x, 40).sync_on(s) is x  # ordered after the launches on another stream
    after = cuasync.stats()
    assert after.slots_armed == before.slots_armed
    np.testing.assert_array_equal(x.to_host().sync(), np.full(40, 3, np.float32))
    path.check()


def test_a_held_sync_returns_once_released(baseline: Any, path: Path, enqueued: list[str]) -> None:
    # Held at a gate past the spin, the blocking sync waits for the stream and still
    # returns the output.
    import threading

    s = cuasync.Device(0).new_stream()
    x = cuasync.zeros((16,), dtype="float32").sync()
    bump[1, 16](x, 16).sync_on(s)
    out: list[Any] = []
    with ct.gate(s) as g:
        mark = len(enqueued)
        worker = threading.Thread(target=lambda: out.append(bump[1, 16](x, 16).sync_on(s)))
        worker.start()
        deadline = time.monotonic() + 10
        while "launch_kernel" not in enqueued[mark:]:
            assert time.monotonic() < deadline, "the launch was never submitted"
            time.sleep(0.001)  # polling a condition with a deadline
        assert not out
        g.open()
        worker.join(10)
    assert out == [x]
    np.testing.assert_array_equal(x.to_host().sync(), np.full(16, 2, np.float32))
    path.check()


async def test_a_launch_the_driver_refuses_raises_from_its_await_and_leaks_nothing(
    anyio_backend: Any, baseline: Any, path: Path
) -> None:
    x = await cuasync.zeros((32,), dtype="float32")
    await bump[1, 32](x, 32)
    with pytest.raises(cuasync.errors.DriverError) as caught:
        await bump[1, 32, 64 * 1024](x, 32)  # more dynamic shared memory than allowed
    assert caught.value.code == 1  # CUDA_ERROR_INVALID_VALUE
    del caught
    np.testing.assert_array_equal(await x.to_host(), np.ones(32, np.float32))


class _NativeLaunch:
    """A backend's native launch (``Backend.fast_launch``) for the express path: it
    records each call, then launches through the backend and writes the flag as the
    native call does; ``rc`` makes it report a failure instead (nothing launched)."""

    def __init__(self, rc: int = 0) -> None:
        self.rc = rc
        self.calls: list[tuple[Any, ...]] = []
        self.failed: list[int] = []

    def __call__(self, *args: Any) -> int:
        *head, params, address, gen = args  # (tensors as their addresses: nothing kept)
        given = [a.ptr if isinstance(a, cuasync.Tensor) else a for a in params]
        self.calls.append((*head, given, address, gen))
        return self.rc

    def launch_failed(self, rc: int, *args: Any) -> None:
        self.failed.append(rc)
        raise cuasync.errors.DriverError(rc, "cuLaunchKernel")


@pytest.fixture
def native_launch(monkeypatch: pytest.MonkeyPatch) -> _NativeLaunch:
    """The express path's native launch, as a CUDA backend with the native module has
    it, on whichever backend runs: the kernel's ``fast`` and the backend's ``current``."""
    backend = get_backend()
    fake = _NativeLaunch()

    def launch(*args: Any) -> int:
        _, gx, gy, gz, bx, by, bz, shared, stream, layout, params, address, gen = args
        rc = fake(*args)
        if rc == 0:  # what the native call does: the launch, then the flag
            backend_launch(
                layout, (gx, gy, gz), (bx, by, bz), shared, stream, params, lambda: [],
                address, gen,
            )  # fmt: skip
        return rc

    backend_launch = backend.launch_kernel
    current = type("Current", (), {"ordinal": 0})()
    monkeypatch.setattr(backend, "fast_launch", launch, raising=False)
    monkeypatch.setattr(backend, "current", current, raising=False)
    monkeypatch.setattr(backend, "launch_failed", fake.launch_failed, raising=False)
    prepared = bump._prepare(cuasync.Device(0))
    # (the native call gets the kernel's handle and layout; here the layout is the kernel)
    monkeypatch.setattr(prepared, "fast", (prepared.handle, prepared))
    return fake


def _needs_flag_slots() -> None:
    if not get_hub().use_reactor:
        pytest.skip("every await completes through a host callback: no launch is express")


@pytest.mark.parametrize("anyio_backend", ["asyncio"], indirect=True)
async def test_the_backends_native_launch_takes_the_express_launch(
    anyio_backend: Any, baseline: Any, native_launch: _NativeLaunch
) -> None:
    x = await cuasync.zeros((300,), dtype="float32")
    _needs_flag_slots()
    stream = cuasync.Device(0).new_stream()
    await bump[2, 256](x, 300).submit_on(stream)
    assert await bump[2, 256](x, 300) is x
    assert len(native_launch.calls) == 2
    handle, *dims, shared, on, layout, args, address, gen = native_launch.calls[0]
    prepared = bump._prepare(cuasync.Device(0))
    assert (handle, layout) == prepared.fast  # what the backend prepared for it
    assert dims == [2, 1, 1, 256, 1, 1] and shared == 0 and on == stream.handle
    assert args == [x.ptr, 300] and address and gen
    np.testing.assert_array_equal(await x.to_host(), np.full(300, 2, np.float32))


@pytest.mark.parametrize("anyio_backend", ["asyncio"], indirect=True)
async def test_a_failed_native_launch_raises_from_its_await_and_leaks_nothing(
    anyio_backend: Any, baseline: Any, native_launch: _NativeLaunch
) -> None:
    x = await cuasync.zeros((32,), dtype="float32")
    _needs_flag_slots()
    native_launch.rc = 1
    with pytest.raises(cuasync.errors.DriverError):
        await bump[1, 32](x, 32)
    with pytest.raises(cuasync.errors.DriverError):
        bump[1, 32](x, 32).submit_on(cuasync.Device(0).new_stream())
    assert native_launch.failed == [1, 1]
    native_launch.rc = 0
    assert await bump[1, 32](x, 32) is x
    np.testing.assert_array_equal(await x.to_host(), np.ones(32, np.float32))
