"""Devices, streams and events."""

from __future__ import annotations

import asyncio
import contextvars
import re

import numpy as np
import pytest

import cuasync
from cuasync._backends import get_backend
from cuasync.errors import ArgumentError, InvalidDeviceError


def test_device_identity_and_properties() -> None:
    dev = cuasync.Device(0)
    assert dev is cuasync.Device(0)
    assert dev.ordinal == 0
    assert isinstance(dev.name, str) and dev.name
    assert cuasync.device_count() >= 1


@pytest.mark.parametrize("bad", [-1, 10_000])
def test_out_of_range_ordinal_names_the_range(bad: int) -> None:
    with pytest.raises(InvalidDeviceError, match=r"ordinal=.* out of range.*ordinals 0\.\."):
        cuasync.Device(bad)


def test_out_of_range_ordinal_says_how_to_get_more_devices() -> None:
    hint = get_backend().more_devices_hint
    assert hint  # each backend has one
    with pytest.raises(InvalidDeviceError, match=re.escape(f"({hint})")):
        cuasync.Device(cuasync.device_count())
    if cuasync.backend_name() == "emulator":
        assert hint == "set CUASYNC_EMU_DEVICES for more"


def test_non_int_ordinal_is_rejected() -> None:
    with pytest.raises(InvalidDeviceError, match="must be an int"):
        cuasync.Device("0")  # type: ignore[arg-type]


def test_memory_info_counts_live_allocations() -> None:
    dev = cuasync.Device(0)
    before = dev.memory_info()
    assert isinstance(before, cuasync.MemoryInfo)
    assert before.total > 0
    t = cuasync.empty((1000,), "float64").sync()
    assert dev.memory_info().used == before.used + 8000
    del t
    assert dev.memory_info().used == before.used


def test_streams_query_synchronize_and_protocol() -> None:
    s = cuasync.Device(0).new_stream()
    assert s.device is cuasync.Device(0)
    assert isinstance(s.handle, int)
    assert s.__cuda_stream__() == (0, s.handle)
    cuasync.from_host(np.ones(4)).sync_on(s)
    s.synchronize()
    assert s.query() is True


def test_foreign_stream_is_wrapped_not_owned() -> None:
    owner = cuasync.Device(0).new_stream()
    foreign = cuasync.Stream.from_handle(owner.handle)
    assert not foreign.owned and foreign.device is cuasync.Device(0)
    via_protocol = cuasync.Stream.from_handle(owner)
    assert via_protocol.handle == owner.handle
    x = cuasync.from_host(np.arange(3.0)).sync_on(foreign)
    np.testing.assert_array_equal(x.to_host().sync_on(foreign), [0.0, 1.0, 2.0])
    del foreign, via_protocol
    owner.synchronize()  # still alive: wrappers never destroy it


def test_from_handle_rejects_garbage() -> None:
    with pytest.raises(ArgumentError, match="__cuda_stream__"):
        cuasync.Stream.from_handle("stream")


def test_streams_are_not_constructed_directly() -> None:
    with pytest.raises(TypeError, match=r"Device\.new_stream\(\).*Stream\.from_handle\(\)"):
        cuasync.Stream(1, cuasync.Device(0), False)
    with pytest.raises(TypeError, match="cannot be constructed directly"):
        cuasync.Stream()


class _ForeignStream:
    """A foreign library's stream: speaks ``__cuda_stream__``, owns its handle."""

    def __init__(self, version: int = 0) -> None:
        self.inner = cuasync.Device(0).new_stream()
        self.version = version

    def __cuda_stream__(self) -> object:
        return (self.version, self.inner.handle)


def test_from_handle_keeps_the_protocol_object_alive() -> None:
    import gc
    import weakref

    owner = _ForeignStream()
    ref = weakref.ref(owner)
    wrapped = cuasync.Stream.from_handle(owner)
    assert wrapped.handle == owner.inner.handle and not wrapped.owned
    del owner
    gc.collect()
    assert ref() is not None  # the wrapper holds it: its stream handle stays valid
    x = cuasync.from_host(np.arange(4.0)).sync_on(wrapped)
    np.testing.assert_array_equal(x.to_host().sync_on(wrapped), np.arange(4.0))
    del x, wrapped
    gc.collect()
    assert ref() is None


def test_from_handle_checks_the_protocol_version() -> None:
    with pytest.raises(ArgumentError, match="protocol version 1.*version 0"):
        cuasync.Stream.from_handle(_ForeignStream(version=1))


def test_from_handle_rejects_a_malformed_protocol_answer() -> None:
    class Bad:
        def __cuda_stream__(self) -> object:
            return 12345

    with pytest.raises(ArgumentError, match=r"\(version, handle\)"):
        cuasync.Stream.from_handle(Bad())


def test_events_record_query_synchronize_and_time() -> None:
    s = cuasync.Device(0).new_stream()
    start, end = cuasync.Event(timing=True), cuasync.Event(timing=True)
    start.record(s)
    cuasync.zeros((1 << 16,)).sync_on(s)
    end.record(s)
    end.synchronize()
    assert end.query()
    assert start.elapsed_ms(end) >= 0.0
    with pytest.raises(ArgumentError, match="timing=True"):
        cuasync.Event().elapsed_ms(end)


def test_default_device_is_context_local() -> None:
    assert cuasync.get_default_device().ordinal == 0

    def inner() -> int:
        cuasync.set_default_device(0)
        return cuasync.get_default_device().ordinal

    ctx = contextvars.copy_context()
    assert ctx.run(inner) == 0
    with pytest.raises(InvalidDeviceError):
        cuasync.set_default_device(99)


def test_default_device_does_not_leak_between_tasks_on_several_devices() -> None:
    if cuasync.device_count() < 2:
        pytest.skip("needs 2 devices (CUASYNC_EMU_DEVICES=2 on the emulator)")

    async def task(i: int) -> int:
        cuasync.set_default_device(i)
        await asyncio.sleep(0)
        return cuasync.get_default_device().ordinal

    async def main() -> list[int]:
        return list(await asyncio.gather(task(0), task(1)))

    assert asyncio.run(main()) == [0, 1]


def test_memory_used_on_a_foreign_stream_is_freed_after_its_owner_destroyed_it() -> None:
    dev = cuasync.Device(0)
    before = dev.memory_info().used
    owner = dev.new_stream()
    foreign = cuasync.Stream.from_handle(owner.handle)
    x = cuasync.from_host(np.arange(8.0)).sync_on(foreign)
    foreign.synchronize()
    del owner  # the owner destroys the handle; the foreign wrapper lives on in x's records
    import gc

    gc.collect()
    del x, foreign
    gc.collect()
    assert dev.memory_info().used == before
    assert cuasync.zeros((4,)).sync().shape == (4,)  # and the device is fine

