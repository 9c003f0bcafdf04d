"""The express path of a small ``from_host``: the native core's, one call from op to flag.

``await cuasync.from_host(a)`` of a few KiB spent most of its time in the generic path's
layers (an :class:`~._core.context.ExecutionContext`, the new tensor's declaration,
the route choice, ``Hub.attach``, a :class:`~._core.completion.Completion` and its
finish), not in the copy. For a source of at most :data:`SMALL_MAX` bytes, the native
module's core (``Express.upload``, reactor/python/upload.c) does what the single route does in
one call, as it does for a launch: the memcpy into a pooled pinned block (before the
execution lock), then under it the stream's sequence number, a completion slot, the new
tensor's stream-ordered allocation, the DMA and the flag write; the spin after the
lock. Work that lands within it needs no context and no completion. This module makes
:class:`HostUploadOp` call it; what the core reads are declared fields: the classes
declared on its core types (``HostUploadOp`` on ``UploadOpCore``, ``Node``,
``_HostUpload``, ``PinnedBlock``) and ``PROCESS``'s, each set by the module that owns it.

Where there is no core (no native module, host-callback completions,
``CUASYNC_NATIVE=off``) or the op is not its common case (the same cases as a launch's,
and a route forced for benchmarks), the generic path runs the op.

>>> t = await cuasync.from_host(np.ones(1024, np.float32))   # (HostUploadOp.__await__)
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from ._core import express
from ._core.completion import Completion
from ._core.device import Stream
from ._core.op import DeviceOp
from ._native import PROCESS, UploadOpCore
from ._ops.tensorop import TensorOp
from ._tensor import Tensor

__all__ = ["SMALL_MAX", "HostUploadOp", "enqueue"]

#: Sources of at most this many bytes take the express path (larger ones spend their
#: time in the copy, not in the layers around it).
SMALL_MAX = 64 * 1024


class HostUploadOp(TensorOp, UploadOpCore):
    """The op :func:`cuasync.from_host` returns: a :class:`TensorOp` whose ``await``,
    ``sync()`` and futures take the express path when the source is small.

    >>> op = cuasync.from_host(np.arange(6, dtype=np.float32))   # a HostUploadOp
    >>> t = await op                                             # or op.sync()
    """

    __slots__ = ()  # _output (the new tensor, set by enqueue): the native base's

    def _start(self, stream: Stream, notify: bool) -> Completion:
        if notify:  # a future
            comp = express.submit(self, stream, enqueue)
            if comp is not None:
                return comp
        return DeviceOp._start(self, stream, notify)

    def _sync(self, stream: Stream) -> Tensor:
        sent = enqueue(self, stream, express.BLOCK, None)
        if isinstance(sent, Tensor):  # landed within the spin: the native core settled it
            return sent
        result: Tensor = express.finish_sync(self, stream, sent)
        return result

    def __await__(self) -> Generator[Any, Any, Tensor]:
        """See :meth:`DeviceOp.__await__`."""
        return express.await_launch(self, enqueue)

    #: (the express path's completion retains no tensor of the op's own)
    _tensors = ()


def enqueue(
    op: HostUploadOp, stream: Stream, spin: int, adapter: Any
) -> express.Sent | Tensor | None:
    """The native core's submission of a small upload (``Express.upload``), spinning as
    ``spin`` says (see :data:`express.Sent`; ``held``: the new tensor's allocation and
    the pinned block). It settles an await's or a blocking call's copy that landed
    within the spin: then it returns the new tensor itself. None where there is no core
    or it declines the op (not the common case: a source of more than :data:`SMALL_MAX`
    bytes, a route forced for benchmarks, the cases of a launch's): the generic path
    (``DeviceOp._start``, ``DeviceOp._sync``) then runs it."""
    hub = PROCESS.hub
    core = hub.express if hub is not None else None
    if core is None:
        return None
    sent: Any = core.upload(op, stream, spin, adapter)
    return None if sent is express.GENERIC else sent
