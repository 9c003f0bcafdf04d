"""CUASYNC_BACKEND selection, run in fresh interpreters (the choice is made once per process)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ON_EMULATOR


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


@pytest.mark.skipif(not ON_EMULATOR, reason="this machine has a GPU: cuda is available")
def test_cuda_without_driver_is_a_typed_error_that_says_why() -> None:
    code = (
        "import cuasync\n"
        "try:\n"
        "    cuasync.backend_name()\n"
        "except cuasync.errors.BackendUnavailableError as e:\n"
        "    print('typed:', e)\n"
    )
    r = run(code, CUASYNC_BACKEND="cuda")
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
