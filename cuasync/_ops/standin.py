"""What a TensorOp will output, known when it is built: :func:`will_output`.

Its ``out=`` tensor; for an op of another op's output that declared it (a view op:
``cuasync.flip(x + 1.0)``), that view; else a :func:`standin`, a contiguous tensor of
the output's shape and dtype with no memory (address 0, read-only). Ops built on these
check their arguments, have shapes, name their kernels (the first use prepared off the
event loop) and see what they would read (aliasing checks), and are never run.

>>> will_output(cuasync.flip(x + 1.0, 0), device).strides      # x: contiguous (3, 4)
(-4, 1)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._core.device import Device
from .._interop.foreign import ForeignAllocation
from .._native import TensorOpCore
from .._tensor import Shape, Tensor
from .expr import Node

__all__ = ["is_standin", "node_output", "standin", "will_output"]


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


def is_standin(t: Tensor) -> bool:
    """Whether ``t`` is (a view of) a :func:`standin`: memory no one holds yet."""
    return isinstance(t.allocation, _StandIn)


def will_output(x: Any, device: Device | None = None) -> Tensor:
    """The tensor the TensorOp ``x`` will output, as known now (see the module); a
    stand-in is on ``device`` (None: ``x``'s)."""
    out = x._out
    return out if out is not None else node_output(x._node, device)


def node_output(node: Node, device: Device | None = None) -> Tensor:
    """:func:`will_output` of an expression's node: a pending op's declared output (an
    ``out=`` TensorOp's tensor, a view op's view), else a new contiguous tensor."""
    if node.kind == "pending":
        value = node.value
        if isinstance(value, TensorOpCore):
            return will_output(value, device)
        made = getattr(value, "_output", None)
        if made is not None:
            return made
    on = device or node.device
    if on is None:
        raise ValueError(f"{node.name}: an op of no device has no output to stand in for")
    return standin(node.shape, node.dtype, on)
