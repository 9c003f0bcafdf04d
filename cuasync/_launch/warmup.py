"""``cuasync.warmup``: the kernels that kernels and example ops would launch, compiled and
loaded ahead of traffic on the compile thread (:mod:`cuasync._first_use`) while the
calling task waits.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Sequence
from typing import Any

from .._backends.base import PreparedKernel
from .._core.device import Device, get_default_device
from .._core.loops import running_adapter
from .._core.op import DeviceOp
from .._first_use import prepare_off_loop
from ..errors import ArgumentError
from .kernel import _Launchable

__all__ = ["warmup"]


class _OffLoop:
    """An awaitable: :func:`prepare_off_loop` on the running loop's adapter."""

    def __init__(self, pairs: list[tuple[Any, Device]]) -> None:
        self.pairs = pairs

    def __await__(self) -> Generator[Any, Any, list[PreparedKernel]]:
        return prepare_off_loop(self.pairs, running_adapter())


#: What :func:`warmup` prepares: a kernel (``Kernel``, a ``Module``'s kernel) or an
#: example op.
Warmable = _Launchable[Any] | DeviceOp[Any]
#: The devices :func:`warmup` prepares on: one (an ordinal or a ``Device``) or several.
Devices = int | Device | Sequence[int | Device] | None


def _devices(devices: Devices) -> list[Device] | None:
    if devices is None:
        return None
    many: list[object] = list(devices) if isinstance(devices, (list, tuple)) else [devices]
    found = [d for d in many if isinstance(d, (int, Device)) and not isinstance(d, bool)]
    if not many or len(found) != len(many):
        raise ArgumentError(
            "devices must be a device (an int or a cuasync.Device), a list or tuple of them, "
            f"or None, got {devices!r}"[:200]
        )
    return [Device(d) for d in found]


def _pairs(things: Iterable[Warmable], devices: list[Device] | None) -> list[tuple[Any, Device]]:
    """The ``(kernel, device)`` pairs to prepare for ``things`` on ``devices``."""
    pairs: list[tuple[Any, Device]] = []
    for i, thing in enumerate(things):
        if isinstance(thing, _Launchable):
            targets = devices or [getattr(thing, "device", None) or get_default_device()]
            pairs += [(thing, d) for d in targets if d.ordinal not in thing._prepared]
        elif isinstance(thing, DeviceOp):
            thing._take()  # an example: consumed, never executed (raises if it was)
            for d in devices or [thing.device or get_default_device()]:
                pairs += thing._first_use(d)
        else:
            raise ArgumentError(
                f"warmup() argument {i} must be a cuasync.Kernel (or a Module kernel) or an "
                f"op (an expression such as x * 2.0 + 1.0, a kernel launch), got "
                f"{type(thing).__name__}"
            )
    unique: dict[tuple[int, int], tuple[Any, Device]] = {}
    for kernel, device in pairs:
        unique.setdefault((id(kernel), device.ordinal), (kernel, device))
    return list(unique.values())


async def warmup(*things: Warmable, devices: Devices = None) -> None:
    """Compile and load, ahead of traffic, the kernels ``things`` would launch, on the
    compile thread while this task waits (the loop goes on): their first awaits then
    compile and load nothing.

    ``things``: :class:`cuasync.Kernel` objects (or a ``Module``'s kernels), and example
    ops, never executed (consumed): an expression (``x * 2.0 + 1.0``, ``cuasync.exp(y)``)
    stands for every expression of its structure, dtypes and layout (contiguous or
    not), whatever its sizes and scalar values. ``devices``: a device or a list of them;
    by default a kernel's default device and an op's own. Compile errors raise here. The
    blocking form for one kernel is :meth:`cuasync.Kernel.compile`; kernels compiled
    before are read from the disk cache (:mod:`cuasync.kernel_cache`).

    >>> await cuasync.warmup(saxpy, x * 2.0 + 1.0, cuasync.exp(x), devices=[0, 1])
    """
    try:
        pairs = _pairs(things, _devices(devices))
    except BaseException:
        _consume(things)  # (examples given to it: no "never executed" beside the error)
        raise
    if pairs:
        await _OffLoop(pairs)


def _consume(things: Iterable[Warmable]) -> None:
    """Take the example ops among ``things`` (never executed, and not warned about)."""
    for thing in things:
        if isinstance(thing, DeviceOp) and not thing._consumed:
            thing._take()
