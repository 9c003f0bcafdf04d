"""The background watcher: the completion hub's one thread.

It observes completions that no event loop waits for (a cancelled await, a dropped
future, a closed loop, a blocking ``wait()``, a future awaited from several loops),
finishes host-callback completions, and gives the hub a clock to probe the streams of
host-callback completions that make no progress. It decides nothing itself: every
report goes to the hub (:mod:`.completion`), which owns completion state and faults.
It also runs *chores* (:meth:`BackgroundWatcher.add_chore`): housekeeping that must not
run on an event loop's thread, such as freeing idle pinned memory.

>>> hub.background.kick()        # wake it (never blocks)
"""

from __future__ import annotations

import collections
import logging
import os
import select
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._config import CONFIG

if TYPE_CHECKING:
    from .completion import Completion, Hub


log = logging.getLogger("cuasync.completion")


class BackgroundWatcher:
    """A daemon thread, ``cuasync-watcher``, started with the hub (never from a destructor).

    It waits with ``poll()`` (never ``select()``, which fails for fds above 1023 in busy
    servers) on its reactor queue, the host-signal queue and a wake-up pipe. An
    unexpected error is logged and the thread carries on: a dead watcher would leak
    every completion handed to it.
    """

    def __init__(self, hub: Hub) -> None:
        self._hub = hub
        #: The reactor queue of completions nobody else waits for.
        native = hub.native
        self.queue: Any = native.LoopQueue() if hub.reactor is not None else None
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._poll = select.poll()
        self._poll.register(self._wake_r, select.POLLIN)
        if self.queue is not None:
            self._poll.register(self.queue.fileno(), select.POLLIN)
        #: Where the native host function of host-callback completions pushes their ids.
        self.signals: Any = None
        if native is not None:
            self.signals = native.LoopQueue()
            self._poll.register(self.signals.fileno(), select.POLLIN)
            native.set_host_signal_queue(self.signals)
        self._landed: collections.deque[Completion] = collections.deque()
        self._chores: list[weakref.WeakMethod[Callable[[], float | None]]] = []
        self.thread = threading.Thread(target=self._run, name="cuasync-watcher", daemon=True)
        self.thread.start()

    def finish_soon(self, comp: Completion) -> None:
        """Finish ``comp`` on this thread soon (from a host function: no driver calls)."""
        self._landed.append(comp)
        self.kick()

    def add_chore(self, chore: Callable[[], float | None]) -> None:
        """Call the bound method ``chore()`` on this thread now and after each wake-up;
        it returns the seconds until it wants to run again, or None (until the next
        :meth:`kick`). Held weakly: a collected owner's chore is dropped.

        >>> hub.background.add_chore(pool._chore)
        """
        self._chores.append(weakref.WeakMethod(chore))
        self.kick()

    def _run_chores(self) -> float | None:
        """Run every chore; the shortest delay any of them asked for."""
        delay: float | None = None
        for ref in list(self._chores):
            chore = ref()
            if chore is None:
                self._chores.remove(ref)
                continue
            try:
                wanted = chore()
            except Exception:
                log.exception("cuasync background watcher: a chore failed; it runs again later")
                wanted = 1.0
            if wanted is not None and (delay is None or wanted < delay):
                delay = max(wanted, 0.001)
            del chore
        return delay

    def kick(self) -> None:
        """Wake the thread (never blocks: a full pipe already means a wake-up is due)."""
        try:
            os.write(self._wake_w, b"\0")
        except (BlockingIOError, OSError):
            pass

    def _run(self) -> None:
        stale = max(CONFIG.stale_us / 1e6, 0.005)
        hub = self._hub
        # Closed at exit (the hub's atexit handler): what is still pending is the process's
        # end's. The thread stops there rather than go on finishing work while the
        # interpreter tears down the streams it would query: a daemon thread stopped by
        # the finalization in the middle of logging that would keep logging's lock
        # forever, and the next finalizer to log (asyncio's "Task was destroyed") hang.
        while not hub.closed:
            try:
                self._step(stale)
            except Exception:
                if hub.closed:
                    return
                log.exception("cuasync background watcher: unexpected error; it keeps running")

    def _step(self, stale: float) -> None:
        hub = self._hub
        # While host-callback completions are pending, wake up to let the hub probe them.
        timeout = stale * 1000 if hub.callback_pending else None
        if self._chores:
            delay = self._run_chores()
            if delay is not None and (timeout is None or delay * 1000 < timeout):
                timeout = delay * 1000
        for fd, _ in self._poll.poll(timeout):
            if hub.closed:
                return
            if fd == self._wake_r:
                try:
                    while os.read(self._wake_r, 4096):
                        pass
                except BlockingIOError:
                    pass
            elif self.signals is not None and fd == self.signals.fileno():
                for sid in self.signals.drain()[0]:
                    try:
                        hub.on_signal(sid)
                    except Exception:
                        log.exception("cuasync: error while finishing host signal %d", sid)
            else:
                hub.drain(self.queue)  # reads the queue's fd first, so poll() re-arms
        self._finish_landed()
        if hub.callback_pending:
            hub.probe_callbacks(stale)

    def _finish_landed(self) -> None:
        landed = self._landed
        while landed:
            comp = landed.popleft()
            try:
                self._hub.on_callback(comp)
            except Exception:
                log.exception("cuasync: error while finishing a host-callback completion")
            del comp  # hold nothing while waiting for the next wake-up
