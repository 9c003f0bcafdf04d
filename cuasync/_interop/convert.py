"""``cuasync.asarray``: any device array another library made, as a cuasync tensor.

>>> x = cuasync.asarray(cupy.arange(4))         # DLPack, zero-copy
>>> cuasync.asarray(x) is x
True
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._core.device import Device, Stream
from .._tensor import Tensor
from ..errors import ArgumentError
from .cai import from_cuda_array_interface
from .dlpack import from_dlpack

__all__ = ["asarray"]


def asarray(
    obj: Any,
    *,
    device: int | Device | None = None,
    stream: Stream | None = None,
    copy: bool | None = None,
) -> Tensor:
    """``obj`` as a :class:`Tensor`, zero-copy: a cuasync tensor (returned as is), a
    DLPack producer, or an object with ``__cuda_array_interface__``.

    The producer's pending work is ordered before every cuasync op that uses the
    result (``stream``: the cuasync stream that waits for it, by default a private one
    of the memory's device), and the producer object stays alive as long as the memory
    is in use. ``copy=True`` is passed to a DLPack producer, which makes the copy;
    cuasync itself never copies here (copy a tensor with ``await t.dup()``).

    >>> x = cuasync.asarray(torch.ones(3, device="cuda"))
    >>> await x.to_host()
    array([1., 1., 1.], dtype=float32)
    """
    if isinstance(obj, Tensor) or hasattr(obj, "__dlpack__"):
        return from_dlpack(obj, device=device, stream=stream, copy=copy)
    if hasattr(obj, "__cuda_array_interface__"):
        if copy:
            raise ArgumentError(
                "copy=True: the CUDA Array Interface has no copy request; adopt the memory "
                "and copy it: `await cuasync.asarray(x).dup()`"
            )
        return from_cuda_array_interface(obj, device=device, stream=stream)
    if isinstance(obj, (np.ndarray, np.generic, list, tuple, int, float, complex)):
        raise ArgumentError(
            f"asarray adopts device memory; {type(obj).__name__} is host data: copy it to the "
            "device with `await cuasync.from_host(x)`"
        )
    raise ArgumentError(
        f"{type(obj).__name__} is not a device array: it has neither __dlpack__ nor "
        "__cuda_array_interface__"
    )
