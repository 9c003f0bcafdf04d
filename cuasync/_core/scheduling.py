"""Scheduling policies map ops to streams.

``StreamPoolRoundRobin`` (each device's default) rotates through a few streams so that
independent ops overlap; ``SingleStream`` pins everything to one stream; subclass
:class:`SchedulingPolicy` for anything else. :func:`use_policy` overrides the policy for
the current context (thread or asyncio task).
"""

from __future__ import annotations

import contextvars
import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .._native import RoundRobinCore, SingleStreamCore
from ..errors import ArgumentError, SchedulingError
from .device import Device, SchedulingPolicy, Stream, get_default_device
from .priority import check_priority

__all__ = [
    "SchedulingPolicy",
    "SingleStream",
    "StreamPoolRoundRobin",
    "current_policy",
    "use_policy",
]


class StreamPoolRoundRobin(SchedulingPolicy, RoundRobinCore):
    """Rotates through ``num_streams`` streams of ``device`` (default: the default device).

    ``priority`` gives the streams a priority (see :meth:`Device.new_stream`): with
    :func:`use_policy`, latency-critical requests run on urgent streams, ahead of batch
    work on the default ones.

    >>> policy = cuasync.StreamPoolRoundRobin(device=0, num_streams=8)
    >>> fut = op.schedule(policy)
    >>> urgent = cuasync.StreamPoolRoundRobin(priority=-5)
    >>> with cuasync.use_policy(urgent):
    ...     await op
    """

    def __init__(
        self,
        device: int | Device | None = None,
        num_streams: int = 4,
        *,
        priority: int | None = None,
    ) -> None:
        if not isinstance(num_streams, int) or isinstance(num_streams, bool) or num_streams < 1:
            raise ArgumentError(f"num_streams must be an int >= 1, got {num_streams!r}")
        self.device = get_default_device() if device is None else Device(device)
        self.num_streams = num_streams
        #: The priority of the pool's streams (None: the default).
        self.priority = None if priority is None else check_priority(self.device.ordinal, priority)
        self._streams = []  # (_streams, _counter, num_streams: RoundRobinCore's)
        self._counter = itertools.count()
        self._lock = threading.Lock()

    @property
    def streams(self) -> list[Stream]:
        """The pool's streams (created on first use)."""
        if not self._streams:
            with self._lock:
                if not self._streams:
                    new = self.device.new_stream
                    self._streams = [new(self.priority) for _ in range(self.num_streams)]
        return list(self._streams)

    def next_stream(self) -> Stream:
        """The next stream of the pool, in turn."""
        streams = self._streams or self.streams
        return streams[next(self._counter) % self.num_streams]

    def __repr__(self) -> str:
        urgency = "" if self.priority is None else f", priority={self.priority}"
        return (
            f"StreamPoolRoundRobin(device={self.device.ordinal}, "
            f"num_streams={self.num_streams}{urgency})"
        )


class SingleStream(SchedulingPolicy, SingleStreamCore):
    """Every op on one stream (in order), ``stream``.

    >>> with cuasync.use_policy(cuasync.SingleStream(stream)): await op
    """

    def __init__(self, stream: Stream) -> None:
        if not isinstance(stream, Stream):
            raise ArgumentError(f"stream must be a cuasync.Stream, got {type(stream).__name__}")
        self.stream = stream

    def next_stream(self) -> Stream:
        """Always ``stream``."""
        return self.stream

    def __repr__(self) -> str:
        return f"SingleStream({self.stream!r})"


_policy: contextvars.ContextVar[SchedulingPolicy | None] = contextvars.ContextVar(
    "cuasync_policy", default=None
)


@contextmanager
def use_policy(policy: SchedulingPolicy) -> Iterator[SchedulingPolicy]:
    """Use ``policy`` for ops executed in this context (safe across asyncio tasks).

    >>> with cuasync.use_policy(cuasync.SingleStream(s)):
    ...     await op
    """
    if not isinstance(policy, SchedulingPolicy):
        raise ArgumentError(
            f"policy must be a cuasync.SchedulingPolicy, got {type(policy).__name__}"
        )
    token = _policy.set(policy)
    try:
        yield policy
    finally:
        _policy.reset(token)


def current_policy(device: Device | None) -> SchedulingPolicy:
    """The policy in force: :func:`use_policy`'s, else the op's device's default."""
    policy = _policy.get()
    if policy is not None:
        return policy
    return (device or get_default_device()).policy


def stream_for(device: Device | None) -> Stream:
    """The stream an op bound to ``device`` executes on: the policy in force's next one.

    ``stream_from(current_policy(device), device)`` in one call (every await makes it).
    """
    policy = _policy.get()
    if policy is None:
        policy = (device or get_default_device()).policy
    stream = policy.next_stream()
    if type(stream) is Stream and (device is None or stream.device is device):
        return stream
    return _checked(policy, stream, device)


def stream_from(policy: SchedulingPolicy, device: Device | None) -> Stream:
    """Ask ``policy`` for a stream and check it can run an op bound to ``device``."""
    return _checked(policy, policy.next_stream(), device)


def _checked(policy: SchedulingPolicy, stream: Any, device: Device | None) -> Stream:
    """``stream``, which ``policy`` returned, if it can run an op bound to ``device``."""
    if not isinstance(stream, Stream):
        raise SchedulingError(
            f"{type(policy).__name__}.next_stream() must return a cuasync.Stream, "
            f"got {type(stream).__name__}"
        )
    if device is not None and stream.device is not device:
        raise SchedulingError(
            f"{type(policy).__name__} returned a stream of device {stream.device.ordinal} for an "
            f"op whose tensors live on device {device.ordinal}; use that device's policy "
            f"(cuasync.Device({device.ordinal}).policy)"
        )
    return stream


# A device's default policy (Device.policy); the device module sits below this one.
Device._default_policy = StreamPoolRoundRobin
