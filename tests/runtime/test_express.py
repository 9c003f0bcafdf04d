"""The native fast path of kernel launches behaves as the generic path does.

``await kernel[grid, block](...)`` and ``.submit_on(stream)`` of a launch go through the
native module's express core (``_reactor.Express``, ``cuasync._core.express``) when they
can. Each test runs twice (the ``path`` fixture): ``native``, and ``generic``, set up
in-process as ``CUASYNC_NATIVE=off`` sets it up (every launch then takes
``DeviceOp._start`` and ``completion.wait``). It asserts what a user sees: outputs,
counters, ordering across streams, errors, cancellation, nothing leaked. Gates hold the
work, so they run on a GPU too.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
from helpers import NATIVE_ON, ON_EMULATOR, await_held, generic_path, run_script, wait_until

import cuasync
import cuasync.testing as ct
from cuasync._backends import get_backend
from cuasync._backends._params import _layout
from cuasync._core import express
from cuasync._core.completion import get_hub
from cuasync._native import NATIVE, PROCESS
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


@pytest.fixture(autouse=True, scope="module")
def _bump_prepared() -> None:
    """These tests are about launches of a prepared kernel: the first await of one not
    yet prepared is declined by the express paths (it is compiled and loaded off the
    loop first: tests/runtime/test_first_use.py)."""
    for ordinal in range(cuasync.device_count()):
        bump.compile(ordinal)
        swap.compile(ordinal)


#: Why a test of the native core skips where a run has none.
NO_CORE = "the native core is off (CUASYNC_NATIVE=off): every launch takes the generic path"


class Path:
    """Which path launches take in a test (``native`` or ``generic``), and the native
    core's counters, which show whether each launch took it."""

    def __init__(self, name: str) -> None:
        self.name = name
        hub = get_hub()
        self.core: Any = hub._core  # (the hub's core, also while a generic run hides it)
        self.counts = (0, 0) if self.core is None else (self.core.launches, self.core.declined)

    def check(self) -> None:
        """On the native run, every launch took the core, where awaits use flag slots
        (with host callbacks it never can); on the generic run, none did."""
        if self.core is None:
            return
        reactor = get_hub().use_reactor
        launches, declined = self.counts
        if self.name == "native":
            assert self.core.launches > launches or not reactor, "no launch took the core"
            assert (self.core.declined == declined) == reactor, "the core declined a launch"
        else:
            assert self.core.launches == launches, "a launch took the native core"


@pytest.fixture(params=["native", "generic"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Path:
    chosen = Path(request.param)
    if chosen.name == "native" and get_hub().express is None:
        pytest.skip(NO_CORE)
    if chosen.name == "generic":
        generic_path(monkeypatch, bump, swap)
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
    return s.completed_inline + s.completed_reactor + s.early_wakes + s.completed_host_callback


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
    await cuasync.wait(s)
    np.testing.assert_array_equal(await x.to_host(), np.full(256, 2, np.float32))
    path.check()


async def test_what_the_express_path_leaves_to_the_generic_one(
    anyio_backend: Any, baseline: Any, path: Path
) -> None:
    # A thread already submitting, and a read-only tensor written to: the same errors.
    x = await cuasync.zeros((16,), dtype="float32")
    if path.core is not None:  # (counted from here: zeros is the core's library call)
        path.counts = (path.core.launches, path.core.declined)
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
    # the warm-up launch only: the other two were left to the generic path
    reactor = get_hub().use_reactor
    if path.core is not None:
        launches, declined = path.counts
        taken = (path.core.launches - launches, path.core.declined - declined)
        assert taken == (((1, 2) if reactor else (0, 3)) if path.name == "native" else (0, 0))


@pytest.mark.skipif(not ON_EMULATOR, reason="emulator only: a numpy twin raises there")
async def test_a_failing_twin_raises_from_the_await(
    anyio_backend: Any, baseline: Any, path: Path
) -> None:
    failing = cuasync.Kernel(BUMP, "bump", emulate=_failing_twin)
    failing.compile()
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


def test_a_process_first_launch_takes_the_express_path(baseline: Any, path: Path) -> None:
    # Whether the device takes stream memory ops is asked on a process's first
    # submission: the launch that asks is taken too, not left to the generic path.
    x = cuasync.zeros((8,), dtype="float32").sync()
    memops = get_hub()._memops
    known = dict(memops)
    memops.clear()  # as in a fresh process
    try:
        assert bump[1, 32](x, 8).sync() is x
    finally:
        memops.update(known)
    assert memops == known
    np.testing.assert_array_equal(x.to_host().sync(), np.ones(8, np.float32))
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
    current = NATIVE.CurrentOrdinal()  # (the record the core reads)
    current.ordinal = 0
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


def _needs_core() -> None:
    if get_hub().express is None:
        pytest.skip(NO_CORE)


@pytest.mark.parametrize("anyio_backend", ["asyncio"], indirect=True)
async def test_the_backends_native_launch_takes_the_express_launch(
    anyio_backend: Any, baseline: Any, native_launch: _NativeLaunch
) -> None:
    x = await cuasync.zeros((300,), dtype="float32")
    _needs_flag_slots()
    _needs_core()  # (the generic path launches through backend.launch_kernel)
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
    _needs_core()
    native_launch.rc = 1
    with pytest.raises(cuasync.errors.DriverError):
        await bump[1, 32](x, 32)
    with pytest.raises(cuasync.errors.DriverError):
        bump[1, 32](x, 32).submit_on(cuasync.Device(0).new_stream())
    assert native_launch.failed == [1, 1]
    native_launch.rc = 0
    assert await bump[1, 32](x, 32) is x
    np.testing.assert_array_equal(await x.to_host(), np.ones(32, np.float32))


class _StubDriver:
    """A driver table of C-callable stubs for the native module (``set_entry_points``):
    ``cuLaunchKernel`` records its configuration and its packed parameters (bump's: a
    pointer and an int) and returns ``rc``; ``cuStreamWriteValue32`` writes the flag."""

    def __init__(self) -> None:
        import ctypes

        self.rc = 0
        self.launches: list[tuple[Any, ...]] = []
        u32, u64, ptr = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_void_p
        launch_t = ctypes.CFUNCTYPE(ctypes.c_int, ptr, *[u32] * 7, ptr, ptr, ptr)
        write_t = ctypes.CFUNCTYPE(ctypes.c_int, ptr, u64, u32, u32)

        def launch(f: int, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, shared: int,
                   stream: int, params: int, extra: int) -> int:  # fmt: skip
            slots = (u64 * 2).from_address(params)
            pointer = u64.from_address(slots[0]).value
            n = ctypes.c_int32.from_address(slots[1]).value
            self.launches.append((f, (gx, gy, gz), (bx, by, bz), shared, stream, pointer, n))
            return self.rc

        def write(stream: int, address: int, value: int, flags: int) -> int:
            u32.from_address(address).value = value
            return 0

        self.launch, self.write = launch_t(launch), write_t(write)
        cast = ctypes.cast
        self.entry = {
            "launch_kernel": cast(self.launch, ptr).value,
            "write_value32": cast(self.write, ptr).value,
        }


@pytest.fixture
def stub_driver(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The native core's own launch (packed and made in C) against :class:`_StubDriver`:
    the backend's ``fast_launch`` is the native module's ``launch_packed``, bump has a
    handle and a layout, and ``current`` says device 0."""
    if not ON_EMULATOR:
        pytest.skip("on a GPU every launch test takes this path with the driver's entry points")
    hub = get_hub()
    if hub.express is None:
        pytest.skip(NO_CORE)
    native = hub.native
    stub = _StubDriver()
    prepared = bump._prepare(cuasync.Device(0))
    layout = _layout(["Q", "i"], [0])  # bump(float* x, int n)
    monkeypatch.setattr(prepared, "fast", (0xF00D, layout))
    monkeypatch.setattr(get_backend(), "fast_launch", native.launch_packed, raising=False)
    current = NATIVE.CurrentOrdinal()  # (the record the core reads)
    current.ordinal = 0
    monkeypatch.setattr(get_backend(), "current", current, raising=False)
    native.set_entry_points(**stub.entry)
    yield stub
    native.set_entry_points()  # never leave dangling callback pointers behind


@pytest.mark.parametrize("anyio_backend", ["asyncio"], indirect=True)
async def test_the_native_core_packs_launches_and_settles_them_itself(
    anyio_backend: Any, baseline: Any, stub_driver: Any
) -> None:
    x = await cuasync.zeros((300,), dtype="float32")
    _needs_flag_slots()
    core = get_hub().express
    stream = cuasync.Device(0).new_stream()
    before, native_before = cuasync.stats(), core.native_launches
    with cuasync.use_policy(cuasync.SingleStream(stream)):
        assert await bump[2, 256](x, 300) is x  # (nothing runs: the stub only records)
        assert await bump[2, 256](x[4:], 296) is not x  # a view: its own address
    assert bump[1, 32](x, 7).sync_on(stream, allow_in_loop=True) is x
    await bump[1, 32](x, 8).submit_on(stream)
    after = cuasync.stats()
    assert core.native_launches - native_before == 4
    assert [launch[1:] for launch in stub_driver.launches] == [
        ((2, 1, 1), (256, 1, 1), 0, stream.handle, x.ptr, 300),
        ((2, 1, 1), (256, 1, 1), 0, stream.handle, x.ptr + 16, 296),
        ((1, 1, 1), (32, 1, 1), 0, stream.handle, x.ptr, 7),
        ((1, 1, 1), (32, 1, 1), 0, stream.handle, x.ptr, 8),
    ]
    assert {launch[0] for launch in stub_driver.launches} == {0xF00D}
    assert after.completed_inline - before.completed_inline >= 3  # the flag was there at once
    assert after.slots_armed == before.slots_armed
    assert x._alloc._write == (stream, stream._submitted)  # its access recorded


@pytest.mark.parametrize("anyio_backend", ["asyncio"], indirect=True)
async def test_a_native_launch_the_driver_refuses_raises_and_leaks_nothing(
    anyio_backend: Any, baseline: Any, stub_driver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = await cuasync.zeros((32,), dtype="float32")
    _needs_flag_slots()
    failed: list[int] = []

    def launch_failed(rc: int, *args: Any) -> None:
        failed.append(rc)
        raise cuasync.errors.DriverError(rc, "cuLaunchKernel")

    monkeypatch.setattr(get_backend(), "launch_failed", launch_failed, raising=False)
    stub_driver.rc = 700  # CUDA_ERROR_ILLEGAL_ADDRESS
    slots = cuasync.stats().slots_armed
    with pytest.raises(cuasync.errors.DriverError):
        await bump[1, 32](x, 32)
    with pytest.raises(cuasync.errors.DriverError):
        bump[1, 32](x, 32).sync_on(cuasync.Device(0).new_stream(), allow_in_loop=True)
    assert failed == [700, 700]
    await wait_until(lambda: cuasync.stats().slots_armed == slots)
    stub_driver.rc = 0
    assert await bump[1, 32](x, 32) is x


SWAP = r"""
extern "C" __global__ void swap(float* a, float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float t = a[i]; a[i] = b[i]; b[i] = t; }
}
"""


def _swap_twin(a: Any, b: Any, n: int) -> None:
    a[:n], b[:n] = b[:n].copy(), a[:n].copy()


swap = cuasync.Kernel(SWAP, "swap", emulate=_swap_twin)


def _native_await() -> Any:
    awaiter = PROCESS.launch_await  # (what every launch op's __await__ calls)
    _needs_core()
    return awaiter


async def test_the_native_await_returns_the_output_of_work_that_landed(
    anyio_backend: Any, baseline: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    awaiter = _native_await()
    _needs_flag_slots()
    a = await cuasync.from_host(np.arange(4, dtype=np.float32))
    b = await cuasync.zeros((4,), dtype="float32")
    await swap[1, 32](a, b, 4)
    monkeypatch.setattr(get_hub(), "spin_budget_us", 2_000_000)  # every await lands in it
    inline, before = awaiter.inline_awaits, cuasync.stats()
    with cuasync.use_policy(cuasync.SingleStream(cuasync.Device(0).new_stream())):
        for _ in range(20):
            out = await swap[1, 32](a, b, 4)
            assert type(out) is tuple and out[0] is a and out[1] is b  # several: a tuple
    after = cuasync.stats()
    assert awaiter.inline_awaits - inline == 20  # each returned from C, no Python frame
    assert after.completed_inline - before.completed_inline == 20
    assert after.slots_armed == before.slots_armed
    # 21 swaps in all: swapped
    np.testing.assert_array_equal(await a.to_host(), np.zeros(4, np.float32))
    np.testing.assert_array_equal(await b.to_host(), np.arange(4, dtype=np.float32))


async def test_the_native_await_refuses_an_op_awaited_twice(
    anyio_backend: Any, baseline: Any
) -> None:
    _native_await()
    x = await cuasync.zeros((8,), dtype="float32")
    op = bump[1, 32](x, 8)
    assert await op is x
    with pytest.raises(cuasync.errors.OpConsumedError):
        await op

    class Delegating:  # a library's awaitable that hands over an op's __await__
        def __init__(self, op: cuasync.DeviceOp[Any]) -> None:
            self.iterator = op.__await__()

        def __await__(self) -> Any:
            return self.iterator

    assert await Delegating(bump[1, 32](x, 8)) is x
    np.testing.assert_array_equal(await x.to_host(), np.full(8, 2, np.float32))


async def test_the_native_await_submits_nothing_until_its_first_step(
    anyio_backend: Any, baseline: Any
) -> None:
    import gc

    _native_await()
    x = await cuasync.zeros((8,), dtype="float32")
    op = bump[1, 32](x, 8)
    iterator = op.__await__()  # as a generator's: nothing runs yet
    assert not op._consumed
    with pytest.warns(RuntimeWarning, match="never executed"):
        del iterator, op
        gc.collect()
    np.testing.assert_array_equal(await x.to_host(), np.zeros(8, np.float32))


@pytest.mark.parametrize("anyio_backend", ["asyncio"], indirect=True)
async def test_a_parked_native_await_that_is_closed_lets_its_work_land_and_frees_it(
    anyio_backend: Any, baseline: Any
) -> None:
    _native_await()
    _needs_flag_slots()
    x = await cuasync.zeros((8,), dtype="float32")
    await bump[1, 32](x, 8)  # loaded before the gate
    stream = cuasync.Device(0).new_stream()
    before = cuasync.stats().slots_armed
    with ct.gate(stream):
        armed = cuasync.stats().slots_armed  # (the gate's own word among them)
        with cuasync.use_policy(cuasync.SingleStream(stream)):
            iterator = bump[1, 32](x, 8).__await__()
            iterator.send(None)  # submitted, held by the gate: the await parks (yields)
        iterator.close()  # dropped by its awaiter, as a cancelled task drops it
        assert cuasync.stats().slots_armed == armed + 1  # the work still holds its slot
    await wait_until(lambda: cuasync.stats().slots_armed == before)
    np.testing.assert_array_equal(await x.to_host(), np.full(8, 2, np.float32))


@pytest.mark.parametrize("anyio_backend", ["asyncio"], indirect=True)
async def test_a_bad_spin_budget_raises_before_anything_is_submitted(
    anyio_backend: Any, baseline: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _native_await()
    _needs_flag_slots()
    x = await cuasync.zeros((8,), dtype="float32")
    await bump[1, 32](x, 8)
    armed = cuasync.stats().slots_armed
    monkeypatch.setattr(get_hub(), "spin_budget_us", 5.0)  # not an int
    with pytest.raises(TypeError, match="spin_budget_us"):
        await bump[1, 32](x, 8)
    monkeypatch.undo()
    assert cuasync.stats().slots_armed == armed  # no slot taken
    np.testing.assert_array_equal(await x.to_host(), np.ones(8, np.float32))


@pytest.mark.parametrize("anyio_backend", ["asyncio"], indirect=True)
async def test_the_core_sees_a_changed_setting_at_the_next_launch(
    anyio_backend: Any, baseline: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What every launch reads of the hub and the backend are fields of their native base
    # types (HubCore, BackendCore): a change to one, or to the hub's core, is seen by the
    # next launch.
    _native_await()
    _needs_flag_slots()
    hub = get_hub()
    core = hub.express
    x = await cuasync.zeros((8,), dtype="float32")
    for _ in range(3):
        await bump[1, 32](x, 8)
    declined = core.declined
    with monkeypatch.context() as m:
        m.setattr(get_backend(), "fault_seen", True)
        await bump[1, 32](x, 8)
        assert core.declined == declined + 1  # seen: the generic path took the launch
    await bump[1, 32](x, 8)
    assert core.declined == declined + 1  # and seen gone
    launches = core.launches
    with monkeypatch.context() as m:
        m.setattr(hub, "express", None)  # no core: the await takes the generic path
        await bump[1, 32](x, 8)
        assert core.launches == launches
    await bump[1, 32](x, 8)
    assert core.launches == launches + 1
    np.testing.assert_array_equal(await x.to_host(), np.full(8, 7, np.float32))


def test_the_native_await_refuses_to_be_closed_from_inside_its_own_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A generator that re-enters its own close() gets "already executing"; so must the
    # native await, whose close() would otherwise free the generator that is running.
    awaiter = _native_await()
    seen: list[BaseException] = []
    holder: list[Any] = []

    def fallback(op: Any) -> Any:
        def body() -> Any:
            try:
                holder[0].close()
            except ValueError as exc:
                seen.append(exc)
            return "done"
            yield  # (a generator)

        return body()

    native = get_hub().native
    mine = native.LaunchAwait(
        fallback=fallback, finish=fallback, get_running_loop=lambda: None,
        running_adapter=lambda: None, policy=express._policy, stream_for=lambda device: None,
        current_tasks=None,
    )  # fmt: skip
    monkeypatch.setattr(get_hub(), "express", None)  # no core: the fallback takes the op
    holder.append(mine(object()))
    with pytest.raises(StopIteration) as stop:
        holder[0].send(None)
    assert stop.value.value == "done"
    assert [str(e) for e in seen] == ["generator already executing"]
    assert awaiter is not mine


async def test_a_future_of_a_launch_is_made_as_the_generic_path_makes_it(
    anyio_backend: Any, baseline: Any, path: Path
) -> None:
    # The native core makes the future's Completion itself (express._completion_of in
    # C); what the rest of cuasync reads from it must be what the generic path gives.
    _needs_flag_slots()
    s = cuasync.Device(0).new_stream()
    x = await cuasync.zeros((32,), dtype="float32")
    y = await cuasync.zeros((32,), dtype="float32")
    await swap[1, 32](x, y, 32)
    with ct.gate(s) as g:
        t0 = time.monotonic()
        fut = swap[1, 32](x, y, 32).submit_on(s)
        comp = fut._comp
        assert comp.stream is s and comp.device is s.device and comp.seq == s._submitted
        assert comp.slot >= 0 and get_hub().slots.completion(comp.slot) is comp
        assert comp.gen == get_hub().slots.generation(comp.slot) and comp.address > 0
        assert t0 <= comp.armed_at <= time.monotonic()
        ctx = comp.ctx
        assert ctx is not None
        if path.name == "native":
            assert ctx.retained == [x._alloc, y._alloc]  # kept until it lands
            assert ctx.errors == [] and ctx.seq == comp.seq
        g.open()
        out = await fut
    assert out[0] is x and out[1] is y and fut.result() is out
    assert get_hub().slots.completion(comp.slot) is not comp and comp.ctx is None  # released
    path.check()


async def test_a_future_of_a_consumed_op_or_on_a_bad_stream_raises(
    anyio_backend: Any, baseline: Any, path: Path
) -> None:
    x = await cuasync.zeros((8,), dtype="float32")
    op = bump[1, 32](x, 8)
    with pytest.raises(ArgumentError, match="stream"):
        op.submit_on("stream 0")  # type: ignore[arg-type]
    assert not op._consumed  # refused before it was taken: it can still run
    assert await op.submit_on(cuasync.Device(0).new_stream()) is x
    with pytest.raises(cuasync.errors.OpConsumedError):
        op.submit_on(cuasync.Device(0).new_stream())
    with pytest.raises(cuasync.errors.OpConsumedError):
        op.submit()
    assert await bump[1, 32](x, 8).submit() is x
    np.testing.assert_array_equal(await x.to_host(), np.full(8, 2, np.float32))


@pytest.mark.parametrize("anyio_backend", ["asyncio"], indirect=True)
async def test_a_future_dropped_unawaited_lets_its_work_land_and_frees_it(
    anyio_backend: Any, baseline: Any, path: Path
) -> None:
    _needs_flag_slots()
    x = await cuasync.zeros((8,), dtype="float32")
    await bump[1, 32](x, 8)
    stream = cuasync.Device(0).new_stream()
    before = cuasync.stats().slots_armed
    with ct.gate(stream):
        fut = bump[1, 32](x, 8).submit_on(stream)
        assert not fut.done()
        del fut  # nobody will read it: the watcher finishes it once it lands
    await wait_until(lambda: cuasync.stats().slots_armed == before)
    np.testing.assert_array_equal(await x.to_host(), np.full(8, 2, np.float32))
    path.check()


async def test_an_await_runs_on_the_stream_its_policy_names_at_that_await(
    anyio_backend: Any, baseline: Any, path: Path
) -> None:
    # The native core reads a SingleStream's stream itself, each time (no Python call);
    # a policy of any other class, a SingleStream subclass included, is asked.
    device = cuasync.Device(0)
    a, b = device.new_stream(), device.new_stream()
    x = await cuasync.zeros((64,), dtype="float32")

    def counts() -> tuple[int, int]:
        return a._submitted, b._submitted

    policy = cuasync.SingleStream(a)
    with cuasync.use_policy(policy):
        before = counts()
        await bump[1, 64](x, 64)
        policy.stream = b  # (read again by the next await)
        await bump[1, 64](x, 64)
        assert np.subtract(counts(), before).tolist() == [1, 1]

    class Alternating(cuasync.SingleStream):
        def next_stream(self) -> cuasync.Stream:
            self.stream = b if self.stream is a else a
            return self.stream

    with cuasync.use_policy(Alternating(a)):
        before = counts()
        for _ in range(3):
            await bump[1, 64](x, 64)
        assert np.subtract(counts(), before).tolist() == [1, 2]
    np.testing.assert_array_equal(await x.to_host(), np.full(64, 5, np.float32))
    path.check()


def test_a_launch_without_tensors_runs_on_its_contexts_default_device() -> None:
    # A launch with no tensor runs on the default device of the context it is built in,
    # read in C where that Device is made already (else get_default_device makes it).
    out = run_script(
        """
        import cuasync
        from cuasync._core.device import Device

        k = cuasync.Kernel('extern "C" __global__ void nop() {}', "nop", emulate=lambda: None)
        if cuasync.device_count() < 2:
            print("one device")
        else:
            made = 1 in Device._instances
            with cuasync.use_device(1):
                op = k[1, 32]()
            first = op.device is Device(1)
            op.sync()
            op = k[1, 32]()
            print(made, first, op.device is Device(0), type(k[1, 32]).__name__)
            op.sync()
        """
    )
    if out.stdout.strip() == "one device":
        pytest.skip("needs two devices (CUASYNC_EMU_DEVICES=2 on the emulator)")
    made, first, default, launcher = out.stdout.split()
    assert (made, first, default) == ("False", "True", "True")
    native = get_hub().native is not None and NATIVE_ON
    assert launcher == ("Launcher" if native else "function")


def test_cuasync_native_off_takes_the_generic_path_with_the_same_completion() -> None:
    # CUASYNC_NATIVE=off turns off the native fast path's entry points only: no core on
    # the hub, no native launcher, no native from_host builder; awaits still complete
    # through the flag slots (inline or the reactor), as with the native path.
    out = run_script(
        """
        import asyncio
        import numpy as np, cuasync
        from cuasync._transfers import copies as _copies
        from cuasync._core.completion import get_hub

        bump = cuasync.Kernel(
            'extern "C" __global__ void bump(float* x, int n) '
            '{ int i = threadIdx.x; if (i < n) x[i] += 1.0f; }',
            "bump", emulate=lambda x, n: x.__setitem__(slice(0, n), x[:n] + 1),
        )

        async def main():
            x = await cuasync.from_host(np.zeros(64, np.float32))
            for _ in range(3):
                await bump[1, 64](x, 64)
            return await x.to_host()

        host = asyncio.run(main())
        hub, s = get_hub(), cuasync.stats()
        print(hub.express is None, type(bump[1, 64]).__name__,
              _copies._build is None or _copies._build(np.ones(4, np.float32)) is None,
              hub.use_reactor == (s.completed_host_callback == 0), int(host[0]))
        """,
        CUASYNC_NATIVE="off",
    ).stdout
    assert out.split() == ["True", "function", "True", "True", "3"], out


def test_the_cores_look_reads_only_a_claimed_slots_word_and_settles_what_landed() -> None:
    """``Express.look`` (a watched op's look): not landed until its word reaches the
    generation; landed, it settles inline (the stream's completed number, the slot back on
    the free list, the counter); a slot not claimed with that generation is refused
    rather than read (no address comes from Python)."""
    hub = get_hub()
    _needs_flag_slots()
    _needs_core()
    core = hub.express
    stream = cuasync.Device(0).new_stream()
    slot, gen, address = hub.slots.claim()
    settled = False
    try:
        seq = stream._completed + 1_000
        assert core.look(stream, slot, gen, seq, -1) == 0  # (its word has not reached gen)
        with pytest.raises(ValueError, match="not claimed"):
            core.look(stream, slot, gen + 1, seq, -1)
        before = core.completed_inline
        hub.native.store32(address, gen)  # (as the GPU's flag write would)
        settled = core.look(stream, slot, gen, seq, -1) == 1
        assert settled
        assert core.completed_inline == before + 1
        assert stream._completed == seq
        with pytest.raises(ValueError, match="not claimed"):  # (released: not read again)
            core.look(stream, slot, gen, seq, -1)
    finally:
        if not settled:
            hub.slots.release(slot)
