"""Host copy threads: a small process-wide pool for the memcpys of staged copies.

Staged copies of large pageable arrays (:mod:`._pageable`) hand their per-chunk host
memcpys (pageable <-> pinned) to these threads, so the event loop only enqueues. A task
must finish in bounded time whatever the device does: it copies host memory and writes
host words, and never calls the driver nor waits for the device. So a thread that
blocks in a driver call waiting for the device (``cuMemFreeHost``, a first module load)
never waits on these threads in vain, and a task never waits on such a thread.

* ``CUASYNC_STAGING_THREADS`` daemon threads (see :mod:`._config`; 0: no pool, callers
  run their tasks themselves), started as tasks arrive, never from a destructor;
* a task's exception is reported (``sys.unraisablehook``) and the thread goes on: tasks
  handle their own errors, this is the last resort;
* at interpreter exit the pool takes no more tasks (:func:`submit` returns False and the
  caller runs them itself); the exit hook runs the queued ones on the exiting thread and
  gives those already running a bounded time to finish (host memcpys), so that no stream
  is left waiting on a word; shutdown never waits on the device;
* a forked child starts with an empty pool of its own.

>>> if not submit([(job.copy_chunk, 0), (job.copy_chunk, 1)]):
...     job.copy_chunk(0); job.copy_chunk(1)      # no pool: on this thread
"""

from __future__ import annotations

import atexit
import os
import threading
from collections import deque
from collections.abc import Callable

from .._config import CONFIG
from .._exceptions import report_unraisable

__all__ = ["Task", "pool_size", "submit"]

#: How long the exit hook lets tasks already running finish (seconds).
_EXIT_WAIT_S = 2.0
#: A task: ``fn(arg)``, run once on a pool thread.
Task = tuple[Callable[[int], None], int]


class _Pool:
    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.tasks: deque[Task] = deque()
        self.threads: list[threading.Thread] = []
        self.start_lock = threading.Lock()
        self.idle = 0
        self.running = 0
        self.closed = False
        self.hooked = False

    def submit(self, tasks: list[Task], size: int) -> bool:
        with self.cond:
            if self.closed:
                return False
            backlog = len(self.tasks) + len(tasks) - self.idle
        if backlog > 0 and len(self.threads) < size:
            with self.start_lock:
                for _ in range(min(backlog, size - len(self.threads))):
                    if not self._start():
                        break
        with self.cond:
            if self.closed or not self.threads:
                return False
            self.tasks.extend(tasks)
            self.cond.notify(len(tasks))
        return True

    def _start(self) -> bool:
        thread = threading.Thread(
            target=self._run, name=f"cuasync-copy-{len(self.threads)}", daemon=True
        )
        try:
            thread.start()
        except RuntimeError:  # can't start new thread (resource limits, shutdown)
            return False
        self.threads.append(thread)
        if not self.hooked:
            self.hooked = True
            atexit.register(self.close)
        return True

    def _run(self) -> None:
        cond, tasks = self.cond, self.tasks
        while True:
            with cond:
                while not tasks:
                    self.idle += 1
                    cond.wait()
                    self.idle -= 1
                fn, arg = tasks.popleft()
                self.running += 1
            try:
                fn(arg)
            except BaseException as exc:
                report_unraisable(exc, fn, "Exception ignored in a cuasync copy thread")
            del fn
            with cond:
                self.running -= 1
                if self.closed and not self.running:
                    cond.notify_all()

    def close(self) -> None:
        """At exit: take no more tasks; run the queued ones here, then give the running
        ones up to :data:`_EXIT_WAIT_S` to finish (bounded memcpys: streams waiting on
        their words go on before the driver tears the context down)."""
        with self.cond:
            self.closed = True
            # Emptied in place: the threads hold this very deque, and must not run the
            # tasks this thread is about to run.
            left = list(self.tasks)
            self.tasks.clear()
        for fn, arg in left:
            try:
                fn(arg)
            except BaseException as exc:
                report_unraisable(exc, fn, "Exception ignored in a cuasync copy task at exit")
        with self.cond:
            self.cond.wait_for(lambda: not self.running, _EXIT_WAIT_S)


_pool = _Pool()


def pool_size() -> int:
    """How many copy threads the pool may run (``CUASYNC_STAGING_THREADS``); 0: none."""

    return int(CONFIG.staging_threads)


def submit(tasks: list[Task]) -> bool:
    """Queue ``tasks`` on the copy threads (FIFO); False when there is no pool (0 threads,
    interpreter exit, no thread could start): the caller then runs them itself."""
    size = pool_size()
    if size <= 0:
        return False
    return _pool.submit(tasks, size)


def _after_fork_in_child() -> None:
    global _pool
    old, _pool = _pool, _Pool()
    if old.hooked:
        atexit.unregister(old.close)


os.register_at_fork(after_in_child=_after_fork_in_child)
