"""Leak checks: device memory and completion slots return to where they were."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager

from .._core.completion import stats, work_in_flight
from .._core.device import Device, device_count
from .._transfers.staging import ORPHANS

__all__ = ["Snapshot", "no_leaks", "settle", "snapshot"]

Snapshot = tuple[tuple[int, ...], int]


def settle(timeout: float = 10.0) -> bool:
    """Wait until every submitted completion has been observed and released, and the
    pinned buffers collected have been freed.

    Work nobody awaits any more (cancelled tasks, futures dropped unawaited) is finished
    by cuasync's background watcher, which also frees collected pinned buffers; this
    waits for both, for at most ``timeout`` seconds, and returns whether everything
    settled (work held behind a gate that is never opened does not). Never call it
    from an event loop thread: it blocks.

    >>> cuasync.testing.settle()
    True
    """
    deadline = time.monotonic() + timeout
    while True:
        gc.collect()
        if not work_in_flight():
            gc.collect()  # after the last completion too: it may free tasks holding outputs
            if not ORPHANS.pending():
                return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)  # polling a condition with a deadline


def snapshot() -> Snapshot:
    """``(live bytes per device, flag slots in use)`` as the leak check compares them."""
    used = tuple(Device(i).memory_info().used for i in range(device_count()))
    return used, stats().slots_armed


@contextmanager
def no_leaks(timeout: float = 10.0) -> Iterator[Snapshot]:
    """Assert that device memory and completion slots are back to their starting point.

    Settles before and after the block (see :func:`settle`); raises ``AssertionError``
    naming what leaked.

    >>> with cuasync.testing.no_leaks():
    ...     asyncio.run(service_under_test())
    """
    settle(timeout)
    before = snapshot()
    yield before
    settle(timeout)
    after = snapshot()
    if after != before:
        raise AssertionError(
            f"cuasync leaked: (bytes per device, slots in use) was {before}, now {after}"
        )
