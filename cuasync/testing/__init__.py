"""Testing async GPU code on both backends: gates, a sleep op, a trap, leak checks.

Tests that hold work in flight with these run unchanged on a GPU and on the emulator:

* :func:`gate` holds streams until the host opens it (``cuStreamWaitValue32``);
* :func:`sleep` keeps a stream busy for a given time (a ``%globaltimer`` kernel);
* :func:`trap` faults the device (``__trap()``; run it in a subprocess);
* :func:`no_leaks` / :func:`settle` check that memory and completion slots come back;
* :func:`mark` records that a cancellable kernel ran (skipped work leaves it unmoved).

The pytest plugin (:mod:`cuasync.testing.pytest_plugin`, loaded automatically once
cuasync is installed) wraps them as fixtures.

>>> with cuasync.testing.gate() as g:
...     task = asyncio.create_task(handler())     # its GPU work waits behind the gate
...     await asyncio.sleep(0)
...     task.cancel()                              # cancelled with work in flight
"""

from __future__ import annotations

from ._device_ops import sleep as sleep
from ._device_ops import trap as trap
from ._gate import Gate as Gate
from ._gate import gate as gate
from ._leaks import no_leaks as no_leaks
from ._leaks import settle as settle
from ._leaks import snapshot as snapshot
from ._marks import mark as mark

__all__ = ["Gate", "gate", "mark", "no_leaks", "settle", "sleep", "snapshot", "trap"]
