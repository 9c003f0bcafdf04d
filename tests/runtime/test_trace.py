"""NVTX tracing: off by default, ranges named after each op when on, a clear error
without the nvtx package."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
from helpers import run_script

import cuasync
from cuasync.errors import ArgumentError

#: A stand-in for the nvtx package that records what cuasync asks of it.
FAKE_NVTX = """
import atexit, threading

events = []
_stack = []
_ids = iter(range(1, 1 << 30))


class _Domain:
    def get_event_attributes(self, message=None, color=None, category=None, payload=None):
        return message

    def push_range(self, attributes):
        events.append(("push", attributes, threading.get_ident()))

    def pop_range(self):
        events.append(("pop", None, threading.get_ident()))

    def start_range(self, attributes):
        rid = next(_ids)
        events.append(("start", attributes, rid))
        return (rid, 0)

    def end_range(self, rid):
        events.append(("end", None, rid[0]))


def get_domain(name=None):
    assert name == "cuasync"
    return _Domain()


@atexit.register
def _dump():
    import json, os
    with open(os.environ["FAKE_NVTX_OUT"], "w") as f:
        json.dump(events, f)
"""


def _run_with_fake_nvtx(tmp_path: Path, code: str) -> list[list[Any]]:
    """Run ``code`` with CUASYNC_NVTX=1 and the fake nvtx; the events it recorded."""
    (tmp_path / "nvtx.py").write_text(FAKE_NVTX)
    out = tmp_path / "events.json"
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    run_script(code, PYTHONPATH=path, FAKE_NVTX_OUT=str(out), CUASYNC_NVTX="1")
    events: list[list[Any]] = json.loads(out.read_text())
    return events


def test_tracing_is_off_by_default() -> None:
    assert cuasync.tracing() is False


def test_each_op_gets_a_submit_range_and_an_in_flight_range(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import asyncio, numpy as np, cuasync, cuasync.testing
        assert cuasync.tracing()
        async def main():
            x = await cuasync.zeros((4,))
            host = await cuasync.from_host(np.ones(3)).then(lambda t: t.to_host())
            await cuasync.testing.sleep(10)
        asyncio.run(main())
        cuasync.zeros((2,)).sync()
        cuasync.trace(False)
        cuasync.zeros((2,)).sync()  # not traced
        """
    )
    events = _run_with_fake_nvtx(tmp_path, code)
    pushed = [name for kind, name, _ in events if kind == "push"]
    started = {rid: name for kind, name, rid in events if kind == "start"}
    ended = [rid for kind, _, rid in events if kind == "end"]
    assert pushed == ["submit zeros", "submit Then", "submit cuasync_sleep", "submit zeros"]
    assert sorted(started.values()) == ["Then", "cuasync_sleep", "zeros", "zeros"]
    assert sorted(ended) == sorted(started)  # every in-flight range was closed
    assert sum(kind == "pop" for kind, _, _ in events) == len(pushed)


def test_trace_true_with_the_real_nvtx_package() -> None:
    pytest.importorskip("nvtx")
    try:
        cuasync.trace(True)
        assert cuasync.tracing()
        assert cuasync.zeros((4,)).sync().shape == (4,)
    finally:
        cuasync.trace(False)
    assert not cuasync.tracing()


def test_trace_takes_a_bool() -> None:
    with pytest.raises(ArgumentError, match="True or False"):
        cuasync.trace("yes")  # type: ignore[arg-type]


def test_without_nvtx_turning_tracing_on_is_a_clear_error() -> None:
    code = """
        import sys
        sys.modules["nvtx"] = None  # as if it were not installed
        import cuasync
        from cuasync.errors import MissingDependencyError
        try:
            cuasync.trace(True)
        except MissingDependencyError as exc:
            assert isinstance(exc, ImportError)
            print("refused:", exc)
        assert not cuasync.tracing()
        assert cuasync.zeros((2,)).sync().shape == (2,)  # still usable, untraced
    """
    out = run_script(code).stdout
    assert "refused:" in out and "pip install 'cuasync[nvtx]'" in out


def test_without_nvtx_the_environment_switch_fails_the_first_op_clearly() -> None:
    code = """
        import sys
        sys.modules["nvtx"] = None
        import cuasync
        from cuasync.errors import MissingDependencyError
        assert cuasync.tracing()
        try:
            cuasync.zeros((2,)).sync()
        except MissingDependencyError as exc:
            print("refused:", exc)
    """
    out = run_script(code, CUASYNC_NVTX="1").stdout
    assert "refused:" in out and "CUASYNC_NVTX" in out
