"""Optional NVTX ranges around op submission and completion, for Nsight Systems.

Off by default; one switch turns it on: ``CUASYNC_NVTX=1`` in the environment (read at
import) or :func:`trace`. Each executed op then shows two ranges in the ``cuasync``
NVTX domain, named after the op (``zeros``, ``from_host``, a kernel's name, ...):
``submit <name>`` on the submitting thread while the work is enqueued, and ``<name>``
from submission until cuasync observes the completion (a process-wide range, so it may
end on another thread). Off, the cost is one bool check per submission. It needs the
``nvtx`` package (``pip install 'cuasync[nvtx]'``).

>>> cuasync.trace(True)       # or CUASYNC_NVTX=1
>>> await cuasync.zeros((4,)) # nsys shows "submit zeros" and "zeros"
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .._native import NATIVE
from ..errors import ArgumentError, MissingDependencyError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .completion import Completion

__all__ = ["trace", "tracing"]

# Whether ranges are emitted: the native module's switch, the one check on the
# submission path (the native core reads it too).
NATIVE.set_tracing(os.environ.get("CUASYNC_NVTX", "").strip().lower() in ("1", "on", "true", "yes"))

_domain: Any = None
_attributes: dict[str, tuple[Any, Any]] = {}  # name -> (submit, in-flight) attributes
_MAX_NAMES = 4096  # distinct op names whose attributes are cached


def _load() -> Any:
    global _domain
    if _domain is None:
        try:
            import nvtx
        except ImportError as exc:
            raise MissingDependencyError(
                "NVTX tracing (cuasync.trace(True) or CUASYNC_NVTX=1) needs the nvtx package, "
                "which is not installed here; install it with \"pip install 'cuasync[nvtx]'\" "
                "(or 'pip install nvtx'), or turn tracing off (unset CUASYNC_NVTX)"
            ) from exc
        _domain = nvtx.get_domain("cuasync")
    return _domain


def trace(on: bool = True) -> None:
    """Turn NVTX ranges around op submission and completion on or off (process-wide).

    Raises :class:`~cuasync.errors.MissingDependencyError` if ``nvtx`` is not installed.

    >>> cuasync.trace(True)
    >>> await op                  # shows as "submit <op>" and "<op>" in Nsight Systems
    >>> cuasync.trace(False)
    """
    if not isinstance(on, bool):
        raise ArgumentError(f"trace() takes True or False, got {type(on).__name__}")
    if on:
        _load()
    NATIVE.set_tracing(on)


def tracing() -> bool:
    """Whether NVTX ranges are on.

    >>> cuasync.tracing()
    False
    """
    return bool(NATIVE.tracing())


def _attrs(name: str) -> tuple[Any, Any]:
    known = _attributes.get(name)
    if known is None:
        domain = _load()
        known = (
            domain.get_event_attributes(message=f"submit {name}", color="green"),
            domain.get_event_attributes(message=name, color="blue"),
        )
        if len(_attributes) < _MAX_NAMES:
            _attributes[name] = known
    return known


@contextmanager
def submitting(name: str) -> Iterator[Any]:
    """The ``submit <name>`` range around an enqueue; yields the in-flight attributes."""
    submit, flight = _attrs(name)
    domain = _domain
    domain.push_range(submit)
    try:
        yield flight
    finally:
        domain.pop_range()


def start_flight(comp: Completion, attributes: Any) -> None:
    """Open the ``<name>`` range of a submitted op; it ends when ``comp`` resolves."""
    comp.trace = _domain.start_range(attributes)


def end_flight(comp: Completion) -> None:
    """Close ``comp``'s ``<name>`` range (once)."""
    rid, comp.trace = comp.trace, None
    if rid is not None and _domain is not None:
        _domain.end_range(rid)
