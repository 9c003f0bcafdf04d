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


# -- properties and the capability query --------------------------------------------------
INT_PROPERTIES = [
    "multiprocessor_count",
    "max_threads_per_block",
    "max_threads_per_multiprocessor",
    "max_blocks_per_multiprocessor",
    "warp_size",
    "max_block_dim_x",
    "max_block_dim_y",
    "max_block_dim_z",
    "max_grid_dim_x",
    "max_grid_dim_y",
    "max_grid_dim_z",
    "max_shared_memory_per_block",
    "max_shared_memory_per_block_optin",
    "max_shared_memory_per_multiprocessor",
    "max_registers_per_block",
    "max_registers_per_multiprocessor",
    "total_constant_memory",
    "l2_cache_size",
    "clock_rate",
    "memory_clock_rate",
    "global_memory_bus_width",
    "peak_memory_bandwidth",
]
BOOL_PROPERTIES = [
    "can_map_host_memory",
    "cluster_launch",
    "concurrent_kernels",
    "concurrent_managed_access",
    "cooperative_launch",
    "ecc_enabled",
    "integrated",
    "managed_memory",
    "memory_pools_supported",
    "stream_priorities_supported",
    "unified_addressing",
]


def test_device_properties_are_positive_typed_and_consistent() -> None:
    dev = cuasync.Device(0)
    p = dev.properties
    assert p is dev.properties and p.device is dev  # one object per device
    for name in INT_PROPERTIES:
        value = getattr(p, name)
        assert type(value) is int and value > 0, (name, value)
    for name in BOOL_PROPERTIES:
        assert type(getattr(p, name)) is bool, name
    for name in ("async_engine_count", "pci_bus_id", "pci_device_id", "pci_domain_id"):
        assert type(getattr(p, name)) is int and getattr(p, name) >= 0, name
    assert p.warp_size == 32
    assert p.max_shared_memory_per_block <= p.max_shared_memory_per_block_optin
    assert p.max_shared_memory_per_block_optin <= p.max_shared_memory_per_multiprocessor
    assert p.max_threads_per_block <= p.max_threads_per_multiprocessor
    assert p.max_threads_per_block >= max(p.max_block_dim_x, p.max_block_dim_z)
    assert p.max_threads_per_block % p.warp_size == 0
    assert p.max_registers_per_block <= p.max_registers_per_multiprocessor
    assert p.l2_cache_size < dev.memory_info().total
    assert p.memory_pools_supported  # cuasync allocates from the device's pool
    assert p.peak_memory_bandwidth == (
        2 * p.memory_clock_rate * 1000 * p.global_memory_bus_width // 8
    )
    assert dev.compute_capability >= (7, 0)


def test_device_properties_are_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    dev = cuasync.Device(0)
    first = dev.properties.l2_cache_size
    backend = get_backend()
    calls: list[str] = []
    original = backend.device_attribute

    def counting(ordinal: int, name: str) -> int:
        calls.append(name)
        return original(ordinal, name)

    monkeypatch.setattr(backend, "device_attribute", counting)
    assert dev.properties.l2_cache_size == first
    assert dev.properties.max_grid_dim_y == dev.properties.max_grid_dim_y
    assert calls.count("l2_cache_size") == 0 and calls.count("max_grid_dim_y") <= 1


def test_every_device_attribute_has_a_property() -> None:
    from cuasync._backends.base import DEVICE_ATTRIBUTES

    props = cuasync.DeviceProperties
    assert all(isinstance(getattr(props, n, None), property) for n in DEVICE_ATTRIBUTES)
    with pytest.raises(ArgumentError, match="unknown device attribute 'bogus'"):
        get_backend().device_attribute(0, "bogus")


@pytest.mark.emulator_only(reason="the emulator's fixed, documented device profile")
def test_the_emulator_reports_its_documented_h200_profile() -> None:
    p = cuasync.Device(0).properties
    assert (p.multiprocessor_count, p.warp_size, p.max_threads_per_block) == (132, 32, 1024)
    assert (p.max_threads_per_multiprocessor, p.max_blocks_per_multiprocessor) == (2048, 32)
    assert (p.max_block_dim_x, p.max_block_dim_y, p.max_block_dim_z) == (1024, 1024, 64)
    assert (p.max_grid_dim_x, p.max_grid_dim_y, p.max_grid_dim_z) == (2**31 - 1, 65535, 65535)
    assert p.max_shared_memory_per_block == 48 * 1024
    assert p.max_shared_memory_per_block_optin == 227 * 1024
    assert p.max_shared_memory_per_multiprocessor == 228 * 1024
    assert (p.max_registers_per_block, p.max_registers_per_multiprocessor) == (65536, 65536)
    assert (p.total_constant_memory, p.l2_cache_size) == (64 * 1024, 50 * 1024 * 1024)
    assert (p.clock_rate, p.memory_clock_rate) == (1_980_000, 3_201_000)
    assert p.global_memory_bus_width == 6144
    assert p.peak_memory_bandwidth == 4_916_736_000_000
    assert p.async_engine_count == 3
    assert all(getattr(p, n) for n in BOOL_PROPERTIES if n != "integrated")
    assert not p.integrated
    assert [cuasync.Device(i).properties.pci_bus_id for i in range(cuasync.device_count())] == (
        list(range(cuasync.device_count()))
    )
    assert (p.pci_domain_id, p.pci_device_id) == (0, 0)


def test_supports_answers_each_feature_as_the_backend_does() -> None:
    dev = cuasync.Device(0)
    backend = get_backend()
    assert dev.supports("stream_memops") is backend.supports_stream_memops(0)
    assert dev.supports("host_task_modes") is (backend.host_task_modes_problem() is None)
    assert dev.supports("memory_pools") is dev.properties.memory_pools_supported is True
    assert dev.supports("stream_priorities") is dev.properties.stream_priorities_supported
    for feature in ("cooperative_launch", "cluster_launch", "managed_memory"):
        assert dev.supports(feature) is getattr(dev.properties, feature)
    assert dev.supports("peer:0")  # its own memory
    n = cuasync.device_count()
    for other in range(1, n):
        assert dev.supports(f"peer:{other}") is dev.can_access_peer(other)
    assert dev.supports(f"peer:{n}") is False  # no such device


@pytest.mark.parametrize("bad", ["bogus", "peer:", "peer:-1", "peer:x", ""])
def test_supports_refuses_an_unknown_feature_naming_the_known_ones(bad: str) -> None:
    with pytest.raises(ArgumentError, match="memory_pools|peer:N"):
        cuasync.Device(0).supports(bad)
    with pytest.raises(ArgumentError, match="must be a str"):
        cuasync.Device(0).supports(1)  # type: ignore[arg-type]
