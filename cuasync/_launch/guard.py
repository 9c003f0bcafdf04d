"""Guarded regions: library calls, memsets and copies that a cancelled scope skips on the device.

cuBLAS calls, memsets and the copy engines' copies cannot check a cancel word themselves.
Inside a cancel scope, an op that writes only tensors it made encloses them in
:func:`guarded`: on a GPU they become the body of a conditional graph node (CUDA 12.4+)
whose condition a one-thread kernel sets from the word when the graph starts
(``cuasync/kernels/guard.cu``, :mod:`cuasync._backends.conditional`); on the emulator,
one command that reads the word first. A region costs a graph built, instantiated and
launched in its place, so only work expected to take longer than :data:`POLICY`'s
``min_ns`` is guarded. A backend may have some kinds off (``backend.guards``): the
emulator and the CUDA backend guard every kind (docs/cancellation.md).
A region is of one of :data:`KINDS`: ``"memset"``, ``"library"`` (a cuBLAS call) or
``"copy"`` (a copy from device memory to device memory of one device: a conditional
node's body takes memcpy nodes; host transfers, peer copies and copies from memory
another library allocated are not guarded);
``backend.guards`` is the set of kinds a backend guards. ``CUASYNC_GUARDS=on`` / ``off``
overrides the backend's choice, and ``memsets`` guards memsets alone.

>>> with guarded(ctx, "library", flops=2 * m * n * k):
...     backend.gemm(ctx.handle, a, b, c, 1.0, 0.0, "highest", ctx.error_box)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .. import _config
from .._backends import get_backend
from .._cancel_var import current_word
from .._core.context import ExecutionContext
from .builtin import KernelFiles
from .kernel import Kernel

__all__ = ["FILES", "KINDS", "POLICY", "GuardPolicy", "guard_kernel", "guarded", "guards_on"]

#: The kinds of guarded region: a memset, a library call (cuBLAS), a device-to-device copy.
KINDS = frozenset(("memset", "library", "copy"))

#: The files of its translation unit (``cuasync/kernels``).
FILES = ("cancel.cuh", "guard.cu")
_KERNELS = KernelFiles(*FILES)


def _twin(*args: object) -> None:
    """(Never run: the emulator's guarded region reads the word itself.)"""


def guard_kernel() -> Kernel:
    """The kernel that sets a guarded region's condition (loaded at the first region;
    ``kernel.compile(device)`` loads it ahead)."""
    return _KERNELS.kernel("ca_cancel_guard", _twin)


@dataclass
class GuardPolicy:
    """When a region is worth guarding: its expected device time (``flops`` at
    ``flops_per_ns``, ``nbytes`` moved at ``bytes_per_ns``: an H200's float32 cuBLAS
    and memset rates, rounded down; a copy moves each byte twice) at least ``min_ns``:
    1 ms, about five times a region's price measured on an H200 (+183-335 µs:
    docs/cancellation.md). Tests set ``min_ns = 0``."""

    min_ns: float = 1_000_000.0
    flops_per_ns: float = 40_000.0
    bytes_per_ns: float = 2_000.0


POLICY = GuardPolicy()


def guards_on(backend: object, kind: str) -> bool:
    """Whether regions of ``kind`` (one of :data:`KINDS`) are guarded: ``CUASYNC_GUARDS``
    if ``on``, ``off`` or ``memsets``, else the backend's own choice (``backend.guards``,
    the kinds it guards)."""
    choice = _config.CONFIG.guards
    if choice == "auto":
        return kind in getattr(backend, "guards", ())
    return choice == "on" or (choice == "memsets" and kind == "memset")


@contextmanager
def guarded(
    ctx: ExecutionContext, kind: str, *, flops: float = 0.0, nbytes: int = 0
) -> Iterator[None]:
    """Enclose what the block enqueues on ``ctx``'s stream (work of ``kind``, one of
    :data:`KINDS`) in a guarded region when the current scope has a word on its device,
    the stream does not capture a graph (a captured graph never bakes in a scope's
    word), the backend guards that kind, and the work is worth it. The block enqueues
    nothing but the guarded work (no waits: read and write its tensors first).
    """
    word = current_word(ctx.device.ordinal)
    policy = POLICY
    worth = flops / policy.flops_per_ns + nbytes / policy.bytes_per_ns >= policy.min_ns
    backend = get_backend()
    if not word or not worth or ctx.stream._capturing or not guards_on(backend, kind):
        yield
        return
    guard = guard_kernel()._prepare(ctx.device).handle
    with backend.guarded(ctx.handle, word, guard):
        yield
