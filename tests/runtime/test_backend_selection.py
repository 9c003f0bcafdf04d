"""CUASYNC_BACKEND selection, run in fresh interpreters (the choice is made once per process)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **env}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=120
    )


def test_import_needs_no_driver_and_names_backend() -> None:
    r = run("import cuasync; print(cuasync.backend_name())", CUASYNC_BACKEND="auto")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() in ("cuda", "emulator")


def test_emulator_can_always_be_forced() -> None:
    r = run("import cuasync; print(cuasync.backend_name())", CUASYNC_BACKEND="emulator")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "emulator"


def test_cuda_without_a_usable_device_is_a_typed_error_that_says_why() -> None:
    code = (
        "import cuasync\n"
        "try:\n"
        "    cuasync.backend_name()\n"
        "except cuasync.errors.BackendUnavailableError as e:\n"
        "    print('typed:', e)\n"
    )
    # No device visible: on a GPU machine as on one without a driver, cuda cannot run.
    r = run(code, CUASYNC_BACKEND="cuda", CUDA_VISIBLE_DEVICES="")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("typed:")
    assert "CUASYNC_BACKEND=cuda" in r.stdout and "emulator" in r.stdout


def test_unknown_backend_value_is_rejected_with_the_choices() -> None:
    # Variables are read at first use (so that a test runner can set them after import).
    r = run("import cuasync; cuasync.backend_name()", CUASYNC_BACKEND="opencl")
    assert r.returncode != 0
    assert "CUASYNC_BACKEND must be one of auto, cuda, emulator" in r.stderr


def test_emulated_device_count_follows_the_environment() -> None:
    r = run(
        "import cuasync; print(cuasync.device_count())",
        CUASYNC_BACKEND="emulator",
        CUASYNC_EMU_DEVICES="3",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "3"


class _FakeDriver:
    """The few driver calls the probe makes, answering for a driver of ``version``."""

    CUDA_VERSION = 13040  # the headers cuda-bindings 13.4 was built on

    def __init__(self, version: int) -> None:
        self.version = version

    def cuInit(self, flags: int) -> tuple[int]:
        return (0,)

    def cuDriverGetVersion(self) -> tuple[int, int]:
        return 0, self.version

    def cuDeviceGetCount(self) -> tuple[int, int]:
        return 0, 1


def test_a_driver_older_than_the_bindings_gets_a_reason_that_names_the_fix(monkeypatch) -> None:
    from cuasync._backends import cuda
    from cuasync.errors import BackendUnavailableError

    monkeypatch.setattr(cuda, "_load_driver", lambda: _FakeDriver(12080))
    reason = cuda.probe()
    assert reason is not None and "\n" not in reason
    assert "the NVIDIA driver supports CUDA 12.8" in reason
    assert "cuda-bindings 13 needs a driver for CUDA 13.0 or newer" in reason
    assert "upgrade the NVIDIA driver (R580 or newer)" in reason
    assert "cuda-bindings 12 with nvidia-cuda-nvrtc-cu12 (that combination is not tested)" in reason
    with pytest.raises(
        BackendUnavailableError, match=r"cannot run here: the NVIDIA driver supports CUDA 12\.8"
    ):
        cuda.CudaBackend()

    for version in (13000, 13020, 14000):  # a driver for CUDA 13.x or newer passes the check
        monkeypatch.setattr(cuda, "_load_driver", lambda v=version: _FakeDriver(v))
        assert cuda.probe() is None, version
