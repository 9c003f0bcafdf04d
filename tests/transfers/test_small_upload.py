"""A small ``from_host`` behaves the same through the native core and the generic path.

``cuasync.from_host`` of at most ``SMALL_MAX`` bytes takes the native module's core
(``Express.upload``, through ``cuasync._small_upload``) when it can. Each test runs twice
(the ``path`` fixture): ``native``, and ``generic``, set up in-process as
``CUASYNC_NATIVE=off`` sets it up. It asserts what a user sees: the values, the array
read at submission, counters, a held upload parking and landing, futures, cancellation
keeping the pinned block until the copy lands, a refused copy raising and leaking
nothing. Gates hold the work, so they run on a GPU too.
"""

from __future__ import annotations

from typing import Any

import anyio
import numpy as np
import pytest
from helpers import await_held, generic_path, run_script, wait_until

import cuasync
import cuasync.testing as ct
from cuasync import _small_upload
from cuasync._backends import get_backend
from cuasync._core.completion import get_hub
from cuasync._native import PROCESS
from cuasync._transfers.staging import staging_pool
from cuasync.errors import DriverError

pytestmark = pytest.mark.anyio


#: Why a test of the native core skips where a run has none.
NO_CORE = "the native core is off (CUASYNC_NATIVE=off): every upload takes the generic path"


class Path:
    """Which path uploads take in a test (``native``: the native module's
    ``Express.upload``; ``generic``), and the core's counter, which shows whether
    uploads took it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.core: Any = get_hub()._core  # (also while a generic run hides it)
        self.uploads = 0 if self.core is None else self.core.uploads

    def check(self, taken: bool = True, core: bool = True) -> None:
        """On the native run, small uploads took the core (where awaits use flag slots);
        ``core=False``: a source the core leaves to the generic path (a strided one);
        ``taken=False``: none did. On the generic run, none did."""
        if self.core is None:
            return
        if self.name == "native" and taken and core and get_hub().use_reactor:
            assert self.core.uploads > self.uploads, "no upload took the native core"
        elif self.name == "generic" or not (taken and core):
            assert self.core.uploads == self.uploads, "an upload took the native core"


@pytest.fixture(params=["native", "generic"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Path:
    chosen = Path(request.param)
    if chosen.name == "native" and get_hub().express is None:
        pytest.skip(NO_CORE)
    if chosen.name == "generic":
        generic_path(monkeypatch)
    return chosen


def _completions(s: cuasync.Stats) -> int:
    return s.completed_inline + s.completed_reactor + s.early_wakes + s.completed_host_callback


def _pinned_in_use() -> int:
    return staging_pool().stats().bytes_in_use


SOURCES = [
    pytest.param(np.arange(1024, dtype=np.float32), id="1-d"),
    pytest.param(np.arange(60, dtype=np.int64).reshape(3, 4, 5), id="3-d"),
    pytest.param(np.arange(64, dtype=np.float64).reshape(8, 8)[:, ::3], id="strided"),
    pytest.param(np.array(7, dtype=np.int16), id="0-d"),
    pytest.param(np.ones(_small_upload.SMALL_MAX // 2, np.uint16), id="SMALL_MAX"),
]


@pytest.mark.parametrize("source", SOURCES)
async def test_a_small_upload_returns_the_array_and_settles_the_counters(
    anyio_backend: Any, baseline: Any, path: Path, source: np.ndarray
) -> None:
    await cuasync.from_host(source)  # the completion machinery set up
    before = cuasync.stats()
    t = await cuasync.from_host(source)
    after = cuasync.stats()
    assert t.shape == source.shape and t.dtype == source.dtype
    assert _completions(after) - _completions(before) == 1
    assert after.slots_armed == before.slots_armed
    np.testing.assert_array_equal(await t.to_host(), source)
    path.check(core=source.flags.c_contiguous)


def test_an_upload_is_live_memory_until_its_tensor_is_dropped(baseline: Any, path: Path) -> None:
    # The core makes the new tensor's allocation from the block cache itself: the device's
    # accounting is the same as Allocation()'s, up and down.
    device = cuasync.Device(0)
    s = device.new_stream()
    source = np.ones(1000, np.float32)
    cuasync.from_host(source).sync_on(s)  # (the machinery set up; a block cached on s)
    before = device.memory_stats()
    t = cuasync.from_host(source).sync_on(s)
    during = device.memory_stats()
    assert during.live_bytes == before.live_bytes + source.nbytes
    assert during.live_allocations == before.live_allocations + 1
    assert during.peak_live_bytes >= during.live_bytes
    np.testing.assert_array_equal(t.to_host().sync(), source)
    del t
    after = device.memory_stats()
    assert (after.live_bytes, after.live_allocations) == (
        before.live_bytes,
        before.live_allocations,
    )
    path.check()


def test_sync_and_sync_on(baseline: Any, path: Path) -> None:
    source = np.arange(100, dtype=np.int32)
    cuasync.from_host(source).sync()
    s = cuasync.Device(0).new_stream()
    for t in (cuasync.from_host(source).sync(), cuasync.from_host(source).sync_on(s)):
        np.testing.assert_array_equal(t.to_host().sync(), source)
    path.check()


async def test_a_held_upload_parks_and_lands_when_released(
    anyio_backend: Any, baseline: Any, path: Path
) -> None:
    source = np.arange(256, dtype=np.float32)
    await cuasync.from_host(source)
    before = cuasync.stats()
    t = await await_held(lambda: cuasync.from_host(source))
    after = cuasync.stats()
    assert after.completed_inline == before.completed_inline  # it could not land inline
    assert _completions(after) - _completions(before) == 1
    np.testing.assert_array_equal(await t.to_host(), source)
    path.check()


async def test_a_future_reads_the_array_at_submission(
    anyio_backend: Any, baseline: Any, path: Path
) -> None:
    s = cuasync.Device(0).new_stream()
    source = np.arange(512, dtype=np.float32)
    await cuasync.from_host(source)
    pinned = _pinned_in_use()
    with ct.gate(s) as g:
        fut = cuasync.from_host(source).submit_on(s)
        source[:] = -1  # after submission: the copy has its own (pinned) copy of it
        assert not fut.done()
        assert _pinned_in_use() > pinned  # the staging block is the copy's until it lands
        g.open()
        t = await fut
    np.testing.assert_array_equal(await t.to_host(), np.arange(512, dtype=np.float32))
    del fut
    # (eventually, not at once: with host callbacks the thread that finished to_host's
    # copy can still hold its completion, and with it the array over a pinned block, for
    # a moment after it woke this task)
    await wait_until(lambda: _pinned_in_use() == pinned)
    path.check()


async def test_a_cancelled_upload_keeps_its_block_until_it_lands(
    anyio_backend: Any, baseline: Any, path: Path
) -> None:
    s = cuasync.Device(0).new_stream()
    source = np.ones(2048, np.float32)
    await cuasync.from_host(source)
    pinned = _pinned_in_use()
    with ct.gate(s), cuasync.use_policy(cuasync.SingleStream(s)):
        with anyio.move_on_after(0.01) as scope:
            await cuasync.from_host(source)
        assert scope.cancelled_caught
        assert not s.query()  # held: the copy goes on after the cancel
        assert _pinned_in_use() > pinned
    await cuasync.wait(s)
    await cuasync.from_host(source)  # (lets the background watcher see it landed)
    await wait_until(lambda: _pinned_in_use() == pinned)
    path.check()


async def test_a_refused_copy_raises_and_leaks_nothing(
    anyio_backend: Any, baseline: Any, path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = np.ones(64, np.float32)
    await cuasync.from_host(source)
    pinned = _pinned_in_use()
    backend = get_backend()

    def refuse(*args: Any) -> None:
        raise DriverError(1, "cuMemcpyHtoDAsync")

    # (memcpy_htod_async in the instance's dict, and out of it afterwards: setattr would
    # leave the class's method there, bound; copy_and_write is the backend core's field,
    # which the native core calls when it is not the backend's own: set, then put back)
    with monkeypatch.context() as m:  # (undone here; the path's set-up stays)
        m.setitem(vars(backend), "memcpy_htod_async", refuse)
        m.setattr(backend, "copy_and_write", refuse)  # (the copy with its flag)
        with pytest.raises(DriverError) as caught:
            await cuasync.from_host(source)
        assert caught.value.call == "cuMemcpyHtoDAsync"
        del caught
    t = await cuasync.from_host(source)  # the stream goes on
    np.testing.assert_array_equal(await t.to_host(), source)
    del t
    await wait_until(lambda: _pinned_in_use() == pinned)
    path.check()


async def test_a_native_copy_the_driver_refuses_is_made_again_by_the_bindings(
    anyio_backend: Any, baseline: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cuda backend's copy_and_write makes the DMA and the flag write in one native
    # call; a failure is told apart (the copy: nothing enqueued; the write: the copy
    # is), and only what did not happen is made again, through the bindings. (The core
    # calls it where it cannot make the copy itself, and always for a copy_and_write set
    # on the backend that is not its own bound method, as here; the core's own copy is
    # the next test's.)
    import functools

    backend: Any = get_backend()
    if not getattr(backend, "_native_copy", False):
        pytest.skip("no native cuMemcpyHtoDAsync: the emulator's copies are Python's")
    if not get_hub().use_reactor:
        pytest.skip("every await completes through a host callback: no upload is express")
    if get_hub().express is None:
        pytest.skip(NO_CORE)
    own = functools.partial(type(backend)._copy_and_write, backend)  # (not a bound method)
    monkeypatch.setattr(backend, "copy_and_write", own)  # (the field back afterwards)
    real = backend._native
    calls: list[int] = []

    class Refusing:
        def __init__(self, rc: int) -> None:
            self.rc = rc

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def copy_and_write(self, dst: int, src: int, n: int, stream: int, *flag: int) -> int:
            calls.append(self.rc)
            if self.rc < 0:  # the copy made, its flag write refused
                backend.memcpy_htod_async(dst, src, n, stream)
            return self.rc

    for rc, values in ((1, [1.0, 2.0]), (-1, [3.0, 4.0])):
        source = np.array(values * 32, np.float32)
        monkeypatch.setattr(backend, "_native", Refusing(rc))
        t = await cuasync.from_host(source)
        monkeypatch.setattr(backend, "_native", real)
        np.testing.assert_array_equal(await t.to_host(), source)
    assert calls == [1, -1]


async def test_a_copy_the_native_core_makes_and_the_driver_refuses_is_made_again(
    anyio_backend: Any, baseline: Any
) -> None:
    # The native core makes the copy through the module's entry points; with a
    # cuMemcpyHtoDAsync that refuses, the backend's copy_and_write makes it again (its
    # own native call refused too, then through the bindings): the upload still lands.
    import ctypes

    backend: Any = get_backend()
    hub = get_hub()
    if not getattr(backend, "_native_copy", False) or hub.express is None:
        pytest.skip("no native cuMemcpyHtoDAsync: the emulator's copies are Python's")
    if not hub.use_reactor:
        pytest.skip("every await completes through a host callback: no upload is express")
    names = ["cuStreamWriteValue32", "cuLaunchKernel", "cuCtxSetCurrent", "cuStreamSynchronize"]
    entry = backend.driver_entry_points(names)
    copy_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t,
                              ctypes.c_void_p)  # fmt: skip
    refuse = copy_t(lambda *args: 1)  # CUDA_ERROR_INVALID_VALUE
    native = hub.native
    kwargs = {
        "write_value32": entry["cuStreamWriteValue32"],
        "launch_kernel": entry["cuLaunchKernel"],
        "ctx_set_current": entry.get("cuCtxSetCurrent", 0),
        "stream_synchronize": entry.get("cuStreamSynchronize", 0),
    }
    source = np.arange(256, dtype=np.float32)
    await cuasync.from_host(source)  # (the machinery set up)
    uploads = hub.express.uploads
    native.set_entry_points(**kwargs, memcpy_htod=ctypes.cast(refuse, ctypes.c_void_p).value)
    try:
        t = await cuasync.from_host(source)
    finally:
        native.set_entry_points(
            **kwargs, memcpy_htod=backend.driver_entry_points(["cuMemcpyHtoDAsync"])[
                "cuMemcpyHtoDAsync"]
        )  # fmt: skip
    assert hub.express.uploads == uploads + 1
    np.testing.assert_array_equal(await t.to_host(), source)


@pytest.fixture
def stub_copies(monkeypatch: pytest.MonkeyPatch) -> Any:
    """On the emulator, the native core's copy made through the module's stub driver
    table (its cuMemcpyHtoDAsync copies nothing, its flag write stores the word at
    once): every upload lands within its spin, so the core's own settling is what runs.
    On a GPU the other tests take that path with the driver's entry points."""
    from helpers import ON_EMULATOR

    hub = get_hub()
    if not ON_EMULATOR:
        pytest.skip("on a GPU the other tests take this path with the driver's entry points")
    if hub.express is None or not hub.use_reactor:
        pytest.skip("needs the native core (off with CUASYNC_NATIVE=off) and flag slots")
    backend: Any = hub.backend
    # (no test's replacement left behind: the backend's own, bound by Backend.__init__)
    assert getattr(backend.copy_and_write, "__self__", None) is backend
    monkeypatch.setattr(backend, "_native_copy", True, raising=False)
    monkeypatch.setattr(backend, "_host_remap", [], raising=False)
    current = hub.native.CurrentOrdinal()  # (as the cuda backend's: device 0 current)
    current.ordinal = 0
    monkeypatch.setattr(backend, "current", current, raising=False)
    hub.native.set_entry_points(**hub.native.stub_entry_points())
    try:
        yield hub.native
    finally:
        hub.native.set_entry_points()  # (the stub table off: the emulator copies in Python)


@pytest.mark.parametrize("anyio_backend", ["asyncio"], indirect=True)
async def test_uploads_that_land_within_the_spin_are_settled_by_the_core(
    anyio_backend: Any, baseline: Any, stub_copies: Any
) -> None:
    # An await or a blocking call whose copy landed within its spin gets the tensor back
    # from the core itself: its slot is free again, its staging block back for the next
    # upload, its completion counted inline, and nothing is left armed.
    hub, s = get_hub(), cuasync.Device(0).new_stream()
    source = np.ones(1024, np.float32)
    for _ in range(2):  # (the machinery set up, then a staging block kept by the core)
        cuasync.from_host(source).sync_on(s, allow_in_loop=True)
    core, free = hub.express, hub.slots.free
    before, copies = cuasync.stats(), stub_copies.stub_copies()
    uploads, reuses, settled = core.uploads, core.staging_reuses, core.completed_inline
    tensors = [cuasync.from_host(source).sync_on(s, allow_in_loop=True) for _ in range(20)]
    tensors += [await cuasync.from_host(source) for _ in range(20)]
    after = cuasync.stats()
    assert all(t.shape == source.shape and t.dtype == source.dtype for t in tensors)
    assert len({t.ptr for t in tensors}) == 40  # each its own allocation, all alive
    assert stub_copies.stub_copies() - copies == 40
    assert core.uploads - uploads == 40
    assert core.staging_reuses - reuses == 40  # one block, back after each copy landed
    assert after.completed_inline - before.completed_inline == 40
    assert core.completed_inline - settled == 40  # (by the core: no Python settled them)
    assert after.slots_armed == before.slots_armed and hub.slots.free == free
    assert core.staging_idle_bytes >= 4096


@pytest.mark.parametrize("anyio_backend", ["asyncio"], indirect=True)
async def test_a_copy_and_write_set_on_the_backend_makes_every_express_copy(
    anyio_backend: Any, baseline: Any, stub_copies: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The core makes a small upload's copy itself only with the backend's own
    # copy_and_write; a callable set on the backend in its place (here the same copy,
    # through Python) is what the core calls instead, for every upload it takes.
    import functools

    backend: Any = get_backend()
    core, calls = get_hub().express, []

    def recording(*args: int) -> None:
        calls.append(args[2])  # (the bytes copied)
        functools.partial(type(backend)._copy_and_write, backend)(*args)

    source = np.arange(1024, dtype=np.float32)
    await cuasync.from_host(source)  # (the machinery set up)
    uploads, copies = core.uploads, stub_copies.stub_copies()
    with monkeypatch.context() as m:
        m.setattr(backend, "copy_and_write", recording)
        tensors = [await cuasync.from_host(source + i) for i in range(3)]
    assert calls == [source.nbytes] * 3
    assert core.uploads - uploads == 3  # (the core took them: only the copy was Python's)
    assert stub_copies.stub_copies() == copies  # (none made natively)
    for i, t in enumerate(tensors):  # (the native stub copies nothing: these are Python's)
        np.testing.assert_array_equal(await t.to_host(), source + i)


def _slots(op: Any) -> dict[str, Any]:
    """Every ``__slots__`` entry of ``op``'s classes that is set, by name, and the same of
    its node and the node's pending work."""
    out: dict[str, Any] = {}
    for prefix, obj in (("op.", op), ("node.", op._node), ("work.", op._node.value)):
        for cls in type(obj).__mro__:
            for name in cls.__dict__.get("__slots__", ()):
                if name != "__weakref__" and hasattr(obj, name):
                    out[prefix + name] = getattr(obj, name)
    return out


def test_the_native_core_builds_from_hosts_op_as_python_does(
    baseline: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # from_host's common case is built by the native module (build_upload); the op
    # it makes has every slot Python's __init__ chain sets, with the same values, and runs
    # the same. What is not its case is left to Python (None).
    from cuasync import _config
    from cuasync._transfers import copies as _copies

    if get_hub().express is None:
        pytest.skip(NO_CORE)
    cuasync.from_host(np.ones(4, np.float32)).sync()  # (the default device made)
    _config.debug_origins()  # (asked once: the core builds only when it is False)
    build = _copies._build
    assert build is not None
    sources = [p.values[0] for p in SOURCES] + [np.ones((2, 0), np.int8)]
    for source in sources:
        native = build(source)
        monkeypatch.setattr(_copies, "_build", None)
        python = cuasync.from_host(source)  # type: ignore[arg-type]
        monkeypatch.undo()
        assert type(native) is type(python) is _small_upload.HostUploadOp
        mine, theirs = _slots(native), _slots(python)
        assert mine.keys() == theirs.keys()
        for name, value in theirs.items():
            if name == "op._node" or name == "node.value":
                continue  # (objects of their own: compared slot by slot)
            same = value is mine[name] or (
                type(value) is type(mine[name]) and bool(value == mine[name])
            )
            assert same, (name, mine[name], value)
        for op in (native, python):
            np.testing.assert_array_equal(op.sync().to_host().sync(), source)
    not_its_case = [
        [1.0, 2.0],  # (not an ndarray: Python converts it)
        np.ma.masked_array([1.0, 2.0]),  # (a subclass)
        np.array(["a", "b"]),  # (a dtype cuasync does not know: Python words the error)
    ]
    for array in not_its_case:
        assert build(array) is None
    monkeypatch.setattr(PROCESS, "debug_origins", True)
    assert build(np.ones(4, np.float32)) is None  # (Python records the origin)
    monkeypatch.setattr(PROCESS, "debug_origins", False)
    monkeypatch.setattr(get_hub(), "express", None)
    assert build(np.ones(4, np.float32)) is None  # (no native core to submit it)


async def test_larger_and_empty_sources_take_the_generic_path(
    anyio_backend: Any, baseline: Any, path: Path
) -> None:
    for source in (np.ones(_small_upload.SMALL_MAX + 1, np.uint8), np.ones((0, 3), np.float32)):
        t = await cuasync.from_host(source)
        np.testing.assert_array_equal(await t.to_host(), source)
    path.check(taken=False)


def test_a_process_that_only_blocks_takes_the_express_paths_too() -> None:
    # The native core needs to know the device takes flag writes; a process that never
    # awaits (no completion attached) asks on its first submission instead.
    out = run_script(
        """
        import numpy as np, cuasync
        from cuasync._core.completion import get_hub
        hub = get_hub()
        core = hub.express
        if not hub.use_reactor or core is None:
            print("no flag slots or no core")
            raise SystemExit
        t = cuasync.from_host(np.arange(256, dtype=np.float32)).sync()
        bump = cuasync.Kernel(
            'extern "C" __global__ void bump(float* x, int n) '
            '{ int i = threadIdx.x; if (i < n) x[i] += 1.0f; }',
            "bump", emulate=lambda x, n: x.__setitem__(slice(0, n), x[:n] + 1),
        )
        bump[1, 256](t, 256).sync()
        assert (t.to_host().sync() == np.arange(256) + 1).all()
        print("taken", core.uploads, core.launches, core.declined)
        """
    ).stdout
    assert "no flag slots or no core" in out or "taken 1 1 0" in out, out


async def test_an_output_that_cannot_be_made_after_the_copy_raises_and_leaks_nothing(
    anyio_backend: Any, baseline: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The copy is enqueued and its tensor cannot be made (out of memory): the error is
    # raised, and the copy's completion still frees its slot and its pinned block once
    # the copy lands (the core's path; a review found the slot lost there).
    from cuasync._tensor import Tensor

    hub = get_hub()
    if hub.express is None or not hub.use_reactor:
        pytest.skip(f"the native core's path (with flag slots) is what this checks; {NO_CORE}")
    source = np.ones(16, np.float32)
    await cuasync.from_host(source)  # (the machinery and the core set up)
    uploads = hub.express.uploads

    def no_memory(self: Any, *args: Any, **kwargs: Any) -> None:
        raise MemoryError("no memory for the tensor")

    op = cuasync.from_host(source)
    monkeypatch.setattr(Tensor, "__init__", no_memory)
    with pytest.raises(MemoryError):
        await op
    monkeypatch.undo()
    assert hub.express.uploads == uploads + 1  # (the core made the copy)
    del op
    ct.settle()  # (baseline: the slot and the memory are back)
