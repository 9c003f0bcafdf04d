"""Ops of the tensor a :class:`~cuasync.TensorOp` will output, built before it runs.

:func:`on_tensor` makes ``build(t)``, the op of a tensor ``t``, on a TensorOp's output:
both run in one submission. Its kernels are prepared off the event loop with the
TensorOp's own (``cuasync._first_use``): ``build`` is tried on what the op will output
as known when it is built (:func:`~cuasync._ops.standin.will_output`: a stand-in with
no memory, or the view a view op declared), and the op it makes is asked for its first
use, never run. :func:`viewing` makes the zero-copy views (``flip``, ``permute_dims``,
...) of Tensors and TensorOps alike; :func:`view_op` is an op whose output is a view
(nothing runs).

>>> v = cuasync.var(x * 2.0, axis=0)     # on_tensor: var's kernels prepared off the loop
>>> f = cuasync.flip(x + 1.0)            # viewing: a TensorOp, the view of its output
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from .._core.context import ExecutionContext
from .._core.device import Device
from .._core.op import FirstUse, device_op
from .._core.output import Output
from .._tensor import Tensor
from ..errors import ArgumentError, UsageError
from . import methods, tensorop
from .standin import will_output
from .tensorop import TensorOp, tensor_op, view_op

__all__ = ["first_use_of", "of_output", "on_tensor", "view_op", "viewing"]


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
    output: Tensor | None = None,
    writes: bool = False,
) -> TensorOp:
    """``build(t)``, the op of a tensor ``t``: on ``x`` itself, or on a TensorOp's output
    once it has run (in the same submission); ``shape`` and ``dtype`` are the result's.
    The kernels ``build``'s op launches on a TensorOp's output are prepared before it is
    enqueued, with the TensorOp's own: ``first_use(device)`` where given, else those of
    ``build`` tried on what the TensorOp will output. ``output``: what the result will
    be where that is known and not a new contiguous tensor (a view of ``x``'s output);
    ``writes``: ``build``'s op writes it (an ``out=``: :func:`~.tensorop.tensor_op`)."""
    if isinstance(x, Tensor):
        return build(x)
    x._take()

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        op = build(x._enqueue(ctx).get())
        if op.shape != shape or op.dtype != dtype:  # (its arguments changed since)
            op._take()
            raise UsageError(
                f"{name}: the op built on the output has shape {op.shape} and dtype "
                f"{op.dtype}, not the {shape} and {dtype} it had when built; were its "
                "arguments (a list) changed after it was built?"
            )
        op._take()
        return op._enqueue(ctx)

    def prepare(on: Device) -> tuple[tuple[Any, Device], ...]:
        mine = first_use(on) if first_use is not None else first_use_of(_built(x, build, on), on)
        return (*x._first_use(on), *mine)

    op = device_op(enqueue, x.device, name, first_use=prepare)
    return tensor_op(op, shape, dtype, output, writes=writes)


def _built(x: TensorOp, build: Callable[[Tensor], Any], device: Device) -> Any:
    """``build`` of what ``x`` will output, as known now (never run)."""
    return build(will_output(x, device))


def of_output(x: TensorOp, name: str, build: Callable[[Tensor], TensorOp]) -> TensorOp:
    """:func:`on_tensor` where the result's shape and dtype are ``build``'s: it is tried
    on what ``x`` will output now (bad arguments raise at once). ``build`` must not hold
    a list the caller may change: pass tuples.

    >>> r = of_output(x * 2.0, "roll", lambda t: cuasync.roll(t, 1, axis=0))
    """
    if x._consumed:
        x._take()  # raises OpConsumedError
    made = _built(x, build, _device(x, name))
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
    its output (checked now, on what it will output: bad arguments raise at once, and
    the view is declared for what is built on it). ``view`` must not hold a list the
    caller may change: pass tuples.

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
    made = view(will_output(x, _device(x, name)))

    def build(t: Tensor) -> TensorOp:
        return view_op(view(t), name)

    return on_tensor(x, name, made.shape, x.dtype, build, output=made)


def frozen(value: Any) -> Any:
    """``value`` with a list as a tuple and a numpy array copied: what an op of a
    TensorOp's output keeps to run later cannot change under it."""
    if isinstance(value, list):
        return tuple(value)
    return value.copy() if isinstance(value, np.ndarray) else value


# (x.copy() of a TensorOp: the mixin is a layer below; TensorOp.reshape and astype)
methods.on_tensor = tensorop.on_tensor = on_tensor
