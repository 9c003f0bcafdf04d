"""The benchmark suites' progress bar: drawn on a terminal with tqdm, nothing otherwise."""

from __future__ import annotations

import io
import sys

import pytest

from cuasync.bench._progress import Progress
from cuasync.bench._util import Report


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _run_two_suites(progress: Progress) -> None:
    report = Report(on_row=progress.row)
    with progress:
        for suite in ("launch", "priority"):
            progress.start(suite)
            report.value(suite, f"{suite} row", 1.0, "us")
            progress.done()


def test_a_terminal_gets_a_bar_counting_the_suites(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tqdm")
    terminal = Terminal()
    progress = Progress(["launch", "priority"], terminal)
    assert progress.active
    _run_two_suites(progress)
    drawn = terminal.getvalue()
    assert "/2" in drawn and "suite" in drawn and "priority" in drawn
    out = capsys.readouterr().out  # the rows still reach stdout, above the bar
    assert "launch row" in out and "priority row" in out


def test_nothing_is_drawn_off_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    pipe = io.StringIO()
    progress = Progress(["launch", "priority"], pipe)
    assert not progress.active
    _run_two_suites(progress)
    assert pipe.getvalue() == ""
    assert "priority row" in capsys.readouterr().out


def test_nothing_is_drawn_without_tqdm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)  # as if it were not installed
    terminal = Terminal()
    progress = Progress(["launch"], terminal)
    assert not progress.active
    _run_two_suites(progress)
    assert terminal.getvalue() == ""
