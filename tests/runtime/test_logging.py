"""The ``cuasync`` logger hierarchy: what is logged where, and that docs/logging.md lists
every logger the package uses."""

from __future__ import annotations

import logging
import pathlib
import re
import sys

import pytest
from helpers import run_script

import cuasync
from cuasync._backends import get_backend
from cuasync._transfers.staging import StagingPool

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_logger_is_documented() -> None:
    # Logger names are string literals "cuasync.<name>" (getLogger, report_once, ...);
    # "cuasync.kernels" is a package name.
    names = {
        name
        for path in (ROOT / "cuasync").rglob("*.py")
        for name in re.findall(r'"(cuasync\.[a-z_]+)"', path.read_text())
    } - {"cuasync.kernels"}
    assert {"cuasync.completion", "cuasync.host", "cuasync.memory"} <= names
    doc = (ROOT / "docs" / "logging.md").read_text()
    missing = sorted(n for n in names if f"`{n}`" not in doc)
    assert not missing, f"loggers missing from docs/logging.md: {missing}"


def test_no_handlers_configured_by_the_library() -> None:
    assert logging.getLogger("cuasync").handlers == []


def test_host_function_error_is_logged(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without a custom sys.unraisablehook (pytest installs one), as in an application.
    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)
    backend = get_backend()
    stream = cuasync.Device(0).new_stream()

    def bad() -> None:
        raise ValueError("raised in a host function")

    with caplog.at_level(logging.ERROR, logger="cuasync.host"):
        backend.launch_host_func(stream.handle, bad)
        backend.stream_synchronize(stream.handle)
    [record] = [r for r in caplog.records if r.name == "cuasync.host"]
    assert record.levelno == logging.ERROR
    assert "Exception ignored in cuasync host function" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is ValueError


def test_pool_trim_is_logged_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    pool = StagingPool()
    block = pool.acquire(1 << 20)
    del block
    with caplog.at_level(logging.DEBUG, logger="cuasync.staging"):
        freed = pool.trim()
    assert freed == 1 << 20
    assert [r.levelno for r in caplog.records if r.name == "cuasync.staging"] == [logging.DEBUG]


def test_slot_exhaustion_is_logged_once() -> None:
    out = run_script(
        """
        import asyncio, logging, numpy as np, cuasync, cuasync.testing as ct
        records = []
        class Keep(logging.Handler):
            def emit(self, record):
                records.append(record)
        logging.getLogger("cuasync").addHandler(Keep())
        async def main():
            with ct.gate():  # takes one of the 2 slots; the rest fall back
                ops = [cuasync.from_host(np.ones(2)).then(lambda t: t.to_host()) for _ in range(8)]
                gathered = asyncio.gather(*ops)
                await asyncio.sleep(0)
            await gathered
        asyncio.run(main())
        hits = [r for r in records if "completion slots are in use" in r.getMessage()]
        print(cuasync.stats().fallbacks > 1, len(hits), hits[0].name, hits[0].levelname)
        """,
        CUASYNC_SLOTS="2",
        CUASYNC_HOST_SYNC="reactor",  # slots exist on the reactor path only
    )
    assert out.stdout.strip() == "True 1 cuasync.completion WARNING"


def test_nothing_is_logged_at_info_on_the_hot_path(caplog: pytest.LogCaptureFixture) -> None:
    import numpy as np

    with caplog.at_level(logging.INFO, logger="cuasync"):
        for _ in range(20):
            cuasync.from_host(np.ones(4)).then(lambda t: t.to_host()).sync()
    assert [r for r in caplog.records if r.name.startswith("cuasync")] == []


@pytest.mark.anyio
async def test_fault_probes_are_logged_at_most_once_a_second(
    caplog: pytest.LogCaptureFixture, anyio_backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Work longer than ``CUASYNC_STALE_US`` is probed for a fault every few
    milliseconds; at DEBUG a small pipeline printed the probe's line 15-22 times. (The
    early wake is off: its watched awaits of steady work are probed only once their
    window ends, docs/completion.md.)"""
    import time

    import numpy as np

    import cuasync.testing as ct
    from cuasync._core import wake
    from cuasync._core.completion import PROBE_LOG_INTERVAL

    monkeypatch.setattr(wake.POLICY, "on", False)

    before = cuasync.stats().stale_probes
    start = time.monotonic()
    with caplog.at_level(logging.DEBUG, logger="cuasync.completion"):
        x = await cuasync.from_host(np.arange(1000.0))
        for _ in range(5):
            await ct.sleep(20_000)  # 20 ms of device time: probed while it runs
            await (x * 2 + 1).then(lambda t: t.to_host())
    elapsed = time.monotonic() - start
    probes = cuasync.stats().stale_probes - before
    lines = [r for r in caplog.records if "for a fault" in r.getMessage()]
    assert probes >= 2, "the pipeline's work was not probed: the test proves nothing"
    assert len(lines) <= 1 + int(elapsed / PROBE_LOG_INTERVAL), (len(lines), probes, elapsed)
