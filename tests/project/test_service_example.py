"""The inference service example (examples/torch_service.py) and its load script, on any
backend: the cuasync-only route's results, /health answering while a request is held in
flight behind a gate, and examples/load.py end to end on the emulator (closed and open
loop), its open loop's schedule on a virtual clock."""

from __future__ import annotations

import asyncio
import importlib.util
import re
import selectors
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from helpers import run_python

import cuasync
import cuasync.testing

pytest.importorskip("starlette", reason="the service example needs starlette (the test extra)")
pytest.importorskip("uvicorn", reason="the service example needs uvicorn (the test extra)")
httpx = pytest.importorskip("httpx", reason="the service tests need httpx (the test extra)")

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
X = [-3.0, -1.0, -0.25, 0.0, 0.5, 2.0, 7.0]


def load_example(file: str) -> ModuleType:
    """examples/``file`` as a module (examples/ is not a package)."""
    name = "cuasync_example_" + file.removesuffix(".py")
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / file)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules[name]


service = load_example("torch_service.py")


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {}), id="asyncio"),
        pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, object]]:
    """The service is asyncio code (as under uvicorn): asyncio and uvloop, not trio."""
    return request.param


def client_for(mode: str):
    app = service.create_app(mode)  # no torch model: /infer answers 503
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://service")


def expected(x: list[float], scale: float, shift: float) -> np.ndarray:
    return np.tanh(np.float32(scale) * np.asarray(x, np.float32) + np.float32(shift))


@pytest.mark.parametrize("mode", service.MODES)
async def test_compute_route_results(anyio_backend: object, mode: str) -> None:
    async with client_for(mode) as client:
        response = await client.post("/compute", json={"x": X, "scale": 0.5, "shift": 0.25})
        assert response.status_code == 200, response.text
        y = np.asarray(response.json()["y"], np.float32)
        np.testing.assert_allclose(y, expected(X, 0.5, 0.25), rtol=1e-6, atol=1e-6)

        response = await client.post("/compute", json={"x": [1.0, 2.0]})  # scale 1, shift 0
        np.testing.assert_allclose(response.json()["y"], np.tanh([1.0, 2.0]), rtol=1e-6)

        health = (await client.get("/health")).json()
        wake = health.pop("wake", None)
        assert health == {
            "ok": True,
            "mode": mode,
            "in_flight": 0,
            "backend": cuasync.backend_name(),
            "model": None,
        }
        if mode == "cuasync":  # the loop's early-wake counters, the process's so far
            assert wake is not None and set(wake) == set(service.WAKE_COUNTERS), health
            assert all(type(v) is int and v >= 0 for v in wake.values()), wake
        else:
            assert wake is None, health


async def test_bad_requests_get_400_and_infer_without_torch_503(anyio_backend: object) -> None:
    async with client_for("cuasync") as client:
        bodies: list[object] = [{"y": [1.0]}, [1.0], {"x": [[1.0], [2.0]]}, {"x": []}, {"x": ["a"]}]
        for body in bodies:
            response = await client.post("/compute", json=body)
            assert response.status_code == 400, body
            assert "x" in response.json()["error"]
        response = await client.post("/compute", content=b"{not json")
        assert response.status_code == 400
        assert response.json() == {"error": "the body is not JSON"}
        response = await client.post("/infer")
        assert response.status_code == 503
        assert "/compute runs on any backend" in response.json()["error"]


@pytest.mark.parametrize("mode", ["cuasync", "poll", "executor"])
async def test_health_answers_while_a_request_is_held_in_flight(
    anyio_backend: object, mode: str
) -> None:
    async with client_for(mode) as client:
        # A first request compiles the fused kernel: on a GPU, loading a module waits
        # for the device's pending work, which must not include a closed gate.
        assert (await client.post("/compute", json={"x": X})).status_code == 200
        with cuasync.testing.gate() as gate:  # holds every stream of the default policy
            held = asyncio.create_task(client.post("/compute", json={"x": X, "scale": 2.0}))
            for _ in range(2000):
                health = await client.get("/health")
                assert health.status_code == 200
                if health.json()["in_flight"] == 1:
                    break
                await asyncio.sleep(0.001)
            assert health.json()["in_flight"] == 1, "the request never got in flight"
            for _ in range(5):  # the loop stays free: more probes answer, the request waits
                assert (await client.get("/health")).json()["in_flight"] == 1
                await asyncio.sleep(0.005)
            assert not held.done()
            gate.open()
            response = await asyncio.wait_for(held, timeout=30)
        assert response.status_code == 200
        np.testing.assert_allclose(
            response.json()["y"], expected(X, 2.0, 0.0), rtol=1e-6, atol=1e-6
        )
        assert (await client.get("/health")).json()["in_flight"] == 0


def run_load_on_the_emulator(*args: str) -> str:
    """What examples/load.py prints for a short run of cuasync and sync on the emulator."""
    proc = run_python(
        str(EXAMPLES / "load.py"),
        "--backend=emulator",
        "--quick",
        "--duration=0.4",
        "--modes=cuasync,sync",
        *args,
        timeout=240,
    )
    return proc.stdout


def test_load_script_runs_end_to_end_on_the_emulator() -> None:
    out = run_load_on_the_emulator()
    for case in ("anchor", "latency", "small"):
        for mode in ("cuasync", "sync"):
            rows = [line.split() for line in out.splitlines() if line.startswith(f"{case} ")]
            row = [r for r in rows if r[1] == mode]
            assert len(row) == 1, out
            assert int(row[0][3]) > 0 and row[0][-1] == "0", out  # requests done, no errors
    # issue 32's targets, as ratios of this run's own figures, after the load's shape
    targets = out.split("-- targets (issue 32)\n", 1)[1].splitlines()
    assert targets[0].startswith("load: closed loop "), out
    assert targets[1].startswith("latency, 1 at a time: cuasync p50 / sync p50 = "), out
    assert targets[2].startswith("anchor: cuasync req/s / the best other mode's (sync) = "), out
    assert targets[3].startswith("anchor: cuasync /health p99 / the best other mode's (sync)"), out
    for line in targets[1:4]:
        assert float(line.split(" = ")[1].split()[0]) > 0, line
    assert "behind" not in out, out  # (an open loop's column and counts)
    # what the loop's early wake did in cuasync mode, from the server's own counters
    wakes = out.split("-- the loop's early wake in cuasync mode\n", 1)[1].splitlines()
    for line, case in zip(wakes, ("anchor", "latency", "small"), strict=False):
        assert re.fullmatch(
            rf"{case}, cuasync's early wake \(the server's counters, every round\):"
            r" [\d.]+ wakes \([\d.]+ late\) and [\d.]+ missed windows a request,"
            r" [\d.]+ us spun a request,"
            r" the server's longest spin so far \d+ us",
            line,
        ), out
    assert len(wakes) >= 3, out


def test_load_script_runs_an_open_loop_on_the_emulator() -> None:
    out = run_load_on_the_emulator("--cases=anchor,latency", "--rate=50")
    assert "; open loop at 50 req/s" in out.splitlines()[0], out
    header = next(line.split() for line in out.splitlines() if line.startswith("case "))
    assert header[-2:] == ["behind", "errors"], out
    for case in ("anchor", "latency"):
        for mode in ("cuasync", "sync"):
            row = [r for r in (line.split() for line in out.splitlines()) if r[:2] == [case, mode]]
            assert len(row) == 1, out
            assert int(row[0][3]) > 0 and row[0][-2].isdigit() and row[0][-1] == "0", out
    targets = out.split("-- targets (issue 32)\n", 1)[1].splitlines()
    assert targets[0].startswith("load: open loop at 50 req/s ("), out
    assert targets[1].startswith("latency, at most 1 at a time: cuasync p50 / sync p50 = "), out
    # every mode served the schedule: its rate and how much of it ran behind, no ratio
    for line, case in ((targets[2], "latency"), (targets[3], "anchor")):
        served = re.fullmatch(
            rf"{case}, served: cuasync [\d.]+ req/s \((\d+) of 20 behind\),"
            r" sync [\d.]+ req/s \((\d+) of 20 behind\)",
            line,
        )
        assert served is not None, out  # 20 due: 0.4 s at 50 req/s
    assert targets[4].startswith("anchor: cuasync /health p99 / the best other mode's (sync)"), out
    assert "req/s / the best other mode's" not in out, out


def test_load_script_takes_the_median_of_alternated_rounds() -> None:
    load = load_example("load.py")
    Result, Summary, format_targets = load.Result, load.Summary, load.format_targets

    def result(per_second: float, p50_ms: float) -> Any:
        return Result(int(per_second), 1.0, [p50_ms / 1000] * 3, [0.001], 0.5, 0, None)

    runs = [result(100, 5.0), result(300, 1.0), result(200, 3.0)]
    summary = Summary.of(runs)
    assert (summary.completed, summary.per_second, summary.p50_s) == (600, 200.0, 0.003)
    assert summary.per_second_range == (100.0, 300.0)
    assert summary.per_second_rounds == (100.0, 300.0, 200.0)  # (in the rounds' order)
    # round by round: 98/95 and 104/105 (a host that drifted between the rounds)
    anchor = {
        ("anchor", "cuasync"): Summary.of([result(98, 4.0), result(104, 4.0)]),
        ("anchor", "poll"): Summary.of([result(95, 4.0), result(105, 4.0)]),
    }
    closed_loop = "load: closed loop (each client sends its next request when its last one answers)"
    assert format_targets(anchor, ["cuasync", "poll"])[:2] == [
        closed_loop,
        "anchor: cuasync req/s / the best other mode's (poll) = 1.010 (target >= 0.98;"
        " rounds: cuasync 98.0-104.0, poll 95.0-105.0 req/s)"
        "; round by round: median 1.011, 0.990-1.032",
    ]
    results = {
        ("latency", "cuasync"): Summary.of([result(10, 4.0)]),
        ("latency", "sync"): Summary.of([result(10, 5.0)]),
    }
    assert format_targets(results, ["cuasync", "sync"]) == [
        closed_loop,
        "latency, 1 at a time: cuasync p50 / sync p50 = 0.800 (target <= 1.02)",
    ]  # (one round: no round-by-round ratio)
    results = {
        ("latency", "cuasync"): Summary.of([result(10, 4.0), result(10, 6.0)]),
        ("latency", "sync"): Summary.of([result(10, 5.0), result(10, 5.0)]),
    }
    assert format_targets(results, ["cuasync", "sync"])[1].endswith(
        "; round by round: median 1.000, 0.800-1.200"
    )
    assert format_targets({}, ["cuasync", "sync"]) == []  # (no targets: no load line)


def test_load_script_under_a_rate_gives_each_modes_rate_not_a_ratio() -> None:
    load = load_example("load.py")

    def scheduled(completed: int, p50_ms: float, due: int, behind: int) -> Any:
        """A round at 100 req/s: ``due`` requests over due / 100 s."""
        latencies = [p50_ms / 1000] * 3
        return load.Result(completed, 9.9, latencies, [0.001], 0.5, 0, None, due, behind, due / 100)

    runs = [scheduled(100, 4.0, 100, 0), scheduled(97, 4.0, 100, 3)]
    summary = load.Summary.of(runs)
    # req/s over the schedule's span (1 s), not the 9.9 s the round took; sums over rounds
    assert summary.per_second_rounds == (100.0, 97.0)
    assert (summary.completed, summary.due, summary.behind) == (197, 200, 3)
    results = {
        ("latency", "cuasync"): load.Summary.of([scheduled(100, 4.0, 100, 0)]),
        ("latency", "sync"): load.Summary.of([scheduled(100, 5.0, 100, 1)]),
        ("anchor", "cuasync"): load.Summary.of([scheduled(100, 4.0, 100, 0)]),
        ("anchor", "sync"): summary,
    }
    assert load.format_targets(results, ["cuasync", "sync"], 100.0) == [
        "load: open loop at 100 req/s (requests start on schedule, at most the case's"
        " concurrency in flight; latency from each one's due time; behind schedule:"
        " started over 10.00 ms late, or not at all)",
        "latency, at most 1 at a time: cuasync p50 / sync p50 = 0.800 (target <= 1.02)",
        "latency, served: cuasync 100.0 req/s (0 of 100 behind),"
        " sync 100.0 req/s (1 of 100 behind)",
        "anchor, served: cuasync 100.0 req/s (0 of 100 behind), sync 98.5 req/s (3 of 200 behind)",
        "anchor: cuasync /health p99 / the best other mode's (sync) = 1.000"
        " (target: unaffected, <= 1.0)",
    ]
    server = load.ServerSpec((), (), "a server")
    cases = [load.Case("anchor", server, "/compute", b"{}", 32)]
    anchor_only = {k: v for k, v in results.items() if k[0] == "anchor"}
    table = load.format_table(cases, ["cuasync", "sync"], anchor_only, 100.0).splitlines()
    assert table[0].split()[-2:] == ["behind", "errors"]
    row = table[3].split()  # (sync's: 98.5 req/s, the median; 3 behind, no errors)
    assert (row[:5], row[-2:]) == (["anchor", "sync", "32", "197", "98.5"], ["3", "0"])
    closed = load.format_table(cases, ["cuasync", "sync"], anchor_only).splitlines()
    assert "behind" not in closed[0]
    # one interval late is on schedule, but no less than the loop's timer resolution
    assert load.behind_after(100.0) == 0.01
    assert load.behind_after(5000.0) == load.LATE_FLOOR_S == 0.001


def test_load_script_pools_the_rounds_health_probes() -> None:
    """One round's /health p99 rests on its few slowest probes; the target line also
    gives the p99 of every round's probes together."""
    load = load_example("load.py")

    def one_round(slow: int, slow_ms: float) -> Any:
        health = [0.001] * (100 - slow) + [slow_ms / 1000] * slow
        return load.Result(100, 1.0, [0.004] * 3, health, 0.5, 0, None)

    results = {  # cuasync: 2 slow probes a round; poll: 4 in one round, none in the other
        ("anchor", "cuasync"): load.Summary.of([one_round(2, 9.0), one_round(2, 9.0)]),
        ("anchor", "poll"): load.Summary.of([one_round(4, 5.0), one_round(0, 5.0)]),
    }
    assert results["anchor", "poll"].health_p99_s == pytest.approx(0.003)  # (5 and 1 ms)
    assert load.format_targets(results, ["cuasync", "poll"])[2] == (
        "anchor: cuasync /health p99 / the best other mode's (poll) = 3.000"
        " (target: unaffected, <= 1.0); round by round: median 5.400, 1.800-9.000"
        "; the rounds' probes pooled: 1.800"
    )


def test_load_script_refuses_a_rate_that_is_not_positive(
    capsys: pytest.CaptureFixture[str],
) -> None:
    load = load_example("load.py")
    for rate in ("0", "-5", "inf", "nan"):
        with pytest.raises(SystemExit):
            load.parse_args(["--backend=emulator", f"--rate={rate}"])
        assert "--rate must be a positive number" in capsys.readouterr().err
    assert load.parse_args(["--backend=emulator"]).rate is None  # (a closed loop)
    assert load.parse_args(["--backend=emulator", "--rate=2.5"]).rate == 2.5


class JumpingSelector(selectors.SelectSelector):
    """A selector that never waits: asked to wait for ``timeout`` s (nothing is ready to
    run, the next timer is that far), it moves its loop's virtual clock by as much."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self.loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise RuntimeError("nothing to run and no timer: the test would hang")
        self.loop.virtual_s += timeout
        return super().select(0)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop on a virtual clock that moves only when nothing is ready to run,
    straight to the next timer: a sleep takes no real time, and what runs at which
    (virtual) time is the same on every run, whatever the machine's load."""

    def __init__(self) -> None:
        self.virtual_s = 0.0
        super().__init__(JumpingSelector(self))

    def time(self) -> float:
        return self.virtual_s


def open_loop_on_a_virtual_clock(
    service_s: float, *, count: int, rate: float, concurrency: int, duration: float
) -> tuple[Any, list[float], int]:
    """examples/load.py's ``open_loop`` against a server that answers each request in
    ``service_s`` (virtual) seconds: its outcome, when each request started (from the
    schedule's start) and the most requests in flight at once."""
    load = load_example("load.py")
    starts: list[float] = []
    in_flight = peak = 0

    async def main() -> Any:
        loop = asyncio.get_running_loop()
        start = loop.time()

        async def send() -> str | None:
            nonlocal in_flight, peak
            index = len(starts)
            starts.append(loop.time() - start)
            in_flight += 1
            peak = max(peak, in_flight)
            await asyncio.sleep(service_s)
            in_flight -= 1
            return None if index != 1 else "503: the second request fails"

        return await load.open_loop(
            send, count, rate, concurrency, start, start + duration, clock=loop.time
        )

    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        outcome = runner.run(main())
    return outcome, starts, peak


def test_open_loop_starts_each_request_when_it_is_due() -> None:
    # 100 req/s, answered in 5 ms, 2 at a time at most: the server keeps up
    outcome, starts, peak = open_loop_on_a_virtual_clock(
        0.005, count=1000, rate=100.0, concurrency=2, duration=0.095
    )
    assert starts == pytest.approx([i / 100 for i in range(10)], abs=1e-9)  # due before 0.095 s
    assert (outcome.due, outcome.behind, peak) == (10, 0, 1)
    assert (outcome.errors, outcome.first_error) == (1, "503: the second request fails")
    assert outcome.latencies_s == pytest.approx([0.005] * 9, abs=1e-9)
    # --requests bounds the schedule too
    outcome, starts, _ = open_loop_on_a_virtual_clock(
        0.005, count=4, rate=100.0, concurrency=2, duration=0.095
    )
    assert (outcome.due, outcome.behind, len(starts)) == (4, 0, 4)


def test_open_loop_queues_behind_a_slow_server_and_counts_it() -> None:
    # 100 req/s (one every 10 ms), answered in 28 ms, 2 at a time at most: a request due
    # while 2 are in flight waits for one to answer; more than 10 ms late is behind
    outcome, starts, peak = open_loop_on_a_virtual_clock(
        0.028, count=1000, rate=100.0, concurrency=2, duration=0.095
    )
    ms = [0, 10, 28, 38, 56, 66, 84, 94]  # due 0, 10, 20, ..., 70 ms: late 0, 0, 8, 8, 16, ...
    assert starts == pytest.approx([t / 1000 for t in ms], abs=1e-9)
    assert peak == 2  # (bounded: the client queues, it does not pile requests up)
    # due 80 and 90 ms have no slot before the end (0.095 s) and would start behind: they
    # never start; behind: those 2 and the 4 that started 16 and 24 ms late
    assert (outcome.due, outcome.behind) == (10, 6)
    # each latency from its due time: the 28 ms of service and the time queued
    latencies_ms = [28, 36, 36, 44, 44, 52, 52]  # (the second request failed: no latency)
    assert outcome.latencies_s == pytest.approx([t / 1000 for t in latencies_ms], abs=1e-9)


def test_load_script_refuses_other_hosts() -> None:
    import subprocess

    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "load.py"), "--host", "192.0.2.1", "--backend=emulator"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "loopback" in proc.stderr
