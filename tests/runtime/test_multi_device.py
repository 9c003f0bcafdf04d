"""Two devices for real: peer access, copies between devices, per-device policies.

Runs on the emulator's two devices (conftest sets CUASYNC_EMU_DEVICES=2) and unchanged
on a machine with two GPUs (CUASYNC_BACKEND=cuda). Work is held in flight with
``cuasync.testing.gate``, which both backends implement, never with sleeps. Tests that
need a second device skip with the reason on a machine that has one.
"""

from __future__ import annotations

import dataclasses
import textwrap
from typing import Any

import anyio
import numpy as np
import pytest
from helpers import BACKEND, ON_EMULATOR, run_script

import cuasync
import cuasync.testing
from cuasync import _config
from cuasync.errors import ArgumentError, DTypeError, InvalidDeviceError, ShapeError

pytestmark = pytest.mark.anyio

#: How long ordering tests let work that should be held run before checking it did not:
#: an observation window, not synchronization (held work passes however long it is).
WINDOW_S = 0.1

COUNT = cuasync.device_count()
needs_two = pytest.mark.skipif(
    COUNT < 2,
    reason=f"needs 2 devices; this {BACKEND} backend has {COUNT} "
    "(CUASYNC_EMU_DEVICES=2 on the emulator, CUDA_VISIBLE_DEVICES=0,1 on GPUs)",
)


@pytest.fixture(params=["machine", "staged"])
def route(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """``machine``: whatever route this machine's topology gives (peer where the devices
    can reach each other); ``staged``: peer access not used (``CUASYNC_PEER=off``)."""
    if request.param == "staged":
        staged = dataclasses.replace(_config.config(), peer="off")
        monkeypatch.setattr(_config._ReadOnFirstUse, "_config", staged)
    yield request.param


def _bits(a: np.ndarray) -> bytes:
    """The exact bytes of an array (NaN payloads and signed zeros included)."""
    return np.ascontiguousarray(a).tobytes()


def _sample(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    """Arbitrary bit patterns of ``dtype`` (NaNs, infinities, denormals for floats)."""
    rng = np.random.default_rng(seed)
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return np.frombuffer(rng.bytes(nbytes), dtype).reshape(shape).copy()


# -- on any number of devices ----------------------------------------------------------
def test_a_device_reaches_its_own_memory() -> None:
    assert cuasync.Device(0).can_access_peer(0)
    assert cuasync.Device(0).can_access_peer(cuasync.Device(0))


@pytest.mark.parametrize("bad", [COUNT, -1, "cuda:1", 1.0, True, None])
def test_bad_devices_are_invalid_device_errors(bad: object) -> None:
    t = cuasync.zeros((4,)).sync()
    with pytest.raises(InvalidDeviceError, match="device"):
        t.to(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidDeviceError, match="other"):
        cuasync.Device(0).can_access_peer(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidDeviceError, match="device"), cuasync.use_device(bad):  # type: ignore[arg-type]
        pass


def test_to_the_same_device_is_a_new_contiguous_tensor() -> None:
    host = np.arange(24, dtype=np.int32).reshape(4, 6)
    t = cuasync.from_host(host).sync()
    same = t[:, ::2].to(0).sync()
    assert same.device.ordinal == 0 and same.is_contiguous
    assert same.allocation is not t.allocation
    np.testing.assert_array_equal(same.to_host().sync(), host[:, ::2])


def test_to_is_lazy_and_refuses_what_is_not_a_tensor() -> None:
    with pytest.raises(ArgumentError, match="tensor must be a cuasync.Tensor, got ndarray"):
        from cuasync._transfers.copies import to_device

        to_device(np.zeros(3), 0)  # type: ignore[arg-type]


async def test_use_device_sets_the_default_for_its_block_only(anyio_backend) -> None:
    last = COUNT - 1
    with cuasync.use_device(last) as dev:
        assert dev is cuasync.Device(last) and cuasync.get_default_device() is dev
        t = await cuasync.zeros((4,))
        assert t.device is dev
    assert cuasync.get_default_device() is cuasync.Device(0)
    assert (await cuasync.zeros((4,))).device.ordinal == 0


# -- two devices -----------------------------------------------------------------------
@needs_two
def test_devices_that_can_access_each_other_say_so_both_ways() -> None:
    a, b = cuasync.Device(0), cuasync.Device(1)
    assert a.can_access_peer(b) == a.can_access_peer(1)
    if ON_EMULATOR:  # emulated devices reach each other unless the knob says otherwise
        assert a.can_access_peer(b) and b.can_access_peer(a)


COUNTER = r"""
extern "C" __global__ void store_on(unsigned long long* out, int value) { *out = value; }
"""


@needs_two
async def test_a_kernel_built_without_tensors_runs_on_the_device_it_lands_on(anyio_backend):
    # Nothing ties the launch to a device when it is built (a raw address and a scalar),
    # so it is made ready for device 0, the default; run inside device 1's submission, it
    # must be made ready for device 1 too (a GPU function belongs to one context).
    def twin(out: int, value: Any) -> None:
        got.append((out, int(value)))

    got: list[tuple[int, int]] = []
    k = cuasync.Kernel(COUNTER, "store_on", emulate=twin)
    word = await cuasync.zeros((1,), "uint64", device=1)
    await cuasync.fill(word, 0).then(lambda w: k[1, 1](cuasync.lowlevel.DevicePointer(w.ptr), 7))
    if ON_EMULATOR:  # the twin gets the raw address as it is
        assert got == [(word.ptr, 7)]
    else:
        assert (await word.to_host()).tolist() == [7]


@needs_two
@pytest.mark.parametrize(
    "dtype", ["uint8", "int16", "float16", "int32", "float32", "float64", "complex128"]
)
async def test_values_round_trip_exactly(anyio_backend, route: str, dtype: str) -> None:
    host = _sample((3, 257), dtype, seed=len(dtype))
    x = await cuasync.from_host(host, device=0)
    y = await x.to(1)
    assert y.device.ordinal == 1 and y.shape == host.shape and y.dtype == host.dtype
    back = await y.to(0)
    assert _bits(await y.to_host()) == _bits(host)
    assert _bits(await back.to_host()) == _bits(host)


@needs_two
@pytest.mark.parametrize("nbytes", [0, 1, 4099, 3 << 20])
async def test_sizes(anyio_backend, route: str, nbytes: int, baseline) -> None:
    host = _sample((nbytes,), "uint8", seed=nbytes)
    y = await (await cuasync.from_host(host, device=1)).to(0)
    assert _bits(await y.to_host()) == _bits(host)


@needs_two
async def test_strided_source_and_destination(anyio_backend, route: str, baseline) -> None:
    host = _sample((6, 10), "float32")
    x = await cuasync.from_host(host, device=0)
    # a strided source: made contiguous on its own device first
    y = await x[1::2, ::3].to(1)
    assert y.is_contiguous
    np.testing.assert_array_equal(await y.to_host(), host[1::2, ::3])
    # a strided destination: written through a contiguous temporary on its device
    out = await cuasync.zeros((6, 10), device=1)
    await cuasync.memcpy(out[::2, 1::4], x[:3, 2:5])
    expected = np.zeros((6, 10), np.float32)
    expected[::2, 1::4] = host[:3, 2:5]
    np.testing.assert_array_equal(await out.to_host(), expected)


@needs_two
async def test_memcpy_between_devices_outputs_dst(anyio_backend, route: str) -> None:
    src = await cuasync.from_host(np.arange(12, dtype=np.int64), device=1)
    dst = await cuasync.zeros((3, 4), "int64", device=0)
    out = await cuasync.memcpy(dst, src)  # contiguous: shapes may differ
    assert out is dst
    np.testing.assert_array_equal(await dst.to_host(), np.arange(12).reshape(3, 4))


@needs_two
def test_memcpy_between_devices_checks_its_arguments() -> None:
    a = cuasync.zeros((4,), "float32", device=0).sync()
    b = cuasync.zeros((5,), "float32", device=1).sync()
    with pytest.raises(ShapeError, match=r"dst has 4 \(4,\), src has 5 \(5,\)"):
        cuasync.memcpy(a, b)
    with pytest.raises(DTypeError, match="dst is float32, src is int32"):
        cuasync.memcpy(a, cuasync.zeros((4,), "int32", device=1).sync())
    wide = cuasync.zeros((4, 4), "float32", device=1).sync()
    with pytest.raises(ShapeError, match="needs both tensors contiguous"):
        cuasync.memcpy(a, wide[:2, 1:3])
    assert issubclass(ShapeError, ArgumentError) and issubclass(DTypeError, ArgumentError)


async def _unordered_work_would_finish(future: cuasync.DeviceFuture) -> None:
    """Give ``future`` a moment to complete. Work held behind a gate cannot; work that
    failed to wait for it would, and the test then says so instead of racing the gate."""
    with anyio.move_on_after(WINDOW_S):
        await future


@needs_two
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
async def test_copy_waits_for_pending_writes_to_the_source(
    anyio_backend, route: str, layout: str
) -> None:
    """Read after write across devices: the fill is held behind a gate on device 0. A
    strided source is first made contiguous on device 0, which must wait as well."""
    whole = await cuasync.zeros((1 << 13,), "int32", device=0)
    src = whole[::2] if layout == "strided" else whole[: 1 << 12]
    await cuasync.fill(whole, 0)  # loads the kernels: a first load behind a gate may hang
    await src.to(1)  # a GPU (CUDA lazy loading; the emulator refuses it)
    writer = cuasync.Device(0).new_stream()
    with cuasync.testing.gate(writer) as gate:
        filled = cuasync.fill(whole, 7).submit_on(writer)
        copied = src.to(1).submit()
        await _unordered_work_would_finish(copied)
        assert not copied.done(), "the copy did not wait for the write to its source"
        gate.open()
        dst = await copied
    await filled
    np.testing.assert_array_equal(await dst.to_host(), np.full(1 << 12, 7, np.int32))


@needs_two
async def test_later_uses_of_the_destination_wait_for_the_copy(anyio_backend, route) -> None:
    """The copy is held behind a gate on device 1: a read of its destination from device 0
    waits for it, and a write of its source on device 0 does not overtake its read."""
    host = np.arange(1 << 12, dtype=np.float32)
    src = await cuasync.from_host(host, device=0)
    dst = await cuasync.zeros(host.shape, device=1)
    copier = cuasync.Device(1).new_stream()
    with cuasync.testing.gate(copier) as gate:
        copied = cuasync.memcpy(dst, src).submit_on(copier)
        read_back = dst.to(0).submit()  # read after write, across devices
        overwrite = cuasync.fill(src, -1.0).submit()  # write after read, across devices
        await _unordered_work_would_finish(read_back)
        assert not read_back.done(), "a read of the destination did not wait for the copy"
        gate.open()
        await copied
        back = await read_back
        await overwrite
    # The overwrite waited for the copy's read of the source (the staged route reads it
    # into pinned memory on device 0 before the gate, the peer route after it).
    np.testing.assert_array_equal(await dst.to_host(), host)
    np.testing.assert_array_equal(await back.to_host(), host)
    np.testing.assert_array_equal(await src.to_host(), np.full(host.shape, -1.0))


@needs_two
async def test_swaps_in_both_directions_at_once(anyio_backend, route: str, baseline) -> None:
    a_host, b_host = _sample((1000,), "float64", 1), _sample((1000,), "float64", 2)
    a = await cuasync.from_host(a_host, device=0)
    b = await cuasync.from_host(b_host, device=1)
    results: dict[str, cuasync.Tensor] = {}

    async def move(name: str, t: cuasync.Tensor, device: int) -> None:
        results[name] = await t.to(device)

    async with anyio.create_task_group() as tg:
        tg.start_soon(move, "a", a, 1)
        tg.start_soon(move, "b", b, 0)
    assert results["a"].device.ordinal == 1 and results["b"].device.ordinal == 0
    assert _bits(await results["a"].to_host()) == _bits(a_host)
    assert _bits(await results["b"].to_host()) == _bits(b_host)


@needs_two
async def test_a_copied_source_is_freed_without_faulting_either_device(
    anyio_backend, route: str, baseline
) -> None:
    """A stream of device 1 read the source last; the source is still freed on device 0."""
    src = await cuasync.from_host(np.ones(1 << 10, np.float32), device=0)
    dst = await src.to(1)
    del src
    assert cuasync.testing.settle()
    np.testing.assert_array_equal(await dst.to_host(), np.ones(1 << 10))
    for ordinal in (0, 1):
        assert cuasync.Device(ordinal).fault is None
        await cuasync.zeros((4,), device=ordinal)


@needs_two
async def test_ops_on_tensors_of_device_1_use_device_1s_policy(anyio_backend) -> None:
    class Counting(cuasync.SchedulingPolicy):
        def __init__(self, device: int) -> None:
            self.stream = cuasync.Device(device).new_stream()
            self.calls = 0

        def next_stream(self) -> cuasync.Stream:
            self.calls += 1
            return self.stream

    dev0, dev1 = cuasync.Device(0), cuasync.Device(1)
    saved = dev0.policy, dev1.policy
    dev0.policy, dev1.policy = Counting(0), Counting(1)
    try:
        t = await cuasync.zeros((4,), device=1)
        await t.to_host()
        with cuasync.use_device(1):
            await cuasync.ones((4,))
        assert (dev0.policy.calls, dev1.policy.calls) == (0, 3)
        await t.to(0)  # the destination's policy runs the copy
        assert dev0.policy.calls == 1
    finally:
        dev0.policy, dev1.policy = saved


@needs_two
def test_cuasync_peer_off_stages_every_copy(route: str) -> None:
    from cuasync._transfers.peer import peer_route

    d0, d1 = cuasync.Device(0), cuasync.Device(1)
    topology = d0.can_access_peer(d1) and d1.can_access_peer(d0)
    assert peer_route(d0, d1) is (topology and route == "machine")


@needs_two
@pytest.mark.emulator_only
def test_the_route_follows_peer_access() -> None:
    import cuasync.emulator as emulator

    x = cuasync.arange(64, dtype="float32", device=0).sync()
    before = emulator.peer_copies()
    np.testing.assert_array_equal(x.to(1).sync().to_host().sync(), np.arange(64))
    assert emulator.peer_copies() == before + 1  # device to device
    assert emulator.peer_access_enabled(0, 1) and emulator.peer_access_enabled(1, 0)
    with emulator.peer_access(False):
        assert not cuasync.Device(0).can_access_peer(1)
        np.testing.assert_array_equal(x.to(1).sync().to_host().sync(), np.arange(64))
        assert emulator.peer_copies() == before + 1  # staged through the host
        assert not emulator.peer_access_enabled(0, 1)


@needs_two
@pytest.mark.emulator_only
def test_enabling_peer_access_is_idempotent_and_refused_without_peers() -> None:
    import cuasync.emulator as emulator
    from cuasync._backends import get_backend
    from cuasync.errors import DriverError

    backend = get_backend()
    backend.enable_peer_access(0, 1)
    backend.enable_peer_access(0, 1)
    assert not backend.device_can_access_peer(0, 0)
    with (
        emulator.peer_access(False),
        pytest.raises(DriverError, match="CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"),
    ):
        backend.enable_peer_access(0, 1)


@needs_two
@pytest.mark.emulator_only
@pytest.mark.parametrize("peer", ["on", "off"])
def test_a_copy_from_a_device_that_faults_first_raises_its_fault(peer: str) -> None:
    """A fault is sticky for the process: it runs in a fresh interpreter."""
    script = textwrap.dedent(
        """
        import asyncio, cuasync, cuasync.emulator as emu, cuasync.testing
        from cuasync.errors import DeviceFaultError

        async def main():
            src = await cuasync.zeros((64,), device=0)
            await cuasync.fill(src, 1.0)  # loads the kernels: a first load behind a gate
            await src.to(1)               # may hang a GPU (the emulator refuses it)
            writer = cuasync.Device(0).new_stream()
            with cuasync.testing.gate(writer) as gate:
                cuasync.fill(src, 1.0).submit_on(writer)
                copied = src.to(1).submit()
                emu.inject_fault(0)
                gate.open()
                try:
                    await copied
                except DeviceFaultError as exc:
                    print("raised", type(exc).__name__)
            await cuasync.zeros((4,), device=1)  # device 1 is unaffected
            print("device 1 ok")

        asyncio.run(main())
        """
    )
    proc = run_script(
        script, CUASYNC_BACKEND="emulator", CUASYNC_EMU_DEVICES="2", CUASYNC_EMU_PEER=peer
    )
    assert proc.stdout.split("\n")[:2] == ["raised DeviceFaultError", "device 1 ok"]


def test_emulated_peer_copies_check_whose_memory_each_pointer_is() -> None:
    from cuasync._backends.emulator import EmulatorBackend
    from cuasync.errors import DeviceFaultError

    e = EmulatorBackend(devices=2, memory=1 << 20)  # its own: the fault below is sticky
    s0, s1 = e.stream_create(0), e.stream_create(1)
    a, b = e.mem_alloc_async(64, s0), e.mem_alloc_async(64, s1)
    e.memset_d8_async(a, 5, 64, s0)
    e.stream_synchronize(s0)
    e.memcpy_peer_async(b, 1, a, 0, 64, s1)
    e.stream_synchronize(s1)
    assert e.device_view(b, 64).tolist() == [5] * 64
    e.memcpy_peer_async(b, 0, a, 0, 64, s1)  # b is memory of device 1, not 0
    with pytest.raises(DeviceFaultError, match="ILLEGAL_ADDRESS.*not of device 0"):
        e.stream_synchronize(s1)


# -- on two GPUs only --------------------------------------------------------------------
def _skip_without_p2p() -> None:
    if not cuasync.Device(0).can_access_peer(1) or not cuasync.Device(1).can_access_peer(0):
        pytest.skip("GPUs 0 and 1 cannot access each other's memory (no P2P): copies are staged")


@needs_two
@pytest.mark.gpu
def test_cuda_peer_access_is_enabled_once_and_already_enabled_is_fine() -> None:
    from cuasync._backends import get_backend

    _skip_without_p2p()
    backend = get_backend()
    backend.enable_peer_access(0, 1)
    backend.enable_peer_access(1, 0)
    backend._peers_enabled.discard((0, 1))  # type: ignore[attr-defined]
    backend.enable_peer_access(0, 1)  # the driver answers ALREADY_ENABLED: not an error
    assert (0, 1) in backend._peers_enabled  # type: ignore[attr-defined]


PEER_READ = r"""
extern "C" __global__ void peer_read(const float* src, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = src[i];
}
"""


@needs_two
@pytest.mark.gpu
async def test_a_kernel_on_device_1_reads_pool_memory_of_device_0(anyio_backend) -> None:
    """Stream-ordered (pool) allocations do not follow cuCtxEnablePeerAccess: only the
    pool's own access list (cuMemPoolSetAccess) lets device 1 dereference them."""
    _skip_without_p2p()
    x0 = await cuasync.arange(256, dtype="float32", device=0)
    await x0.to(1)  # the first copy between the pair enables peer access
    out = await cuasync.zeros((256,), device=1)
    kernel = cuasync.Kernel(PEER_READ, "peer_read")
    await kernel[1, 256](cuasync.lowlevel.DevicePointer(x0.ptr), out, 256)
    np.testing.assert_array_equal(await out.to_host(), np.arange(256, dtype=np.float32))
