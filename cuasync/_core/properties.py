"""``DeviceProperties``: a device's attributes, read from the driver once, and the
``Device.supports`` query of what the device and its driver can do."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from .._backends import get_backend
from ..errors import ArgumentError

if TYPE_CHECKING:
    from .device import Device

__all__ = ["FEATURES", "DeviceProperties", "supports"]


class DeviceProperties:
    """A device's attributes as named, typed, read-only properties (as cuda.core's
    ``DeviceProperties``): ``Device(i).properties``, one object per device.

    Each is read from the driver (``cuDeviceGetAttribute``) on first use and kept: they
    do not change while the process runs. Sizes are in bytes, clocks in kHz; flags are
    bools. The emulator reports a fixed H200-like profile (docs/emulator.md).
    ``device``: the :class:`~cuasync.Device` described.

    >>> p = cuasync.Device(0).properties
    >>> p.multiprocessor_count, p.l2_cache_size, p.peak_memory_bandwidth
    (132, 52428800, 4916736000000)
    >>> blocks = 4 * p.multiprocessor_count     # a persistent kernel's grid
    """

    __slots__ = ("_lock", "_values", "device")

    def __init__(self, device: Device) -> None:
        self.device = device
        self._values: dict[str, int] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<cuasync.DeviceProperties of device {self.device.ordinal}>"

    def _read(self, name: str) -> int:
        value = self._values.get(name)
        if value is None:
            value = get_backend().device_attribute(self.device.ordinal, name)
            with self._lock:
                self._values[name] = value
        return value

    @property
    def peak_memory_bandwidth(self) -> int:
        """Theoretical peak bandwidth of the device memory, in bytes per second: the
        memory clock (:attr:`memory_clock_rate`, kHz) times two transfers per clock
        (double data rate) times the bus width (:attr:`global_memory_bus_width`, bits)
        in bytes: ``2 * memory_clock_rate * 1000 * global_memory_bus_width // 8``, for an
        H200 ``2 * 3_201_000_000 * 6144 // 8``, 4.92 TB/s. What a kernel reaches is below
        it; use it as the roofline's memory bound.

        >>> cuasync.Device(0).properties.peak_memory_bandwidth / 1e12
        4.916736
        """
        return 2 * self.memory_clock_rate * 1000 * self.global_memory_bus_width // 8

    @property
    def multiprocessor_count(self) -> int:
        """Streaming multiprocessors (SMs) on the device: its SM count."""
        return self._read("multiprocessor_count")

    @property
    def max_threads_per_block(self) -> int:
        """Most threads one block may have."""
        return self._read("max_threads_per_block")

    @property
    def max_threads_per_multiprocessor(self) -> int:
        """Most threads resident on one SM at a time."""
        return self._read("max_threads_per_multiprocessor")

    @property
    def max_blocks_per_multiprocessor(self) -> int:
        """Most blocks resident on one SM at a time."""
        return self._read("max_blocks_per_multiprocessor")

    @property
    def warp_size(self) -> int:
        """Threads per warp (32 on every NVIDIA GPU so far)."""
        return self._read("warp_size")

    @property
    def max_block_dim_x(self) -> int:
        """Largest ``x`` extent of a block, in threads."""
        return self._read("max_block_dim_x")

    @property
    def max_block_dim_y(self) -> int:
        """Largest ``y`` extent of a block, in threads."""
        return self._read("max_block_dim_y")

    @property
    def max_block_dim_z(self) -> int:
        """Largest ``z`` extent of a block, in threads."""
        return self._read("max_block_dim_z")

    @property
    def max_grid_dim_x(self) -> int:
        """Largest ``x`` extent of a grid, in blocks."""
        return self._read("max_grid_dim_x")

    @property
    def max_grid_dim_y(self) -> int:
        """Largest ``y`` extent of a grid, in blocks."""
        return self._read("max_grid_dim_y")

    @property
    def max_grid_dim_z(self) -> int:
        """Largest ``z`` extent of a grid, in blocks."""
        return self._read("max_grid_dim_z")

    @property
    def max_shared_memory_per_block(self) -> int:
        """Bytes of shared memory a block gets without opting in (static plus dynamic; 48 KiB)."""
        return self._read("max_shared_memory_per_block")

    @property
    def max_shared_memory_per_block_optin(self) -> int:
        """Bytes of shared memory a block may use once its kernel opts in
        (``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``)."""
        return self._read("max_shared_memory_per_block_optin")

    @property
    def max_shared_memory_per_multiprocessor(self) -> int:
        """Bytes of shared memory of one SM, shared by its resident blocks."""
        return self._read("max_shared_memory_per_multiprocessor")

    @property
    def max_registers_per_block(self) -> int:
        """32-bit registers one block may use."""
        return self._read("max_registers_per_block")

    @property
    def max_registers_per_multiprocessor(self) -> int:
        """32-bit registers of one SM."""
        return self._read("max_registers_per_multiprocessor")

    @property
    def total_constant_memory(self) -> int:
        """Bytes of ``__constant__`` memory."""
        return self._read("total_constant_memory")

    @property
    def l2_cache_size(self) -> int:
        """Bytes of L2 cache."""
        return self._read("l2_cache_size")

    @property
    def clock_rate(self) -> int:
        """Peak SM clock, in kHz."""
        return self._read("clock_rate")

    @property
    def memory_clock_rate(self) -> int:
        """Peak memory clock, in kHz."""
        return self._read("memory_clock_rate")

    @property
    def global_memory_bus_width(self) -> int:
        """Width of the global memory bus, in bits."""
        return self._read("global_memory_bus_width")

    @property
    def async_engine_count(self) -> int:
        """Copy engines: copies that can run concurrently with kernels."""
        return self._read("async_engine_count")

    @property
    def pci_bus_id(self) -> int:
        """The device's PCI bus number."""
        return self._read("pci_bus_id")

    @property
    def pci_device_id(self) -> int:
        """The device's PCI device (slot) number."""
        return self._read("pci_device_id")

    @property
    def pci_domain_id(self) -> int:
        """The device's PCI domain number."""
        return self._read("pci_domain_id")

    @property
    def can_map_host_memory(self) -> bool:
        """Whether pinned host memory can be mapped into the device's address space."""
        return bool(self._read("can_map_host_memory"))

    @property
    def cluster_launch(self) -> bool:
        """Whether kernels can be launched with thread block clusters (Hopper on)."""
        return bool(self._read("cluster_launch"))

    @property
    def concurrent_kernels(self) -> bool:
        """Whether kernels of different streams can run at the same time."""
        return bool(self._read("concurrent_kernels"))

    @property
    def concurrent_managed_access(self) -> bool:
        """Whether the device and the CPU can access managed memory at the same time."""
        return bool(self._read("concurrent_managed_access"))

    @property
    def cooperative_launch(self) -> bool:
        """Whether cooperative kernels (grid-wide synchronization) can be launched."""
        return bool(self._read("cooperative_launch"))

    @property
    def ecc_enabled(self) -> bool:
        """Whether the device memory's error correction is on."""
        return bool(self._read("ecc_enabled"))

    @property
    def integrated(self) -> bool:
        """Whether the GPU is integrated with the host (shares its memory)."""
        return bool(self._read("integrated"))

    @property
    def managed_memory(self) -> bool:
        """Whether the device supports managed (unified) memory."""
        return bool(self._read("managed_memory"))

    @property
    def memory_pools_supported(self) -> bool:
        """Whether the device supports stream-ordered memory pools (``cuMemAllocAsync``)."""
        return bool(self._read("memory_pools_supported"))

    @property
    def stream_priorities_supported(self) -> bool:
        """Whether streams can have priorities."""
        return bool(self._read("stream_priorities_supported"))

    @property
    def unified_addressing(self) -> bool:
        """Whether the device shares one virtual address space with the host."""
        return bool(self._read("unified_addressing"))


#: What :meth:`Device.supports` answers, besides ``"peer:N"``: feature → one line.
FEATURES: dict[str, str] = {
    "stream_memops": "stream memory operations (cuStreamWriteValue32/WaitValue32), which "
    "cuasync's completion flags and testing gates use",
    "memory_pools": "stream-ordered allocation from memory pools (cuMemAllocAsync)",
    "host_task_modes": "host functions with a sync mode (cuLaunchHostFunc_v2, CUDA 13.2): "
    "CUASYNC_HOST_SYNC=callback-spin and callback-block",
    "cooperative_launch": "cooperative kernels (grid-wide synchronization)",
    "cluster_launch": "thread block clusters",
    "managed_memory": "managed (unified) memory",
    "stream_priorities": "stream priorities (Device.new_stream(priority=))",
}

#: The property answering a feature, where it is not the feature's own name.
_PROPERTY_OF = {
    "memory_pools": "memory_pools_supported",
    "stream_priorities": "stream_priorities_supported",
}


def supports(device: Device, feature: str) -> bool:
    """Whether ``device`` (with this driver and cuda-bindings) can do ``feature``: a key
    of :data:`FEATURES`, or ``"peer:N"`` (it can access device ``N``'s memory directly;
    False for an ordinal with no device)."""
    if not isinstance(feature, str):
        raise ArgumentError(f"feature must be a str, got {type(feature).__name__} {feature!r}")
    backend = get_backend()
    ordinal = device.ordinal
    if feature.startswith("peer:"):
        peer = feature[5:]
        if not peer.isdigit():
            raise ArgumentError(
                f"feature {feature!r}: peer:N takes a device ordinal N, e.g. 'peer:1'"
            )
        other = int(peer)
        if other == ordinal:
            return True  # (a device always reaches its own memory)
        return other < backend.device_count() and backend.device_can_access_peer(ordinal, other)
    if feature == "stream_memops":
        return backend.supports_stream_memops(ordinal)
    if feature == "host_task_modes":
        return backend.host_task_modes_problem() is None
    if feature in FEATURES:
        return bool(getattr(device.properties, _PROPERTY_OF.get(feature, feature)))
    raise ArgumentError(
        f"unknown feature {feature!r}; Device.supports knows {', '.join(sorted(FEATURES))} "
        "and 'peer:N'"
    )
