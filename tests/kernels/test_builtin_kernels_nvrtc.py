"""Every built-in CUDA kernel compiles with NVRTC, for every dtype instantiation.

Runs without a GPU (NVRTC is a compiler library), so a CUDA source error in a built-in
kernel fails CI even though CI only runs the numpy twins. The images are shared with the
launches' compiles (on a GPU, and on the emulator with ``CUASYNC_EMU_COMPILE``): nothing is
compiled twice.
"""

from __future__ import annotations

from typing import Any

import pytest

import cuasync
from cuasync._backends import get_backend
from cuasync._dtypes import SUPPORTED
from cuasync._launch import builtin as _builtin
from cuasync._launch import kernel as _kernel
from cuasync._launch.kernel import Kernel
from cuasync._launch.nvrtc import nvrtc_problem
from cuasync._ops import indexing as _indexing
from cuasync.errors import KernelCompileError

ARCHS = ("sm_80", "sm_90")

PROBLEM = nvrtc_problem()
pytestmark = [
    pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or ""),
    pytest.mark.path_independent,  # (compiles sources: no op path)
]

KERNELS: dict[str, Kernel] = {k.name: k for k in _builtin.builtin_kernels()}
#: The indexing family (gather, take_along_axis, scatter, dynamic slices, pad): one
#: translation unit of its own (cuasync/kernels/indexing.cu).
INDEXING: dict[str, Kernel] = {k.name: k for k in _indexing.indexing_kernels()}


def test_every_family_and_dtype_is_listed() -> None:
    families = {name.split("<")[0] for name in KERNELS}
    assert families == {
        "ca_fill",
        "ca_linspace",
        "ca_arange",
        "ca_convert",
        "ca_convert_checked",
        "ca_rand",
        "ca_randn",
    }
    dtypes = len(SUPPORTED)
    assert sum(name.startswith("ca_convert<") for name in KERNELS) == dtypes
    assert sum(name.startswith("ca_convert_checked<") for name in KERNELS) == dtypes
    assert sum(name.startswith("ca_linspace<") for name in KERNELS) == dtypes
    assert sum(name.startswith("ca_arange<") for name in KERNELS) == dtypes
    assert sum(name.startswith("ca_fill<") for name in KERNELS) == 5


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_builtin_kernel_compiles(name: str, arch: str) -> None:
    # (the emulator's fast check: the same front end and assembler, the name expression
    # lowered, a third of a full compile's time; shared with the launches' own checks)
    try:
        KERNELS[name].check_compiles(arch)
    except KernelCompileError as exc:
        pytest.fail(f"{name} does not compile for {arch}:\n{exc.log}")


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(INDEXING))
def test_indexing_kernel_compiles(name: str, arch: str) -> None:
    try:
        INDEXING[name].check_compiles(arch)
    except KernelCompileError as exc:
        pytest.fail(f"{name} does not compile for {arch}:\n{exc.log}")


def test_every_indexing_family_is_listed() -> None:
    families = {name.split("<")[0] for name in INDEXING}
    assert families == {
        "ca_gather",
        "ca_gather_along",
        "ca_scatter",
        "ca_scatter_narrow",
        "ca_window",
        "ca_pad",
    }
    combining = sum(len(v) for v in _indexing.COMBINE_DTYPES.values())
    assert sum(name.startswith("ca_scatter") for name in INDEXING) == 2 * (combining + 5)


def test_launches_and_this_check_share_compiled_images(monkeypatch) -> None:
    # A launch compiles for the device's architecture: on a GPU to run the kernel, on the
    # emulator (sm_90) to check its source (a faster compile) before the numpy twin runs.
    arch = get_backend().arch(0)
    cuasync.arange(4, dtype="int16").sync()  # compiled ca_arange<..., int16> for arch

    def refuse(source: str, name: str, arch: str, flags: list[str]) -> Any:
        raise AssertionError(f"{name} was compiled for {arch} a second time")

    monkeypatch.setattr(_kernel, "compile_cubin", refuse)
    k = _builtin.kernel("arange", "int16")
    if get_backend().name == "emulator":  # the emulator's check (Kernel.check_compiles)
        k.check_compiles(arch)
    else:
        image, _ = k.compile_image(arch)
        assert image[:4] == b"\x7fELF"
