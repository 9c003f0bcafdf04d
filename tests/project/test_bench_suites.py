"""``python -m cuasync.bench``: every suite runs to the end and reports its rows."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any

import helpers
import pytest

import cuasync

SUITES = [
    "completion", "launch", "graphs", "transfers", "priority", "ops", "interop", "requests",
    "cancel",
]  # fmt: skip
# the test extra installs matplotlib (CI plots); a GPU machine without an index may lack it
PLOTS = importlib.util.find_spec("matplotlib") is not None


@pytest.mark.parametrize("suite", SUITES)
def test_a_bench_suite_runs_and_writes_its_rows(suite: str, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    image = tmp_path / "bench.png"  # (the completion suite's latency rows drawn too)
    plot = ["--plot", str(image)] if suite == "completion" and PLOTS else []
    done = helpers.run_python(
        "-m", "cuasync.bench", suite, "--quick", "--json", str(out), *plot, timeout=300
    )
    assert "suite" not in done.stderr  # no progress bar off a terminal
    if plot:  # every latency row drawn into one image
        drawn = int(done.stdout.rsplit("plot: ", 1)[1].split()[0])
        assert drawn >= 10  # the await, executor and breakdown rows
        assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
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
        # the same gather with the start-up heap left to the cyclic GC, its passes counted
        thawed = next(r for r in rows if r["name"].endswith("awaits, heap not frozen"))
        assert "collections per round by generation" in thawed["note"]
        # the default-spin awaits of every loop, with the paths they completed by
        # (interleaved with the raw loop where there is one: a GPU)
        awaits = [
            r for r in rows if r["name"].endswith(" us") and "await tiny kernel, spin" in r["name"]
        ]
        assert {r["name"].split(":")[0] for r in awaits} >= {"asyncio"}
        raw = any(r["name"].endswith("cuStreamSynchronize, interleaved") for r in rows)
        for r in awaits:
            assert "inline" in r["note"]
            assert ("interleaved with the raw loop" in r["note"]) == raw, r
        # spin 0: the awaits the reactor woke, apart from those that finished inline
        spin0 = next(
            r for r in rows if r["name"] == "asyncio: cuasync await tiny kernel, spin 0 (reactor)"
        )
        reactor = int(spin0["note"].split("reactor ")[1].split(",")[0])
        woken = [r for r in rows if r["name"] == "asyncio: " + WOKEN]  # (the same loop's)
        if reactor > 50:  # (the 50 warm-up awaits count in the stats, not in the rows)
            assert woken, spin0
        if woken:
            count = int(woken[0]["note"].split(" of ")[0])
            assert 0 < count <= reactor  # (the 50 warm-up awaits are counted in the stats only)
        # the loop's lag while new expressions compile: awaited, and inline (the control)
        first_use = [r for r in rows if "first use of 3 new expressions" in r["name"]]
        assert {r["name"].rsplit(", ", 1)[1] for r in first_use} >= {
            "awaited",
            "compiled inline by .sync() (control)",
        }
        # a new process's first op of each kernel family: awaited against the 5 ms target,
        # and run inline (the control) on the first loop
        families = [r for r in rows if "first op of 16 kernel families" in r["name"]]
        assert {r["name"].rsplit(", ", 1)[1] for r in families} >= {
            "awaited",
            "run inline by .sync() (control)",
        }
        for r in families:
            assert ("target <= 5 ms" in r["note"]) == r["name"].endswith("awaited"), r
        targets = [r for r in rows if r["name"].startswith("asyncio: spin-0 p50 - raw p50")]
        assert len(targets) == raw  # (the ratios need the raw loop: a GPU)
        for target in targets:
            expected = "of the awaits the reactor woke" if woken else "of every spin-0 await"
            assert target["note"] == expected
    if suite == "ops":
        _check_ops_rows(rows, data["meta"]["backend"])
    if suite == "interop":  # (torch and CuPy where installed, on a GPU: their rows too)
        assert any(r["name"].startswith("cuasync.from_dlpack(producer)") for r in rows) or any(
            r["name"].startswith("DLPack import: cuasync / CuPy") for r in rows
        ), rows
    if suite == "requests":  # host-inclusive rows: both heaps, the wake rows and targets
        names = {r["name"] for r in rows}
        assert {
            "small op add: cuasync (heap frozen)",
            "small op add: cuasync (heap collectable)",
        } <= names
        assert "asyncio: await of 5 ms of work" in names
        assert "asyncio: cross-thread wake floor (5 ms apart)" in names
        assert "asyncio 5 ms: await - .sync() (target <= 25 us)" in names
        assert "asyncio 0.3 ms: CPU above idle while awaiting (target <= 10 %)" in names
        floor = (
            "asyncio: CPU above idle, the loop's own timer wake every 0.3 ms (no GPU, no cuasync)"
        )
        assert floor in names  # (the CPU floor of any await that wakes by its loop's timer)
        # ...and of an early wake: that, the submission and the spin, from the same run
        assert "asyncio: CPU floor of an early wake at 0.3 ms" in names
        assert "uvloop 5 ms: CPU above idle over the early wake's floor (%)" in names or (
            "uvloop: await of 5 ms of work" not in names  # (no uvloop here)
        )
        if sys.platform.startswith("linux"):  # (timerfd: measured, not nan)
            assert math.isfinite(next(r["value"] for r in rows if r["name"] == floor))
    if suite == "cancel":  # the queue both ways, its targets, the word's host cost
        names = {r["name"] for r in rows}
        assert {
            "cancel: stream first-to-last kernel, skip",
            "cancel: stream first-to-last kernel, no skip",
            "cancel: surviving requests p50, skip",
            "cancel: stream time, skip / no skip",
            "cancel: survivors' p50, skip / no skip",
            "cancel: host cost of carrying the word (build)",
        } <= names
        if data["meta"]["backend"] == "emulator":  # cancelled chains returned at once
            skipped = next(r for r in rows if r["name"].startswith("cancel: kernels skipped"))
            assert skipped["value"] > 0
    if suite == "priority":
        names = {r["name"] for r in rows}
        assert "tiny kernel under batch load, default priority" in names
        greatest = cuasync.Device(0).stream_priority_range.greatest
        assert f"tiny kernel under batch load, priority {greatest}" in names


#: The row of the spin-0 awaits the reactor woke (after each loop's name).
WOKEN = "cuasync await tiny kernel, spin 0, woken by the reactor"


def _check_ops_rows(rows: list[dict[str, Any]], backend: str) -> None:
    """Each compared call has its row (named by its call and sizes), timed in 3 rounds;
    with torch on a GPU, each target line against torch is there too."""
    calls = [
        *(f"cuasync {op}(x, axis={axis}, out=out), x (" for op, axis in _OPS_REDUCTIONS),
        "cuasync add(a, b, out=c), float32, ",
        "cuasync add(a, b, out=c), bfloat16, ",
        "cuasync scatter(bins, idx, upd, axis=0, mode='add', out=bins), ",
        "cuasync take_along_axis(x, idx, axis=1, out=out), x (",
    ]
    for call in calls:
        timed = [r for r in rows if r["name"].startswith(call)]
        assert timed, call
        for r in timed:  # --quick: 3 rounds
            assert len(r["note"].split("; rounds ")[1].split(", ")) == 3, r
    adds = [r for r in rows if r["name"].startswith("cuasync add(a, b, out=c), float32, ")]
    assert len(adds) == 2  # 64 and 256 MiB (1 and 4 MiB on the emulator)
    if backend == "cuda" and importlib.util.find_spec("torch") is not None:
        targets = {r["name"] for r in rows if "/ torch's (target" in r["name"]}
        assert len(targets) == 5 + 3 + 2 + 1, targets  # reductions, adds, scatter, gather


_OPS_REDUCTIONS = [
    ("sum", None),
    ("sum", -1),
    ("sum", 0),
    ("max", None),
    ("max", 0),
    ("min", None),
    ("min", 0),
]


def test_plot_without_matplotlib_says_which_extra_before_measuring() -> None:
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from cuasync.bench.__main__ import main\n"
        "from cuasync.errors import MissingDependencyError\n"
        "try:\n"
        "    main(['completion', '--plot', 'never.png'])\n"
        "except MissingDependencyError as e:\n"
        "    print('refused:', e)\n"
    )
    out = helpers.run_python("-c", code, timeout=120).stdout
    assert "refused: --plot needs matplotlib: pip install 'cuasync[plot]'" in out
    assert "== completion" not in out  # nothing was measured first


def test_interleaved_candidates_take_turns() -> None:
    # The rows whose ratio is a target time their candidates in turns of `block` calls
    # (each sample one call), the warm-up first, `between` after each turn, untimed.
    import asyncio

    from cuasync.bench._util import interleaved, interleaved_awaits

    calls: list[str] = []
    samples = interleaved(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
        5,
        block=2,
        warmup=1,
        between=lambda: calls.append("|"),
    )
    assert "".join(calls) == "ab|aa|bb|aa|bb|a|b|"
    assert [len(samples["a"]), len(samples["b"])] == [5, 5]
    assert all(isinstance(ns, int) and ns >= 0 for ns in samples["a"] + samples["b"])

    order: list[str] = []

    async def awaited() -> None:
        order.append("w")

    async def main() -> tuple[list[int], list[int]]:
        return await interleaved_awaits(awaited, lambda: order.append("c"), 45, block=20)

    awaits, blocking = asyncio.run(main())
    assert (len(awaits), len(blocking)) == (45, 45)
    assert "".join(order[100:]) == "w" * 20 + "c" * 20 + "w" * 20 + "c" * 20 + "w" * 5 + "c" * 5
