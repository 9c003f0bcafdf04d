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


class _TerminalEnd(io.TextIOBase):
    """stdout or stderr of one terminal: both write to the same screen."""

    def __init__(self, screen: list[str]) -> None:
        self.screen = screen

    def write(self, text: str) -> int:
        self.screen.append(text)
        return len(text)

    def isatty(self) -> bool:
        return True


def _rendered(raw: str) -> list[str]:
    """The lines a terminal shows for ``raw`` (``\\r`` returns to the line's start)."""
    lines: list[str] = []
    line: list[str] = []
    column = 0
    for char in raw:
        if char == "\n":
            lines.append("".join(line).rstrip())
            line, column = [], 0
        elif char == "\r":
            column = 0
        else:
            line[column : column + 1] = [char]
            column += 1
    return [*lines, "".join(line).rstrip()]


def test_suite_headers_print_whole_above_a_bar_on_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bar is on stderr and the suites print to stdout, two files of one terminal:
    each line must clear the bar first (it was glued to the bar's text, splitting the
    "== suite" headers)."""
    pytest.importorskip("tqdm")
    screen: list[str] = []
    monkeypatch.setattr(sys, "stdout", _TerminalEnd(screen))
    monkeypatch.setattr(sys, "stderr", _TerminalEnd(screen))
    printed = []
    with Progress(["launch", "priority"]) as progress:
        for suite in ("launch", "priority"):
            progress.start(suite)
            printed.append(f"== {suite} (emulator: cuasync emulator device 0)")
            print(printed[-1], flush=True)
            progress.row(f"{suite} row")
            printed.append(f"  {suite} row   1.0 us")
            print(printed[-1], end="", flush=True)  # a line written in two parts
            print(flush=True)
            progress.done()
        print("a last line without its end", end="")
    shown = _rendered("".join(screen))
    assert shown[: len(printed)] == printed
    assert shown[len(printed)] == "a last line without its end"
