"""Ops that are one launch of a built-in kernel into a new tensor, raw launches of the core.

``tril``, ``take``, ``pad`` and ``astype`` of contiguous tensors each make a new tensor
and fill it with one launch: ``kernel(out, *tail)``, ``out`` the new tensor seen as the
kernel writes it (a flat view of its storage type, or the shape of the source's one
chunk). A :class:`OneLaunch` op holds that launch, so that the native core submits it
as it submits an elementwise op's (a raw launch, its maker :func:`_one_launch` in
``ExpressLaunches.pending_launches``), once the kernel is prepared for the device; the
long way (a first use, a capturing stream, a graph) enqueues the same launch.

>>> op = one_launch(kernel, x.device, "tril", x.shape, x.dtype, (n,), "uint32", n,
...                 (src_view, n, rows, cols, k, 0))
>>> await op                                      # -> the new tensor
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._core.context import ExecutionContext
from .._core.device import Device, Stream
from .._core.op import DeviceOp
from .._core.output import Output
from .._first_use import unprepared
from .._launch import builtin
from .._launch.kernel import Kernel, trusted_launch
from .._tensor import Shape, Tensor, contiguous_strides
from .._transfers.device_copy import ADDRESSABLE, new_tensor
from .launch_plan import LAUNCHES, new_tensor_on
from .tensorop import TensorOp, tensor_op

__all__ = ["OneLaunch", "one_launch"]


class OneLaunch(DeviceOp[Tensor]):
    """A new contiguous tensor (``shape``, ``dtype``) written by one launch of ``kernel``
    over ``work`` threads: ``kernel(out, *tail)``, ``out`` the new tensor's memory seen
    as ``view_shape`` of ``view_dtype`` (contiguous, from its first byte). ``tail``: the
    launch's other arguments (contiguous input tensors read, and scalars), made when the
    op is built."""

    __slots__ = (
        "_dtype", "_kernel", "_name", "_nbytes", "_shape", "_strides", "_tail",
        "_view_dtype", "_view_shape", "_view_strides", "_work",
    )  # fmt: skip

    def __init__(
        self,
        kernel: Kernel,
        device: Device,
        name: str,
        shape: Shape,
        dtype: np.dtype[Any],
        view_shape: Shape,
        view_dtype: np.dtype[Any],
        work: int,
        tail: tuple[Any, ...],
    ) -> None:
        super().__init__(device)
        self._kernel, self._name = kernel, name
        self._shape, self._dtype, self._strides = shape, dtype, contiguous_strides(shape)
        self._nbytes = math.prod(shape) * dtype.itemsize
        self._view_shape, self._view_dtype = view_shape, view_dtype
        self._view_strides = contiguous_strides(view_shape)
        self._work, self._tail = work, tail

    def _trace_name(self) -> str:
        return self._name

    def _first_use(self, on: Device) -> Sequence[tuple[Any, Device]]:
        return unprepared([self._kernel], on)

    def _view(self, out: Tensor) -> Tensor:
        """``out`` as the kernel writes it."""
        return Tensor(out._alloc, self._view_shape, self._view_dtype, self._view_strides, 0)

    def _enqueue(self, ctx: ExecutionContext) -> Output[Tensor]:
        out = new_tensor(ctx, self._shape, self._dtype, self._name)
        builtin.launch(ctx, self._kernel, self._work, self._view(out), *self._tail, scoped=True)
        return Output.ready(out)

    def __repr__(self) -> str:
        return f"<cuasync.DeviceOp {self._name}{' (consumed)' if self._consumed else ''}>"


def _one_launch(op: OneLaunch, stream: Stream) -> Any:
    """The launch op of ``op`` on ``stream`` (``ExpressLaunches.pending_launches``): its
    new tensor and its one launch (its cancel word the scope's, as the long way's), or
    None: no work, more bytes than a size_t holds, or the kernel not prepared for the
    device (its first use, off the loop in an await, is the long way's)."""
    kernel = op._kernel
    device = stream.device
    prepared = kernel._prepared.get(device.ordinal)
    if prepared is None or not op._work or not op._nbytes < ADDRESSABLE:
        return None
    out = new_tensor_on(stream, op._nbytes, op._shape, op._dtype, op._strides)
    converted, tensors = kernel._trusted_worded((op._view(out), *op._tail), device.ordinal, True)
    return trusted_launch(
        kernel,
        prepared,
        device,
        tuple(converted),
        tuple(t for t, _ in tensors),
        tuple(p for _, p in tensors),
        tuple(not p.const for _, p in tensors),
        out,
        (builtin.blocks(op._work), 1, 1),
        (builtin.BLOCK, 1, 1),
    )


LAUNCHES.pending_launches[OneLaunch] = _one_launch


def one_launch(*spec: Any) -> TensorOp:
    """The TensorOp of a new tensor written by one launch: ``OneLaunch(*spec)``
    (``kernel, device, name, shape, dtype, view_shape, view_dtype, work, tail``).

    >>> one_launch(tri_kernel(4), x.device, "tril", x.shape, x.dtype, (x.size,),
    ...            SUPPORTED["uint32"], x.size, (src, x.size, rows, cols, k, 0))
    """
    op = OneLaunch(*spec)
    return tensor_op(op, op._shape, op._dtype)
