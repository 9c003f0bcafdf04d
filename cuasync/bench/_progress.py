"""A progress bar over the benchmark suites, on a terminal only.

When stderr is a TTY and ``tqdm`` is installed (``pip install 'cuasync[bench]'``), a bar
counts the suites done and shows the row last measured; the suites' output still goes
to stdout, each line printed above the bar (cleared first, drawn again after: stdout
and stderr are two files on one terminal). Otherwise (a pipe, a file, CI, no tqdm) nothing is
drawn and the output is unchanged.

>>> with Progress(["completion", "launch"]) as progress:
...     progress.start("completion"); ...; progress.done()
"""

from __future__ import annotations

import contextlib
import sys
from types import TracebackType
from typing import IO, Any

__all__ = ["Progress"]


class Progress:
    """The bar for ``suites`` on ``stream`` (default stderr), or nothing off a TTY."""

    def __init__(self, suites: list[str], stream: IO[str] | None = None) -> None:
        self._stream = sys.stderr if stream is None else stream
        self._bar: Any = None
        self._redirect: contextlib.ExitStack | None = None
        self._above: _AboveTheBar | None = None
        isatty = getattr(self._stream, "isatty", None)
        if not (callable(isatty) and isatty()):
            return
        try:
            from tqdm import tqdm
        except ImportError:
            return
        self._bar = tqdm(total=len(suites), unit="suite", file=self._stream, leave=False)

    @property
    def active(self) -> bool:
        """Whether a bar is drawn."""
        return self._bar is not None

    def __enter__(self) -> Progress:
        if self._bar is not None:
            self._redirect = contextlib.ExitStack()
            # print() in the suites goes above the bar instead of through it
            self._above = _AboveTheBar(self._bar, sys.stdout)
            self._redirect.enter_context(contextlib.redirect_stdout(self._above))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._redirect is not None:
            self._redirect.close()
        if self._bar is not None:
            self._bar.close()
        if self._above is not None:
            self._above.end()  # (after the bar is gone from the line)

    def start(self, suite: str) -> None:
        """A suite begins."""
        if self._bar is not None:
            self._bar.set_description(suite)

    def row(self, name: str) -> None:
        """A row was measured."""
        if self._bar is not None:
            self._bar.set_postfix_str(name[:48])

    def done(self) -> None:
        """The current suite has finished."""
        if self._bar is not None:
            self._bar.update(1)


class _AboveTheBar:
    """``sys.stdout`` while the bar is drawn: each complete line is written above it.

    tqdm's own ``DummyTqdmFile`` clears a bar only where it shares the file written to
    (or where both are the process's current ``sys.stdout`` / ``sys.stderr``, which
    this redirection replaces): a bar on stderr stayed on the line a suite's header
    went to, and the header was split by it on the terminal.
    """

    def __init__(self, bar: Any, out: IO[str]) -> None:
        self._bar = bar
        self._out = out
        self._partial = ""

    def write(self, text: str) -> int:
        lines, newline, self._partial = (self._partial + text).rpartition("\n")
        if newline:
            self._above(lines + newline)
        return len(text)

    def _above(self, text: str) -> None:
        with self._bar.get_lock():
            self._bar.clear(nolock=True)
            self._out.write(text)
            self._out.flush()
            self._bar.refresh(nolock=True)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self._out.flush()  # (a partial line waits for its end, to go above the bar whole)

    def end(self) -> None:
        """The bar is closed: write what is left of a last, unterminated line."""
        if self._partial:
            self._out.write(self._partial)
            self._out.flush()
            self._partial = ""

    def __getattr__(self, name: str) -> Any:  # isatty, encoding, fileno, ...
        return getattr(self._out, name)
