"""Cancel scopes: GPU work queued by a cancelled scope is skipped on the device.

A scope owns a *cancel word* per device it launches on: 32 bits of device memory. Every
kernel launched inside the scope (generated and built-in kernels, and user kernels that
include ``cuasync/cancel.cuh``) receives the word as its last parameter and checks it
once per block before doing any work (thread 0 loads it, ``__syncthreads``). Cancelling
the scope enqueues one write of the word on the device's *urgent* stream (a stream of
the greatest priority that carries nothing else): an enqueue, never a wait. Kernels
already running finish; kernels still queued return at once when they start.

Words are reused: the parameter packs the word's address (low 48 bits) with the scope's
*generation* (high 16 bits), and a scope is cancelled when its word holds its
generation. A word released by one scope goes back to a FIFO of free words; the next
scope to claim it gets the next generation, so kernels of an earlier, cancelled scope
that are still queued keep seeing their own generation, and stay skipped (until the
word's next owner is cancelled: then they run, wasted but harmless).

>>> with cuasync.cancel_scope() as scope:
...     y = await (x * 2 + 1)          # launched with scope's word
>>> scope.cancelled                    # True when the task was cancelled inside
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from contextvars import Token
from types import TracebackType
from typing import Any

from .._backends import get_backend
from .._backends.base import CANCEL_ADDRESS_BITS
from .._cancel_var import SCOPE
from .._core.device import get_default_device
from ..errors import InternalError, UsageError

__all__ = ["CancelScope", "cancel_scope", "wait_cancels_visible"]

_GENERATIONS = 1 << (64 - CANCEL_ADDRESS_BITS)  # 16 bits: 1..65535 (0 is never a generation)
_SLAB_WORDS = 1024  # words in one slab of device memory (4 KiB)
log = logging.getLogger("cuasync.cancel")


def _next(generation: int) -> int:
    return generation + 1 if generation + 1 < _GENERATIONS else 1


class _Words:
    """The cancel words of one device: slabs of device memory never freed (a queued
    kernel may read any word at any time), a FIFO of free ``(address, generation)``
    pairs, what the host last wrote into each word, and the urgent stream it writes on.
    """

    def __init__(self, backend: Any, ordinal: int) -> None:
        self.backend = backend
        self.ordinal = ordinal
        self.unused: deque[tuple[int, int]] = deque()
        self.stored: dict[int, int] = {}  # address -> the generation last written there
        self.urgent = 0  # the stream of the greatest priority, made with the first slab
        self.unseen = False  # a word was set since the urgent stream was last waited for
        self.lock = threading.Lock()

    def claim(self) -> tuple[int, int]:
        """A free word and its next generation (never the value the word holds)."""
        with self.lock:
            if not self.unused:
                self._grow()
            address, generation = self.unused.popleft()
            if self.stored.get(address) == generation:  # a scope 65535 owners ago cancelled
                generation = _next(generation)
        return address, generation

    def release(self, address: int, generation: int) -> None:
        with self.lock:
            self.unused.append((address, _next(generation)))

    def store(self, address: int, generation: int) -> None:
        """Set the word on the urgent stream: seen by kernels that start after it lands."""
        with self.lock:
            self.stored[address] = generation
        self.backend.write_device_word(self.urgent, address, generation)
        self.unseen = True  # (after the enqueue: a wait that sees it covers this write)

    def wait_visible(self) -> None:
        """Block until the words set so far are in device memory (a few microseconds: the
        urgent stream carries nothing but these writes)."""
        if self.unseen:
            self.unseen = False
            self.backend.stream_synchronize(self.urgent)

    def _grow(self) -> None:
        backend = self.backend
        if not self.urgent:
            _, greatest = backend.stream_priority_range(self.ordinal)
            self.urgent = backend.stream_create(self.ordinal, greatest)
        slab = backend.device_words_alloc(self.ordinal, _SLAB_WORDS * 4, self.urgent)
        if slab >> CANCEL_ADDRESS_BITS:
            raise InternalError(
                f"device memory at {slab:#x} lies above 2**48: the cancel word's parameter "
                "cannot pack its address with a generation"
            )
        self.unused.extend((slab + 4 * i, 1) for i in range(_SLAB_WORDS))


_words: dict[int, _Words] = {}  # ordinal -> its words, for the backend of _words_backend
_words_backend: list[Any] = [None]
_words_lock = threading.Lock()


def _words_of(ordinal: int) -> _Words:
    backend = get_backend()
    words = _words.get(ordinal)
    if words is None or words.backend is not backend:
        with _words_lock:
            if _words_backend[0] is not backend:  # (tests switch backends)
                _words.clear()
                _words_backend[0] = backend
            words = _words.get(ordinal)
            if words is None:
                words = _words[ordinal] = _Words(backend, ordinal)
    return words


def wait_cancels_visible() -> None:
    """Block until every cancel word set so far is visible to the device.

    A cancel is an enqueue on an urgent stream that lands a few microseconds later; a
    kernel that starts before it runs. ``cuasync.testing``'s gates open after this, so
    that work cancelled behind a closed gate is skipped on both backends, every time.

    >>> wait_cancels_visible()   # (then open the gate)
    """
    backend = _words_backend[0]
    if backend is None or backend is not get_backend():
        return
    for words in list(_words.values()):
        words.wait_visible()


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
    word: an op submitted as a future (``submit()``, ``submit_on()``, ``schedule()``,
    ``shared()``) is never skipped, since others may await it. An op handed to asyncio
    inside it (``gather``, ``ensure_future``, ``shield``) carries the word and is
    cancelled with it, so that no awaiter reads what was skipped. ``word`` is the kernels'
    parameter on ``ordinal``, the device current when the scope was entered: the word's
    address and the scope's generation while it is open, 0 once closed or cancelled
    (:meth:`word_for`: on another device).

    >>> with cuasync.cancel_scope() as scope:
    ...     await model_step(request)
    >>> scope.cancel()                     # any work of it still queued is skipped
    """

    __slots__ = (
        "_cancelled", "_claimed", "_entered", "_futures", "_task", "_token", "ordinal", "word",
    )  # fmt: skip

    def __init__(self) -> None:
        self._claimed: dict[int, tuple[_Words, int, int]] = {}  # ordinal -> its word
        self._entered = False
        self._token: Token[Any] | None = None
        self._cancelled = False
        self._task: asyncio.Task[Any] | None = None
        self._futures: list[Any] = []  # the Watched of ops handed to asyncio inside it
        self.ordinal = -1
        self.word = 0

    def __enter__(self) -> CancelScope:
        if self._entered:
            raise UsageError("a cancel scope is entered once; make a new one")
        self._entered = True
        self.ordinal = get_default_device().ordinal
        self.word = self._claim(self.ordinal)
        try:
            self._task = asyncio.current_task()
        except RuntimeError:  # no asyncio loop in this thread (trio, or none)
            self._task = None
        self._token = SCOPE.set(self)
        return self

    def _claim(self, ordinal: int) -> int:
        words = _words_of(ordinal)
        address, generation = words.claim()
        self._claimed[ordinal] = (words, address, generation)
        return address | (generation << CANCEL_ADDRESS_BITS)

    def word_for(self, ordinal: int) -> int:
        """The word parameter of a launch on device ``ordinal`` (claimed at its first
        launch there); 0 once the scope is closed or cancelled.

        >>> scope.word_for(1)
        """
        if ordinal == self.ordinal or not self.word:
            return self.word
        got = self._claimed.get(ordinal)
        if got is None:
            return self._claim(ordinal)
        return got[1] | (got[2] << CANCEL_ADDRESS_BITS)

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
        self._futures = []  # (not cancelled: they run, as they would have)
        claimed, self._claimed = self._claimed, {}  # cancel() no longer stores: the
        for words, address, generation in claimed.values():  # words are others' next
            words.release(address, generation)

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
        """Skip the scope's work that has not started on the device: one write of its
        word per device, enqueued on that device's urgent stream (nothing waits).

        Work skipped must never deliver a value, so the asyncio task that entered the
        scope is cancelled first (its awaits raise ``CancelledError``; from another
        thread, both happen on its loop, in that order), and ops built in the scope
        afterwards carry no word. Once the scope is left (its word may belong to
        another scope), it does nothing. On trio, cancel trio's scope around it instead.

        >>> scope.cancel()
        """
        if not self._claimed or self._cancelled:
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
        """Cancel its ops handed to asyncio (before any can end with skipped work), then
        write its words."""
        self.word = 0  # later ops of the scope run (their values are delivered)
        futures, self._futures = self._futures, []
        for watched in futures:
            _cancel_adopted(watched)
        for words, address, generation in list(self._claimed.values()):
            words.store(address, generation)

    def _adopt(self, watched: Any) -> None:
        """An op handed to asyncio as a future inside the scope (its ``op_future.Watched``,
        at the handover): cancelled with the scope where it has not ended by then."""
        if not self.word:  # (closed, or cancelled: it carries no word, and runs)
            return
        futures = self._futures
        if len(futures) >= 64 and not len(futures) & (len(futures) - 1):  # (at 64, 128, ...)
            # (a new list: a cancel on another thread may be walking this one)
            futures = self._futures = [w for w in futures if not w.finished]
        futures.append(watched)
        if self._cancelled:  # (cancelled from another thread meanwhile: it may not see it)
            _cancel_adopted(watched)

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


#: The message of the ``CancelledError`` an op handed over in a cancelled scope ends with.
_CANCELLED_WITH_SCOPE = "its cancel scope was cancelled: the op's work may have been skipped"


def _cancel_adopted(watched: Any) -> None:
    """Cancel an op adopted by a scope being cancelled (its ``Watched``), before the
    scope's words are written: marked cancelled at once, from any thread, so that
    whatever ends it delivers no output (``outcome``, ``result()`` and ``cancelled()``
    read the mark first); then cancelled on its loop's thread (its awaiters get
    ``CancelledError``), here or as soon as that loop runs. A closed loop's ends when
    its work lands (``Watched.abandon``)."""
    if watched.finished:
        return
    watched.cancelled, watched.message = True, _CANCELLED_WITH_SCOPE
    if watched.adapter._closed:
        return
    if watched.thread != threading.get_ident():
        watched.adapter.call_from_thread(watched.cancel, _CANCELLED_WITH_SCOPE)
        return
    try:
        watched.cancel(_CANCELLED_WITH_SCOPE)
    except Exception:  # (its loop closing: marked already; the words must still be written)
        log.exception("cuasync: cancelling an op of a cancelled scope failed")


def cancel_scope() -> CancelScope:
    """A new :class:`CancelScope`: ``with cuasync.cancel_scope(): ...``.

    >>> async with cuasync.cancel_scope():
    ...     return await handler(request)
    """
    return CancelScope()
