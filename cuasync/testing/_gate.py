"""Gates: hold streams at a point until the host opens them.

A gate claims one word of the completion slab (pinned, device-mapped host memory) and
enqueues ``cuStreamWaitValue32`` on it on each stream it holds: work submitted after the
gate on those streams (and work on other streams ordered after it) waits until the host
writes the word. The emulator models the same wait, so tests built on gates run on both
backends.
"""

from __future__ import annotations

from types import TracebackType

from .._backends import get_backend
from .._core.completion import get_hub
from .._core.context import LOCK, check_not_submitting, no_capture
from .._core.device import Stream
from .._core.scheduling import SingleStream, StreamPoolRoundRobin, current_policy
from .._exceptions import report_once
from .._launch.cancel import wait_cancels_visible
from ..errors import ArgumentError, DriverError
from ._device_ops import load

__all__ = ["Gate", "gate"]


class Gate:
    """Streams held at a point (``streams``); :meth:`open` lets them go on. See :func:`gate`.

    >>> with cuasync.testing.gate(stream) as g:
    ...     fut = op.submit_on(stream)     # waits behind the gate
    ...     assert not fut.done()
    """

    __slots__ = ("_slot", "_value", "streams")

    def __init__(self, streams: tuple[Stream, ...]) -> None:
        self.streams = streams
        hub = get_hub()
        slot, address, value = hub.claim_word()
        self._slot: int | None = slot
        self._value = value
        backend = get_backend()
        try:
            with LOCK:  # ordered with submissions made by other threads
                for stream in streams:
                    backend.stream_wait_value32(stream.handle, address, value)
        except BaseException:
            self._release()
            raise

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open` has been called (the held streams may go on).

        >>> g = cuasync.testing.gate(stream); g.open(); g.is_open
        True
        """
        return self._slot is None

    def open(self) -> None:
        """Let the held streams go on (idempotent).

        Cancel words set before (``CancelScope.cancel()``, a cancelled task's scope) are
        made visible to the device first: the gate waits, a few microseconds, for the
        urgent stream that writes them, so that the work they skip is skipped every
        time, not only when the write wins the race with the gate's opening."""
        if self._slot is not None:
            try:
                wait_cancels_visible()
            except DriverError:  # a faulted device: the work reports it, the gate opens
                pass
        self._release()

    def _release(self) -> None:
        slot, self._slot = self._slot, None
        if slot is not None:
            get_hub().release_word(slot, self._value)

    def __enter__(self) -> Gate:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.open()

    def __del__(self) -> None:
        # A gate nobody opens would hold its streams forever; the store never blocks.
        if getattr(self, "_slot", None) is not None:
            try:
                self._release()  # (no wait for cancel words: a finalizer never blocks)
            except Exception as exc:
                report_once("cuasync.testing", "open a gate", exc)

    def __repr__(self) -> str:
        state = "open" if self.is_open else "closed"
        return f"<cuasync.testing.Gate {state} on {len(self.streams)} stream(s)>"


def _default_streams() -> tuple[Stream, ...]:
    policy = current_policy(None)
    if isinstance(policy, StreamPoolRoundRobin):
        return tuple(policy.streams)
    if isinstance(policy, SingleStream):
        return (policy.stream,)
    raise ArgumentError(
        f"gate() cannot tell which streams a {type(policy).__name__} uses; pass the streams "
        "to hold, e.g. cuasync.testing.gate(stream)"
    )


def gate(*streams: Stream) -> Gate:
    """Hold ``streams`` (default: every stream of the current scheduling policy) at this
    point: work submitted to them afterwards waits until the gate opens.

    Use it as a context manager (the gate opens when the block exits) or call
    :meth:`Gate.open`. On a GPU, loading a kernel module waits for all pending work on
    the device, so a kernel launched for the first time behind a closed gate would wait
    for the gate: launch (or ``Kernel.compile()``) each kernel once before closing one.
    Work in flight behind a gate is how tests observe cancellation,
    timeouts and ordering deterministically, on a GPU and on the emulator alike.

    >>> with cuasync.testing.gate() as g:
    ...     fut = cuasync.zeros((4,)).submit()
    ...     assert not fut.done()
    ...     g.open()
    ...     await fut
    """
    check_not_submitting("cuasync.testing.gate()")
    if not streams:
        streams = _default_streams()
    for i, stream in enumerate(streams):
        if not isinstance(stream, Stream):
            raise ArgumentError(
                f"gate() argument {i} must be a cuasync.Stream, got {type(stream).__name__}"
            )
        no_capture(stream, "cuasync.testing.gate()")
    for device in {s.device for s in streams}:
        # Loading a module waits for the device's pending work, so a kernel first loaded
        # behind a closed gate waits for the gate: load the testing kernels now.
        load(device)
    return Gate(tuple(streams))
