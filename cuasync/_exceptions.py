"""Exceptions raised more than once, errors that cannot propagate (finalizers, driver
callbacks), reported the way CPython does, and the one-time log of memory a faulted device
leaks on purpose."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from .errors import DeviceFaultError

if TYPE_CHECKING:
    from ._core.device import Device

__all__ = ["fresh", "report_once", "report_unraisable", "warn_leak"]

_leak_logged = False


def fresh(error: BaseException) -> BaseException:
    """A new exception like ``error``, chained to it, to raise once more.

    Raising one exception object again and again grows its traceback without bound
    (each raise appends the raising frames), and keeps every frame it passed alive;
    a sticky device fault is raised by every later call. Raise a copy instead.
    """
    cls = type(error)
    try:
        # Not copy.copy: that calls __init__ with .args, which many exception classes
        # (DriverError among them) do not take back.
        again = cls.__new__(cls, *error.args)
        again.args = error.args
        again.__dict__.update(getattr(error, "__dict__", {}))
    except Exception:
        return error
    again.__cause__ = error
    again.__context__ = None
    return again


class _Unraisable:
    """Duck-typed ``sys.UnraisableHookArgs`` for a custom ``sys.unraisablehook``."""

    __slots__ = ("err_msg", "exc_traceback", "exc_type", "exc_value", "object")

    def __init__(self, exc: BaseException, err_msg: str, obj: object) -> None:
        self.exc_type = type(exc)
        self.exc_value = exc
        self.exc_traceback = exc.__traceback__
        self.err_msg = err_msg
        self.object = obj


def report_unraisable(exc: BaseException, obj: object, msg: str, logger: str = "cuasync") -> None:
    """Hand ``exc`` to a custom ``sys.unraisablehook`` (pytest's, an application's), else
    log it at ERROR, with the traceback, to ``logger`` (a ``cuasync.*`` logger).

    Never raises: it is called where nothing may propagate.

    >>> report_unraisable(exc, fn, "Exception ignored in cuasync host function", "cuasync.host")
    """
    try:
        hook = sys.unraisablehook
        if hook is not sys.__unraisablehook__:
            # The default hook only accepts the interpreter's own args type; custom
            # hooks (pytest's, an application's) read the attributes.
            hook(_Unraisable(exc, msg, obj))  # type: ignore[arg-type]
            return
    except BaseException:
        pass
    try:
        logging.getLogger(logger).error(
            "%s: %r", msg, obj, exc_info=(type(exc), exc, exc.__traceback__)
        )
    except BaseException:
        pass


_reported: set[tuple[str, str, type[BaseException]]] = set()


def report_once(logger: str, what: str, exc: BaseException) -> None:
    """Log that a finalizer could not ``what``, once per logger, action and error type.

    For destructors, which must neither raise nor block: the resource is leaked (the
    safe choice) and the first failure of each kind is logged to ``logger`` (one of the
    ``cuasync.*`` loggers). A device that has faulted fails every release, as expected,
    so that is logged at INFO (its fault was already raised to the ops that met it);
    anything else at WARNING, with the traceback. Quiet at interpreter shutdown.

    >>> report_once("cuasync.device", "destroy a stream", exc)
    """
    try:
        if sys.is_finalizing():
            return
        key = (logger, what, type(exc))
        if key in _reported:
            return
        _reported.add(key)
        log = logging.getLogger(logger)
        if isinstance(exc, DeviceFaultError):
            log.info("could not %s on a faulted device, leaking it: %s", what, exc)
        else:
            log.warning(
                "could not %s; leaking it (reported once per kind of error)",
                what,
                exc_info=(type(exc), exc, exc.__traceback__),
            )
    except BaseException:
        pass  # the reporter of last resort: nothing may escape a finalizer


def warn_leak(device: Device, what: str) -> None:
    """Log, once per process, that memory of a faulted device is leaked on purpose.

    A log record, not a warning: the application can do nothing about it.
    """
    global _leak_logged
    if _leak_logged:
        return
    _leak_logged = True
    logging.getLogger("cuasync.memory").warning(
        "device %d has faulted (%s); %s are leaked rather than freed, since the faulted "
        "context may still reference them (logged once)",
        device.ordinal,
        device.fault,
        what,
    )
