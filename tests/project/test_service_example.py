"""The inference service example (examples/torch_service.py) and its load script, on any
backend: the cuasync-only route's results, /health answering while a request is held in
flight behind a gate, and examples/load.py end to end on the emulator."""

from __future__ import annotations

import asyncio
import importlib.util
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
        assert health == {
            "ok": True,
            "mode": mode,
            "in_flight": 0,
            "backend": cuasync.backend_name(),
            "model": None,
        }


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


def test_load_script_runs_end_to_end_on_the_emulator() -> None:
    proc = run_python(
        str(EXAMPLES / "load.py"),
        "--backend=emulator",
        "--quick",
        "--duration=0.4",
        "--modes=cuasync,sync",
        timeout=240,
    )
    out = proc.stdout
    for case in ("anchor", "latency", "small"):
        for mode in ("cuasync", "sync"):
            rows = [line.split() for line in out.splitlines() if line.startswith(f"{case} ")]
            row = [r for r in rows if r[1] == mode]
            assert len(row) == 1, out
            assert int(row[0][3]) > 0 and row[0][-1] == "0", out  # requests done, no errors
    # issue 32's targets, as ratios of this run's own figures
    targets = out.split("-- targets (issue 32)\n", 1)[1].splitlines()
    assert targets[0].startswith("latency, 1 at a time: cuasync p50 / sync p50 = "), out
    assert targets[1].startswith("anchor: cuasync req/s / the best other mode's (sync) = "), out
    assert targets[2].startswith("anchor: cuasync /health p99 / the best other mode's (sync)"), out
    for line in targets[:3]:
        assert float(line.split(" = ")[1].split()[0]) > 0, line


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
    assert format_targets(anchor, ["cuasync", "poll"])[0] == (
        "anchor: cuasync req/s / the best other mode's (poll) = 1.010 (target >= 0.98;"
        " rounds: cuasync 98.0-104.0, poll 95.0-105.0 req/s)"
        "; round by round: median 1.011, 0.990-1.032"
    )
    results = {
        ("latency", "cuasync"): Summary.of([result(10, 4.0)]),
        ("latency", "sync"): Summary.of([result(10, 5.0)]),
    }
    assert format_targets(results, ["cuasync", "sync"]) == [
        "latency, 1 at a time: cuasync p50 / sync p50 = 0.800 (target <= 1.02)"
    ]  # (one round: no round-by-round ratio)
    results = {
        ("latency", "cuasync"): Summary.of([result(10, 4.0), result(10, 6.0)]),
        ("latency", "sync"): Summary.of([result(10, 5.0), result(10, 5.0)]),
    }
    assert format_targets(results, ["cuasync", "sync"])[0].endswith(
        "; round by round: median 1.000, 0.800-1.200"
    )


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
