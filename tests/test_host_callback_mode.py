"""The whole op and cancellation contract also holds on the host-callback path.

``CUASYNC_HOST_SYNC`` is read once per process, so the suites run in a subprocess with
``CUASYNC_HOST_SYNC=callback`` (every await completes through ``cuLaunchHostFunc``), on
this suite's backend.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import run_python

HERE = Path(__file__).parent


@pytest.mark.skipif(
    os.environ.get("CUASYNC_HOST_SYNC") == "callback",
    reason="this whole run already uses CUASYNC_HOST_SYNC=callback",
)
def test_ops_and_cancellation_suites_pass_with_host_callbacks() -> None:
    suites = ["test_ops.py", "test_cancellation.py", "test_cross_stream.py", "test_graph.py"]
    r = run_python(
        "-m", "pytest", "-q", "-p", "no:cacheprovider", *suites,
        timeout=600, cwd=str(HERE), CUASYNC_HOST_SYNC="callback",
    )  # fmt: skip
    assert " passed" in r.stdout and " failed" not in r.stdout
