"""The emulator is a faithful model of the driver semantics cuasync depends on."""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest

import cuasync
from cuasync._backends import get_backend
from cuasync.errors import DeviceFaultError, DriverError

pytestmark = pytest.mark.emulator_only


@pytest.fixture
def be(emu):
    yield get_backend()


def test_streams_run_commands_in_fifo_order(be) -> None:
    s = be.stream_create(0)
    order: list[int] = []
    for i in range(50):
        be.launch_host_func(s, lambda i=i: order.append(i))
    be.stream_synchronize(s)
    assert order == list(range(50))
    be.stream_destroy(s)


def test_event_wait_orders_another_stream(be, emu) -> None:
    a, b = be.stream_create(0), be.stream_create(0)
    seen: list[str] = []
    ev = be.event_create(0)
    with emu.paused():
        be.launch_host_func(a, lambda: seen.append("a"))
        be.event_record(ev, a)
        be.stream_wait_event(b, ev)
        be.launch_host_func(b, lambda: seen.append("b"))
        assert not be.event_query(ev)
    be.stream_synchronize(b)
    assert seen == ["a", "b"]


def test_write_value32_lands_in_real_host_memory(be, emu) -> None:
    word = be.host_alloc(4)
    s = be.stream_create(0)
    with emu.paused():
        be.write_value32(s, word, 0xDEADBEEF)
        assert ctypes.c_uint32.from_address(word).value == 0
        assert be.stream_query(s) is False
    be.stream_synchronize(s)
    assert ctypes.c_uint32.from_address(word).value == 0xDEADBEEF
    be.host_free(word)


def test_delay_knob_holds_work_in_flight(emu) -> None:
    emu.set_delay(20_000)
    s = cuasync.Device(0).new_stream()
    fut = cuasync.zeros((4,)).submit_on(s)
    assert not fut.done()
    assert not s.query()
    fut.wait()
    assert s.query()


def test_freed_memory_access_is_an_illegal_address_fault(be) -> None:
    # A private emulator: faulting the shared one would end the rest of the suite.
    from cuasync._backends.emulator import EmulatorBackend

    e = EmulatorBackend(devices=1, memory=1 << 20)
    s = e.stream_create(0)
    ptr = e.mem_alloc_async(64, s)
    host = e.host_alloc(64)
    e.memcpy_dtoh_async(host, ptr, 64, s)
    e.mem_free_async(ptr, s)
    e.memcpy_dtoh_async(host, ptr, 64, s)  # use after free
    with pytest.raises(DeviceFaultError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        e.stream_synchronize(s)
    # sticky: every later call on the device fails the same way
    with pytest.raises(DeviceFaultError):
        e.stream_query(s)
    with pytest.raises(DeviceFaultError):
        e.mem_alloc_async(64, s)
    assert isinstance(e.device_fault(0), DeviceFaultError)


def test_injected_fault_stops_queued_work_and_is_sticky() -> None:
    from cuasync._backends.emulator import EmulatorBackend

    e = EmulatorBackend(devices=2, memory=1 << 20)
    s0, s1 = e.stream_create(0), e.stream_create(1)
    ran: list[int] = []
    gate = threading.Event()
    e.launch_host_func(s0, gate.wait)
    e.launch_host_func(s0, lambda: ran.append(0))
    e.inject_fault(0)
    gate.set()
    with pytest.raises(DeviceFaultError, match="ILLEGAL_INSTRUCTION"):
        e.stream_synchronize(s0)
    assert ran == []  # queued work never ran
    e.launch_host_func(s1, lambda: ran.append(1))  # the other device is unaffected
    e.stream_synchronize(s1)
    assert ran == [1]


def test_emulated_kernel_raising_faults_the_device() -> None:
    from cuasync._backends.emulator import EmulatorBackend

    e = EmulatorBackend(devices=1, memory=1 << 20)
    s = e.stream_create(0)

    def kernel() -> None:
        raise ZeroDivisionError("boom")

    e.launch_emulated(s, kernel)
    with pytest.raises(DeviceFaultError, match="ZeroDivisionError: boom"):
        e.stream_synchronize(s)


def test_capture_records_and_launch_replays(be) -> None:
    s = be.stream_create(0)
    out: list[int] = []
    be.stream_begin_capture(s)
    assert be.stream_is_capturing(s)
    be.launch_host_func(s, lambda: out.append(len(out)))
    with pytest.raises(DriverError, match="CAPTURE_UNSUPPORTED"):
        be.stream_query(s)
    graph = be.stream_end_capture(s)
    assert out == []  # capture ran nothing
    exe = be.graph_instantiate(graph)
    for _ in range(3):
        be.graph_launch(exe, s)
    be.stream_synchronize(s)
    assert out == [0, 1, 2]
    be.graph_exec_destroy(exe)
    be.graph_destroy(graph)


def test_memcpy_2d_and_memset(be) -> None:
    s = be.stream_create(0)
    ptr = be.mem_alloc_async(64, s)
    be.memset_d8_async(ptr, 0, 64, s)
    src = np.arange(16, dtype=np.uint8)
    host = be.host_alloc(64)
    ctypes.memmove(host, src.ctypes.data, 16)
    # 4 rows of 2 bytes, source pitch 4, destination pitch 8
    be.memcpy_2d_async(ptr, 8, host, 4, 2, 4, s, "htod")
    out = np.zeros(64, np.uint8)
    be.memcpy_dtoh_async(out.ctypes.data, ptr, 64, s)
    be.stream_synchronize(s)
    expected = np.zeros(64, np.uint8)
    for r in range(4):
        expected[r * 8 : r * 8 + 2] = src[r * 4 : r * 4 + 2]
    np.testing.assert_array_equal(out, expected)


def test_events_time_work(be, emu) -> None:
    emu.set_delay(2000)
    s = be.stream_create(0)
    a, b = be.event_create(0, timing=True), be.event_create(0, timing=True)
    be.event_record(a, s)
    be.launch_host_func(s, lambda: None)
    be.event_record(b, s)
    be.event_synchronize(b)
    assert be.event_elapsed_ms(a, b) >= 2.0 * 0.9


def test_several_devices_have_separate_address_spaces(be) -> None:
    if be.device_count() < 2:
        pytest.skip("needs 2 devices")
    s0, s1 = be.stream_create(0), be.stream_create(1)
    p0, p1 = be.mem_alloc_async(16, s0), be.mem_alloc_async(16, s1)
    assert be.stream_device(s1) == 1
    assert p0 // (1 << 40) != p1 // (1 << 40)
