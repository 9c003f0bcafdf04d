"""The whole op and cancellation contract also holds on the host-callback path.

``CUASYNC_HOST_SYNC`` is read once per process, so the suites run in a subprocess with
``CUASYNC_HOST_SYNC=callback`` (every await completes through ``cuLaunchHostFunc``), on
this suite's backend.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def test_ops_and_cancellation_suites_pass_with_host_callbacks() -> None:
    env = {**os.environ, "CUASYNC_HOST_SYNC": "callback"}
    suites = ["test_ops.py", "test_cancellation.py", "test_cross_stream.py", "test_graph.py"]
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *suites],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and " failed" not in r.stdout
