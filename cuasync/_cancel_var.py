"""The cancel scope current in this context: the word a launch made now carries.

A foundation (nothing of cuasync below it), so that every layer can read it or step out
of it: launches read :func:`current_word`; futures are built inside :func:`detached`
(never skipped: others may await them). The scopes themselves are
:mod:`cuasync._launch.cancel`'s.

>>> current_word()                 # outside any scope
0
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any, Protocol

__all__ = ["SCOPE", "current_word", "detached"]


class _Scope(Protocol):
    word: int
    ordinal: int

    def word_for(self, ordinal: int) -> int: ...

    def _adopt(self, watched: Any) -> None: ...


#: The scope entered last in this context (None: none, or stepped out by ``detached``).
SCOPE: ContextVar[_Scope | None] = ContextVar("cuasync_cancel_scope", default=None)


def current_word(ordinal: int = -1) -> int:
    """The cancel-word parameter of a launch built now on device ``ordinal`` (-1: the
    scope's own device): the current scope's word there, else 0.

    >>> current_word()
    0
    """
    scope = SCOPE.get()
    if scope is None:
        return 0
    return scope.word if ordinal < 0 or ordinal == scope.ordinal else scope.word_for(ordinal)


def detached() -> AbstractContextManager[None]:
    """Build and enqueue ops outside any scope for the block's duration (futures).
    Outside any scope there is nothing to leave: a shared no-op (futures are built on
    every submit, so this is on a hot path).

    >>> with detached():
    ...     fut = op.submit()
    """
    if SCOPE.get() is None:
        return _NOTHING_TO_LEAVE
    return _outside_the_scope()


_NOTHING_TO_LEAVE: AbstractContextManager[None] = nullcontext()


@contextmanager
def _outside_the_scope() -> Iterator[None]:
    token = SCOPE.set(None)
    try:
        yield
    finally:
        SCOPE.reset(token)
