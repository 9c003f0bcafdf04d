"""Every program in examples/ runs to completion (exit code 0) in a fresh interpreter; the
service and its load script are run by tests/project/test_service_example.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Programs that do not run to completion on their own, and the test that runs them.
ELSEWHERE = {
    "torch_service.py": "a server: tests/project/test_service_example.py drives it",
    "load.py": "starts servers: tests/project/test_service_example.py runs it on the emulator",
    # (a fresh interpreter of it starts a Ray cluster of its own: 15 s of the suite's time)
    "ray_workers.py": "tests/project/test_ray.py runs its main() over the suite's Ray cluster",
}
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py") if p.name not in ELSEWHERE)


def test_there_are_examples() -> None:
    assert EXAMPLES, "examples/ holds no programs"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("PYTHONUNBUFFERED", "1")
    proc = subprocess.run(
        [sys.executable, str(path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, (
        f"{path.name} exited with {proc.returncode}\n"
        f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
    )


def test_the_demo_runs_and_says_why_it_is_not_on_a_gpu() -> None:
    env = {k: v for k, v in os.environ.items() if k != "CUASYNC_BACKEND"}  # auto, as installed
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-m", "cuasync"], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "all results checked" in proc.stdout
    if "backend 'emulator'" in proc.stdout:
        from cuasync._backends import cuda

        assert f"(not on a GPU: {cuda.probe()})" in proc.stdout
    else:
        assert "backend 'cuda'" in proc.stdout and "not on a GPU" not in proc.stdout
