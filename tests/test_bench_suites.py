"""``python -m cuasync.bench``: every suite runs to the end and reports its rows."""

from __future__ import annotations

import json
from pathlib import Path

import conftest
import pytest

import cuasync

SUITES = ["completion", "launch", "graphs", "transfers", "priority"]


@pytest.mark.parametrize("suite", SUITES)
def test_a_bench_suite_runs_and_writes_its_rows(suite: str, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = conftest.run_python(
        "-m", "cuasync.bench", suite, "--quick", "--json", str(out), timeout=300
    )
    assert "suite" not in done.stderr  # no progress bar off a terminal
    data = json.loads(out.read_text())
    rows = [r for r in data["rows"] if r["suite"] == suite]
    assert rows, data
    assert data["meta"]["backend"] in ("cuda", "emulator")
    if suite == "completion":
        names = {r["name"] for r in rows}
        # the per-op cost breakdown, with the driver real and stubbed
        assert "submit: op.submit_on(stream) (driver real)" in names
        assert "submit: op.submit_on(stream) (driver stubbed)" in names
        assert "asyncio: whole await, driver stubbed (inline)" in names
        concurrent = next(r for r in rows if "concurrent cuasync awaits" in r["name"])
        assert "spins skipped" in concurrent["note"]
    if suite == "priority":
        names = {r["name"] for r in rows}
        assert "tiny kernel under batch load, default priority" in names
        greatest = cuasync.Device(0).stream_priority_range.greatest
        assert f"tiny kernel under batch load, priority {greatest}" in names
