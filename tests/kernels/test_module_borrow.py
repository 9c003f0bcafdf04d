"""Module.from_handle and Module.kernel_from_handle: launching code another library loaded.

The "other library" is played by the driver interface itself: on a GPU it loads a cubin
compiled from SCALE (cuModuleLoadData), on the emulator it registers the numpy twin
(cuasync.emulator.load_module). Either way the test owns the module and unloads it.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import numpy as np
import pytest
from helpers import ON_EMULATOR

import cuasync
from cuasync._backends import get_backend
from cuasync._launch.nvrtc import nvrtc_problem
from cuasync.errors import ArgumentError, DriverError, InvalidDeviceError, LaunchError

SCALE = r"""
extern "C" __global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
"""
SIGNATURE = "float* x, float a, int n"


def scale_twin(x: np.ndarray, a: np.float32, n: np.int32) -> None:
    x[:n] *= a


class Owner:
    """Stands for the other library's object that keeps its module loaded."""


@pytest.fixture
def raw_module() -> Iterator[int]:
    """A module handle this test owns (loaded here, unloaded at the end)."""
    backend = get_backend()
    if ON_EMULATOR:
        import cuasync.emulator as emu

        handle = emu.load_module({"scale": scale_twin})
    else:
        if nvrtc_problem() is not None:
            pytest.skip("NVRTC cannot be loaded here (needed to build the test's cubin)")
        image, _ = cuasync.Kernel(SCALE, "scale").compile_image(backend.arch(0))
        handle = backend.module_load(0, image)
    yield handle
    gc.collect()
    backend.module_unload(handle)  # raises if cuasync had unloaded it behind the owner's back


@pytest.mark.anyio
async def test_a_borrowed_module_launches_its_functions(raw_module: int) -> None:
    mod = cuasync.Module.from_handle(raw_module, 0)
    assert mod.borrowed and mod.handle == raw_module and mod.device == cuasync.Device(0)
    k = mod.kernel("scale", SIGNATURE)
    x = await cuasync.ones(100)
    await k[1, 128](x, 3.0, 100)
    np.testing.assert_array_equal(await x.to_host(), np.full(100, 3.0, np.float32))
    assert "borrowed" in repr(mod)


@pytest.mark.anyio
async def test_a_borrowed_function_launches_with_checked_arguments(raw_module: int) -> None:
    function = get_backend().module_function(raw_module, "scale")
    k = cuasync.Module.kernel_from_handle(function, SIGNATURE, device=0, name="scale")
    x = await cuasync.arange(64, dtype="float32")
    await k[2, 32](x, 2.0, 64)
    np.testing.assert_array_equal(await x.to_host(), 2 * np.arange(64, dtype=np.float32))
    with pytest.raises(LaunchError, match="x"):
        k[1, 32](np.zeros(4, np.float32), 2.0, 4)  # a host array for a device pointer
    assert "scale(float* x, float a, int n)" in repr(k)


def test_nothing_borrowed_is_unloaded(raw_module: int) -> None:
    owner = Owner()
    alive = weakref.ref(owner)
    mod = cuasync.Module.from_handle(raw_module, owner=owner)
    k = mod.kernel("scale", SIGNATURE)
    function = get_backend().module_function(raw_module, "scale")
    f = cuasync.Module.kernel_from_handle(function, SIGNATURE, owner=owner)
    del owner, mod
    gc.collect()
    assert alive() is not None  # the kernels keep the owner (and so its module) alive
    x = cuasync.ones(8).sync()
    k[1, 8](x, 2.0, 8).sync()
    f[1, 8](x, 2.0, 8).sync()
    assert x.to_host().sync().tolist() == [4.0] * 8
    del k, f
    gc.collect()
    assert alive() is None
    # raw_module's teardown unloads the module: it fails if cuasync had unloaded it.


def test_handles_are_checked() -> None:
    for bad in (None, 1.5, True, "0x10"):
        with pytest.raises(ArgumentError, match="handle"):
            cuasync.Module.from_handle(bad)
    with pytest.raises(ArgumentError, match="non-null"):
        cuasync.Module.kernel_from_handle(0, SIGNATURE)
    with pytest.raises(ArgumentError, match="signature"):
        cuasync.Module.kernel_from_handle(0x10, None, name="f")  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="C identifier"):
        cuasync.Module.kernel_from_handle(0x10, SIGNATURE, name="not a name")


def test_a_borrowed_kernel_runs_only_on_its_device(raw_module: int) -> None:
    if cuasync.device_count() < 2:
        pytest.skip("needs two devices")
    k = cuasync.Module.from_handle(raw_module, 0).kernel("scale", SIGNATURE)
    x = cuasync.ones(8, device=1).sync()
    with pytest.raises(InvalidDeviceError, match="device 0"):
        k[1, 8](x, 2.0, 8).sync()


@pytest.mark.emulator_only(reason="what a handle the emulator did not issue means there")
def test_the_emulator_refuses_handles_it_did_not_issue(raw_module: int) -> None:
    with pytest.raises(DriverError, match="not a function the emulator issued"):
        cuasync.Module.kernel_from_handle(0xDEAD, SIGNATURE)
    with pytest.raises(DriverError, match="CUDA_ERROR_NOT_FOUND"):
        cuasync.Module.from_handle(raw_module).kernel("nope", SIGNATURE)
    with pytest.raises(DriverError, match="unknown module"):
        cuasync.Module.from_handle(0xDEAD).kernel("scale", SIGNATURE)
    import cuasync.emulator as emu

    with pytest.raises(ValueError, match="twins"):
        emu.load_module({})
