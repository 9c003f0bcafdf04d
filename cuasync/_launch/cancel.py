"""Cancel scopes: GPU work queued by a cancelled scope is skipped on the device.

A scope owns a *cancel word*: 32 bits of pinned, device-mapped host memory. Every
kernel launched inside the scope (generated elementwise kernels, and user kernels that
include ``cuasync/cancel.cuh``) receives the word as its last parameter and checks it
once per block before doing any work. Cancelling the scope is one host store into the
word: no stream, no driver call, nothing that waits. Kernels already running finish;
kernels still queued return at once when they start.

Words are reused: the parameter packs the word's address (low 48 bits) with the scope's
*generation* (high 16 bits), and a scope is cancelled when its word holds its
generation. A word released by one scope goes back to a FIFO of free words; the next
scope to claim it gets the next generation, so kernels of an earlier, cancelled scope
that are still queued keep seeing their own generation, and stay skipped.

>>> with cuasync.cancel_scope() as scope:
...     y = await (x * 2 + 1)          # launched with scope's word
>>> scope.cancelled                    # True when the task was cancelled inside
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
from collections import deque
from contextvars import Token
from types import TracebackType
from typing import Any

from .._backends import get_backend
from .._backends.base import CANCEL_ADDRESS_BITS
from .._cancel_var import SCOPE
from ..errors import InternalError, UsageError

__all__ = ["CancelScope", "cancel_scope"]

_GENERATIONS = 1 << (64 - CANCEL_ADDRESS_BITS)  # 16 bits: 1..65535 (0 is never a generation)
_SLAB_WORDS = 1024  # words in one pinned block (4 KiB)


class _Words:
    """The cancel words of one backend: pinned blocks never freed (a queued kernel may
    read any word at any time), a FIFO of free ``(address, generation)`` pairs."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.unused: deque[tuple[int, int]] = deque()
        self.lock = threading.Lock()

    def claim(self) -> tuple[int, int, ctypes.c_uint32]:
        """A free word, its next generation and the host's view of it."""
        with self.lock:
            if not self.unused:
                self._grow()
            address, generation = self.unused.popleft()
        view = ctypes.c_uint32.from_address(address)
        if view.value == generation:  # 65535 scopes ago: that scope's work has passed
            view.value = 0
        return address, generation, view

    def release(self, address: int, generation: int) -> None:
        nxt = generation + 1 if generation + 1 < _GENERATIONS else 1
        with self.lock:
            self.unused.append((address, nxt))

    def _grow(self) -> None:
        host = self.backend.host_alloc(_SLAB_WORDS * 4)
        mapped = getattr(self.backend, "host_device_pointer", None)  # (the emulator: none)
        device = host if mapped is None else mapped(host)
        if device >> CANCEL_ADDRESS_BITS or host >> CANCEL_ADDRESS_BITS:
            raise InternalError(
                f"pinned memory at {host:#x} (device {device:#x}) lies above 2**48: the "
                "cancel word's parameter cannot pack its address with a generation"
            )
        ctypes.memset(host, 0, _SLAB_WORDS * 4)
        # host and device addresses are the same under unified addressing (every 64-bit
        # Linux system CUDA supports); the word is stored by the host, loaded by kernels
        if device != host:
            raise InternalError("cancel words need unified addressing (device == host)")
        self.unused.extend((host + 4 * i, 1) for i in range(_SLAB_WORDS))


_words: _Words | None = None
_words_lock = threading.Lock()


def _words_of_backend() -> _Words:
    global _words
    backend = get_backend()
    words = _words
    if words is None or words.backend is not backend:
        with _words_lock:
            if _words is None or _words.backend is not backend:
                _words = _Words(backend)
            words = _words
    return words


def _is_cancellation(exc: BaseException | None) -> bool:
    """Whether ``exc`` leaving a scope means its task gave up on the work: asyncio's
    (and anyio's on asyncio) ``CancelledError``, a timeout, trio's ``Cancelled``."""
    if exc is None:
        return False
    if isinstance(exc, asyncio.CancelledError | TimeoutError):
        return True
    kind = type(exc)
    return kind.__name__ == "Cancelled" and kind.__module__.startswith("trio")


class CancelScope:
    """Work launched inside is skipped on the device once the scope is cancelled.

    Use it as a context manager (``with`` or ``async with``) around the awaits of one
    request. Leaving it by cancellation (the task cancelled, a timeout) cancels it;
    :meth:`cancel` does it explicitly, from any thread. Only *awaited* work carries the
    word: an op submitted as a future (``submit()``, ``submit_on()``, ``shared()``) is
    never skipped, since others may await it. ``word`` is the kernels' parameter: the
    word's address and the scope's generation while it is open, 0 once closed.

    >>> with cuasync.cancel_scope() as scope:
    ...     await model_step(request)
    >>> scope.cancel()                     # any work of it still queued is skipped
    """

    __slots__ = ("_address", "_cancelled", "_generation", "_task", "_token", "_view", "word")

    def __init__(self) -> None:
        self._address = 0
        self._generation = 0
        self._view: ctypes.c_uint32 | None = None
        self._token: Token[Any] | None = None
        self._cancelled = False
        self._task: asyncio.Task[Any] | None = None
        self.word = 0

    def __enter__(self) -> CancelScope:
        if self._address:
            raise UsageError("a cancel scope is entered once; make a new one")
        words = _words_of_backend()
        self._address, self._generation, self._view = words.claim()
        try:
            self._task = asyncio.current_task()
        except RuntimeError:  # no asyncio loop in this thread (trio, or none)
            self._task = None
        self.word = self._address | (self._generation << CANCEL_ADDRESS_BITS)
        self._token = SCOPE.set(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None:
            SCOPE.reset(self._token)
            self._token = None
        if _is_cancellation(exc):
            self.cancel()
        self.word = 0  # ops built later (a child task's) carry no word
        self._view = None  # the word is another scope's next: cancel() no longer stores
        _words_of_backend().release(self._address, self._generation)

    async def __aenter__(self) -> CancelScope:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    def cancel(self) -> None:
        """Skip the scope's work that has not started on the device: one host store.

        Work skipped must never deliver a value, so the asyncio task that entered the
        scope is cancelled first (its awaits raise ``CancelledError``; from another
        thread, both happen on its loop, in that order), and ops built in the scope
        afterwards carry no word. Once the scope is left (its word may belong to
        another scope), it does nothing. On trio, cancel trio's scope around it instead.

        >>> scope.cancel()
        """
        if self._view is None or self._cancelled:
            return
        self._cancelled = True
        task = self._task
        if task is None or task.done():
            self._store()
            return
        loop = task.get_loop()
        try:
            here = asyncio.get_running_loop() is loop
        except RuntimeError:
            here = False
        if here:
            if task is not asyncio.current_task():
                task.cancel()
            self._store()
        else:
            loop.call_soon_threadsafe(self._cancel_on_loop, task)

    def _cancel_on_loop(self, task: asyncio.Task[Any]) -> None:
        task.cancel()
        self._store()

    def _store(self) -> None:
        view = self._view
        self.word = 0  # later ops of the scope run (their values are delivered)
        if view is not None:
            view.value = self._generation

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` ran (leaving the scope by cancellation runs it).

        >>> scope.cancelled
        False
        """
        return self._cancelled

    def __repr__(self) -> str:
        state = "cancelled" if self._cancelled else "open" if self.word else "closed"
        return f"<cuasync.CancelScope {state}>"


def cancel_scope() -> CancelScope:
    """A new :class:`CancelScope`: ``with cuasync.cancel_scope(): ...``.

    >>> async with cuasync.cancel_scope():
    ...     return await handler(request)
    """
    return CancelScope()
