"""The emulator is a faithful model of the driver semantics cuasync depends on.

Each test drives a private emulator instance, not the suite's backend: the model is
checked on every machine (on a GPU too), and faulting it ends nothing else. Only the
test of the ``cuasync.emulator`` knobs needs the suite to run on the emulator.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator

import numpy as np
import pytest

import cuasync
from cuasync._backends.emulator import EmulatorBackend
from cuasync.errors import DeviceFaultError, DriverError


@pytest.fixture
def be() -> Iterator[EmulatorBackend]:
    """A private emulator with two devices; its stream workers end with the test."""
    backend = EmulatorBackend(devices=2, memory=1 << 20)
    yield backend
    backend.resume()
    for handle in list(backend._streams):
        backend.stream_destroy(handle)  # never blocks: the worker drains, then exits


def test_streams_run_commands_in_fifo_order(be) -> None:
    s = be.stream_create(0)
    order: list[int] = []
    for i in range(50):
        be.launch_host_func(s, lambda i=i: order.append(i))
    be.stream_synchronize(s)
    assert order == list(range(50))
    be.stream_destroy(s)


def test_event_wait_orders_another_stream(be) -> None:
    a, b = be.stream_create(0), be.stream_create(0)
    seen: list[str] = []
    ev = be.event_create(0)
    be.pause()  # every stream worker holds before its next command
    try:
        be.launch_host_func(a, lambda: seen.append("a"))
        be.event_record(ev, a)
        be.stream_wait_event(b, ev)
        be.launch_host_func(b, lambda: seen.append("b"))
        assert not be.event_query(ev)
    finally:
        be.resume()
    be.stream_synchronize(b)
    assert seen == ["a", "b"]


def test_write_value32_lands_in_real_host_memory(be) -> None:
    word = be.host_alloc(4)
    s = be.stream_create(0)
    be.pause()
    try:
        be.write_value32(s, word, 0xDEADBEEF)
        assert ctypes.c_uint32.from_address(word).value == 0
        assert be.stream_query(s) is False
    finally:
        be.resume()
    be.stream_synchronize(s)
    assert ctypes.c_uint32.from_address(word).value == 0xDEADBEEF
    be.host_free(word)


@pytest.mark.emulator_only(reason="tests the emulator's own delay knob (cuasync.emulator)")
def test_delay_knob_holds_work_in_flight(emu) -> None:
    emu.set_delay(20_000)
    s = cuasync.Device(0).new_stream()
    fut = cuasync.zeros((4,)).submit_on(s)
    assert not fut.done()
    assert not s.query()
    fut.wait()
    assert s.query()


def test_freed_memory_access_is_an_illegal_address_fault(be) -> None:
    s = be.stream_create(0)
    ptr = be.mem_alloc_async(64, s)
    host = be.host_alloc(64)
    be.memcpy_dtoh_async(host, ptr, 64, s)
    be.mem_free_async(ptr, s)
    be.memcpy_dtoh_async(host, ptr, 64, s)  # use after free
    with pytest.raises(DeviceFaultError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        be.stream_synchronize(s)
    # sticky: every later call on the device fails the same way
    with pytest.raises(DeviceFaultError):
        be.stream_query(s)
    with pytest.raises(DeviceFaultError):
        be.mem_alloc_async(64, s)
    assert isinstance(be.device_fault(0), DeviceFaultError)


def test_injected_fault_stops_queued_work_and_is_sticky(be) -> None:
    s0, s1 = be.stream_create(0), be.stream_create(1)
    ran: list[int] = []
    gate = threading.Event()
    be.launch_host_func(s0, gate.wait)
    be.launch_host_func(s0, lambda: ran.append(0))
    be.inject_fault(0)
    gate.set()
    with pytest.raises(DeviceFaultError, match="ILLEGAL_INSTRUCTION"):
        be.stream_synchronize(s0)
    assert ran == []  # queued work never ran
    be.launch_host_func(s1, lambda: ran.append(1))  # the other device is unaffected
    be.stream_synchronize(s1)
    assert ran == [1]


def test_emulated_kernel_raising_faults_the_device(be) -> None:
    s = be.stream_create(0)

    def kernel() -> None:
        raise ZeroDivisionError("boom")

    be.launch_emulated(s, kernel)
    with pytest.raises(DeviceFaultError, match="ZeroDivisionError: boom") as info:
        be.stream_synchronize(s)
    # where it raised, in the message (it may travel without its traceback: another
    # process, a log line) and as the fault's cause
    assert "raised in kernel, test_emulator.py:" in str(info.value)
    assert isinstance(be.device_fault(0).__cause__, ZeroDivisionError)


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


def test_events_time_work(be) -> None:
    be.delay_us = 2000  # every command takes >= 2 ms
    s = be.stream_create(0)
    a, b = be.event_create(0, timing=True), be.event_create(0, timing=True)
    be.event_record(a, s)
    be.launch_host_func(s, lambda: None)
    be.event_record(b, s)
    be.event_synchronize(b)
    assert be.event_elapsed_ms(a, b) >= 2.0 * 0.9


def test_several_devices_have_separate_address_spaces(be) -> None:
    assert be.device_count() == 2
    s0, s1 = be.stream_create(0), be.stream_create(1)
    p0, p1 = be.mem_alloc_async(16, s0), be.mem_alloc_async(16, s1)
    assert be.stream_device(s1) == 1
    assert p0 // (1 << 40) != p1 // (1 << 40)
