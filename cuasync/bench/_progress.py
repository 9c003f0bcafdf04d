"""A progress bar over the benchmark suites, on a terminal only.

When stderr is a TTY and ``tqdm`` is installed (``pip install 'cuasync[bench]'``), a bar
counts the suites done and shows the row last measured; the suites' output still goes
to stdout, printed above the bar. Otherwise (a pipe, a file, CI, no tqdm) nothing is
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
            from tqdm.contrib import DummyTqdmFile

            self._redirect = contextlib.ExitStack()
            # print() in the suites goes above the bar instead of through it
            self._redirect.enter_context(contextlib.redirect_stdout(DummyTqdmFile(sys.stdout)))
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
