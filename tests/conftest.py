"""Shared fixtures: the event-loop matrix, emulator knobs, leak checks."""

from __future__ import annotations

import os

import pytest

# Two emulated devices, so that multi-device behaviour is tested in CI (ignored on cuda).
os.environ.setdefault("CUASYNC_EMU_DEVICES", "2")

import cuasync
import cuasync.testing

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
    cuasync.testing.settle()


@pytest.fixture
def baseline():
    """Asserts that memory (every device) and slots return to where they were."""
    with cuasync.testing.no_leaks() as before:
        yield before
