"""Shared fixtures: the event-loop matrix, emulator knobs, leak checks."""

from __future__ import annotations

import gc
import os

import pytest

# Two emulated devices, so that multi-device behaviour is tested in CI (ignored on cuda).
os.environ.setdefault("CUASYNC_EMU_DEVICES", "2")

import cuasync

BACKEND = cuasync.backend_name()
ON_EMULATOR = BACKEND == "emulator"

pytest_plugins = ["pytester"]


def pytest_report_header(config: pytest.Config) -> str:
    dev = cuasync.Device(0)
    return f"cuasync backend: {BACKEND} ({dev.name}); CUASYNC_SPIN_BUDGET_US={os.environ.get('CUASYNC_SPIN_BUDGET_US', '20')}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_gpu = pytest.mark.skip(reason="needs a real GPU (run with CUASYNC_BACKEND=cuda)")
    skip_emu = pytest.mark.skip(reason="uses emulator knobs (delay, pause, fault injection)")
    for item in items:
        if "gpu" in item.keywords and ON_EMULATOR:
            item.add_marker(skip_gpu)
        if "emulator_only" in item.keywords and not ON_EMULATOR:
            item.add_marker(skip_emu)


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {}), id="asyncio"),
        pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
        pytest.param(("trio", {}), id="trio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, object]]:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def emu():
    """The emulator knobs, reset after the test."""
    import cuasync.emulator as emulator

    if not ON_EMULATOR:
        pytest.skip("uses emulator knobs")
    yield emulator
    emulator.set_delay(0)


def settle() -> None:
    """Wait until every completion has been observed (background watcher included)."""
    import time

    def in_flight() -> bool:
        s = cuasync.stats()
        return bool(s.slots_armed or s.callbacks_pending)

    gc.collect()
    deadline = time.monotonic() + 10
    while in_flight() and time.monotonic() < deadline:
        for ordinal in range(cuasync.device_count()):
            cuasync.Device(ordinal).synchronize()
        gc.collect()
        time.sleep(0.001)  # polling a condition with a deadline, not synchronization by sleep


@pytest.fixture
def baseline():
    """Asserts that memory and slots return to where they were."""
    settle()
    dev = cuasync.Device(0)
    before = (dev.memory_info().used, cuasync.stats().slots_armed)
    yield before
    settle()
    gc.collect()
    after = (dev.memory_info().used, cuasync.stats().slots_armed)
    assert after == before, f"leaked: (bytes, slots) before {before}, after {after}"
