"""Objects that belong to one process refuse to be pickled, with a typed error.

A tensor is device memory of this process's CUDA context (or its emulator); an op is
work bound to this process's streams and allocations; streams, events, graphs, pinned
buffers and loaded modules are driver handles. None of them means anything in another
process, and pickling them by their attributes either fails somewhere deep (a lock) or,
worse, succeeds with handles that are garbage on the other side. Sending one to a Ray
actor or a multiprocessing worker raises :class:`~cuasync.errors.ProcessLocalError`
instead, naming what to send. ``copy.copy`` and ``copy.deepcopy`` go through the same
protocol and raise the same error (a shallow copy would share ownership of the memory).
"""

from __future__ import annotations

from typing import Any, NoReturn

from ..errors import ProcessLocalError

__all__ = ["ProcessLocal"]


class ProcessLocal:
    """Base of the classes whose instances live in one process; ``_local_hint`` says
    what to do instead (a class attribute)."""

    __slots__ = ()

    _local_hint = "build it in the process that uses it"

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        name = type(self).__name__
        raise ProcessLocalError(
            f"a cuasync.{name} cannot be pickled or copied: it lives in this process's "
            f"device context (other processes, Ray actors included, have their own); "
            f"{self._local_hint}"
        )
