"""The native submitter (``cuasync._reactor.Submitter``) against stub driver entry points.

The submitter's thread makes queued launches and their flag writes. Here the entry
points are ctypes functions that record each call, so the thread's behaviour is checked
without a GPU: push order is launch order, parameters arrive packed as ``launch_packed``
packs them, each flag is written after its launch, failures land in ``status`` with the
flag written by the host, ``fence`` waits for what was queued before it, a full queue
or large parameters are refused (the caller launches), and ``close`` never hangs on a
launch stuck in the driver. (The cuda backend's use of it runs in the GPU suite.)
"""

from __future__ import annotations

import ctypes
import gc
import os
import struct
import threading
import time
from typing import Any

import numpy as np
import pytest

_reactor = pytest.importorskip("cuasync._reactor")

from cuasync._backends._params import ParamBlock  # noqa: E402
from cuasync._launch.signature import parse_params  # noqa: E402

TIMEOUT = 10.0

from test_reactor_native import LAUNCH_T, WRITE_T  # noqa: E402 (the driver's ABIs)

ONE_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)  # cuCtxSetCurrent, cuStreamSynchronize


class Driver:
    """Stub entry points that log every call in order, from whichever thread makes it.

    ``launch_rc``/``write_rc``: what the next calls return; ``hold``: a launch waits for
    it to be set (a launch stuck in the driver).
    """

    def __init__(self, slab: np.ndarray, param_sizes: list[int] | None = None) -> None:
        self.slab = slab
        self.calls: list[tuple[Any, ...]] = []
        self.launch_rc = 0
        self.write_rc = 0
        self.hold = threading.Event()
        self.hold.set()
        self.entered = threading.Event()  # a launch has reached the driver
        self.sizes = param_sizes or []

        @LAUNCH_T
        def launch(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra):
            self.entered.set()
            self.hold.wait(TIMEOUT)
            values = []
            if params:
                pointers = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
                for i, size in enumerate(self.sizes):
                    values.append(ctypes.string_at(pointers[i], size))
            self.calls.append(("launch", f, (gx, gy, gz), (bx, by, bz), shmem, stream, values))
            return self.launch_rc

        @WRITE_T
        def write(stream, address, value, flags):
            self.calls.append(("write", stream, address, value))
            if self.write_rc:
                return self.write_rc
            ctypes.c_uint32.from_address(address).value = value
            return 0

        @ONE_T
        def ctx_set(ctx):
            self.calls.append(("ctx", ctx))
            return 0

        @ONE_T
        def sync(stream):
            self.calls.append(("sync", stream))
            return 0

        self._keep = (launch, write, ctx_set, sync)

        def address(fn: Any) -> int:
            value = ctypes.cast(fn, ctypes.c_void_p).value
            assert value is not None
            return value

        _reactor.set_entry_points(
            launch_kernel=address(launch),
            write_value32=address(write),
            ctx_set_current=address(ctx_set),
            stream_synchronize=address(sync),
        )

    def of(self, kind: str) -> list[tuple[Any, ...]]:
        return [c for c in self.calls if c[0] == kind]


@pytest.fixture
def rig() -> Any:
    """A slab, its reactor, stub entry points and a submitter made over them."""
    made: list[Any] = []

    def make(n: int = 64, **kw: Any) -> tuple[Any, Driver, np.ndarray]:
        slab = np.zeros(n, np.uint32)
        reactor = _reactor.Reactor(slab.ctypes.data, n, stale_ns=0)
        driver = Driver(slab, kw.pop("param_sizes", None))
        sub = _reactor.Submitter(reactor, **kw)
        made.append((sub, reactor, slab, driver))
        return sub, driver, slab

    yield make
    for sub, reactor, _, driver in made:
        driver.hold.set()
        assert sub.close(TIMEOUT)
        reactor.close()
    gc.collect()
    _restore_entry_points()


def _restore_entry_points() -> None:
    """No stub left behind: the cuda backend gets its real entry points back."""
    _reactor.set_entry_points()
    from cuasync._backends import get_backend

    backend: Any = get_backend()
    if hasattr(backend, "_native_entry_points"):
        backend._native = backend._native_entry_points()


_CTYPES = {"Q": "float*", "i": "int", "f": "float", "d": "double", "?": "bool", "h": "short"}


def _layout(*codes: str) -> tuple[bytes, list[int]]:
    """The launch_packed layout of a kernel taking these struct codes, and their sizes."""
    signature = ", ".join(f"{_CTYPES[c]} p{i}" for i, c in enumerate(codes))
    source = f'extern "C" __global__ void k({signature}) {{}}'
    layout = ParamBlock(parse_params(source, "k")).layout
    assert layout is not None
    return layout, [struct.calcsize(c) for c in codes]


def push(sub: Any, stream: int, slot: int, value: int, *, args: list[Any] | None = None,
         layout: bytes = b"", context: int = 0xC0, function: int = 0xF0) -> bool:  # fmt: skip
    """Whether the launch was queued (push gave a ticket, not -1)."""
    ticket: int = sub.push(
        function, 2, 1, 1, 128, 1, 1, 0, stream, context, layout, args or [], slot, value
    )
    return ticket >= 0


def wait_for(pred: Any, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


def test_launches_run_in_push_order_each_followed_by_its_flag(rig: Any) -> None:
    sub, driver, slab = rig()
    tickets = [
        sub.push(0xF0, 2, 1, 1, 128, 1, 1, 0, 0x100 + i % 3, 0xC0, b"", [], i, 7 + i)
        for i in range(20)
    ]
    assert tickets == list(range(20))  # the records pushed before each
    sub.fence()
    assert sub.pending == 0 and sub.launched == 20 and sub.failed == 0 and sub.done == 20
    launches = driver.of("launch")
    assert [c[5] for c in launches] == [0x100 + i % 3 for i in range(20)]
    assert launches[0][1:5] == (0xF0, (2, 1, 1), (128, 1, 1), 0)
    order = [(c[0], c[1] if c[0] == "write" else c[5]) for c in driver.calls if c[0] != "ctx"]
    streams = [0x100 + i % 3 for i in range(20)]
    assert order == [call for s in streams for call in (("launch", s), ("write", s))]
    writes = driver.of("write")
    assert [w[2] for w in writes] == [slab.ctypes.data + 4 * i for i in range(20)]
    assert list(slab[:20]) == [7 + i for i in range(20)]
    assert all(sub.status(i) == 0 for i in range(20))


def test_parameters_arrive_packed_as_launch_packed_packs_them(rig: Any) -> None:
    layout, sizes = _layout("Q", "i", "f", "d", "?", "h")
    sub, driver, _ = rig(param_sizes=sizes)
    args = [0x7F0000001000, -5, 1.5, -2.25, True, -300]
    assert push(sub, 1, 0, 1, args=args, layout=layout)
    sub.fence()
    (launch,) = driver.of("launch")
    want = [struct.pack(f"<{c}", a) for c, a in zip("Qifd?h", args, strict=True)]
    assert launch[6] == want


def test_the_context_is_made_current_when_it_changes(rig: Any) -> None:
    sub, driver, _ = rig()
    for i, ctx in enumerate([0xA, 0xA, 0xB, 0xB, 0xA]):
        assert push(sub, 1, i, 1, context=ctx)
    sub.fence()
    assert [c[1] for c in driver.of("ctx")] == [0xA, 0xB, 0xA]


def test_a_failed_launch_reports_its_code_and_the_host_writes_its_flag(rig: Any) -> None:
    # ... once the stream's earlier work has run: the flag says its stream is done up to
    # here, and other streams then order nothing after that work.
    sub, driver, slab = rig()
    driver.launch_rc = 700  # CUDA_ERROR_ILLEGAL_ADDRESS
    assert push(sub, 0x66, 3, 9)
    sub.fence()
    assert int(slab[3]) == 9  # the waiter wakes ...
    assert sub.status(3) == 700  # ... and reads why
    assert driver.of("write") == [] and sub.failed == 1
    assert [c[0] for c in driver.calls if c[0] != "ctx"] == ["launch", "sync"]
    assert driver.of("sync") == [("sync", 0x66)]
    driver.launch_rc = 0
    assert push(sub, 1, 3, 10)  # the slot's next launch starts clean
    sub.fence()
    assert sub.status(3) == 0 and int(slab[3]) == 10 and sub.launched == 1


def test_a_failed_flag_write_synchronizes_the_stream_before_the_host_writes_it(
    rig: Any,
) -> None:
    sub, driver, slab = rig()
    driver.write_rc = 1
    assert push(sub, 0x55, 2, 4)
    sub.fence()
    assert [c[0] for c in driver.calls if c[0] != "ctx"] == ["launch", "write", "sync"]
    assert driver.of("sync") == [("sync", 0x55)]
    assert sub.status(2) == -1 and int(slab[2]) == 4


def test_fence_returns_once_what_was_queued_before_it_is_launched(rig: Any) -> None:
    sub, driver, _ = rig()
    driver.hold.clear()
    for i in range(5):
        assert push(sub, 1, i, 1)
    fenced = threading.Event()

    def fence() -> None:
        sub.fence()
        fenced.set()

    waiter = threading.Thread(target=fence)
    waiter.start()
    assert not fenced.wait(0.05)  # every launch is held in the driver
    assert sub.pending >= 4
    assert sub.done < 5
    driver.hold.set()
    waiter.join(TIMEOUT)
    assert fenced.is_set() and len(driver.of("launch")) == 5 and sub.pending == 0
    assert sub.done == 5


def test_a_full_queue_and_large_parameters_are_left_to_the_caller(rig: Any) -> None:
    sub, driver, _ = rig(capacity=4)
    driver.hold.clear()
    accepted = [push(sub, 1, i, 1) for i in range(8)]
    # the thread may have taken the first record out before the fourth push
    assert accepted[:4] == [True] * 4 and accepted[-1] is False
    driver.hold.set()
    sub.fence()
    many, _ = _layout(*"i" * 17)
    assert push(sub, 1, 9, 1, args=[0] * 17, layout=many) is False
    far = struct.pack("<c3xI", b"i", 1024)  # a parameter past the record's 256 bytes
    assert push(sub, 1, 9, 1, args=[0], layout=far) is False
    assert len(driver.of("launch")) == accepted.count(True)


def test_bad_arguments_are_refused_before_anything_is_queued(rig: Any) -> None:
    sub, driver, _ = rig(n=8)
    layout, _ = _layout("i")
    with pytest.raises(ValueError, match="slot"):
        push(sub, 1, 8, 1)
    with pytest.raises(OverflowError):
        push(sub, 1, 0, 1, args=[2**40], layout=layout)
    with pytest.raises(ValueError, match="arguments"):
        push(sub, 1, 0, 1, args=[1, 2], layout=layout)
    with pytest.raises(TypeError):
        sub.push(1, 2, 3)
    sub.fence()
    assert driver.calls == [] and sub.pending == 0


def test_close_drains_the_queue_and_later_pushes_raise(rig: Any) -> None:
    sub, driver, _ = rig()
    for i in range(10):
        assert push(sub, 1, i, 1)
    assert sub.close() is True
    assert len(driver.of("launch")) == 10 and sub.closed
    with pytest.raises(RuntimeError, match="closed"):
        push(sub, 1, 0, 1)
    assert sub.close() is True  # idempotent
    sub.fence()  # nothing to wait for


def test_close_never_hangs_on_a_launch_stuck_in_the_driver(rig: Any) -> None:
    sub, driver, slab = rig()
    driver.hold.clear()
    assert push(sub, 1, 0, 5)
    assert driver.entered.wait(TIMEOUT)
    t0 = time.monotonic()
    assert sub.close(0.05) is False  # still in the driver: left to finish on its own
    assert time.monotonic() - t0 < 2.0
    driver.hold.set()
    wait_for(lambda: int(slab[0]) == 5, "the stuck launch to finish after close")


def test_a_submitter_needs_every_entry_point_and_a_reactor() -> None:
    slab = np.zeros(4, np.uint32)
    reactor = _reactor.Reactor(slab.ctypes.data, 4, stale_ns=0)
    try:
        _reactor.set_entry_points()
        with pytest.raises(RuntimeError, match="entry points"):
            _reactor.Submitter(reactor)
        with pytest.raises(TypeError, match="Reactor"):
            _reactor.Submitter(object())
        with pytest.raises(ValueError, match="capacity"):
            _reactor.Submitter(reactor, capacity=0)
    finally:
        reactor.close()
        _restore_entry_points()


def _submit_threads() -> set[str]:
    """The ids of this process's threads named cuasync-submit (Linux /proc)."""
    found = set()
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                if f.read().strip() == "cuasync-submit":
                    found.add(task)
        except OSError:
            pass
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_a_submitter_starts_its_thread_at_the_first_push_and_a_dropped_one_stops_it() -> None:
    """(Threads are told apart by id: the collection below may also stop the threads of
    submitters that earlier tests left to the cyclic GC.)"""
    slab = np.zeros(4, np.uint32)
    reactor = _reactor.Reactor(slab.ctypes.data, 4, stale_ns=0)
    driver = Driver(slab)
    before = _submit_threads()
    sub = _reactor.Submitter(reactor)
    try:
        assert not _submit_threads() - before  # lazily started
        assert push(sub, 1, 0, 3)
        sub.fence()
        (mine,) = _submit_threads() - before
        assert int(slab[0]) == 3
        del sub
        gc.collect()
        wait_for(lambda: mine not in _submit_threads(), "the thread to stop")
    finally:
        del driver
        reactor.close()
        _restore_entry_points()


def test_the_fenced_driver_waits_before_each_call_and_passes_the_rest_through() -> None:
    from cuasync._backends.cuda import _FencedDriver

    log: list[str] = []

    class FakeDriver:
        CU_CONSTANT = 7

        class CUstream:  # a type: passed through, not wrapped
            pass

        @staticmethod
        def cuStreamQuery(stream: int) -> tuple[int]:
            log.append(f"query {stream}")
            return (0,)

    fenced = _FencedDriver(FakeDriver(), lambda: log.append("fence"))
    assert fenced.cuStreamQuery(5) == (0,)
    assert fenced.cuStreamQuery(6) == (0,)  # the cached wrapper, once looked up
    assert log == ["fence", "query 5", "fence", "query 6"]
    assert fenced.CU_CONSTANT == 7 and fenced.CUstream is FakeDriver.CUstream
    fenced._fence = lambda: log.append("other fence")  # a new hub's submitter
    fenced.cuStreamQuery(1)
    assert log[-2:] == ["other fence", "query 1"]
