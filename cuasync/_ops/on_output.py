"""Ops of the tensor a :class:`~cuasync.TensorOp` will output, built before it runs.

:func:`on_tensor` makes ``build(t)``, the op of a tensor ``t``, on a TensorOp's output:
both run in one submission. Its kernels are prepared off the event loop with the
TensorOp's own (``cuasync._first_use``): ``build`` is tried on a :func:`standin`, a
tensor standing for the output before it exists (shape, dtype and device; no memory),
and the op it makes is asked for its first use, never run. :func:`viewing` makes the
zero-copy views (``flip``, ``permute_dims``, ...) of Tensors and TensorOps alike, with
:func:`view_op`, an op whose output is a view (nothing runs).

>>> v = cuasync.var(x * 2.0, axis=0)     # on_tensor: var's kernels prepared off the loop
>>> f = cuasync.flip(x + 1.0)            # viewing: a TensorOp, the view of its output
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from .._core.context import ExecutionContext
from .._core.device import Device
from .._core.op import FirstUse, device_op
from .._core.output import Output
from .._interop.foreign import ForeignAllocation
from .._tensor import Shape, Tensor
from ..errors import ArgumentError
from . import methods, tensorop
from .tensorop import TensorOp, tensor_op, view_op

__all__ = ["of_output", "on_tensor", "standin", "view_op", "viewing"]


class _StandIn(ForeignAllocation):
    """The memory of a :func:`standin`: address 0, read-only, never touched."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<stand-in for an op's output, {self.nbytes} B on device {self.device.ordinal}>"


def standin(shape: Shape, dtype: Any, device: Device) -> Tensor:
    """A contiguous tensor standing for one an op will output: ops built on it check their
    arguments, have shapes and name their kernels, but are never run (its address is 0,
    and read-only: no op writes it).

    >>> standin((4, 6), np.dtype("float32"), device).strides
    (6, 1)
    """
    dt = np.dtype(dtype)
    memory = _StandIn(device, 0, math.prod(shape) * dt.itemsize, owner=None, readonly=True)
    return Tensor(memory, tuple(shape), dt)


def first_use_of(op: Any, device: Device) -> Sequence[tuple[Any, Device]]:
    """The first use on ``device`` of ``op``, built to be asked, never run."""
    op._take()
    return op._first_use(device)


def on_tensor(
    x: Tensor | TensorOp,
    name: str,
    shape: tuple[int, ...],
    dtype: Any,
    build: Callable[[Tensor], TensorOp],
    first_use: FirstUse | None = None,
) -> TensorOp:
    """``build(t)``, the op of a tensor ``t``: on ``x`` itself, or on a TensorOp's output
    once it has run (in the same submission); ``shape`` and ``dtype`` are the result's.
    The kernels ``build``'s op launches on a TensorOp's output are prepared before it is
    enqueued, with the TensorOp's own: ``first_use(device)`` where given, else those of
    ``build`` tried on a :func:`standin` (the output as a new contiguous tensor; one of
    another layout, an ``out=`` view, may need a kernel named only when it runs)."""
    if isinstance(x, Tensor):
        return build(x)
    x._take()

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        op = build(x._enqueue(ctx).get())
        op._take()
        return op._enqueue(ctx)

    def prepare(on: Device) -> tuple[tuple[Any, Device], ...]:
        if first_use is not None:
            mine = first_use(on)
        else:
            mine = first_use_of(build(standin(x.shape, x.dtype, on)), on)
        return (*x._first_use(on), *mine)

    return tensor_op(device_op(enqueue, x.device, name, first_use=prepare), shape, dtype)


def of_output(x: TensorOp, name: str, build: Callable[[Tensor], TensorOp]) -> TensorOp:
    """:func:`on_tensor` where the result's shape and dtype are ``build``'s: it is tried
    on a :func:`standin` now (bad arguments raise at once).

    >>> r = of_output(x * 2.0, "roll", lambda t: cuasync.roll(t, 1, axis=0))
    """
    if x._consumed:
        x._take()  # raises OpConsumedError
    made = build(standin(x.shape, x.dtype, _device(x, name)))
    made._take()
    return on_tensor(x, name, made.shape, made.dtype, build)


def _device(x: TensorOp, name: str) -> Device:
    device = x.device
    if device is None:  # (an op of no device yet: a scalar expression; it names one)
        raise ArgumentError(f"{name}: x is an op of no device; await it first")
    return device


X = TypeVar("X", Tensor, TensorOp)


def viewing(x: X, name: str, view: Callable[[Tensor], Tensor]) -> X:
    """``view(x)`` for a tensor; for a TensorOp, a TensorOp whose output is that view of
    its output (checked now, on a :func:`standin`: bad arguments raise at once).

    >>> viewing(x + 1.0, "flip", lambda t: t[::-1]).shape == x.shape
    True
    """
    if isinstance(x, Tensor):
        return view(x)
    if not isinstance(x, TensorOp):
        raise ArgumentError(
            f"{name}: x must be a cuasync.Tensor or TensorOp, got {type(x).__name__}"
        )
    if x._consumed:
        x._take()  # raises OpConsumedError
    shape = view(standin(x.shape, x.dtype, _device(x, name))).shape
    return on_tensor(x, name, shape, x.dtype, lambda t: view_op(view(t), name))


# (x.copy() of a TensorOp: the mixin is a layer below; TensorOp.reshape and astype)
methods.on_tensor = tensorop.on_tensor = on_tensor
