"""Stream priorities: the device's range and the check every priority goes through.

CUDA's convention holds: lower numbers are more urgent, ``0`` is the default (and, on
current GPUs, the least urgent), and ``greatest`` is the most urgent. The driver would
silently clamp a priority outside the range; cuasync refuses it instead.

>>> r = cuasync.Device(0).stream_priority_range
>>> r.least, r.greatest
(0, -5)
"""

from __future__ import annotations

from typing import NamedTuple

from .._backends import get_backend
from ..errors import ArgumentError

__all__ = ["StreamPriorityRange", "check_priority", "priority_range"]


class StreamPriorityRange(NamedTuple):
    """The stream priorities a device supports: ``greatest <= p <= least``.

    ``least`` is the default and least urgent; ``greatest`` the most urgent (numerically
    lowest, as in CUDA). A device without priorities reports ``(0, 0)``.

    >>> cuasync.Device(0).stream_priority_range.greatest
    -5
    """

    least: int
    greatest: int

    def __contains__(self, priority: object) -> bool:
        return isinstance(priority, int) and self.greatest <= priority <= self.least


_ranges: dict[int, StreamPriorityRange] = {}


def priority_range(ordinal: int) -> StreamPriorityRange:
    """The priority range of device ``ordinal`` (asked of the driver once)."""
    known = _ranges.get(ordinal)
    if known is None:
        least, greatest = get_backend().stream_priority_range(ordinal)
        known = _ranges[ordinal] = StreamPriorityRange(least, greatest)
    return known


def check_priority(ordinal: int, priority: object) -> int:
    """``priority`` as an int in device ``ordinal``'s range (None: the default, 0)."""
    if priority is None:
        return 0
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ArgumentError(f"priority must be an int or None, got {type(priority).__name__}")
    r = priority_range(ordinal)
    if priority not in r:
        raise ArgumentError(
            f"priority {priority} is outside device {ordinal}'s stream priority range "
            f"[{r.greatest} (most urgent), {r.least} (least urgent)]; lower numbers are more "
            f"urgent, as in CUDA (see Device.stream_priority_range)"
        )
    return int(priority)
