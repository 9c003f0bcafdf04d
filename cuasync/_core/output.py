"""Outputs of enqueued work: values that are realized when completion is observed.

``_enqueue`` returns an :class:`Output`. Device handles are usable at once for more
stream-ordered work (a ``then`` closure receives them during submission), while host-side
transforms (``map``, ``inspect``) run when the value is realized: at completion, or
during submission when a ``then`` closure needs it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from .._native import OutputCore

T = TypeVar("T")
U = TypeVar("U")

_UNSET: Any = object()


class Output(OutputCore, Generic[T]):
    """A value produced by enqueued work; ``get()`` realizes it (once)."""

    __slots__ = ()  # _fn, _value: the native base's (``OutputCore``)

    def __init__(self, fn: Callable[[], T] | None = None, value: Any = _UNSET) -> None:
        self._fn = fn
        self._value = value

    @staticmethod
    def ready(value: T) -> Output[T]:
        """An output that is already a value (device handles, for instance)."""
        return _Ready(value)

    def get(self) -> T:
        """The value, computed on the first call (after the work has completed).

        >>> lowlevel.Output(lambda: dst).get()
        """
        if self._value is _UNSET:
            assert self._fn is not None
            self._value = self._fn()
            self._fn = None
        return self._value

    def then(self, fn: Callable[[T], U]) -> Output[U]:
        """An output realized as ``fn(self.get())``."""
        return Output(lambda: fn(self.get()))


class _Ready(Output[T]):
    """An output known at submission: no function to run."""

    __slots__ = ()

    def __init__(self, value: T) -> None:
        self._value = value

    def get(self) -> T:
        return self._value
